// Shape inference of the transformer ops (infer_tensor_ops.cc) and the known values of an export's
// shape code (known_values.cc): the batch N, and N * k where a model folds it into another
// dimension, flow through; values that would depend on N in another way stay unknown.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "unit/graph/graph_builder.h"

namespace gpulab {
namespace {

using testing::GraphBuilder;
using ::testing::HasSubstr;
constexpr int64_t N = Shape::kBatch;

TEST(BatchMultiples, EncodeDecodeAndPrint) {
  EXPECT_EQ(Shape::batch_times(1), N);
  EXPECT_TRUE(Shape::is_batch(Shape::batch_times(64)));
  EXPECT_EQ(Shape::batch_factor(Shape::batch_times(64)), 64);
  // Exporters write INT64_MIN + 1 as "from the end" in Slice ends: not the batch.
  EXPECT_FALSE(Shape::is_batch(std::numeric_limits<int64_t>::min() + 1));
  const Shape s{Shape::batch_times(64), 49, 96};
  EXPECT_EQ(s.to_string(), "[N*64,49,96]");
  EXPECT_EQ(s.numel(3), 3 * 64 * 49 * 96);
  EXPECT_EQ(s.bind_batch(2), (Shape{128, 49, 96}));
}

// Swin's window partition: [N, 8, 7, 8, 7, C] -> transpose -> [N * 64, 49, C], the target shape
// computed from Shape and Mul as the exporter writes it, and back by x.size(0) // 64.
TEST(KnownValues, BatchFoldedIntoWindowsAndBack) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 8, 7, 8, 7, 4})
                .ints("zero", Shape{1}, {0})
                .ints("windows", Shape{1}, {64})
                .ints("rest", Shape{2}, {49, 4})
                .ints("back_rest", Shape{3}, {64, 49, 4})
                .node(OpType::kTranspose, "t", {"x"}, {"xt"}, TransposeAttrs{{0, 1, 3, 2, 4, 5}})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "batch", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kMul, "times", {"n", "windows"}, {"nw"})
                .node(OpType::kConcat, "target", {"nw", "rest"}, {"target"}, AxisAttrs{0})
                .node(OpType::kReshape, "partition", {"xt", "target"}, {"w"}, ReshapeAttrs{})
                .node(OpType::kShape, "wshape", {"w"}, {"ws"})
                .node(OpType::kGather, "wbatch", {"ws", "zero"}, {"wn"}, AxisAttrs{0})
                .node(OpType::kDiv, "per_image", {"wn", "windows"}, {"back_n"})
                .node(OpType::kConcat, "back_target", {"back_n", "back_rest"}, {"bt"}, AxisAttrs{0})
                .node(OpType::kReshape, "departition", {"w", "bt"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  const Status s = g.infer_shapes();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(g.value("w")->shape, (Shape{Shape::batch_times(64), 49, 4}));
  EXPECT_EQ(g.value("wn")->known_values, (std::vector<int64_t>{Shape::batch_times(64)}));
  EXPECT_EQ(g.value("back_n")->known_values, (std::vector<int64_t>{N}));
  EXPECT_EQ(g.value("y")->shape, (Shape{N, 64, 49, 4}));
}

// expand(n, -1, -1) as torch.onnx writes it: Where(Equal(shape, -1), 1, shape).
TEST(KnownValues, ExpandShapeThroughWhereAndEqual) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3, 8})
                .weight("token", Shape{1, 1, 8})
                .ints("zero", Shape{1}, {0})
                .ints("minus", Shape{2}, {-1, -1})
                .ints("ones", Shape{3}, {1, 1, 1})
                .ints("neg", Shape{3}, {-1, -1, -1})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "batch", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kConcat, "cat", {"n", "minus"}, {"want"}, AxisAttrs{0})
                .node(OpType::kEqual, "is_minus", {"want", "neg"}, {"eq"})
                .node(OpType::kWhere, "pick", {"eq", "ones", "want"}, {"target"})
                .node(OpType::kExpand, "expand", {"token", "target"}, {"tokens"})
                .output("tokens")
                .build();
  const Status s = g.infer_shapes();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(g.value("eq")->known_values, (std::vector<int64_t>{0, 1, 1})) << "N == -1 is false for every N";
  EXPECT_EQ(g.value("target")->known_values, (std::vector<int64_t>{N, 1, 1}));
  EXPECT_EQ(g.value("tokens")->shape, (Shape{N, 1, 8}));
}

// N == 2 holds for one batch size only: unknown, so a shape that needed it is refused by name.
TEST(KnownValues, ComparisonThatDependsOnTheBatchStaysUnknown) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4})
                .ints("zero", Shape{1}, {0})
                .ints("two", Shape{1}, {2})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "batch", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kEqual, "is_two", {"n", "two"}, {"eq"})
                .node(OpType::kAdd, "plus", {"n", "two"}, {"np2"})
                .node(OpType::kConstantOfShape, "zeros", {"np2"}, {"z"}, ConstantOfShapeAttrs{})
                .output("z")
                .build();
  const Status s = g.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("'zeros'"));
}

TEST(InferTensorOps, SliceSplitSqueezeReduceLayerNormAttention) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 6, 10})
                .ints("starts", Shape{2}, {1, -4})
                .ints("ends", Shape{2}, {INT64_MAX, INT64_MAX})
                .ints("axes", Shape{2}, {1, 2})
                .weight("scale", Shape{10})
                .node(OpType::kSlice, "slice", {"x", "starts", "ends", "axes"}, {"sl"})
                .node(OpType::kSplit, "split", {"x"}, {"a", "b"}, SplitAttrs{1, {2, 4}})
                .node(OpType::kReduceMean, "mean", {"x"}, {"m"}, ReduceAttrs{{-1}, false})
                .node(OpType::kLayerNormalization, "ln", {"x", "scale"}, {"ln"}, LayerNormAttrs{-1, 1e-6f})
                .node(OpType::kAttention, "attention", {"x", "x", "ln"}, {"att"}, AttentionAttrs{0.5f})
                .output("att")
                .build();
  const Status s = g.infer_shapes();
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(g.value("sl")->shape, (Shape{N, 5, 4}));
  EXPECT_EQ(g.value("a")->shape, (Shape{N, 2, 10}));
  EXPECT_EQ(g.value("b")->shape, (Shape{N, 4, 10}));
  EXPECT_EQ(g.value("m")->shape, (Shape{N, 6}));
  EXPECT_EQ(g.value("ln")->shape, (Shape{N, 6, 10}));
  EXPECT_EQ(g.value("att")->shape, (Shape{N, 6, 10}));
}

TEST(InferTensorOps, TheBatchIsNotSlicedSplitOrReduced) {
  const auto refused = [](Graph g, const char* name) {
    const Status s = g.infer_shapes();
    ASSERT_FALSE(s.is_ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr(name));
  };
  refused(GraphBuilder()
              .input("x", Shape{N, 4})
              .ints("starts", Shape{1}, {1})
              .ints("ends", Shape{1}, {INT64_MAX})
              .node(OpType::kSlice, "slice_batch", {"x", "starts", "ends"}, {"y"})
              .output("y")
              .build(),
          "slice_batch");
  refused(GraphBuilder()
              .input("x", Shape{N, 4})
              .node(OpType::kReduceMean, "mean_batch", {"x"}, {"y"}, ReduceAttrs{{0}, true})
              .output("y")
              .build(),
          "mean_batch");
  refused(GraphBuilder()
              .input("x", Shape{N, 4})
              .input("ends", Shape{1}, DataType::kInt64)
              .ints("starts", Shape{1}, {0})
              .node(OpType::kSlice, "runtime_ends", {"x", "starts", "ends"}, {"y"})
              .output("y")
              .build(),
          "runtime_ends");
}

// Sizes computed from a file's numbers: an overflow is a refusal (or an unknown value), never
// undefined behaviour. The onnx_import fuzz target found the Pad case (10 + INT64_MAX).
TEST(InferTensorOps, OverflowingPadsAndRangesAreRefused) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Graph pad = GraphBuilder()
                  .input("x", Shape{1, 3, 10, 10})
                  .ints("pads", Shape{8}, {0, 0, 0, 0, 0, 0, kMax, 0})
                  .node(OpType::kPad, "pad", {"x", "pads"}, {"y"})
                  .output("y")
                  .build();
  const Status p = pad.infer_shapes();
  EXPECT_FALSE(p.is_ok());
  EXPECT_THAT(p.message(), HasSubstr("overflow"));
  Graph range = GraphBuilder()
                    .ints("start", Shape{}, {-kMax})
                    .ints("limit", Shape{}, {kMax})
                    .ints("delta", Shape{}, {1})
                    .node(OpType::kRange, "range", {"start", "limit", "delta"}, {"r"})
                    .output("r")
                    .build();
  const Status r = range.infer_shapes();
  EXPECT_FALSE(r.is_ok());
  EXPECT_THAT(r.message(), HasSubstr("more elements than a size can count"));
}

TEST(KnownValues, OverflowingArithmeticLeavesTheValueUnknown) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4})
                .ints("big", Shape{1}, {std::numeric_limits<int64_t>::max()})
                .ints("ten", Shape{1}, {10})
                .node(OpType::kAdd, "sum", {"big", "ten"}, {"s"})
                .node(OpType::kMul, "product", {"big", "ten"}, {"m"})
                .node(OpType::kRelu, "relu", {"x"}, {"y"})
                .output("y")
                .output("s")
                .output("m")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_FALSE(g.value("s")->known_values.has_value());
  EXPECT_FALSE(g.value("m")->known_values.has_value());
}

}  // namespace
}  // namespace gpulab
