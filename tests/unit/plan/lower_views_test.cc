// Lowering the transformer and ShuffleNet ops onto the view steps (lower_views.h), each small graph
// checked with the plan interpreter against the reference backend, in FP32 (within 1e-5) and in
// FP16 with its storage emulated (within 1e-2): ShuffleNet's split/shuffle/concat, ConvNeXt's
// transpose/LayerNorm/MLP/transpose block, a ViT-style encoder block with attention, a Swin-style
// window partition with an attention bias, and the view algebra itself.
#include <gtest/gtest.h>

#include <random>

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

}  // namespace
}  // namespace gpulab
