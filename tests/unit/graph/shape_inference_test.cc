#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "unit/graph/graph_builder.h"

namespace gpulab {
namespace {

using testing::GraphBuilder;
using ::testing::HasSubstr;
constexpr int64_t N = Shape::kBatch;

const Shape& shape_of(const Graph& g, const std::string& v) {
  return g.value(v)->shape;
}

TEST(ShapeInference, ConvStrideAndPadsKeepSymbolicBatch) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3, 224, 224})
                .weight("w", Shape{32, 3, 3, 3})
                .weight("b", Shape{32})
                .node(OpType::kConv, "conv", {"x", "w", "b"}, {"y"}, testing::conv_attrs(3, 2, 1))
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 32, 112, 112}));
}

TEST(ShapeInference, AsymmetricPadsAndDepthwise) {
  ConvAttrs a = testing::conv_attrs(3, 2, 0, 32);
  a.pads = {0, 0, 1, 1};  // TF SAME for a stride-2 3x3 on an even size
  Graph g = GraphBuilder()
                .input("x", Shape{N, 32, 112, 112})
                .weight("w", Shape{32, 1, 3, 3})
                .node(OpType::kConv, "dw", {"x", "w"}, {"y"}, a)
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 32, 56, 56}));
}

TEST(ShapeInference, ConvChannelMismatchNamesNodeOpAndShapes) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 8, 8})
                .weight("w", Shape{8, 3, 3, 3})
                .node(OpType::kConv, "conv7", {"x", "w"}, {"y"}, testing::conv_attrs(3))
                .output("y")
                .build();
  Status s = g.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidModel);
  EXPECT_THAT(s.message(), HasSubstr("conv7"));
  EXPECT_THAT(s.message(), HasSubstr("Conv"));
  EXPECT_THAT(s.message(), HasSubstr("[N,4,8,8]"));
  EXPECT_THAT(s.message(), HasSubstr("[8,3,3,3]"));
}

TEST(ShapeInference, PoolFloorAndCeilMode) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 64, 112, 112})
                .input("odd", Shape{1, 1, 5, 5})
                .node(OpType::kMaxPool, "mp", {"x"}, {"y"}, testing::pool_attrs(3, 2, 1))
                .node(OpType::kMaxPool, "floor", {"odd"}, {"f"}, testing::pool_attrs(2, 2))
                .node(OpType::kAveragePool, "ceil", {"odd"}, {"c"}, testing::pool_attrs(2, 2, 0, true))
                .output("y")
                .output("f")
                .output("c")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 64, 56, 56}));
  EXPECT_EQ(shape_of(g, "f"), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(shape_of(g, "c"), (Shape{1, 1, 3, 3}));
}

TEST(ShapeInference, ClassifierHeadGapFlattenGemmSoftmax) {
  GemmAttrs gemm;
  gemm.trans_b = true;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 512, 7, 7})
                .weight("fc.w", Shape{1000, 512})
                .weight("fc.b", Shape{1000})
                .node(OpType::kGlobalAveragePool, "gap", {"x"}, {"p"})
                .node(OpType::kFlatten, "flat", {"p"}, {"f"}, FlattenAttrs{1})
                .node(OpType::kGemm, "fc", {"f", "fc.w", "fc.b"}, {"logits"}, gemm)
                .node(OpType::kSoftmax, "sm", {"logits"}, {"prob"}, AxisAttrs{-1})
                .output("prob")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "p"), (Shape{N, 512, 1, 1}));
  EXPECT_EQ(shape_of(g, "f"), (Shape{N, 512}));
  EXPECT_EQ(shape_of(g, "logits"), (Shape{N, 1000}));
  EXPECT_EQ(shape_of(g, "prob"), (Shape{N, 1000}));
}

TEST(ShapeInference, GemmInnerMismatchFails) {
  Graph g = GraphBuilder()
                .input("a", Shape{N, 256})
                .weight("w", Shape{512, 10})
                .node(OpType::kGemm, "fc", {"a", "w"}, {"y"}, GemmAttrs{})
                .output("y")
                .build();
  Status s = g.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("'fc' (Gemm)"));
}

// The pattern older torch.onnx exports use for x.view(x.size(0), -1).
TEST(ShapeInference, ShapeGatherUnsqueezeConcatReshapeChainIsStatic) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 512, 1, 1})
                .ints("zero", Shape{}, {0})
                .ints("minus_one", Shape{1}, {-1})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "gather", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kUnsqueeze, "unsq", {"n"}, {"n1"}, UnsqueezeAttrs{{0}})
                .node(OpType::kConcat, "cat", {"n1", "minus_one"}, {"target"}, AxisAttrs{0})
                .node(OpType::kReshape, "reshape", {"x", "target"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(g.value("s")->known_values, (std::vector<int64_t>{N, 512, 1, 1}));
  EXPECT_EQ(shape_of(g, "n"), Shape{});
  EXPECT_EQ(g.value("n")->known_values, (std::vector<int64_t>{N}));
  EXPECT_EQ(shape_of(g, "n1"), Shape{1});
  EXPECT_EQ(g.value("target")->known_values, (std::vector<int64_t>{N, -1}));
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 512}));
}

TEST(ShapeInference, ReshapeConstantTargets) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 8, 2, 2})
                .ints("copy0", Shape{2}, {0, -1})
                .ints("last", Shape{2}, {-1, 32})
                .ints("fixed", Shape{3}, {0, 16, 2})
                .node(OpType::kReshape, "r0", {"x", "copy0"}, {"a"}, ReshapeAttrs{})
                .node(OpType::kReshape, "r1", {"x", "last"}, {"b"}, ReshapeAttrs{})
                .node(OpType::kReshape, "r2", {"x", "fixed"}, {"c"}, ReshapeAttrs{})
                .output("a")
                .output("b")
                .output("c")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "a"), (Shape{N, 32}));
  EXPECT_EQ(shape_of(g, "b"), (Shape{N, 32}));
  EXPECT_EQ(shape_of(g, "c"), (Shape{N, 16, 2}));
}

TEST(ShapeInference, ReshapeErrors) {
  {  // the batch folded into another dimension: the -1 takes it, N * 4
    Graph g = GraphBuilder()
                  .input("x", Shape{N, 8})
                  .ints("t", Shape{2}, {2, -1})
                  .node(OpType::kReshape, "fold_batch", {"x", "t"}, {"y"}, ReshapeAttrs{})
                  .output("y")
                  .build();
    ASSERT_TRUE(g.infer_shapes().is_ok());
    EXPECT_EQ(g.value("y")->shape, (Shape{2, Shape::batch_times(4)}));
    EXPECT_EQ(g.value("y")->shape.to_string(), "[2,N*4]");
  }
  {  // the batch twice
    Graph g = GraphBuilder()
                  .input("x", Shape{N, 8})
                  .ints("t", Shape{3}, {N, N, -1})
                  .node(OpType::kReshape, "twice", {"x", "t"}, {"y"}, ReshapeAttrs{})
                  .output("y")
                  .build();
    Status s = g.infer_shapes();
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_THAT(s.message(), HasSubstr("twice"));
  }
  {
    Graph g = GraphBuilder()
                  .input("x", Shape{1, 8})
                  .ints("t", Shape{2}, {3, 3})
                  .node(OpType::kReshape, "bad_count", {"x", "t"}, {"y"}, ReshapeAttrs{})
                  .output("y")
                  .build();
    Status s = g.infer_shapes();
    ASSERT_FALSE(s.is_ok());
    EXPECT_THAT(s.message(), HasSubstr("bad_count"));
    EXPECT_THAT(s.message(), HasSubstr("[3,3]"));
  }
  {
    Graph g = GraphBuilder()
                  .input("x", Shape{1, 8})
                  .input("t", Shape{2}, DataType::kInt64)
                  .node(OpType::kReshape, "runtime_shape", {"x", "t"}, {"y"}, ReshapeAttrs{})
                  .output("y")
                  .build();
    Status s = g.infer_shapes();
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  }
}

TEST(ShapeInference, BroadcastAddMulAndMismatch) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 16, 4, 4})
                .weight("scale", Shape{16, 1, 1})
                .input("other", Shape{N, 16, 4, 4})
                .node(OpType::kMul, "mul", {"x", "scale"}, {"m"})
                .node(OpType::kAdd, "add", {"m", "other"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "m"), (Shape{N, 16, 4, 4}));
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 16, 4, 4}));

  Graph bad = GraphBuilder()
                  .input("x", Shape{N, 16, 4, 4})
                  .weight("w", Shape{8, 1, 1})
                  .node(OpType::kAdd, "add_bad", {"x", "w"}, {"y"})
                  .output("y")
                  .build();
  Status s = bad.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("add_bad"));
  EXPECT_THAT(s.message(), HasSubstr("do not broadcast"));
}

TEST(ShapeInference, MatMulConcatAndElementwise) {
  Graph g = GraphBuilder()
                .input("a", Shape{N, 512})
                .weight("w", Shape{512, 10})
                .input("p", Shape{N, 2, 4, 4})
                .input("q", Shape{N, 3, 4, 4})
                .node(OpType::kMatMul, "mm", {"a", "w"}, {"y"})
                .node(OpType::kConcat, "cat", {"p", "q"}, {"c"}, AxisAttrs{1})
                .node(OpType::kHardSwish, "hs", {"c"}, {"h"})
                .node(OpType::kHardSigmoid, "hsig", {"h"}, {"hs2"}, HardSigmoidAttrs{})
                .node(OpType::kSigmoid, "sig", {"hs2"}, {"s"})
                .output("y")
                .output("s")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(shape_of(g, "y"), (Shape{N, 10}));
  EXPECT_EQ(shape_of(g, "c"), (Shape{N, 5, 4, 4}));
  EXPECT_EQ(shape_of(g, "s"), (Shape{N, 5, 4, 4}));
}

TEST(ShapeInference, BatchNormChecksParameterShapes) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 2, 2})
                .weight("s", Shape{4})
                .weight("b", Shape{4})
                .weight("m", Shape{4})
                .weight("v", Shape{3})
                .node(OpType::kBatchNormalization, "bn", {"x", "s", "b", "m", "v"}, {"y"}, BatchNormAttrs{})
                .output("y")
                .build();
  Status s = g.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("'bn' (BatchNormalization)"));
}

TEST(ShapeInference, UndefinedInputIsReported) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4})
                .node(OpType::kRelu, "relu", {"missing"}, {"y"})
                .output("y")
                .build();
  Status s = g.infer_shapes();
  ASSERT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("missing"));
}

TEST(ShapeInference, InferNodeBindsConcreteBatch) {
  Node conv;
  conv.name = "c";
  conv.op = OpType::kConv;
  conv.inputs = {"x", "w"};
  conv.outputs = {"y"};
  conv.attrs = testing::conv_attrs(1);
  ValueInfo x{DataType::kFloat32, Shape{8, 4, 5, 5}, std::nullopt};
  ValueInfo w{DataType::kFloat32, Shape{6, 4, 1, 1}, std::nullopt};
  Graph g;
  auto out = infer_node(conv, {&x, &w}, g);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value()[0].shape, (Shape{8, 6, 5, 5}));
}

}  // namespace
}  // namespace gpulab
