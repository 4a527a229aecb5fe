// Lowering a Graph into a Plan (CPU only): NHWC values with the input's channels padded, KRSC
// weights in the storage dtype, the steps in order, per-layer precision casts, clear refusals.
#include <gtest/gtest.h>

#include <cstring>

#include "plan/lower.h"

namespace gpulab {
namespace {

Tensor iota(Shape shape, float scale) {
  Tensor t(DataType::kFloat32, std::move(shape));
  float v = 0;
  for (float& x : t.f32()) x = (v += 1.0f) * scale;
  return t;
}

// input [N,3,8,8] -> Conv 3x3 (16) + relu -> GlobalAveragePool -> Flatten -> Gemm(10).
Graph tiny_classifier() {
  Graph g;
  g.name = "tiny";
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 3, 8, 8}, std::nullopt};
  g.initializers["w"] = iota(Shape{16, 3, 3, 3}, 0.01f);
  g.initializers["b"] = iota(Shape{16}, 0.1f);
  g.initializers["fc.w"] = iota(Shape{10, 16}, 0.001f);
  g.initializers["fc.b"] = iota(Shape{10}, 0.5f);
  Node conv{"conv1", OpType::kConv, {"input", "w", "b"}, {"c1"}, {}};
  ConvAttrs a;
  a.kernel = {3, 3};
  a.pads = {1, 1, 1, 1};
  a.activation = Activation::kRelu;
  conv.attrs = a;
  Node gap{"gap", OpType::kGlobalAveragePool, {"c1"}, {"p"}, {}};
  Node flat{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}};
  GemmAttrs ga;
  ga.trans_b = true;
  ga.beta = 2.0f;
  Node fc{"fc", OpType::kGemm, {"f", "fc.w", "fc.b"}, {"logits"}, ga};
  g.nodes = {conv, gap, flat, fc};
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

TEST(Lower, TinyClassifierFp16) {
  BuildOptions options;
  options.precision = Precision::kFp16;
  options.max_batch = 4;
  auto plan = lower_graph(tiny_classifier(), options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  ASSERT_EQ(plan->steps.size(), 5u);  // input, conv, gap, gemm, output (flatten is a view)
  EXPECT_EQ(plan->steps[0].kind, StepKind::kInput);
  EXPECT_EQ(plan->steps[1].kind, StepKind::kConv);
  EXPECT_EQ(plan->steps[2].kind, StepKind::kGlobalAveragePool);
  EXPECT_EQ(plan->steps[3].kind, StepKind::kGemm);
  EXPECT_EQ(plan->steps[4].kind, StepKind::kOutput);
  EXPECT_EQ(plan->values[0].c, 8);  // 3 channels padded to 8 for FP16
  EXPECT_EQ(plan->values[0].c_valid, 3);
  EXPECT_EQ(plan->num_classes, 10);
  const PlanWeight& w = plan->weights[plan->steps[1].weight];
  EXPECT_EQ(w.shape, (Shape{16, 3, 3, 8}));
  EXPECT_EQ(w.dtype, DataType::kFloat16);
  // KRSC: element (k=1, r=2, s=0, c=1) is OIHW element (1, 1, 2, 0); padded channels are 0.
  auto half_at = [&](int64_t i) {
    uint16_t bits;
    std::memcpy(&bits, w.bytes.data() + 2 * i, 2);
    return bits;
  };
  const float want = ((1 * 3 + 1) * 3 + 2) * 3 + 0 + 1;  // iota value (times 0.01)
  const auto expect_bits = convert_floats(std::vector<float>{want * 0.01f}, DataType::kFloat16);
  uint16_t want_bits;
  std::memcpy(&want_bits, expect_bits.data(), 2);
  EXPECT_EQ(half_at(((1 * 3 + 2) * 3 + 0) * 8 + 1), want_bits);
  EXPECT_EQ(half_at(((1 * 3 + 2) * 3 + 0) * 8 + 5), 0);
  // Gemm: beta folded into the bias.
  const PlanWeight& fb = plan->weights[plan->steps[3].bias];
  const auto want_bias = convert_floats(std::vector<float>{2.0f * 0.5f}, DataType::kFloat16);
  EXPECT_EQ(std::memcmp(fb.bytes.data(), want_bias.data(), 2), 0);
  EXPECT_TRUE(plan->validate().is_ok());
}

TEST(Lower, LayerPrecisionOverrideInsertsCasts) {
  BuildOptions options;
  options.precision = Precision::kBf16;
  options.layer_precision = {{"conv1", Precision::kFp32}};
  auto plan = lower_graph(tiny_classifier(), options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::vector<StepKind> kinds;
  for (const auto& s : plan->steps) kinds.push_back(s.kind);
  // The only reader of the input computes in FP32, so the input is converted to float32 directly
  // (no BF16 round trip, no cast); the conv's float32 output is cast to BF16 for the pooling.
  const std::vector<StepKind> want = {StepKind::kInput, StepKind::kConv,
                                      StepKind::kCast,  StepKind::kGlobalAveragePool,
                                      StepKind::kGemm,  StepKind::kOutput};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(plan->values[0].dtype, DataType::kFloat32);
  EXPECT_EQ(plan->values[0].c, 4);  // padded to whole float32 vectors
  const PlanStep& conv = plan->steps[1];
  EXPECT_EQ(conv.precision, Precision::kFp32);
  EXPECT_EQ(plan->values[conv.inputs[0]].dtype, DataType::kFloat32);
  EXPECT_EQ(plan->values[conv.output].dtype, DataType::kFloat32);
  EXPECT_EQ(plan->weights[conv.weight].dtype, DataType::kFloat32);
  EXPECT_EQ(plan->values[plan->steps[3].output].dtype, DataType::kBFloat16);

  options.layer_precision = {{"nope", Precision::kFp32}};
  auto bad = lower_graph(tiny_classifier(), options);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'nope'"), std::string::npos);
}

TEST(Lower, UnsupportedOpsAndShapesAreNamed) {
  Graph g = tiny_classifier();
  g.nodes.insert(g.nodes.begin() + 1, Node{"softmax", OpType::kSoftmax, {"c1"}, {"s"}, AxisAttrs{1}});
  g.nodes[2].inputs = {"s"};
  ASSERT_TRUE(g.infer_shapes().is_ok());
  auto r = lower_graph(g, BuildOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("'softmax'"), std::string::npos) << r.status().message();

  BuildOptions zero;
  zero.max_batch = 0;
  EXPECT_EQ(lower_graph(tiny_classifier(), zero).status().code(), StatusCode::kInvalidArgument);
}

TEST(Lower, PaddedInputChannels) {
  EXPECT_EQ(padded_input_channels(3, Precision::kFp16), 8);
  EXPECT_EQ(padded_input_channels(3, Precision::kFp32), 4);
  EXPECT_EQ(padded_input_channels(1, Precision::kBf16), 8);
  EXPECT_EQ(padded_input_channels(16, Precision::kFp16), 16);
}

TEST(ConvertFloats, RoundsToNearestEven) {
  auto h = convert_floats(std::vector<float>{1.0f, -2.0f, 65504.0f, 1e-8f}, DataType::kFloat16);
  uint16_t bits[4];
  std::memcpy(bits, h.data(), 8);
  EXPECT_EQ(bits[0], 0x3c00);
  EXPECT_EQ(bits[1], 0xc000);
  EXPECT_EQ(bits[2], 0x7bff);
  EXPECT_EQ(bits[3], 0x0000);
  auto b = convert_floats(std::vector<float>{1.0f, 1.00390625f}, DataType::kBFloat16);  // 1 + 2^-8: a tie
  std::memcpy(bits, b.data(), 4);
  EXPECT_EQ(bits[0], 0x3f80);
  EXPECT_EQ(bits[1], 0x3f80);  // ties to even
}

}  // namespace
}  // namespace gpulab
