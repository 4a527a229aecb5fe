// One representative of each classifier family issue 26 added (ShuffleNetV2, ConvNeXt,
// EfficientNetV2, ViT, Swin, Swin V2, MaxViT), exported with seeded weights by
// tests/fixtures/make_torchvision_fixtures.py, at batches 1 and 3:
//   - the reference backend, on the graph as imported and after run_passes, matches PyTorch within a
//     relative L2 error of 1e-5 (FP32, FP64 sums);
//   - the FP32 plan in the CPU plan interpreter matches the reference backend within 1e-5, and the
//     FP16 plan with its storage emulated within 1e-2.
// The CNNs run at reduced image sizes to keep CI short; scripts/torchvision_acceptance.py checks
// every classifier at its own size.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/file_io.h"
#include "model_check.h"
#include "test_support.h"

namespace gpulab::testing {
namespace {

constexpr double kFp32Bound = 1e-5;
constexpr double kFp16Bound = 1e-2;

std::filesystem::path torchvision_dir() {
  if (const char* env = std::getenv("GPULAB_TORCHVISION_FIXTURES"); env && *env) return env;
  return fixture_dir() / "torchvision";
}

class TorchvisionModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchvisionModel, MatchesPyTorchAndTheReference) {
  const std::string model = GetParam();
  const auto dir = torchvision_dir();
  auto text = read_file_text(dir / "manifest.json");
  if (!text.is_ok())
    GTEST_SKIP()
        << "torchvision fixtures missing (" << text.status().to_string()
        << "); run `ctest -R fixtures.torchvision` or tests/fixtures/make_torchvision_fixtures.py --out "
        << dir.string();
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_FALSE(manifest.is_discarded());
  ASSERT_TRUE(manifest["models"].contains(model)) << model << " is not in " << dir / "manifest.json";
  const nlohmann::json& entry = manifest["models"][model];
  ASSERT_TRUE(entry.contains("cases")) << model << ": " << entry.dump();
  auto check = check_model(dir, model, entry);
  ASSERT_TRUE(check.is_ok()) << check.status().to_string();
  std::printf("%s\n", to_json(*check).dump().c_str());
  EXPECT_TRUE(check->plan_built) << check->plan_refusal;
  for (const BatchErrors& b : check->batches) {
    EXPECT_LE(b.reference, kFp32Bound) << "batch " << b.batch << ": reference (as imported) vs PyTorch";
    EXPECT_LE(b.passes, kFp32Bound) << "batch " << b.batch << ": reference after passes vs PyTorch";
    if (check->plan_built) {
      EXPECT_LE(b.plan_fp32, kFp32Bound) << "batch " << b.batch << ": FP32 plan vs reference";
      EXPECT_GE(b.plan_fp32, 0.0);
      EXPECT_LE(b.plan_fp16, kFp16Bound) << "batch " << b.batch << ": emulated FP16 plan vs reference";
      EXPECT_GE(b.plan_fp16, 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TorchvisionModel,
                         ::testing::Values("shufflenet_v2_x0_5", "convnext_tiny", "efficientnet_v2_s",
                                           "vit_b_32", "swin_t", "swin_v2_t", "maxvit_t"));

}  // namespace
}  // namespace gpulab::testing
