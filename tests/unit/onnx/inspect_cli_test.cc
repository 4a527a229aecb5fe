// `gpulab inspect` end to end: runs the built executable (skips when it was not built).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "onnx_model_builder.h"
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

  // The GPU engine's plan: 52 convolutions and the 1x1 classifier, the pooling, input and output.
  ASSERT_TRUE(j.contains("gpu_engine")) << "the plan library is part of every build";
  EXPECT_EQ(j["gpu_engine"]["supported"], true);
  EXPECT_EQ(j["gpu_engine"]["steps"]["conv"], 53);

  const CliRun text = run_gpulab("inspect '" + model.string() + "' --no-passes");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, ::testing::HasSubstr("as imported (100 nodes"));
  EXPECT_THAT(text.output, ::testing::Not(::testing::HasSubstr("after passes")));
}

// A model the reference backend runs but the GPU engine does not (a Softmax before the classifier):
// inspect says so and why, naming the node, and still succeeds.
TEST(InspectCli, SaysWhyTheGpuEngineCannotRunAModel) {
  if (!fs::exists(gpulab::testing::gpulab_exe())) GTEST_SKIP() << "gpulab executable not built";
  gpulab::testing::ModelBuilder m;
  m.input("input", {-1, 3, 8, 8});
  m.floats("proj", {3, 4});
  m.node("GlobalAveragePool", "gap", {"input"}, {"g"});
  m.node("Flatten", "flat", {"g"}, {"f"});
  m.node("Softmax", "early", {"f"}, {"s"});
  m.node("MatMul", "project", {"s", "proj"}, {"logits"});
  m.output("logits");
  const fs::path path =
      fs::temp_directory_path() / ("gpulab_inspect_softmax_" + std::to_string(::getpid()) + ".onnx");
  {
    std::ofstream out(path, std::ios::binary);
    out << m.bytes();
  }
  const CliRun r = run_gpulab("inspect '" + path.string() + "'");
  const CliRun j = run_gpulab("inspect --json '" + path.string() + "'");
  fs::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.out, ::testing::HasSubstr("GPU engine: not supported"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("'early' (Softmax)"));
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const auto json = nlohmann::json::parse(j.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(json.is_discarded());
  EXPECT_EQ(json["gpu_engine"]["supported"], false);
  EXPECT_THAT(json["gpu_engine"]["reason"].get<std::string>(), ::testing::HasSubstr("Softmax"));
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
