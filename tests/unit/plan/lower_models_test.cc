// Lowering whole classifiers (the bundled MobileNetV2, and the seeded ResNet-18, MobileNetV2,
// MobileNetV3-Small and SqueezeNet 1.1 fixtures when generated) into FP32 plans, and running the plans on the
// CPU with a plain interpreter: the result matches the reference backend on the original graph. This checks
// the weight layouts, channel padding, views and attribute mapping of the lowering without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "backends/reference/reference_executor.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/memory_plan.h"
#include "test_support.h"

namespace gpulab {
namespace {

std::optional<std::filesystem::path> find_model(const std::string& file) {
  for (const auto& d : {testing::source_dir() / "models", testing::fixture_dir()})
    if (std::filesystem::exists(d / file)) return d / file;
  return std::nullopt;
}

void check_model(const std::string& file, Precision precision = Precision::kFp32, double bound = 1e-5) {
  const auto path = find_model(file);
  if (!path) GTEST_SKIP() << file << " not found (tests/fixtures/make_model_fixtures.py generates it)";
  auto graph = load_onnx(*path);
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  const Graph original = *graph;
  ASSERT_TRUE(run_passes(*graph).is_ok());
  BuildOptions options;
  options.precision = precision;
  options.max_batch = 2;
  auto plan = lower_graph(*graph, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->validate().is_ok());
  // Round trip through the file format keeps the plan usable.
  auto back = deserialize_plan(serialize_plan(*plan));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  // The arena is smaller than keeping every value alive (for a model of a few values of a few
  // hundred bytes, alignment decides instead).
  const auto requests = value_lifetimes(*back, 2);
  int64_t all = 0;
  for (const auto& r : requests) all += r.bytes;
  if (all > (int64_t{1} << 20)) {
    EXPECT_LT(plan_memory(requests).arena_bytes, all / 2);
  }

  const int64_t batch = 2;
  Tensor input(DataType::kFloat32, Shape{batch, plan->input_channels, plan->input_h, plan->input_w});
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& x : input.f32()) x = dist(rng);
  auto exec = ReferenceExecutor::create(original);
  ASSERT_TRUE(exec.is_ok());
  auto ref = exec->run(std::vector<Tensor>{input});
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  const std::vector<float> in(input.f32().begin(), input.f32().end());
  const auto got = interpret_plan(*back, in, batch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const ErrorStats e = compare(*got, (*ref)[0].f32());
  EXPECT_LE(e.rel_l2, bound) << file << " " << precision_name(precision);
  std::printf("[ plan  ] %s %s: %zu steps, %zu weights (%.1f MiB), arena %.1f MiB at batch 2, rel L2 %.2e\n",
              file.c_str(), std::string(precision_name(precision)).c_str(), back->steps.size(),
              back->weights.size(), back->weights_bytes() / 1048576.0,
              plan_memory(requests).arena_bytes / 1048576.0, e.rel_l2);
  EXPECT_EQ(e.non_finite, 0);
}

TEST(LowerModels, BundledMobileNetV2) {
  check_model("mobilenet_v2_1.0_224.onnx");
}
TEST(LowerModels, ResNet18Fixture) {
  check_model("resnet18.onnx");
}
TEST(LowerModels, MobileNetV2Fixture) {
  check_model("mobilenet_v2.onnx");
}
// HardSwish, and squeeze-and-excitation blocks: HardSigmoid and a Mul broadcast per channel.
TEST(LowerModels, MobileNetV3SmallFixture) {
  check_model("mobilenet_v3_small.onnx");
}
// Every op outside ResNet-18/MobileNetV2 in one small module (tests/fixtures): ceil_mode average
// pooling of the padded image, Sigmoid * HardSigmoid, HardSwish, Concat, a flatten of 5x5 pixels
// into a Gemm, a MatMul (made a Gemm) and the final Softmax.
TEST(LowerModels, TinyOpsFixture) {
  check_model("tiny_ops.onnx");
}
// Fire modules: a Concat of two convolutions' channels.
TEST(LowerModels, SqueezeNetFixture) {
  check_model("squeezenet1_1.onnx");
}
// FP16 and BF16 storage as the interpreter emulates it, within the GPU engine test's bounds.
TEST(LowerModels, MobileNetV3SmallFixtureFp16AndBf16) {
  check_model("mobilenet_v3_small.onnx", Precision::kFp16, 1e-2);
  check_model("mobilenet_v3_small.onnx", Precision::kBf16, 3e-2);
}

}  // namespace
}  // namespace gpulab
