#include "passes/passes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "unit/graph/graph_builder.h"

namespace gpulab {
namespace {

using testing::count_ops;
using testing::GraphBuilder;
using ::testing::HasSubstr;
constexpr int64_t N = Shape::kBatch;

// --- drop_identity --------------------------------------------------------------------------------

TEST(DropIdentity, RemovesIdentityAndDropoutInTheMiddle) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4})
                .node(OpType::kRelu, "r1", {"x"}, {"a"})
                .node(OpType::kIdentity, "id", {"a"}, {"b"})
                .node(OpType::kDropout, "drop", {"b"}, {"c"})
                .node(OpType::kRelu, "r2", {"c"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(drop_identity(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].inputs[0], "a");
  EXPECT_TRUE(g.validate().is_ok());
}

TEST(DropIdentity, KeepsGraphOutputNames) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4})
                .node(OpType::kRelu, "r", {"x"}, {"a"})
                .node(OpType::kIdentity, "id", {"a"}, {"y"})
                .node(OpType::kIdentity, "passthrough", {"x"}, {"z"})
                .output("y")
                .output("z")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(drop_identity(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 2u);  // the Relu, and the input->output Identity that must stay
  EXPECT_EQ(g.nodes[0].op, OpType::kRelu);
  EXPECT_EQ(g.nodes[0].outputs[0], "y");
  EXPECT_EQ(g.nodes[1].name, "passthrough");
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"y", "z"}));
  EXPECT_TRUE(g.validate().is_ok());
}

// --- fold_constants -------------------------------------------------------------------------------

Graph flatten_by_shape_chain() {
  return GraphBuilder()
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
}

TEST(FoldConstants, ReshapeGetsShapeInitializerWithBatchAsZero) {
  Graph g = flatten_by_shape_chain();
  ASSERT_TRUE(fold_constants(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& r = g.nodes[0];
  EXPECT_EQ(r.op, OpType::kReshape);
  const Tensor* shape = g.initializer(r.input(1));
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(std::vector<int64_t>(shape->i64().begin(), shape->i64().end()), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(g.value("y")->shape, (Shape{N, 512}));
  EXPECT_EQ(g.initializer("zero"), nullptr);  // dead constants are gone
}

TEST(FoldConstants, StaticChainBecomesInitializer) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 6, 2, 2})
                .ints("one", Shape{1}, {1})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "gather", {"s", "one"}, {"c"}, AxisAttrs{0})
                .output("c")
                .build();
  ASSERT_TRUE(fold_constants(g).is_ok());
  EXPECT_TRUE(g.nodes.empty());
  const Tensor* c = g.initializer("c");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->numel(), 1);
  EXPECT_EQ(c->i64()[0], 6);
}

// The batch at another position than the input's: written as -1 with the other dims as inferred.
TEST(FoldConstants, BatchOutsideItsPositionBecomesMinusOne) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 8})
                .ints("zero", Shape{1}, {0})
                .ints("eight", Shape{1}, {8})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "gather", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kConcat, "cat", {"eight", "n"}, {"target"}, AxisAttrs{0})
                .node(OpType::kReshape, "transpose_like", {"x", "target"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(g.value("y")->shape, (Shape{8, N}));
  ASSERT_TRUE(fold_constants(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  const Tensor* t = g.initializer(g.nodes[0].inputs[1]);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<int64_t>(t->i64().begin(), t->i64().end()), (std::vector<int64_t>{8, -1}));
  EXPECT_EQ(g.value("y")->shape, (Shape{8, N}));
}

// A -1 beside the batch at another position cannot be written as a constant target.
TEST(FoldConstants, RefusesBatchBesideAnInferredDimension) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 8})
                .ints("zero", Shape{1}, {0})
                .ints("minus_one", Shape{1}, {-1})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "gather", {"s", "zero"}, {"n"}, AxisAttrs{0})
                .node(OpType::kConcat, "cat", {"minus_one", "n"}, {"target"}, AxisAttrs{0})
                .node(OpType::kReshape, "transpose_like", {"x", "target"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_EQ(g.value("y")->shape, (Shape{8, N}));
  Status s = fold_constants(g);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("transpose_like"));
}

// --- fold_batchnorm -------------------------------------------------------------------------------

TEST(FoldBatchnorm, ConvBnBecomesOneConvWithSameOutput) {
  // 1x1 conv on one channel: y = w*x + b, so the folded weights can be checked by hand.
  const std::vector<float> w{2.0f, -1.0f}, b{0.5f, 1.0f}, scale{1.5f, 0.5f}, beta{0.1f, -0.2f},
      mean{0.3f, 2.0f}, var{4.0f, 0.25f};
  const float eps = 1e-3f;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 1, 3, 3})
                .weight("w", Shape{2, 1, 1, 1}, w)
                .weight("b", Shape{2}, b)
                .weight("scale", Shape{2}, scale)
                .weight("beta", Shape{2}, beta)
                .weight("mean", Shape{2}, mean)
                .weight("var", Shape{2}, var)
                .node(OpType::kConv, "conv", {"x", "w", "b"}, {"c"}, testing::conv_attrs(1))
                .node(OpType::kBatchNormalization, "bn", {"c", "scale", "beta", "mean", "var"}, {"y"},
                      BatchNormAttrs{eps})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(fold_batchnorm(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& conv = g.nodes[0];
  EXPECT_EQ(conv.outputs[0], "y");
  const Tensor* nw = g.initializer(conv.input(1));
  const Tensor* nb = g.initializer(conv.input(2));
  ASSERT_TRUE(nw && nb);
  for (int k = 0; k < 2; ++k) {
    const double a = scale[k] / std::sqrt(var[k] + eps);
    EXPECT_NEAR(nw->f32()[k], w[k] * a, 1e-6);
    EXPECT_NEAR(nb->f32()[k], (b[k] - mean[k]) * a + beta[k], 1e-6);
    // Same function: check on x = 1.7.
    const double x = 1.7;
    const double before = scale[k] * ((w[k] * x + b[k]) - mean[k]) / std::sqrt(var[k] + eps) + beta[k];
    EXPECT_NEAR(nw->f32()[k] * x + nb->f32()[k], before, 1e-5);
  }
  EXPECT_EQ(g.initializer("scale"), nullptr);
  EXPECT_EQ(g.value("y")->shape, (Shape{N, 2, 3, 3}));
}

TEST(FoldBatchnorm, StandaloneBnAndSharedConvOutputStay) {
  Graph g =
      GraphBuilder()
          .input("x", Shape{N, 2, 3, 3})
          .weight("w", Shape{2, 2, 1, 1})
          .weight("s", Shape{2})
          .weight("b", Shape{2})
          .weight("m", Shape{2})
          .weight("v", Shape{2})
          .node(OpType::kBatchNormalization, "bn_alone", {"x", "s", "b", "m", "v"}, {"a"}, BatchNormAttrs{})
          .node(OpType::kConv, "conv", {"a", "w"}, {"c"}, testing::conv_attrs(1))
          .node(OpType::kBatchNormalization, "bn_shared", {"c", "s", "b", "m", "v"}, {"d"}, BatchNormAttrs{})
          .node(OpType::kAdd, "add", {"c", "d"}, {"y"})
          .output("y")
          .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(fold_batchnorm(g).is_ok());
  EXPECT_EQ(count_ops(g, OpType::kBatchNormalization), 2);
  EXPECT_EQ(g.nodes.size(), 4u);
}

// --- batchnorm_to_conv ---------------------------------------------------------------------------

TEST(BatchnormToConv, StandaloneBnBecomesADepthwiseConvWithTheSameScaleAndShift) {
  const std::vector<float> scale{1.5f, 0.5f}, beta{0.1f, -0.2f}, mean{0.3f, 2.0f}, var{4.0f, 0.25f};
  const float eps = 1e-3f;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 2, 3, 3})
                .weight("scale", Shape{2}, scale)
                .weight("beta", Shape{2}, beta)
                .weight("mean", Shape{2}, mean)
                .weight("var", Shape{2}, var)
                .node(OpType::kBatchNormalization, "bn", {"x", "scale", "beta", "mean", "var"}, {"b"},
                      BatchNormAttrs{eps})
                .node(OpType::kRelu, "relu", {"b"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  ASSERT_TRUE(batchnorm_to_conv(g).is_ok());
  ASSERT_EQ(count_ops(g, OpType::kBatchNormalization), 0);
  const Node& conv = g.nodes[0];
  ASSERT_EQ(conv.op, OpType::kConv);
  EXPECT_EQ(conv.attr<ConvAttrs>().groups, 2);
  EXPECT_EQ(conv.attr<ConvAttrs>().kernel.h, 1);
  const Tensor* w = g.initializer(conv.input(1));
  const Tensor* b = g.initializer(conv.input(2));
  ASSERT_TRUE(w && b);
  EXPECT_EQ(w->shape(), (Shape{2, 1, 1, 1}));
  for (int k = 0; k < 2; ++k) {  // same function of x: check on x = 1.7
    const double x = 1.7;
    const double want = scale[k] * (x - mean[k]) / std::sqrt(var[k] + eps) + beta[k];
    EXPECT_NEAR(w->f32()[k] * x + b->f32()[k], want, 1e-6);
  }
  EXPECT_EQ(g.value("b")->shape, (Shape{N, 2, 3, 3}));
  // The Relu after it fuses like a convolution's.
  ASSERT_TRUE(fuse_conv_epilogue(g).is_ok());
  EXPECT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attr<ConvAttrs>().activation, Activation::kRelu);
}

// --- matmul_to_gemm ------------------------------------------------------------------------------

TEST(MatmulToGemm, ConstantMatmulAndItsBiasBecomeOneGemm) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3})
                .weight("w", Shape{3, 4})
                .weight("b", Shape{1, 4}, {1, 2, 3, 4})
                .node(OpType::kMatMul, "mm", {"x", "w"}, {"m"})
                .node(OpType::kAdd, "add", {"b", "m"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(matmul_to_gemm(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& gemm = g.nodes[0];
  EXPECT_EQ(gemm.op, OpType::kGemm);
  EXPECT_FALSE(gemm.attr<GemmAttrs>().trans_b);
  EXPECT_EQ(gemm.outputs[0], "y");
  const Tensor* c = g.initializer(gemm.input(2));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->shape(), (Shape{4}));
  EXPECT_EQ(c->f32()[3], 4.0f);
  EXPECT_EQ(g.value("y")->shape, (Shape{N, 4}));
}

TEST(MatmulToGemm, ActivationTimesActivationAndSharedOutputsStay) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3})
                .input("z", Shape{3, 4})
                .weight("w", Shape{3, 4})
                .weight("b", Shape{4})
                .node(OpType::kMatMul, "two_inputs", {"x", "z"}, {"p"})
                .node(OpType::kMatMul, "mm", {"x", "w"}, {"m"})
                .node(OpType::kAdd, "add", {"m", "b"}, {"y"})
                .node(OpType::kRelu, "relu", {"m"}, {"r"})
                .output("p")
                .output("y")
                .output("r")
                .build();
  ASSERT_TRUE(matmul_to_gemm(g).is_ok());
  EXPECT_EQ(count_ops(g, OpType::kMatMul), 1);  // B is not a constant
  EXPECT_EQ(count_ops(g, OpType::kGemm), 1);
  EXPECT_EQ(count_ops(g, OpType::kAdd), 1) << "m is read twice: the Add stays";
}

// --- fold_flatten_into_gemm -----------------------------------------------------------------------

TEST(FoldFlattenIntoGemm, ReshapeBeforeGemmBecomesFlatten) {
  GemmAttrs gemm;
  gemm.trans_b = true;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 512, 1, 1})
                .ints("t", Shape{2}, {0, -1})
                .weight("fc.w", Shape{10, 512})
                .node(OpType::kReshape, "reshape", {"x", "t"}, {"f"}, ReshapeAttrs{})
                .node(OpType::kGemm, "fc", {"f", "fc.w"}, {"y"}, gemm)
                .output("y")
                .build();
  ASSERT_TRUE(fold_flatten_into_gemm(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op, OpType::kFlatten);
  EXPECT_EQ(g.nodes[0].attr<FlattenAttrs>().axis, 1);
  EXPECT_EQ(g.nodes[0].inputs.size(), 1u);
  EXPECT_EQ(g.initializer("t"), nullptr);
  EXPECT_EQ(g.value("f")->shape, (Shape{N, 512}));
  EXPECT_EQ(g.value("y")->shape, (Shape{N, 10}));
}

TEST(FoldFlattenIntoGemm, FlattenOfRank2IsRemovedOthersStay) {
  GemmAttrs gemm;
  gemm.trans_b = true;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 512})
                .input("img", Shape{N, 4, 2, 2})
                .weight("fc.w", Shape{10, 512})
                .node(OpType::kFlatten, "noop", {"x"}, {"f"}, FlattenAttrs{1})
                .node(OpType::kGemm, "fc", {"f", "fc.w"}, {"y"}, gemm)
                .node(OpType::kFlatten, "to_relu", {"img"}, {"g"}, FlattenAttrs{1})
                .node(OpType::kRelu, "relu", {"g"}, {"z"})
                .output("y")
                .output("z")
                .build();
  ASSERT_TRUE(fold_flatten_into_gemm(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op, OpType::kGemm);
  EXPECT_EQ(g.nodes[0].inputs[0], "x");
  EXPECT_EQ(count_ops(g, OpType::kFlatten), 1);
}

// --- fuse_conv_epilogue ---------------------------------------------------------------------------

TEST(FuseConvEpilogue, ResNetConvAddRelu) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 8, 8})
                .weight("w", Shape{4, 4, 3, 3})
                .node(OpType::kConv, "conv", {"x", "w"}, {"c"}, testing::conv_attrs(3, 1, 1))
                .node(OpType::kAdd, "add", {"c", "x"}, {"s"})
                .node(OpType::kRelu, "relu", {"s"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(fuse_conv_epilogue(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& conv = g.nodes[0];
  EXPECT_EQ(conv.inputs, (std::vector<std::string>{"x", "w", "", "x"}));
  EXPECT_EQ(conv.outputs[0], "y");
  EXPECT_TRUE(conv.attr<ConvAttrs>().has_residual);
  EXPECT_EQ(conv.attr<ConvAttrs>().activation, Activation::kRelu);
  EXPECT_TRUE(g.validate().is_ok());
}

TEST(FuseConvEpilogue, ConvClipAndConvAddWithoutActivation) {
  ClipAttrs relu6;
  relu6.min = 0.0f;
  relu6.max = 6.0f;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 8, 8})
                .weight("w1", Shape{4, 4, 1, 1})
                .weight("b1", Shape{4})
                .weight("w2", Shape{4, 4, 1, 1})
                .weight("b2", Shape{4})
                .node(OpType::kConv, "expand", {"x", "w1", "b1"}, {"c1"}, testing::conv_attrs(1))
                .node(OpType::kClip, "relu6", {"c1"}, {"a1"}, relu6)
                .node(OpType::kConv, "project", {"a1", "w2", "b2"}, {"c2"}, testing::conv_attrs(1))
                .node(OpType::kAdd, "add", {"c2", "x"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(fuse_conv_epilogue(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  const ConvAttrs& a0 = g.nodes[0].attr<ConvAttrs>();
  EXPECT_EQ(a0.activation, Activation::kClip);
  EXPECT_FLOAT_EQ(a0.clip_min, 0.0f);
  EXPECT_FLOAT_EQ(a0.clip_max, 6.0f);
  EXPECT_FALSE(a0.has_residual);
  EXPECT_EQ(g.nodes[0].outputs[0], "a1");
  const ConvAttrs& a1 = g.nodes[1].attr<ConvAttrs>();
  EXPECT_TRUE(a1.has_residual);
  EXPECT_EQ(a1.activation, Activation::kNone);
  EXPECT_EQ(g.nodes[1].inputs, (std::vector<std::string>{"a1", "w2", "b2", "x"}));
  EXPECT_EQ(g.nodes[1].outputs[0], "y");
}

TEST(FuseConvEpilogue, NoFusionWhenIntermediateHasTwoUsesOrShapesDiffer) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 8, 8})
                .weight("w", Shape{4, 4, 1, 1})
                .weight("bias_like", Shape{4, 1, 1})
                .node(OpType::kConv, "conv1", {"x", "w"}, {"c1"}, testing::conv_attrs(1))
                .node(OpType::kRelu, "relu", {"c1"}, {"r"})
                .node(OpType::kConv, "conv2", {"x", "w"}, {"c2"}, testing::conv_attrs(1))
                .node(OpType::kAdd, "add_broadcast", {"c2", "bias_like"}, {"a"})
                .output("r")
                .output("c1")
                .output("a")
                .build();
  ASSERT_TRUE(fuse_conv_epilogue(g).is_ok());
  EXPECT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(count_ops(g, OpType::kRelu), 1);
  EXPECT_EQ(count_ops(g, OpType::kAdd), 1);
}

TEST(FuseConvEpilogue, ResidualMustBeDefinedBeforeTheConv) {
  // Add(convA, convB): only convB (the later one) can take the other as its residual.
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 8, 8})
                .weight("wa", Shape{4, 4, 1, 1})
                .weight("wb", Shape{4, 4, 1, 1})
                .node(OpType::kConv, "conv_a", {"x", "wa"}, {"a"}, testing::conv_attrs(1))
                .node(OpType::kConv, "conv_b", {"x", "wb"}, {"b"}, testing::conv_attrs(1))
                .node(OpType::kAdd, "add", {"a", "b"}, {"s"})
                .node(OpType::kRelu, "relu", {"s"}, {"y"})
                .output("y")
                .build();
  ASSERT_TRUE(fuse_conv_epilogue(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_FALSE(g.nodes[0].attr<ConvAttrs>().has_residual);
  EXPECT_EQ(g.nodes[1].name, "conv_b");
  EXPECT_TRUE(g.nodes[1].attr<ConvAttrs>().has_residual);
  EXPECT_EQ(g.nodes[1].input(3), "a");
  EXPECT_EQ(g.nodes[1].attr<ConvAttrs>().activation, Activation::kRelu);
  EXPECT_TRUE(g.validate().is_ok());
}

// --- run_passes -----------------------------------------------------------------------------------

TEST(RunPasses, ResNetBasicBlockAndHead) {
  GemmAttrs gemm;
  gemm.trans_b = true;
  GraphBuilder b;
  b.input("x", Shape{N, 4, 8, 8}).weight("w1", Shape{4, 4, 3, 3}).weight("w2", Shape{4, 4, 3, 3});
  for (const char* p : {"bn1", "bn2"}) {
    const std::string s(p);
    b.weight(s + ".s", Shape{4})
        .weight(s + ".b", Shape{4})
        .weight(s + ".m", Shape{4})
        .weight(s + ".v", Shape{4});
  }
  b.weight("fc.w", Shape{3, 4}).weight("fc.b", Shape{3});
  b.node(OpType::kConv, "conv1", {"x", "w1"}, {"c1"}, testing::conv_attrs(3, 1, 1))
      .node(OpType::kBatchNormalization, "bn1", {"c1", "bn1.s", "bn1.b", "bn1.m", "bn1.v"}, {"n1"},
            BatchNormAttrs{})
      .node(OpType::kRelu, "relu1", {"n1"}, {"r1"})
      .node(OpType::kConv, "conv2", {"r1", "w2"}, {"c2"}, testing::conv_attrs(3, 1, 1))
      .node(OpType::kBatchNormalization, "bn2", {"c2", "bn2.s", "bn2.b", "bn2.m", "bn2.v"}, {"n2"},
            BatchNormAttrs{})
      .node(OpType::kAdd, "add", {"n2", "x"}, {"s"})
      .node(OpType::kRelu, "relu2", {"s"}, {"r2"})
      .node(OpType::kGlobalAveragePool, "gap", {"r2"}, {"p"})
      .node(OpType::kFlatten, "flat", {"p"}, {"f"}, FlattenAttrs{1})
      .node(OpType::kIdentity, "id", {"f"}, {"f2"})
      .node(OpType::kGemm, "fc", {"f2", "fc.w", "fc.b"}, {"logits"}, gemm)
      .output("logits");
  Graph g = b.build();
  ASSERT_TRUE(run_passes(g).is_ok());
  ASSERT_EQ(g.nodes.size(), 5u);  // conv1+relu, conv2+residual+relu, gap, flatten, gemm
  EXPECT_EQ(count_ops(g, OpType::kBatchNormalization), 0);
  EXPECT_EQ(count_ops(g, OpType::kRelu), 0);
  EXPECT_EQ(count_ops(g, OpType::kIdentity), 0);
  EXPECT_EQ(g.nodes[0].attr<ConvAttrs>().activation, Activation::kRelu);
  EXPECT_TRUE(g.nodes[1].attr<ConvAttrs>().has_residual);
  EXPECT_EQ(g.value("logits")->shape, (Shape{N, 3}));

  Graph unfused = b.build();
  PassOptions no_fuse;
  no_fuse.fuse = false;
  ASSERT_TRUE(run_passes(unfused, no_fuse).is_ok());
  EXPECT_EQ(count_ops(unfused, OpType::kRelu), 2);
  EXPECT_EQ(count_ops(unfused, OpType::kBatchNormalization), 0);
}

}  // namespace
}  // namespace gpulab
