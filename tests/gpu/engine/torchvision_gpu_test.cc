// The GPU engine on one model per torchvision family of issue 26 (ShuffleNetV2, ConvNeXt,
// EfficientNetV2, ViT, Swin, Swin V2, MaxViT; tests/fixtures/make_torchvision_fixtures.py), every
// precision, against PyTorch's float64 output, eager and CUDA-graph runs bitwise equal. SmallFamilies
// runs on the fixtures ctest generates (the narrow 64x64 models); FullSizeFamilies on the full-size
// representatives when GPULAB_TORCHVISION_FIXTURES points at a folder made with `--set families`
// (skipped with that reason otherwise).
// Bounds (relative L2 over the logits): FP32 1e-5, TF32 5e-3, FP16 1e-2 and BF16 3e-2 -- for 16-bit
// storage at least 1.25x the seeded model's own error under float16 storage in PyTorch
// (torch_fp16_storage_rel_l2), times 8 for BF16 (its unit roundoff is 8x float16's), as in
// tests/reference/torchvision. Skipped with a reason when no GPU is usable or the fixtures are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/file_io.h"
#include "gpulab/engine.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "reference/torchvision/model_check.h"
#include "runtime/runtime.h"
#include "test_support.h"

namespace gpulab {
namespace {

double bound(Precision p, double torch_fp16_storage) {
  const double floor16 = 1.25 * torch_fp16_storage;
  switch (p) {
    case Precision::kFp32: return 1e-5;
    case Precision::kTf32: return 5e-3;
    case Precision::kFp16: return std::max(1e-2, floor16);
    case Precision::kBf16: return std::max(3e-2, 8 * floor16);
    case Precision::kInt8:
    case Precision::kFp8: break;  // not run here: 8-bit plans need calibration (quantized_engine_test)
  }
  return 0;
}

class TorchvisionGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchvisionGpu, EveryPrecisionMatchesPyTorch) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no GPU: " << reason;
  const std::string model = GetParam();
  std::filesystem::path dir = testing::fixture_dir() / "torchvision";
  if (const char* env = std::getenv("GPULAB_TORCHVISION_FIXTURES"); env && *env) dir = env;
  auto text = read_file_text(dir / "manifest.json");
  if (!text.is_ok())
    GTEST_SKIP() << "torchvision fixtures missing (" << text.status().to_string()
                 << "); run tests/fixtures/make_torchvision_fixtures.py --out " << dir.string();
  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  ASSERT_FALSE(manifest.is_discarded());
  // A model the fixture script could not export has an entry with its error (a failure below).
  if (!manifest["models"].contains(model))
    GTEST_SKIP() << model << " is not in " << (dir / "manifest.json").string() << "; make it with "
                 << "make_torchvision_fixtures.py --set "
                 << (model.rfind("small_", 0) == 0 ? "small" : "families")
                 << " --out DIR and set GPULAB_TORCHVISION_FIXTURES=DIR";
  ASSERT_TRUE(manifest["models"].contains(model) && manifest["models"][model].contains("cases")) << model;
  const nlohmann::json& entry = manifest["models"][model];
  auto graph = load_onnx(dir / entry.at("file").get<std::string>());
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  ASSERT_TRUE(run_passes(*graph).is_ok());
  auto cases = testing::load_fixture_cases(dir, entry);
  ASSERT_TRUE(cases.is_ok()) << cases.status().to_string();
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    BuildOptions options;
    options.precision = p;
    options.max_batch = 3;
    options.time_tactics = p == Precision::kFp16;  // timing for one precision keeps the test short
    auto engine = build_engine_from_graph(*graph, options, false);
    ASSERT_TRUE(engine.is_ok()) << precision_name(p) << ": " << engine.status().to_string();
    auto ctx = (*engine)->create_context();
    ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
    for (const testing::FixtureCase& c : *cases) {
      auto eager = (*ctx)->run(c.input, false);
      auto graphed = (*ctx)->run(c.input, true);
      ASSERT_TRUE(eager.is_ok()) << eager.status().to_string();
      ASSERT_TRUE(graphed.is_ok()) << graphed.status().to_string();
      EXPECT_EQ(std::memcmp(eager->data(), graphed->data(), eager->size_bytes()), 0) << precision_name(p);
      const ErrorStats e = compare(graphed->f32(), c.expected.f32());
      const double limit = bound(p, c.torch_fp16_storage);
      EXPECT_EQ(e.non_finite, 0);
      EXPECT_LE(e.rel_l2, limit) << model << " " << precision_name(p) << " batch " << c.batch;
      std::printf("[ error ] %-20s %-5s batch %lld: rel L2 %.3e (bound %.1e)\n", model.c_str(),
                  std::string(precision_name(p)).c_str(), static_cast<long long>(c.batch), e.rel_l2, limit);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SmallFamilies, TorchvisionGpu, ::testing::ValuesIn(testing::small_family_models()));
INSTANTIATE_TEST_SUITE_P(FullSizeFamilies, TorchvisionGpu,
                         ::testing::ValuesIn(testing::full_size_family_models()));

}  // namespace
}  // namespace gpulab
