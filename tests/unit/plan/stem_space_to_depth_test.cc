// The space-to-depth stem rewrite (plan.h's SpaceToDepth, lower.h's stem_space_to_depth): which
// stems it takes, the plan it makes, and that the rewritten plan, run by the CPU interpreter,
// computes what the reference backend computes on the original graph, for kernel sizes that are
// and are not multiples of the stride, odd image sizes and asymmetric padding.
#include <gtest/gtest.h>

#include "backends/reference/reference_executor.h"
#include "normal_tensor.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/memory_plan.h"

namespace gpulab {
namespace {

Tensor random_tensor(Shape shape, uint32_t seed) {
  return testing::normal_tensor(std::move(shape), seed);
}

PoolAttrs pool_2x2() {
  PoolAttrs pool;
  pool.kernel = {2, 2};
  pool.stride = {2, 2};
  return pool;
}

// input [N, c, h, w] -> Conv (8 outputs, `a`) + ReLU -> MaxPool (2x2 unless given) ->
// GlobalAveragePool -> Flatten -> Gemm(5).
Graph stem_classifier(int64_t c, int64_t h, int64_t w, ConvAttrs a, PoolAttrs pool = pool_2x2()) {
  Graph g;
  g.name = "stem";
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, c, h, w}, std::nullopt};
  g.initializers["w"] = random_tensor(Shape{8, c, a.kernel.h, a.kernel.w}, 1);
  g.initializers["b"] = random_tensor(Shape{8}, 2);
  g.initializers["fc.w"] = random_tensor(Shape{5, 8}, 3);
  g.initializers["fc.b"] = random_tensor(Shape{5}, 4);
  a.activation = Activation::kRelu;
  GemmAttrs ga;
  ga.trans_b = true;
  g.nodes = {Node{"stem", OpType::kConv, {"input", "w", "b"}, {"s"}, a},
             Node{"pool", OpType::kMaxPool, {"s"}, {"p"}, pool},
             Node{"gap", OpType::kGlobalAveragePool, {"p"}, {"g"}, {}},
             Node{"flat", OpType::kFlatten, {"g"}, {"f"}, FlattenAttrs{1}},
             Node{"fc", OpType::kGemm, {"f", "fc.w", "fc.b"}, {"logits"}, ga}};
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

ConvAttrs conv(int64_t k, int64_t stride, Pads pads) {
  ConvAttrs a;
  a.kernel = {k, k};
  a.stride = {stride, stride};
  a.pads = pads;
  return a;
}

// Lowers `g` with the rewrite on (FP32 storage), checks the rewrite happened, and compares the
// interpreted plan with the reference backend at batch 2.
void expect_rewrite_matches_reference(const Graph& g) {
  BuildOptions options;
  options.precision = Precision::kFp32;
  options.max_batch = 2;
  auto plan = lower_graph(g, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  ASSERT_GT(plan->steps[0].space_to_depth.block, 1) << "the stem was not rewritten";
  EXPECT_TRUE(plan->validate().is_ok());
  auto back = deserialize_plan(serialize_plan(*plan));  // the layout survives the plan file
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->steps[0].space_to_depth, plan->steps[0].space_to_depth);
  const Shape& in = g.value("input")->shape;
  const Tensor x = random_tensor(Shape{2, in[1], in[2], in[3]}, 9);
  auto exec = ReferenceExecutor::create(g);
  ASSERT_TRUE(exec.is_ok());
  auto ref = exec->run(std::vector<Tensor>{x});
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  const std::vector<float> xs(x.f32().begin(), x.f32().end());
  auto got = interpret_plan(*back, xs, 2);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const ErrorStats e = compare(*got, (*ref)[0].f32());
  EXPECT_LE(e.rel_l2, 1e-6);
  EXPECT_EQ(e.non_finite, 0);
}

TEST(StemSpaceToDepth, ResNetStemBecomesA4x4ConvolutionOver16Channels) {
  const Graph g = stem_classifier(3, 224, 224, conv(7, 2, {3, 3, 3, 3}));
  BuildOptions options;
  options.precision = Precision::kFp16;
  auto plan = lower_graph(g, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->steps[0].space_to_depth, (SpaceToDepth{2, 3, 3}));
  const PlanValue& x = plan->values[0];
  EXPECT_EQ(x.h, 115);  // 112 outputs + 4 taps - 1
  EXPECT_EQ(x.w, 115);
  EXPECT_EQ(x.c_valid, 12);
  EXPECT_EQ(x.c, 16);  // padded for FP16 tensor cores
  const PlanStep& stem = plan->steps[1];
  ASSERT_EQ(stem.kind, StepKind::kConv);
  EXPECT_EQ(stem.conv.kernel, (Hw{4, 4}));
  EXPECT_EQ(stem.conv.stride, (Hw{1, 1}));
  EXPECT_EQ(stem.conv.pads, Pads{});
  EXPECT_EQ(plan->weights[stem.weight].shape, (Shape{8, 4, 4, 16}));
  EXPECT_EQ(plan->values[stem.output].h, 112);

  options.stem_space_to_depth = false;
  auto plain = lower_graph(g, options);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->steps[0].space_to_depth, SpaceToDepth{});
  EXPECT_EQ(plain->values[0].h, 224);
  EXPECT_EQ(plain->values[0].c, 8);
  // FLOPs stay the model's, not the zero-padded rewrite's.
  EXPECT_DOUBLE_EQ(stem.flops_per_image, plain->steps[1].flops_per_image);
}

TEST(StemSpaceToDepth, RewrittenPlansMatchTheReference) {
  expect_rewrite_matches_reference(stem_classifier(3, 30, 30, conv(7, 2, {3, 3, 3, 3})));  // ResNet
  expect_rewrite_matches_reference(stem_classifier(3, 29, 31, conv(7, 2, {3, 3, 3, 3})));  // odd sizes
  expect_rewrite_matches_reference(stem_classifier(3, 32, 32, conv(3, 2, {1, 1, 1, 1})));  // MobileNetV2
  expect_rewrite_matches_reference(stem_classifier(3, 33, 32, conv(3, 2, {0, 0, 1, 1})));  // SAME-style pads
  expect_rewrite_matches_reference(stem_classifier(1, 27, 27, conv(5, 3, {2, 1, 0, 2})));  // stride 3, gray
  expect_rewrite_matches_reference(stem_classifier(4, 20, 20, conv(4, 2, {0, 0, 0, 0})));  // k = 2 b, RGBA
}

TEST(StemSpaceToDepth, TakesOnlyStemsItCanRewrite) {
  auto rewritten = [](const Graph& g) { return stem_space_to_depth(g, BuildOptions{}).has_value(); };
  EXPECT_TRUE(rewritten(stem_classifier(3, 32, 32, conv(7, 2, {3, 3, 3, 3}))));
  EXPECT_FALSE(rewritten(stem_classifier(3, 32, 32, conv(3, 1, {1, 1, 1, 1}))));  // stride 1
  EXPECT_FALSE(rewritten(stem_classifier(8, 32, 32, conv(3, 2, {1, 1, 1, 1}))));  // 4 * 8 > 16 channels
  EXPECT_FALSE(rewritten(stem_classifier(3, 32, 32, conv(1, 2, {0, 0, 0, 0}))));  // kernel < stride
  ConvAttrs uneven = conv(3, 2, {1, 1, 1, 1});
  uneven.stride = {2, 1};
  EXPECT_FALSE(rewritten(stem_classifier(3, 32, 32, uneven)));
  ConvAttrs dilated = conv(3, 2, {2, 2, 2, 2});
  dilated.dilation = {2, 2};
  EXPECT_FALSE(rewritten(stem_classifier(3, 32, 32, dilated)));
  // The input read by a second node as well: the plain layout is needed.
  Graph two = stem_classifier(3, 32, 32, conv(7, 2, {3, 3, 3, 3}));
  two.nodes.push_back(Node{"extra", OpType::kRelu, {"input"}, {"r"}, {}});
  EXPECT_FALSE(rewritten(two));
}

// ResNet's stem on a small image: 7x7/2 convolution, ReLU, 3x3/2 max pool with padding 1.
Graph resnet_like_stem() {
  PoolAttrs pool;
  pool.kernel = {3, 3};
  pool.stride = {2, 2};
  pool.pads = {1, 1, 1, 1};
  return stem_classifier(3, 30, 34, conv(7, 2, {3, 3, 3, 3}), pool);
}

// fuse_stem_pool: the input conversion, the stem convolution and its max pool become one kStem
// step that keeps their attributes, survives the plan file, plans no memory for the values it
// no longer writes and, interpreted, computes exactly what the three steps computed.
TEST(FuseStemPool, OneStepComputesWhatTheThreeStepsDid) {
  const Graph g = resnet_like_stem();
  BuildOptions options;
  options.precision = Precision::kFp16;
  options.max_batch = 2;
  auto lowered = lower_graph(g, options);
  ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
  const Plan unfused = *lowered;
  Plan fused = *lowered;
  int asked = 0;
  ASSERT_TRUE(fuse_stem_pool(fused, [&](const PlanStep& stem) {
    ++asked;
    return stem.kind == StepKind::kStem;
  }));
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(fused.steps.size(), unfused.steps.size() - 2);
  const PlanStep& stem = fused.steps[0];
  EXPECT_EQ(stem.kind, StepKind::kStem);
  EXPECT_EQ(stem.name, "stem+pool");
  EXPECT_TRUE(stem.inputs.empty());
  EXPECT_EQ(stem.output, unfused.steps[2].output);
  EXPECT_EQ(stem.fused_values, (std::vector<int>{unfused.steps[0].output, unfused.steps[1].output}));
  EXPECT_EQ(stem.weight, unfused.steps[1].weight);
  EXPECT_EQ(stem.space_to_depth, unfused.steps[0].space_to_depth);
  EXPECT_EQ(stem.conv.kernel, (Hw{4, 4}));
  EXPECT_EQ(stem.pool.pads, (Pads{1, 1, 1, 1}));
  EXPECT_TRUE(fused.validate().is_ok()) << fused.validate().to_string();

  auto back = deserialize_plan(serialize_plan(fused));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->steps[0].kind, StepKind::kStem);
  EXPECT_EQ(back->steps[0].fused_values, stem.fused_values);
  EXPECT_EQ(back->steps[0].pool.kernel, (Hw{3, 3}));
  EXPECT_EQ(back->steps[0].conv.kernel, (Hw{4, 4}));
  EXPECT_EQ(back->steps[0].conv.activation, Activation::kRelu);
  EXPECT_EQ(back->steps[0].space_to_depth, stem.space_to_depth);

  const auto requests = value_lifetimes(fused, 2);
  EXPECT_EQ(requests[stem.fused_values[0]].bytes, 0);
  EXPECT_EQ(requests[stem.fused_values[1]].bytes, 0);
  EXPECT_GT(requests[stem.output].bytes, 0);

  const Tensor x = random_tensor(Shape{2, 3, 30, 34}, 11);
  const std::vector<float> xs(x.f32().begin(), x.f32().end());
  auto want = interpret_plan(unfused, xs, 2);
  auto got = interpret_plan(*back, xs, 2);
  ASSERT_TRUE(want.is_ok() && got.is_ok());
  EXPECT_EQ(*got, *want);
}

// BF16 plans run a pooled stem in FP16 (default_layer_precision): the input conversion, the stem
// and its max pool in FP16, so that they fuse, then one cast of the pooled value to BF16, which
// joins the fused step (it writes BF16 itself), or stays a step when the kernel refuses that; the
// fused plans interpret as the unfused one, and stay close to the FP32 plan. A stem with a weight
// beyond FP16's range stays in TF32, pooled in float32.
TEST(FuseStemPool, Bf16PlansRunThePooledStemInFp16) {
  Graph g = resnet_like_stem();
  EXPECT_EQ(default_layer_precision(g, Precision::kBf16),
            (std::map<std::string, Precision>{{"stem", Precision::kFp16}}));
  BuildOptions options;
  options.precision = Precision::kBf16;
  options.max_batch = 2;
  auto lowered = lower_graph(g, options);
  ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
  const Plan& plan = *lowered;
  ASSERT_GE(plan.steps.size(), 4u);
  EXPECT_EQ(plan.steps[1].precision, Precision::kFp16);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(plan.values[plan.steps[i].output].dtype, DataType::kFloat16) << i;
  EXPECT_EQ(plan.steps[3].kind, StepKind::kCast);
  EXPECT_EQ(plan.values[plan.steps[3].output].dtype, DataType::kBFloat16);
  Plan fused = plan;
  ASSERT_TRUE(fuse_stem_pool(fused, [](const PlanStep&) { return true; }));
  EXPECT_TRUE(fused.validate().is_ok()) << fused.validate().to_string();
  ASSERT_EQ(fused.steps.size(), plan.steps.size() - 3);
  EXPECT_EQ(fused.steps[0].output, plan.steps[3].output);  // the cast's bfloat16 value
  // A kernel that writes float16 only: the cast stays.
  Plan fp16_out = plan;
  ASSERT_TRUE(fuse_stem_pool(
      fp16_out, [&](const PlanStep& s) { return fp16_out.values[s.output].dtype == DataType::kFloat16; }));
  ASSERT_EQ(fp16_out.steps.size(), plan.steps.size() - 2);
  EXPECT_EQ(fp16_out.steps[1].kind, StepKind::kCast);
  const Tensor x = random_tensor(Shape{2, 3, 30, 34}, 11);
  const std::vector<float> xs(x.f32().begin(), x.f32().end());
  options.precision = Precision::kFp32;
  auto exact_plan = lower_graph(g, options);
  ASSERT_TRUE(exact_plan.is_ok());
  auto exact = interpret_plan(*exact_plan, xs, 2);
  auto unfused = interpret_plan(plan, xs, 2);
  auto got = interpret_plan(fused, xs, 2);
  auto got_fp16_out = interpret_plan(fp16_out, xs, 2);
  ASSERT_TRUE(exact.is_ok() && unfused.is_ok() && got.is_ok() && got_fp16_out.is_ok());
  EXPECT_EQ(*got, *unfused);
  EXPECT_EQ(*got_fp16_out, *unfused);
  EXPECT_LT(compare(*got, *exact).rel_l2, 2e-2);

  Tensor& w = g.initializers["w"];
  std::vector<float> big(w.f32().begin(), w.f32().end());
  big[0] = 1e5f;
  w = Tensor::from_floats(w.shape(), big);
  EXPECT_EQ(default_layer_precision(g, Precision::kBf16),
            (std::map<std::string, Precision>{{"stem", Precision::kTf32}}));
  options.precision = Precision::kBf16;
  auto tf32 = lower_graph(g, options);
  ASSERT_TRUE(tf32.is_ok()) << tf32.status().to_string();
  EXPECT_EQ(tf32->steps[1].precision, Precision::kTf32);
  EXPECT_EQ(tf32->values[tf32->steps[2].output].dtype, DataType::kFloat32);  // pooled in float32, then cast
}

// An image batch of 2 for `g`, build options (max batch 2) whose ranges are the reference
// backend's maxima on it, and its reference logits (empty when the reference backend failed).
struct Calibrated {
  std::vector<float> xs, logits;
  BuildOptions options;
};
Calibrated calibrated(const Graph& g) {
  Calibrated c;
  const Tensor x = random_tensor(Shape{2, 3, 30, 34}, 11);
  c.xs.assign(x.f32().begin(), x.f32().end());
  c.options.max_batch = 2;
  auto exec = ReferenceExecutor::create(g);
  if (!exec.is_ok()) return c;
  auto run = exec->run_with_values(std::vector<Tensor>{x});
  if (!run.is_ok()) return c;
  for (const auto& [name, t] : run->values) {
    float m = 0;
    for (float v : t.f32()) m = std::max(m, std::abs(v));
    c.options.activation_amax[name] = m;
  }
  c.logits.assign(run->values.at("logits").f32().begin(), run->values.at("logits").f32().end());
  return c;
}

// INT8 and FP8 plans run the pooled stem in FP16 as well (and nothing else): the fused stem,
// whose pooled output is quantized for the layers after it; fused and unfused interpret the same.
TEST(FuseStemPool, QuantizedPlansRunThePooledStemInFp16) {
  const Graph g = resnet_like_stem();
  const Calibrated c = calibrated(g);
  ASSERT_FALSE(c.logits.empty());
  BuildOptions options = c.options;
  const std::vector<float>& xs = c.xs;
  for (const Precision precision : {Precision::kInt8, Precision::kFp8}) {
    SCOPED_TRACE(precision_name(precision));
    EXPECT_EQ(default_layer_precision(g, precision),
              (std::map<std::string, Precision>{{"stem", Precision::kFp16}}));
    options.precision = precision;
    auto lowered = lower_graph(g, options);
    ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
    const Plan& plan = *lowered;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(plan.values[plan.steps[i].output].dtype, DataType::kFloat16) << i;
    Plan fused = plan;
    ASSERT_TRUE(fuse_stem_pool(fused, [](const PlanStep&) { return true; }));
    auto unfused_y = interpret_plan(plan, xs, 2);
    auto fused_y = interpret_plan(fused, xs, 2);
    ASSERT_TRUE(unfused_y.is_ok() && fused_y.is_ok());
    EXPECT_EQ(*fused_y, *unfused_y);
    EXPECT_LT(compare(*fused_y, c.logits).rel_l2, 5e-2);
    // The Gemm still runs in 8 bits.
    EXPECT_EQ(plan.steps[plan.steps.size() - 2].precision, precision);
  }
}

// ResNet's first block after the pooled stem: a 3x3 convolution of the pooled value with that
// value as its residual (conv + bias + residual, ReLU), then the classifier.
Graph resnet_like_stem_block() {
  Graph g = resnet_like_stem();
  const Tensor w1 = random_tensor(Shape{8, 8, 3, 3}, 5);  // scaled to fan-in 72: a block that keeps the size
  std::vector<float> scaled(w1.f32().begin(), w1.f32().end());
  for (float& v : scaled) v *= 0.12f;
  g.initializers["w1"] = Tensor::from_floats(w1.shape(), scaled);
  g.initializers["b1"] = random_tensor(Shape{8}, 6);
  ConvAttrs a = conv(3, 1, {1, 1, 1, 1});
  a.activation = Activation::kRelu;
  a.has_residual = true;
  g.nodes.insert(g.nodes.begin() + 2, Node{"block", OpType::kConv, {"p", "w1", "b1", "p"}, {"q"}, a});
  g.nodes[3].inputs = {"q"};  // the global pool
  g.values.clear();
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 3, 30, 34}, std::nullopt};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

// An INT8 or FP8 plan quantizes the pooled FP16 value for its first 8-bit layer, which reads it
// as input and residual: that cast joins the fused stem, which then writes the 8-bit value itself
// (3.3% of ResNet-18's INT8 time at batch 256 on an H100 was the cast, 2a1a736), or stays a step
// when the kernel refuses. The fused plan's 8-bit codes and logits are the unfused plan's.
TEST(FuseStemPool, QuantizedPlansTakeTheCastIntoTheStem) {
  const Graph g = resnet_like_stem_block();
  const Calibrated c = calibrated(g);
  ASSERT_FALSE(c.logits.empty());
  BuildOptions options = c.options;
  const std::vector<float>& xs = c.xs;
  for (const Precision precision : {Precision::kInt8, Precision::kFp8}) {
    SCOPED_TRACE(precision_name(precision));
    options.precision = precision;
    auto lowered = lower_graph(g, options);
    ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
    const Plan& plan = *lowered;
    ASSERT_GE(plan.steps.size(), 5u);
    ASSERT_EQ(plan.steps[3].kind, StepKind::kCast);
    const int q = plan.steps[3].output;
    EXPECT_EQ(plan.values[q].dtype, precision == Precision::kInt8 ? DataType::kInt8 : DataType::kFp8E4M3);
    EXPECT_EQ(plan.steps[4].kind, StepKind::kConv);
    EXPECT_EQ(plan.steps[4].precision, precision);
    EXPECT_EQ(plan.steps[4].inputs, (std::vector<int>{q, q}));  // input and residual: one cast
    Plan fused = plan;
    ASSERT_TRUE(fuse_stem_pool(fused, [](const PlanStep&) { return true; }));
    EXPECT_TRUE(fused.validate().is_ok()) << fused.validate().to_string();
    ASSERT_EQ(fused.steps.size(), plan.steps.size() - 3);
    EXPECT_EQ(fused.steps[0].kind, StepKind::kStem);
    EXPECT_EQ(fused.steps[0].output, q);
    auto back = deserialize_plan(serialize_plan(fused));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back->steps[0].output, q);
    // A kernel that writes 16-bit values only: the cast stays.
    Plan fp16_out = plan;
    ASSERT_TRUE(fuse_stem_pool(
        fp16_out, [&](const PlanStep& s) { return !is_quantized_dtype(fp16_out.values[s.output].dtype); }));
    ASSERT_EQ(fp16_out.steps.size(), plan.steps.size() - 2);
    EXPECT_EQ(fp16_out.steps[1].kind, StepKind::kCast);
    std::vector<std::vector<float>> unfused_values, fused_values, fp16_out_values;
    const auto interpret = [&](const Plan& p, std::vector<std::vector<float>>& values) {
      InterpretOptions keep;
      keep.values = &values;
      return interpret_plan(p, xs, 2, keep);
    };
    auto unfused_y = interpret(plan, unfused_values);
    auto fused_y = interpret(*back, fused_values);
    auto fp16_out_y = interpret(fp16_out, fp16_out_values);
    ASSERT_TRUE(unfused_y.is_ok() && fused_y.is_ok() && fp16_out_y.is_ok());
    ASSERT_FALSE(unfused_values[static_cast<size_t>(q)].empty());
    EXPECT_EQ(fused_values[static_cast<size_t>(q)], unfused_values[static_cast<size_t>(q)]);
    EXPECT_EQ(*fused_y, *unfused_y);
    EXPECT_EQ(*fp16_out_y, *unfused_y);
    EXPECT_LT(compare(*fused_y, c.logits).rel_l2, 5e-2);
  }
}

TEST(FuseStemPool, LeavesOtherPlansAlone) {
  const Graph g = resnet_like_stem();
  BuildOptions options;
  options.precision = Precision::kFp16;
  auto accept = [](const PlanStep&) { return true; };
  auto plan = lower_graph(g, options);
  ASSERT_TRUE(plan.is_ok());
  // The kernel refuses: nothing changes.
  Plan refused = *plan;
  EXPECT_FALSE(fuse_stem_pool(refused, [](const PlanStep&) { return false; }));
  EXPECT_EQ(refused.steps.size(), plan->steps.size());
  EXPECT_EQ(refused.steps[0].kind, StepKind::kInput);
  // Already fused; no space-to-depth stem.
  Plan twice = *plan;
  ASSERT_TRUE(fuse_stem_pool(twice, accept));
  EXPECT_FALSE(fuse_stem_pool(twice, accept));
  options.stem_space_to_depth = false;
  auto plain = lower_graph(g, options);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(fuse_stem_pool(*plain, accept));
  // A convolution output read by another step as well.
  Graph shared = g;
  shared.nodes.push_back(Node{"extra", OpType::kGlobalAveragePool, {"s"}, {"e"}, {}});
  ASSERT_TRUE(shared.infer_shapes().is_ok());
  options.stem_space_to_depth = true;
  auto two_readers = lower_graph(shared, options);
  ASSERT_TRUE(two_readers.is_ok()) << two_readers.status().to_string();
  EXPECT_FALSE(fuse_stem_pool(*two_readers, accept));
  // A plan file whose stem step lost its intermediate values is refused.
  ASSERT_TRUE(fuse_stem_pool(*plan, accept));
  plan->steps[0].fused_values.pop_back();
  EXPECT_EQ(plan->validate().code(), StatusCode::kInvalidFile);
}

}  // namespace
}  // namespace gpulab
