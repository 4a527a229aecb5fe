// Lowering the ops of squeeze-and-excitation classifiers (MobileNetV3, EfficientNet), a final
// Softmax, VGG's flatten of a multi-pixel tensor and SqueezeNet's channel Concat: Sigmoid, HardSigmoid and
// HardSwish become kPointwise steps, Mul and Add of a value per image and channel become broadcasting
// kMul/kAdd steps, a Softmax over the output's classes becomes part of kOutput, a Gemm reads a flattened NHWC
// tensor with its weight's columns permuted, and a Concat becomes one kConcat step. The plan interpreter
// checks each against the reference backend (CPU, milliseconds); what cannot run on the GPU is refused by
// name.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"
#include "normal_tensor.h"
#include "plan/interpret.h"
#include "plan/lower.h"

namespace gpulab {
namespace {

using testing::normal_tensor;

Node conv(std::string name, std::string in, std::string w, std::string out, int64_t kernel, Activation act) {
  ConvAttrs a;
  a.kernel = {kernel, kernel};
  a.pads = {kernel / 2, kernel / 2, kernel / 2, kernel / 2};
  a.activation = act;
  return Node{std::move(name), OpType::kConv, {std::move(in), std::move(w)}, {std::move(out)}, a};
}

// A graph named `name` whose input is [N, 3, 8, 8].
Graph image_graph(std::string name) {
  Graph g;
  g.name = std::move(name);
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 3, 8, 8}, std::nullopt};
  return g;
}

// input [N,3,8,8] -> conv 3x3 (16) relu -> HardSwish = h
//   squeeze-and-excitation: GAP(h) -> conv 1x1 (4) relu -> conv 1x1 (16) = e -> HardSigmoid = s
//   Mul(s, h) (the scale first, as torchvision writes it) = m
//   SiLU: Mul(m, Sigmoid(m)) = silu;  Add(silu, e) (broadcast second) = a
// -> GAP -> Flatten -> Gemm (10) -> Softmax over the classes.
Graph se_classifier() {
  Graph g = image_graph("se");
  g.initializers["w1"] = normal_tensor(Shape{16, 3, 3, 3}, 1, 0.4f);
  g.initializers["fc1.w"] = normal_tensor(Shape{4, 16, 1, 1}, 2, 0.5f);
  g.initializers["fc2.w"] = normal_tensor(Shape{16, 4, 1, 1}, 3, 0.8f);
  g.initializers["fc.w"] = normal_tensor(Shape{10, 16}, 4, 0.8f);
  g.initializers["fc.b"] = normal_tensor(Shape{10}, 5, 0.2f);
  g.nodes = {conv("conv1", "input", "w1", "c1", 3, Activation::kRelu),
             Node{"hswish", OpType::kHardSwish, {"c1"}, {"h"}, {}},
             Node{"squeeze", OpType::kGlobalAveragePool, {"h"}, {"p"}, {}},
             conv("fc1", "p", "fc1.w", "f1", 1, Activation::kRelu),
             conv("fc2", "f1", "fc2.w", "e", 1, Activation::kNone),
             Node{"hsigmoid", OpType::kHardSigmoid, {"e"}, {"s"}, HardSigmoidAttrs{1.0f / 6, 0.5f}},
             Node{"scale", OpType::kMul, {"s", "h"}, {"m"}, {}},
             Node{"sigmoid", OpType::kSigmoid, {"m"}, {"g"}, {}},
             Node{"silu", OpType::kMul, {"m", "g"}, {"silu"}, {}},
             Node{"shift", OpType::kAdd, {"silu", "e"}, {"a"}, {}},
             Node{"gap", OpType::kGlobalAveragePool, {"a"}, {"q"}, {}},
             Node{"flat", OpType::kFlatten, {"q"}, {"fl"}, FlattenAttrs{1}}};
  GemmAttrs ga;
  ga.trans_b = true;
  g.nodes.push_back(Node{"fc", OpType::kGemm, {"fl", "fc.w", "fc.b"}, {"logits"}, ga});
  g.nodes.push_back(Node{"softmax", OpType::kSoftmax, {"logits"}, {"prob"}, AxisAttrs{-1}});
  g.outputs = {"prob"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

const PlanStep* find_step(const Plan& plan, const std::string& name) {
  for (const PlanStep& s : plan.steps)
    if (s.name == name) return &s;
  return nullptr;
}

Result<Plan> lower(const Graph& g, Precision precision) {
  BuildOptions options;
  options.precision = precision;
  options.max_batch = 3;
  return lower_graph(g, options);
}

// A seeded [batch, 3, 8, 8] input and what the reference backend computes for it on `g`.
struct Reference {
  std::vector<float> input, output;
};
Reference reference_run(const Graph& g, int64_t batch, uint32_t seed) {
  const Tensor input = normal_tensor(Shape{batch, 3, 8, 8}, seed, 1.0f);
  auto exec = ReferenceExecutor::create(g);
  EXPECT_TRUE(exec.is_ok()) << exec.status().to_string();
  if (!exec.is_ok()) return {};
  auto out = exec->run(std::vector<Tensor>{input});
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  if (!out.is_ok()) return {};
  return {{input.f32().begin(), input.f32().end()}, {(*out)[0].f32().begin(), (*out)[0].f32().end()}};
}

// `g` lowered in `precision` and interpreted on ref.input: within `bound` (relative L2) of the
// reference. The plan goes to `plan` for the caller's checks; the interpreted output is returned
// (empty after a failure, which is reported).
std::vector<float> interpret_like_reference(const Graph& g, Precision precision, const Reference& ref,
                                            int64_t batch, double bound, Plan& plan) {
  auto lowered = lower(g, precision);
  EXPECT_TRUE(lowered.is_ok()) << lowered.status().to_string();
  if (!lowered.is_ok()) return {};
  plan = std::move(lowered).value();
  auto got = interpret_plan(plan, ref.input, batch);
  EXPECT_TRUE(got.is_ok()) << got.status().to_string();
  if (!got.is_ok() || got->size() != ref.output.size()) return {};
  const ErrorStats e = compare(*got, ref.output);
  EXPECT_LE(e.rel_l2, bound) << precision_name(precision);
  EXPECT_EQ(e.non_finite, 0) << precision_name(precision);
  return std::move(got).value();
}

// `g` lowered and interpreted in FP32 and FP16 at batch 2 against the reference backend; `check`
// looks at each plan.
void check_fp32_and_fp16(const Graph& g, uint32_t seed, const std::function<void(const Plan&)>& check) {
  const Reference ref = reference_run(g, 2, seed);
  for (const auto& [precision, bound] :
       {std::pair{Precision::kFp32, 1e-6}, std::pair{Precision::kFp16, 5e-3}}) {
    SCOPED_TRACE(precision_name(precision));
    Plan plan;
    EXPECT_FALSE(interpret_like_reference(g, precision, ref, 2, bound, plan).empty());
    check(plan);
  }
}

TEST(LowerPointwise, StepsOfASqueezeExcitationClassifier) {
  auto plan = lower(se_classifier(), Precision::kFp32);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const PlanStep* hswish = find_step(*plan, "hswish");
  const PlanStep* hsigmoid = find_step(*plan, "hsigmoid");
  const PlanStep* sigmoid = find_step(*plan, "sigmoid");
  ASSERT_TRUE(hswish && hsigmoid && sigmoid);
  EXPECT_EQ(hswish->kind, StepKind::kPointwise);
  EXPECT_EQ(hswish->pointwise, PointwiseFn::kHardSwish);
  EXPECT_EQ(hsigmoid->pointwise, PointwiseFn::kHardSigmoid);
  EXPECT_FLOAT_EQ(hsigmoid->alpha, 1.0f / 6);
  EXPECT_EQ(sigmoid->pointwise, PointwiseFn::kSigmoid);

  // The scale is read second and broadcast; SiLU's Mul has two inputs of one shape.
  const PlanStep* scale = find_step(*plan, "scale");
  const PlanStep* silu = find_step(*plan, "silu");
  const PlanStep* shift = find_step(*plan, "shift");
  ASSERT_TRUE(scale && silu && shift);
  EXPECT_EQ(scale->kind, StepKind::kMul);
  EXPECT_EQ(plan->values[scale->inputs[0]].name, "h");
  EXPECT_EQ(plan->values[scale->inputs[1]].name, "s");
  EXPECT_TRUE(broadcasts_channels(*plan, *scale));
  EXPECT_FALSE(broadcasts_channels(*plan, *silu));
  EXPECT_EQ(shift->kind, StepKind::kAdd);
  EXPECT_TRUE(broadcasts_channels(*plan, *shift));

  // The Softmax is the output step's, over float32 logits.
  EXPECT_EQ(find_step(*plan, "softmax"), nullptr);
  EXPECT_EQ(plan->steps.back().kind, StepKind::kOutput);
  EXPECT_TRUE(plan->steps.back().softmax);
  EXPECT_EQ(plan->num_classes, 10);

  // The plan file keeps all of it.
  auto back = deserialize_plan(serialize_plan(*plan));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_TRUE(back->steps.back().softmax);
  const PlanStep* hsigmoid_back = find_step(*back, "hsigmoid");
  ASSERT_NE(hsigmoid_back, nullptr);
  EXPECT_EQ(hsigmoid_back->kind, StepKind::kPointwise);
  EXPECT_EQ(hsigmoid_back->pointwise, PointwiseFn::kHardSigmoid);
  EXPECT_FLOAT_EQ(hsigmoid_back->alpha, 1.0f / 6);
  EXPECT_FLOAT_EQ(hsigmoid_back->beta, 0.5f);
  EXPECT_EQ(find_step(*back, "scale")->kind, StepKind::kMul);
}

// The interpreted plan computes what the reference backend does on the graph: in FP32 to float
// rounding, in FP16 and BF16 (storage emulated) to their rounding.
TEST(LowerPointwise, InterpretedPlanMatchesTheReference) {
  const Graph g = se_classifier();
  const int64_t batch = 3;
  const Reference ref = reference_run(g, batch, 9);
  ASSERT_EQ(ref.output.size(), 30u);
  // Not a flat distribution: the test would not see a softmax taken twice.
  EXPECT_GT(*std::max_element(ref.output.begin(), ref.output.begin() + 10), 0.2f);
  for (const auto& [precision, bound] : {std::pair{Precision::kFp32, 1e-6}, std::pair{Precision::kFp16, 5e-3},
                                         std::pair{Precision::kBf16, 3e-2}}) {
    Plan plan;
    const std::vector<float> got = interpret_like_reference(g, precision, ref, batch, bound, plan);
    ASSERT_EQ(got.size(), ref.output.size());
    for (int64_t n = 0; n < batch; ++n) {
      double sum = 0;
      for (int64_t c = 0; c < 10; ++c) sum += got[n * 10 + c];
      EXPECT_NEAR(sum, 1.0, 1e-5) << precision_name(precision) << " image " << n;
    }
  }
}

TEST(LowerPointwise, WhatTheGpuCannotRunIsRefusedByName) {
  // A Softmax inside the network.
  Graph inner = se_classifier();
  inner.nodes.insert(inner.nodes.begin() + 1,
                     Node{"early_softmax", OpType::kSoftmax, {"c1"}, {"sm"}, AxisAttrs{1}});
  inner.nodes[2].inputs = {"sm"};
  ASSERT_TRUE(inner.infer_shapes().is_ok());
  auto r = lower(inner, Precision::kFp32);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("'early_softmax'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("output only"), std::string::npos) << r.status().message();

  // A Mul broadcasting one channel over sixteen.
  Graph one_channel = se_classifier();
  one_channel.initializers["mask.w"] = normal_tensor(Shape{1, 16, 1, 1}, 6, 0.5f);
  one_channel.nodes.insert(one_channel.nodes.begin() + 2,
                           conv("mask", "h", "mask.w", "mk", 1, Activation::kNone));
  one_channel.nodes.insert(one_channel.nodes.begin() + 3,
                           Node{"masked", OpType::kMul, {"h", "mk"}, {"hm"}, {}});
  one_channel.nodes[4].inputs = {"hm"};  // squeeze
  ASSERT_TRUE(one_channel.infer_shapes().is_ok());
  r = lower(one_channel, Precision::kFp32);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("'masked'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("broadcast"), std::string::npos) << r.status().message();
}

// The runtime indexes an elementwise step's inputs by its output's shape, so a plan whose values
// do not fit is refused when it is validated (as a damaged file would be), never run.
TEST(LowerPointwise, ValidationRefusesMismatchedElementwiseInputs) {
  auto plan = lower(se_classifier(), Precision::kFp32);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const PlanStep* scale = find_step(*plan, "scale");
  ASSERT_NE(scale, nullptr);
  Plan wide = *plan;
  wide.values[scale->inputs[1]].c = 32;  // the broadcast scale no longer has the output's channels
  EXPECT_EQ(wide.validate().code(), StatusCode::kInvalidFile);
  Plan tall = *plan;
  tall.values[find_step(*plan, "hswish")->inputs[0]].h = 4;
  const Status s = tall.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidFile);
  EXPECT_NE(s.message().find("'hswish'"), std::string::npos) << s.message();
}

// input [N,3,8,8] -> conv 3x3 (8) relu -> maxpool 2x2 -> Flatten [N, 128] (4x4x8: the plan keeps
// NHWC order) -> Gemm (32, transB) -> Relu -> Dropout -> Gemm (10, B not transposed).
Graph vgg_like(bool relu_before_gemm = false) {
  Graph g = image_graph("vgg");
  g.initializers["w1"] = normal_tensor(Shape{8, 3, 3, 3}, 11, 0.4f);
  g.initializers["fc1.w"] = normal_tensor(Shape{32, 128}, 12, 0.1f);
  g.initializers["fc1.b"] = normal_tensor(Shape{32}, 13, 0.1f);
  g.initializers["fc2.w"] = normal_tensor(Shape{32, 10}, 14, 0.3f);
  PoolAttrs pool;
  pool.kernel = {2, 2};
  pool.stride = {2, 2};
  GemmAttrs t;
  t.trans_b = true;
  g.nodes = {conv("conv1", "input", "w1", "c1", 3, Activation::kRelu),
             Node{"pool", OpType::kMaxPool, {"c1"}, {"p"}, pool},
             Node{"flatten", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}}};
  std::string features = "f";
  if (relu_before_gemm) {
    g.nodes.push_back(Node{"early_relu", OpType::kRelu, {"f"}, {"fr"}, {}});
    features = "fr";
  }
  g.nodes.push_back(Node{"fc1", OpType::kGemm, {features, "fc1.w", "fc1.b"}, {"h"}, t});
  g.nodes.push_back(Node{"relu", OpType::kRelu, {"h"}, {"hr"}, {}});
  g.nodes.push_back(Node{"drop", OpType::kDropout, {"hr"}, {"hd"}, {}});
  g.nodes.push_back(Node{"fc2", OpType::kGemm, {"hd", "fc2.w"}, {"logits"}, GemmAttrs{}});
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

TEST(LowerFlatten, GemmReadsAFlattenedMultiPixelTensorInItsNhwcOrder) {
  const Graph g = vgg_like();
  check_fp32_and_fp16(g, 21, [](const Plan& plan) {
    const PlanStep* fc1 = find_step(plan, "fc1");
    ASSERT_NE(fc1, nullptr);
    const PlanValue& x = plan.values[fc1->inputs[0]];
    EXPECT_EQ(x.h * x.w, 16) << "the pooled 4x4x8 value itself, not a copy";
    EXPECT_EQ(plan.weights[fc1->weight].shape, (Shape{32, 128}));
  });
}

// GlobalAveragePool of the image itself keeps the input's channel padding (3 of 4 in FP32, of 8
// in FP16): the Gemm after the Flatten gets zero weights for the padding.
TEST(LowerFlatten, GemmOverPaddedChannels) {
  Graph g = image_graph("padded");
  g.initializers["fc.w"] = normal_tensor(Shape{3, 10}, 51, 0.5f);
  g.initializers["fc.b"] = normal_tensor(Shape{10}, 52, 0.1f);
  g.nodes = {Node{"gap", OpType::kGlobalAveragePool, {"input"}, {"p"}, {}},
             Node{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}},
             Node{"fc", OpType::kGemm, {"f", "fc.w", "fc.b"}, {"logits"}, GemmAttrs{}}};
  g.outputs = {"logits"};
  ASSERT_TRUE(g.infer_shapes().is_ok());
  check_fp32_and_fp16(g, 53, [](const Plan& plan) {
    const PlanStep* fc = find_step(plan, "fc");
    ASSERT_NE(fc, nullptr);
    const int64_t stored = plan.values[fc->inputs[0]].c;
    EXPECT_GT(stored, 3);
    EXPECT_EQ(plan.weights[fc->weight].shape, (Shape{10, stored}));
  });
}

TEST(LowerFlatten, OnlyAGemmMayReadTheFlattenedTensor) {
  auto r = lower(vgg_like(/*relu_before_gemm=*/true), Precision::kFp32);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("'early_relu'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("only a Gemm"), std::string::npos) << r.status().message();

  // A Gemm weight that does not fit its input is a damaged plan.
  auto plan = lower(vgg_like(), Precision::kFp32);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  plan->values[find_step(*plan, "fc1")->inputs[0]].h = 2;
  const Status s = plan->validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidFile);
  EXPECT_NE(s.message().find("'fc1'"), std::string::npos) << s.message();
}

// A fire module: squeeze 1x1 (4) -> expand 1x1 (8) and expand 3x3 (12), concatenated to 20
// channels -> GAP -> Flatten -> Gemm (10).
Graph fire_module() {
  Graph g = image_graph("fire");
  g.initializers["squeeze.w"] = normal_tensor(Shape{4, 3, 1, 1}, 31, 0.5f);
  g.initializers["e1.w"] = normal_tensor(Shape{8, 4, 1, 1}, 32, 0.5f);
  g.initializers["e3.w"] = normal_tensor(Shape{12, 4, 3, 3}, 33, 0.3f);
  g.initializers["fc.w"] = normal_tensor(Shape{10, 20}, 34, 0.3f);
  GemmAttrs t;
  t.trans_b = true;
  g.nodes = {conv("squeeze", "input", "squeeze.w", "s", 1, Activation::kRelu),
             conv("e1", "s", "e1.w", "a", 1, Activation::kRelu),
             conv("e3", "s", "e3.w", "b", 3, Activation::kRelu),
             Node{"cat", OpType::kConcat, {"a", "b"}, {"c"}, AxisAttrs{1}},
             Node{"gap", OpType::kGlobalAveragePool, {"c"}, {"p"}, {}},
             Node{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}},
             Node{"fc", OpType::kGemm, {"f", "fc.w"}, {"logits"}, t}};
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

TEST(LowerConcat, FireModuleInterpretsLikeTheReference) {
  const Graph g = fire_module();
  check_fp32_and_fp16(g, 35, [](const Plan& plan) {
    const PlanStep* cat = find_step(plan, "cat");
    ASSERT_NE(cat, nullptr);
    EXPECT_EQ(cat->kind, StepKind::kConcat);
    ASSERT_EQ(cat->inputs.size(), 2u);
    EXPECT_EQ(plan.values[cat->output].c, 20);
    auto back = deserialize_plan(serialize_plan(plan));
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(find_step(*back, "cat")->kind, StepKind::kConcat);
  });
}

// The image itself (3 channels, padded in the plan to 4 in FP32 and 8 in FP16) pooled and joined
// with a strided convolution's 5 channels: the concatenation holds 3 + 5 channels, no padding.
TEST(LowerConcat, PaddedInputContributesItsValidChannels) {
  Graph g = image_graph("padded");
  g.initializers["w"] = normal_tensor(Shape{5, 3, 2, 2}, 41, 0.5f);
  g.initializers["fc.w"] = normal_tensor(Shape{10, 8}, 42, 0.3f);
  ConvAttrs a;
  a.kernel = {2, 2};
  a.stride = {2, 2};
  a.activation = Activation::kRelu;
  PoolAttrs pool;
  pool.kernel = {2, 2};
  pool.stride = {2, 2};
  GemmAttrs t;
  t.trans_b = true;
  g.nodes = {Node{"pool", OpType::kMaxPool, {"input"}, {"p"}, pool},
             Node{"conv", OpType::kConv, {"input", "w"}, {"c"}, a},
             Node{"cat", OpType::kConcat, {"p", "c"}, {"j"}, AxisAttrs{1}},
             Node{"gap", OpType::kGlobalAveragePool, {"j"}, {"q"}, {}},
             Node{"flat", OpType::kFlatten, {"q"}, {"f"}, FlattenAttrs{1}},
             Node{"fc", OpType::kGemm, {"f", "fc.w"}, {"logits"}, t}};
  g.outputs = {"logits"};
  ASSERT_TRUE(g.infer_shapes().is_ok());
  check_fp32_and_fp16(g, 43, [](const Plan& plan) {
    const PlanStep* cat = find_step(plan, "cat");
    ASSERT_NE(cat, nullptr);
    EXPECT_GT(plan.values[cat->inputs[0]].c, 3) << "the pooled image keeps the input's padding";
    EXPECT_EQ(plan.values[cat->output].c, 8);
  });
}

TEST(LowerConcat, OtherAxesAreCopiesAndMismatchedPlansAreRefused) {
  // Two images stacked: [N, 4, 16, 8], one kCopy per input into its rows of the output (lower_views.h).
  Graph rows = fire_module();
  rows.nodes = {rows.nodes[0], Node{"cat", OpType::kConcat, {"s", "s"}, {"c"}, AxisAttrs{2}}, rows.nodes[4],
                rows.nodes[5], rows.nodes[6]};
  rows.initializers["fc.w"] = normal_tensor(Shape{10, 4}, 36, 0.3f);
  ASSERT_TRUE(rows.infer_shapes().is_ok());
  check_fp32_and_fp16(rows, 37, [](const Plan& plan) {
    EXPECT_EQ(std::count_if(plan.steps.begin(), plan.steps.end(),
                            [](const PlanStep& s) {
                              return s.kind == StepKind::kCopy && s.name.rfind("cat.", 0) == 0;
                            }),
              2);
  });

  auto plan = lower(fire_module(), Precision::kFp32);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const PlanStep* cat = find_step(*plan, "cat");
  Plan short_output = *plan;
  short_output.values[cat->output].c = short_output.values[cat->output].c_valid = 19;  // one channel short
  Status s = short_output.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidFile);
  EXPECT_NE(s.message().find("'cat'"), std::string::npos) << s.message();
  Plan other_size = *plan;
  other_size.values[cat->inputs[1]].h = 4;
  EXPECT_EQ(other_size.validate().code(), StatusCode::kInvalidFile);
}

}  // namespace
}  // namespace gpulab
