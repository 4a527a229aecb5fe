// Lowering the transformer and ShuffleNet ops onto the view steps (lower_views.h), each small graph
// checked with the plan interpreter against the reference backend, in FP32 (within 1e-5) and in
// FP16 with its storage emulated (within 1e-2): ShuffleNet's split/shuffle/concat, ConvNeXt's
// transpose/LayerNorm/MLP/transpose block, a ViT-style encoder block with attention, a Swin-style
// window partition with an attention bias, and the view algebra itself.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>

#include "backends/reference/reference_executor.h"
#include "graph/graph.h"
#include "normal_tensor.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/views.h"

namespace gpulab {
namespace {

using testing::normal_tensor;

Graph image_graph(Shape input) {
  Graph g;
  g.name = "views";
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, std::move(input), std::nullopt};
  return g;
}

void ints(Graph& g, const std::string& name, std::vector<int64_t> v) {
  g.initializers[name] = Tensor::from_int64s(Shape{static_cast<int64_t>(v.size())}, v);
}

ConvAttrs conv_attrs(int64_t k, int64_t groups = 1) {
  ConvAttrs a;
  a.kernel = {k, k};
  a.pads = {k / 2, k / 2, k / 2, k / 2};
  a.groups = groups;
  return a;
}

// Lowers `g` (after run_passes unless told otherwise) and compares the plan interpreter with the
// reference backend at batch 2, in FP32 and FP16. Returns the FP32 plan.
Plan check(Graph g, double fp32_bound = 1e-5, double fp16_bound = 1e-2, bool passes = true) {
  EXPECT_TRUE(g.infer_shapes().is_ok());
  const Graph original = g;
  if (passes) {
    const Status s = run_passes(g);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  const ValueInfo* in = original.value("input");
  Tensor input = normal_tensor(in->shape.bind_batch(2), 7, 1.0f);
  auto exec = ReferenceExecutor::create(original);
  EXPECT_TRUE(exec.is_ok());
  auto ref = exec->run(std::vector<Tensor>{input});
  EXPECT_TRUE(ref.is_ok()) << ref.status().to_string();
  Plan first;
  for (Precision p : {Precision::kFp32, Precision::kFp16}) {
    BuildOptions options;
    options.precision = p;
    options.max_batch = 2;
    auto plan = lower_graph(g, options);
    EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
    if (!plan.is_ok()) return {};
    auto back = deserialize_plan(serialize_plan(*plan));
    EXPECT_TRUE(back.is_ok()) << back.status().to_string();
    const std::vector<float> x(input.f32().begin(), input.f32().end());
    auto got = interpret_plan(*back, x, 2);
    EXPECT_TRUE(got.is_ok()) << got.status().to_string();
    if (!got.is_ok()) return {};
    const ErrorStats e = compare(*got, (*ref)[0].f32());
    EXPECT_LE(e.rel_l2, p == Precision::kFp32 ? fp32_bound : fp16_bound) << precision_name(p);
    EXPECT_EQ(e.non_finite, 0);
    if (p == Precision::kFp32) first = *plan;
  }
  return first;
}

int count(const Plan& plan, StepKind kind) {
  return static_cast<int>(
      std::count_if(plan.steps.begin(), plan.steps.end(), [&](const PlanStep& s) { return s.kind == kind; }));
}

TEST(ViewAlgebra, ReshapeMergesAndSplitsWhereMemoryAllows) {
  const TensorView nhwc{0, {1, 8, 2, 3}, {48, 1, 24, 8}};  // NCHW dims over NHWC memory
  auto merged_hw = reshape_view(nhwc, {1, 8, 6});          // H and W merge: strides 24, 8
  ASSERT_TRUE(merged_hw);
  EXPECT_EQ(merged_hw->strides[1], 1);
  EXPECT_EQ(merged_hw->strides[2], 8);
  EXPECT_FALSE(reshape_view(nhwc, {1, 48}));  // C with H and W: not one stride
  auto split_c = reshape_view(nhwc, {1, 2, 4, 2, 3});
  ASSERT_TRUE(split_c);
  // (Dim 0 has extent 1: any stride reads the same elements.)
  EXPECT_EQ(std::vector<int64_t>(split_c->strides.begin() + 1, split_c->strides.end()),
            (std::vector<int64_t>{4, 1, 24, 8}));
  const TensorView t = permute_view(contiguous_view({2, 3, 4}), {2, 0, 1});
  EXPECT_EQ(t.dims, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 12, 4}));
  std::vector<size_t> order;
  EXPECT_TRUE(is_permuted_dense(t, &order));
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0}));
  EXPECT_FALSE(is_dense(t));
  EXPECT_TRUE(is_dense(contiguous_view({2, 3, 4})));
  const TensorView s = slice_view(contiguous_view({4, 6}), 1, 2, 2, 2);
  EXPECT_EQ(s.offset, 2);
  EXPECT_EQ(s.strides, (std::vector<int64_t>{6, 2}));
}

// ShuffleNetV2's unit: split the channels, convolve one half, concatenate, shuffle.
TEST(LowerViews, ShuffleNetUnit) {
  Graph g = image_graph(Shape{Shape::kBatch, 8, 6, 6});
  ints(g, "starts0", {0});
  ints(g, "ends0", {4});
  ints(g, "starts1", {4});
  ints(g, "ends1", {8});
  ints(g, "axes", {1});
  ints(g, "split_shape", {0, 2, 4, 6, 6});
  ints(g, "merge_shape", {0, 8, 6, 6});
  g.initializers["w1"] = normal_tensor(Shape{4, 4, 1, 1}, 1, 0.5f);
  g.initializers["w2"] = normal_tensor(Shape{4, 1, 3, 3}, 2, 0.5f);
  g.initializers["fc"] = normal_tensor(Shape{10, 8}, 3, 0.5f);
  ConvAttrs relu1 = conv_attrs(1);
  relu1.activation = Activation::kRelu;
  g.nodes = {
      Node{"x1", OpType::kSlice, {"input", "starts0", "ends0", "axes"}, {"a"}, {}},
      Node{"x2", OpType::kSlice, {"input", "starts1", "ends1", "axes"}, {"b"}, {}},
      Node{"conv1", OpType::kConv, {"b", "w1"}, {"b1"}, relu1},
      Node{"dw", OpType::kConv, {"b1", "w2"}, {"b2"}, conv_attrs(3, 4)},
      Node{"cat", OpType::kConcat, {"a", "b2"}, {"c"}, AxisAttrs{1}},
      Node{"split", OpType::kReshape, {"c", "split_shape"}, {"s"}, ReshapeAttrs{}},
      Node{"shuffle", OpType::kTranspose, {"s"}, {"t"}, TransposeAttrs{{0, 2, 1, 3, 4}}},
      Node{"merge", OpType::kReshape, {"t", "merge_shape"}, {"m"}, ReshapeAttrs{}},
      Node{"gap", OpType::kGlobalAveragePool, {"m"}, {"p"}, {}},
      Node{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}},
      Node{"fc", OpType::kGemm, {"f", "fc"}, {"logits"}, GemmAttrs{1, 1, false, true}},
  };
  g.outputs = {"logits"};
  const Plan plan = check(g);
  EXPECT_GE(count(plan, StepKind::kCopy), 1) << "the shuffle is a layout step";
}

// ConvNeXt's block: depthwise conv -> to NHWC (a view) -> LayerNorm -> Linear + GELU -> Linear ->
// layer scale -> back to NCHW (a view) -> + input, then a strided conv reading the result.
TEST(LowerViews, ConvNeXtBlockNeedsNoLayoutSteps) {
  Graph g = image_graph(Shape{Shape::kBatch, 8, 6, 6});
  g.initializers["dw"] = normal_tensor(Shape{8, 1, 7, 7}, 1, 0.3f);
  g.initializers["ln.w"] = normal_tensor(Shape{8}, 2, 0.5f);
  g.initializers["ln.b"] = normal_tensor(Shape{8}, 3, 0.1f);
  g.initializers["fc1"] = normal_tensor(Shape{8, 32}, 4, 0.3f);
  g.initializers["fc1.b"] = normal_tensor(Shape{32}, 5, 0.1f);
  g.initializers["fc2"] = normal_tensor(Shape{32, 8}, 6, 0.3f);
  g.initializers["fc2.b"] = normal_tensor(Shape{8}, 7, 0.1f);
  g.initializers["gamma"] = normal_tensor(Shape{8, 1, 1}, 8, 0.5f);
  g.initializers["down"] = normal_tensor(Shape{16, 8, 2, 2}, 9, 0.3f);
  g.initializers["fc"] = normal_tensor(Shape{10, 16}, 10, 0.3f);
  ConvAttrs down;
  down.kernel = {2, 2};
  down.stride = {2, 2};
  g.nodes = {
      Node{"dw", OpType::kConv, {"input", "dw"}, {"c"}, conv_attrs(7, 8)},
      Node{"to_nhwc", OpType::kTranspose, {"c"}, {"t"}, TransposeAttrs{{0, 2, 3, 1}}},
      Node{"ln", OpType::kLayerNormalization, {"t", "ln.w", "ln.b"}, {"n"}, LayerNormAttrs{-1, 1e-6f}},
      Node{"fc1", OpType::kMatMul, {"n", "fc1"}, {"h0"}, {}},
      Node{"fc1.bias", OpType::kAdd, {"fc1.b", "h0"}, {"h1"}, {}},
      Node{"gelu", OpType::kGelu, {"h1"}, {"h"}, GeluAttrs{}},
      Node{"fc2", OpType::kMatMul, {"h", "fc2"}, {"o0"}, {}},
      Node{"fc2.bias", OpType::kAdd, {"fc2.b", "o0"}, {"o"}, {}},
      Node{"to_nchw", OpType::kTranspose, {"o"}, {"b"}, TransposeAttrs{{0, 3, 1, 2}}},
      Node{"scale", OpType::kMul, {"gamma", "b"}, {"s"}, {}},
      Node{"residual", OpType::kAdd, {"s", "input"}, {"r"}, {}},
      Node{"down", OpType::kConv, {"r", "down"}, {"d"}, down},
      Node{"gap", OpType::kGlobalAveragePool, {"d"}, {"p"}, {}},
      Node{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}},
      Node{"fc", OpType::kGemm, {"f", "fc"}, {"logits"}, GemmAttrs{1, 1, false, true}},
  };
  g.outputs = {"logits"};
  const Plan plan = check(g);
  EXPECT_EQ(count(plan, StepKind::kCopy), 0) << "the transposes are views of NHWC";
  EXPECT_EQ(count(plan, StepKind::kLinear), 2);
  EXPECT_EQ(count(plan, StepKind::kLayerNorm), 1);
  for (const PlanStep& s : plan.steps)
    if (s.kind == StepKind::kLinear && s.name == "fc1") {
      EXPECT_EQ(s.pointwise, PointwiseFn::kGelu);
    }
  // FP16: the GELU layer's bias is float32 (cuBLASLt's GELU_BIAS epilogue has no algorithm for a
  // float16 one), the other layer's float16; check() above ran this plan in the interpreter.
  BuildOptions fp16;
  fp16.precision = Precision::kFp16;
  fp16.max_batch = 2;
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(run_passes(g).is_ok());
  auto half = lower_graph(g, fp16);
  ASSERT_TRUE(half.is_ok()) << half.status().to_string();
  int linears = 0;
  for (const PlanStep& s : half->steps) {
    if (s.kind != StepKind::kLinear) continue;
    ++linears;
    ASSERT_GE(s.bias, 0) << s.name;
    EXPECT_EQ(s.pointwise, s.name == "fc1" ? PointwiseFn::kGeluTanh : PointwiseFn::kIdentity) << s.name;
    EXPECT_EQ(half->weights[static_cast<size_t>(s.bias)].dtype,
              s.name == "fc1" ? DataType::kFloat32 : DataType::kFloat16)
        << s.name;
  }
  EXPECT_EQ(linears, 2);
}

// F.normalize over the channels of NHWC pixels (Swin V2's cosine attention normalizes q and k so):
// fuse_l2_normalize makes it LpNormalization, lowered as a kLayerNorm step in L2 mode, which the
// plan file keeps (check() runs the plan after a serialize/deserialize round trip).
TEST(LowerViews, L2NormalizeIsALayerNormStepInL2Mode) {
  Graph g = image_graph(Shape{Shape::kBatch, 8, 3, 3});
  g.initializers["fc"] = normal_tensor(Shape{10, 8}, 2, 0.3f);
  g.nodes = {
      Node{"to_nhwc", OpType::kTranspose, {"input"}, {"t"}, TransposeAttrs{{0, 2, 3, 1}}},
      Node{"l2", OpType::kReduceL2, {"t"}, {"n"}, ReduceAttrs{{-1}, true}},
      Node{"clip", OpType::kClip, {"n"}, {"c"}, ClipAttrs{1e-12f}},
      Node{"div", OpType::kDiv, {"t", "c"}, {"u"}, {}},
      Node{"to_nchw", OpType::kTranspose, {"u"}, {"b"}, TransposeAttrs{{0, 3, 1, 2}}},
      Node{"gap", OpType::kGlobalAveragePool, {"b"}, {"p"}, {}},
      Node{"flat", OpType::kFlatten, {"p"}, {"f"}, FlattenAttrs{1}},
      Node{"fc", OpType::kGemm, {"f", "fc"}, {"logits"}, GemmAttrs{1, 1, false, true}},
  };
  g.outputs = {"logits"};
  const Plan plan = check(g);
  ASSERT_EQ(count(plan, StepKind::kLayerNorm), 1);
  for (const PlanStep& s : plan.steps)
    if (s.kind == StepKind::kLayerNorm) {
      EXPECT_TRUE(s.l2_norm);
      EXPECT_FLOAT_EQ(s.epsilon, 1e-12f);
      EXPECT_LT(s.bias, 0);
    }
  // The L2 mode came with plan format 6: a version-5 file that claims it is refused, not read as
  // a layer norm.
  std::vector<std::byte> bytes = serialize_plan(plan);
  const uint32_t version = 5;
  std::memcpy(bytes.data() + 8, &version, 4);
  const uint64_t sum = fnv1a64(std::span(bytes).first(bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  const auto old = deserialize_plan(bytes);
  ASSERT_FALSE(old.is_ok());
  EXPECT_EQ(old.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(
      old.status().message().find("the L2 mode, which plan format version 6 added, in a version-5 file"),
      std::string::npos)
      << old.status().message();
}

// A ViT encoder block: class token and position embedding, LayerNorm, packed QKV projection, heads
// split by Reshape/Transpose, scaled dot-product attention, heads merged, projection + residual, MLP.
TEST(LowerViews, VitEncoderBlockWithAttention) {
  const int64_t t = 5, c = 8, heads = 2, d = c / heads;
  Graph g = image_graph(Shape{Shape::kBatch, 3, 4, 4});
  g.initializers["patch"] = normal_tensor(Shape{c, 3, 2, 2}, 1, 0.3f);
  g.initializers["cls"] = normal_tensor(Shape{1, 1, c}, 2, 0.5f);
  g.initializers["pos"] = normal_tensor(Shape{1, t, c}, 3, 0.5f);
  g.initializers["ln.w"] = normal_tensor(Shape{c}, 4, 0.5f);
  g.initializers["qkv"] = normal_tensor(Shape{c, 3 * c}, 5, 0.4f);
  g.initializers["qkv.b"] = normal_tensor(Shape{3 * c}, 6, 0.1f);
  g.initializers["proj"] = normal_tensor(Shape{c, c}, 7, 0.4f);
  g.initializers["head"] = normal_tensor(Shape{10, c}, 8, 0.3f);
  ints(g, "tokens_shape", {0, c, t - 1});
  ints(g, "heads_shape", {0, t, 3, heads, d});
  ints(g, "merge_shape", {0, t, c});
  ints(g, "expand_shape", {1, 1});
  ints(g, "zero", {0});
  g.initializers["zero_scalar"] = Tensor::from_int64s(Shape{}, std::vector<int64_t>{0});
  g.initializers["one_scalar"] = Tensor::from_int64s(Shape{}, std::vector<int64_t>{1});
  g.initializers["two_scalar"] = Tensor::from_int64s(Shape{}, std::vector<int64_t>{2});
  ConvAttrs patch;
  patch.kernel = {2, 2};
  patch.stride = {2, 2};
  g.nodes = {
      Node{"patch", OpType::kConv, {"input", "patch"}, {"pe"}, patch},  // [N, 8, 2, 2]: 4 tokens
      Node{"flatten", OpType::kReshape, {"pe", "tokens_shape"}, {"pf"}, ReshapeAttrs{}},
      Node{"tokens", OpType::kTranspose, {"pf"}, {"tok"}, TransposeAttrs{{0, 2, 1}}},
      Node{"shape", OpType::kShape, {"input"}, {"s"}, {}},
      Node{"batch", OpType::kGather, {"s", "zero"}, {"n"}, AxisAttrs{0}},
      Node{"cls_shape", OpType::kConcat, {"n", "expand_shape"}, {"es"}, AxisAttrs{0}},
      Node{"cls_expand", OpType::kExpand, {"cls", "es"}, {"ce"}, {}},
      Node{"prepend", OpType::kConcat, {"ce", "tok"}, {"x0"}, AxisAttrs{1}},
      Node{"pos", OpType::kAdd, {"x0", "pos"}, {"x"}, {}},
      Node{"ln", OpType::kLayerNormalization, {"x", "ln.w"}, {"n1"}, LayerNormAttrs{-1, 1e-6f}},
      Node{"qkv", OpType::kMatMul, {"n1", "qkv"}, {"qkv0"}, {}},
      Node{"qkv.bias", OpType::kAdd, {"qkv0", "qkv.b"}, {"qkv1"}, {}},
      Node{"split_heads", OpType::kReshape, {"qkv1", "heads_shape"}, {"h5"}, ReshapeAttrs{}},
      Node{"heads_first", OpType::kTranspose, {"h5"}, {"h5t"}, TransposeAttrs{{2, 0, 3, 1, 4}}},
      Node{"q", OpType::kGather, {"h5t", "zero_scalar"}, {"q"}, AxisAttrs{0}},
      Node{"k", OpType::kGather, {"h5t", "one_scalar"}, {"k"}, AxisAttrs{0}},
      Node{"v", OpType::kGather, {"h5t", "two_scalar"}, {"v"}, AxisAttrs{0}},
      Node{"kt", OpType::kTranspose, {"k"}, {"kt"}, TransposeAttrs{{0, 1, 3, 2}}},
      Node{"qk", OpType::kMatMul, {"q", "kt"}, {"qk"}, {}},
      Node{"scale", OpType::kDiv, {"qk", "sqrt_d"}, {"qks"}, {}},
      Node{"softmax", OpType::kSoftmax, {"qks"}, {"p"}, AxisAttrs{-1}},
      Node{"pv", OpType::kMatMul, {"p", "v"}, {"o"}, {}},
      Node{"merge", OpType::kTranspose, {"o"}, {"ot"}, TransposeAttrs{{0, 2, 1, 3}}},
      Node{"merge_heads", OpType::kReshape, {"ot", "merge_shape"}, {"om"}, ReshapeAttrs{}},
      Node{"proj", OpType::kMatMul, {"om", "proj"}, {"pr"}, {}},
      Node{"residual", OpType::kAdd, {"pr", "x"}, {"y"}, {}},
      Node{"select_cls", OpType::kGather, {"y", "zero_scalar"}, {"cls_out"}, AxisAttrs{1}},
      Node{"head", OpType::kGemm, {"cls_out", "head"}, {"logits"}, GemmAttrs{1, 1, false, true}},
  };
  g.initializers["sqrt_d"] = Tensor::from_floats(Shape{}, std::vector<float>{2.0f});
  g.outputs = {"logits"};
  const Plan plan = check(g);
  EXPECT_EQ(count(plan, StepKind::kAttention), 1);
  EXPECT_EQ(count(plan, StepKind::kMatMul), 0) << "fused into the attention";
  for (const PlanStep& s : plan.steps)
    if (s.kind == StepKind::kLinear && s.name == "proj") {
      EXPECT_EQ(s.inputs.size(), 2u) << "residual fused";
    }
}

}  // namespace
}  // namespace gpulab
