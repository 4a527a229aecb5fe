// `gpulab inspect` end to end: runs the built executable (skips when it was not built).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

using gpulab::testing::CliRun;
using gpulab::testing::run_gpulab;

TEST(InspectCli, MobileNetV2Json) {
  if (!fs::exists(gpulab::testing::gpulab_exe())) GTEST_SKIP() << "gpulab executable not built";
  const auto shared = gpulab::testing::shared_dir();
  if (!shared) GTEST_SKIP() << "shared data folder not found (set GPULAB_SHARED_DIR)";
  const fs::path model = *shared / "models" / "mobilenet_v2_1.0_224.onnx";
  if (!fs::exists(model)) GTEST_SKIP() << model << " not found";

  const CliRun r = run_gpulab("inspect '" + model.string() + "' --json --batch 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out.substr(0, 500);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["opset"], 13);
  EXPECT_EQ(j["inputs"][0]["shape"], "[N,3,224,224]");
  EXPECT_EQ(j["outputs"][0]["shape"], "[N,1000]");
  EXPECT_EQ(j["imported"]["node_count"], 100);
  EXPECT_EQ(j["optimized"]["node_count"], 55);
  // Fusion moves fewer bytes but does the same arithmetic and keeps every weight.
  EXPECT_EQ(j["imported"]["totals"]["params"], j["optimized"]["totals"]["params"]);
  EXPECT_LT(j["optimized"]["totals"]["bytes"].get<int64_t>(),
            j["imported"]["totals"]["bytes"].get<int64_t>());
  const double gflop = j["optimized"]["totals"]["gflop"].get<double>();
  EXPECT_GT(gflop, 1.1);  // about 0.6 GFLOP per image (300 M multiply-adds), times 2 images
  EXPECT_LT(gflop, 1.4);

  const CliRun text = run_gpulab("inspect '" + model.string() + "' --no-passes");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, ::testing::HasSubstr("as imported (100 nodes"));
  EXPECT_THAT(text.output, ::testing::Not(::testing::HasSubstr("after passes")));
}

TEST(InspectCli, MissingModelFailsWithOneLine) {
  if (!fs::exists(gpulab::testing::gpulab_exe())) GTEST_SKIP() << "gpulab executable not built";
  const CliRun r = run_gpulab("inspect /nonexistent/model.onnx");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, ::testing::HasSubstr("gpulab: not found"));
  EXPECT_THAT(r.output, ::testing::HasSubstr("/nonexistent/model.onnx"));
}

}  // namespace
}  // namespace gpulab
