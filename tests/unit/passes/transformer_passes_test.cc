// The passes for the transformer classifiers and ShuffleNet, each on the subgraph torch.onnx writes:
// what the pass leaves (ops counted) and that the reference backend computes the same outputs
// before and after (within float rounding).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "backends/reference/reference_executor.h"
#include "normal_tensor.h"
#include "passes/passes.h"
#include "unit/graph/graph_builder.h"

namespace gpulab {
namespace {

using testing::count_ops;
using testing::GraphBuilder;
using testing::normal_tensor;
constexpr int64_t N = Shape::kBatch;

// The graph's first output at batch 2 (seeded input), through the reference backend.
std::vector<float> run(const Graph& g) {
  const Shape in = g.value(g.inputs[0])->shape.bind_batch(2);
  auto exec = ReferenceExecutor::create(g);
  EXPECT_TRUE(exec.is_ok()) << exec.status().to_string();
  auto out = exec->run(std::vector<Tensor>{normal_tensor(in, 11)});
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  if (!out.is_ok()) return {};
  return {(*out)[0].f32().begin(), (*out)[0].f32().end()};
}

// Runs `pass` on a copy of `g` and checks the outputs are unchanged.
Graph apply(const Graph& g, Status (*pass)(Graph&), double bound = 1e-6) {
  Graph out = g;
  EXPECT_TRUE(out.infer_shapes().is_ok());
  const std::vector<float> before = run(out);
  const Status s = pass(out);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(out.validate().is_ok());
  const std::vector<float> after = run(out);
  EXPECT_LE(compare(after, before).rel_l2, bound);
  return out;
}

Tensor scalar(float v) {
  return Tensor::from_floats(Shape{}, std::span<const float>(&v, 1));
}

TEST(FuseLayerNorm, TheOpset13DecompositionBecomesOneNode) {
  GraphBuilder b;
  b.input("x", Shape{N, 5, 8}).weight("gamma", Shape{8}).weight("beta", Shape{8});
  Graph g = b.node(OpType::kReduceMean, "mean", {"x"}, {"m"}, ReduceAttrs{{-1}, true})
                .node(OpType::kSub, "sub", {"x", "m"}, {"d"})
                .node(OpType::kPow, "pow", {"d", "two"}, {"d2"})
                .node(OpType::kReduceMean, "var", {"d2"}, {"v"}, ReduceAttrs{{-1}, true})
                .node(OpType::kAdd, "add_eps", {"v", "eps"}, {"ve"})
                .node(OpType::kSqrt, "sqrt", {"ve"}, {"s"})
                .node(OpType::kDiv, "div", {"d", "s"}, {"n"})
                .node(OpType::kMul, "mul", {"n", "gamma"}, {"g"})
                .node(OpType::kAdd, "add", {"g", "beta"}, {"y"})
                .output("y")
                .build();
  g.initializers["two"] = scalar(2.0f);
  g.initializers["eps"] = scalar(1e-6f);
  g.initializers["gamma"] = normal_tensor(Shape{8}, 1);
  g.initializers["beta"] = normal_tensor(Shape{8}, 2);
  const Graph out = apply(g, fuse_layer_norm);
  ASSERT_EQ(out.nodes.size(), 1u);
  EXPECT_EQ(out.nodes[0].op, OpType::kLayerNormalization);
  EXPECT_EQ(out.nodes[0].attr<LayerNormAttrs>().axis, -1);
  EXPECT_FLOAT_EQ(out.nodes[0].attr<LayerNormAttrs>().epsilon, 1e-6f);
  EXPECT_EQ(out.nodes[0].outputs[0], "y");
}

TEST(FuseGelu, TheErfFormInEveryOrderBecomesGelu) {
  for (int order = 0; order < 3; ++order) {
    GraphBuilder b;
    b.input("x", Shape{N, 6});
    b.node(OpType::kDiv, "div", {"x", "sqrt2"}, {"xs"}).node(OpType::kErf, "erf", {"xs"}, {"e"});
    b.node(OpType::kAdd, "add", {"e", "one"}, {"a"});
    if (order == 0) {  // Mul(Mul(x, a), 0.5), as torch.onnx writes nn.GELU
      b.node(OpType::kMul, "m1", {"x", "a"}, {"p"}).node(OpType::kMul, "m2", {"p", "half"}, {"y"});
    } else if (order == 1) {  // Mul(x, Mul(a, 0.5))
      b.node(OpType::kMul, "m1", {"a", "half"}, {"p"}).node(OpType::kMul, "m2", {"x", "p"}, {"y"});
    } else {  // Mul(Mul(x, 0.5), a)
      b.node(OpType::kMul, "m1", {"x", "half"}, {"p"}).node(OpType::kMul, "m2", {"p", "a"}, {"y"});
    }
    Graph g = b.output("y").build();
    g.initializers["sqrt2"] = scalar(1.4142135f);
    g.initializers["one"] = scalar(1.0f);
    g.initializers["half"] = scalar(0.5f);
    const Graph out = apply(g, fuse_gelu);
    ASSERT_EQ(out.nodes.size(), 1u) << "order " << order;
    EXPECT_EQ(out.nodes[0].op, OpType::kGelu);
    EXPECT_FALSE(out.nodes[0].attr<GeluAttrs>().tanh_approximation);
  }
}

// F.normalize(x, dim=-1) as Swin V2's cosine attention exports it, with the Expand back to x's shape
// and without; over another axis it stays as it is.
TEST(FuseL2Normalize, ReduceL2ClipExpandDivBecomesLpNormalization) {
  for (bool expand : {true, false}) {
    GraphBuilder b;
    b.input("x", Shape{N, 3, 4, 8});
    b.node(OpType::kReduceL2, "l2", {"x"}, {"n"}, ReduceAttrs{{-1}, true});
    b.node(OpType::kClip, "clip", {"n"}, {"c"}, ClipAttrs{1e-12f});
    if (expand) {
      b.node(OpType::kShape, "shape", {"x"}, {"s"}).node(OpType::kExpand, "expand", {"c", "s"}, {"e"});
    }
    Graph g = b.node(OpType::kDiv, "div", {"x", expand ? "e" : "c"}, {"y"}).output("y").build();
    const Graph out = apply(g, fuse_l2_normalize);
    ASSERT_EQ(out.nodes.size(), 1u) << "expand " << expand;
    EXPECT_EQ(out.nodes[0].op, OpType::kLpNormalization);
    EXPECT_EQ(out.nodes[0].attr<LpNormAttrs>().axis, -1);
    EXPECT_EQ(out.nodes[0].attr<LpNormAttrs>().p, 2);
    EXPECT_FLOAT_EQ(out.nodes[0].attr<LpNormAttrs>().epsilon, 1e-12f);
    EXPECT_EQ(out.nodes[0].outputs[0], "y");
  }
  GraphBuilder b;
  b.input("x", Shape{N, 3, 8});
  Graph g = b.node(OpType::kReduceL2, "l2", {"x"}, {"n"}, ReduceAttrs{{1}, true})
                .node(OpType::kClip, "clip", {"n"}, {"c"}, ClipAttrs{1e-12f})
                .node(OpType::kDiv, "div", {"x", "c"}, {"y"})
                .output("y")
                .build();
  EXPECT_EQ(apply(g, fuse_l2_normalize).nodes.size(), 3u);
}

// ViT's attention as torch.onnx writes nn.MultiheadAttention: K^T by a Transpose from [T, N*H, d],
// Q divided by sqrt(d).
TEST(FuseAttention, MultiheadAttentionBecomesOneNode) {
  GraphBuilder b;
  b.input("q0", Shape{N, 2, 5, 4}).input("k0", Shape{5, N, 2, 4}).input("v", Shape{N, 2, 5, 4});
  Graph g = b.node(OpType::kDiv, "scale", {"q0", "eight"}, {"q"})
                .node(OpType::kTranspose, "kt", {"k0"}, {"kT"}, TransposeAttrs{{1, 2, 3, 0}})
                .node(OpType::kMatMul, "qk", {"q", "kT"}, {"s"})
                .node(OpType::kSoftmax, "softmax", {"s"}, {"p"}, AxisAttrs{-1})
                .node(OpType::kMatMul, "pv", {"p", "v"}, {"y"})
                .output("y")
                .build();
  g.initializers["eight"] = scalar(2.0f);
  // Three graph inputs: run() feeds the first only, so the test compares through a wrapper below.
  ASSERT_TRUE(g.infer_shapes().is_ok());
  Graph out = g;
  ASSERT_TRUE(fuse_attention(out).is_ok());
  ASSERT_EQ(count_ops(out, OpType::kAttention), 1);
  EXPECT_EQ(count_ops(out, OpType::kSoftmax), 0);
  EXPECT_EQ(count_ops(out, OpType::kMatMul), 0);
  EXPECT_EQ(count_ops(out, OpType::kDiv), 0) << "the scale joins the node";
  for (const Node& n : out.nodes)
    if (n.op == OpType::kAttention) {
      EXPECT_FLOAT_EQ(n.attr<AttentionAttrs>().scale, 0.5f);
    }
  // Same outputs on seeded inputs.
  auto run3 = [](const Graph& graph) {
    auto exec = ReferenceExecutor::create(graph);
    auto r = exec->run(std::vector<Tensor>{normal_tensor(Shape{2, 2, 5, 4}, 1),
                                           normal_tensor(Shape{5, 2, 2, 4}, 2),
                                           normal_tensor(Shape{2, 2, 5, 4}, 3)});
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return std::vector<float>((*r)[0].f32().begin(), (*r)[0].f32().end());
  };
  EXPECT_LE(compare(run3(out), run3(g)).rel_l2, 1e-6);
}

// Swin's shifted windows: a relative position bias, then a mask added over [N, nW, H, T, T].
TEST(FuseAttention, ShiftedWindowMaskJoinsTheBias) {
  const int64_t nw = 4, h = 2, t = 3, d = 4;
  GraphBuilder b;
  b.input("x", Shape{Shape::batch_times(nw), h, t, d});
  b.ints("to5", Shape{5}, {-1, nw, h, t, t}).ints("to4", Shape{4}, {-1, h, t, t});
  Graph g = b.node(OpType::kMul, "scale_q", {"x", "scale"}, {"q"})
                .node(OpType::kTranspose, "kt", {"x"}, {"kT"}, TransposeAttrs{{0, 1, 3, 2}})
                .node(OpType::kMatMul, "qk", {"q", "kT"}, {"s"})
                .node(OpType::kAdd, "bias", {"s", "rel"}, {"sb"})
                .node(OpType::kReshape, "split", {"sb", "to5"}, {"s5"}, ReshapeAttrs{})
                .node(OpType::kAdd, "mask", {"s5", "m"}, {"sm"})
                .node(OpType::kReshape, "merge", {"sm", "to4"}, {"s4"}, ReshapeAttrs{})
                .node(OpType::kSoftmax, "softmax", {"s4"}, {"p"}, AxisAttrs{-1})
                .node(OpType::kMatMul, "pv", {"p", "x"}, {"y"})
                .output("y")
                .build();
  g.initializers["scale"] = scalar(0.5f);
  g.initializers["rel"] = normal_tensor(Shape{1, h, t, t}, 4);
  g.initializers["m"] = normal_tensor(Shape{1, nw, 1, t, t}, 5, 10.0f);
  const Graph out = apply(g, fuse_attention);
  ASSERT_EQ(count_ops(out, OpType::kAttention), 1);
  EXPECT_EQ(count_ops(out, OpType::kSoftmax), 0);
  for (const Node& n : out.nodes) {
    if (n.op != OpType::kAttention) continue;
    ASSERT_EQ(n.inputs.size(), 4u);
    EXPECT_EQ(out.initializer(n.inputs[3])->shape(), (Shape{1, nw, h, t, t})) << "bias and mask summed";
    EXPECT_EQ(out.value(n.inputs[0])->shape, (Shape{N, nw, h, t, d})) << "Q regrouped to the mask's dims";
  }
}

TEST(FoldChannelShuffle, ReshapeTransposeReshapeIsOneGather) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 6, 2, 2})
                .ints("split", Shape{5}, {0, 2, 3, 2, 2})
                .ints("merge", Shape{4}, {0, 6, 2, 2})
                .node(OpType::kReshape, "split", {"x", "split"}, {"s"}, ReshapeAttrs{})
                .node(OpType::kTranspose, "t", {"s"}, {"t"}, TransposeAttrs{{0, 2, 1, 3, 4}})
                .node(OpType::kReshape, "merge", {"t", "merge"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  const Graph out = apply(g, fold_channel_shuffle, 0);
  ASSERT_EQ(out.nodes.size(), 1u);
  EXPECT_EQ(out.nodes[0].op, OpType::kGather);
  const Tensor* idx = out.initializer(out.nodes[0].inputs[1]);
  EXPECT_EQ(std::vector<int64_t>(idx->i64().begin(), idx->i64().end()),
            (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

// ConvNeXt: Linear -> Transpose back to NCHW -> layer scale [C, 1, 1].
TEST(FoldLayerScale, PerFeatureScaleGoesIntoTheWeights) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3, 3, 4})
                .node(OpType::kMatMul, "fc", {"x", "w"}, {"z0"})
                .node(OpType::kAdd, "bias", {"b", "z0"}, {"z"})
                .node(OpType::kTranspose, "to_nchw", {"z"}, {"t"}, TransposeAttrs{{0, 3, 1, 2}})
                .node(OpType::kMul, "layer_scale", {"gamma", "t"}, {"y"})
                .output("y")
                .build();
  g.initializers["w"] = normal_tensor(Shape{4, 5}, 1);
  g.initializers["b"] = normal_tensor(Shape{5}, 2);
  g.initializers["gamma"] = normal_tensor(Shape{5, 1, 1}, 3);
  const Graph out = apply(g, fold_layer_scale);
  EXPECT_EQ(count_ops(out, OpType::kMul), 0);
  EXPECT_EQ(out.nodes.back().outputs[0], "y");
}

TEST(UnflattenGemm, RowsKeepTheirDims) {
  GemmAttrs a;
  a.trans_b = true;
  Graph g = GraphBuilder()
                .input("x", Shape{5, N, 4})
                .ints("flat", Shape{2}, {-1, 4})
                .ints("back", Shape{3}, {5, -1, 3})
                .node(OpType::kReshape, "flatten", {"x", "flat"}, {"f"}, ReshapeAttrs{})
                .node(OpType::kGemm, "proj", {"f", "w", "c"}, {"p"}, a)
                .node(OpType::kReshape, "unflatten", {"p", "back"}, {"y"}, ReshapeAttrs{})
                .output("y")
                .build();
  g.initializers["w"] = normal_tensor(Shape{3, 4}, 1);
  g.initializers["c"] = normal_tensor(Shape{3}, 2);
  const Graph out = apply(g, unflatten_gemm);
  EXPECT_EQ(count_ops(out, OpType::kGemm), 0);
  EXPECT_EQ(count_ops(out, OpType::kMatMul), 1);
  EXPECT_EQ(out.value("y")->shape, (Shape{5, N, 3}));
}

TEST(DropNoops, ZeroPadsWholeSlicesAndOnesGo) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 4, 4})
                .ints("pads", Shape{6}, {0, 0, 0, 0, 0, 0})
                .ints("starts", Shape{1}, {0})
                .ints("ends", Shape{1}, {INT64_MAX})
                .ints("axes", Shape{1}, {2})
                .node(OpType::kPad, "pad", {"x", "pads"}, {"p"})
                .node(OpType::kSlice, "slice", {"p", "starts", "ends", "axes"}, {"s"})
                .node(OpType::kMul, "one", {"s", "ones"}, {"m"})
                .node(OpType::kRelu, "relu", {"m"}, {"y"})
                .output("y")
                .build();
  g.initializers["ones"] = Tensor::from_floats(Shape{4}, std::vector<float>(4, 1.0f));
  const Graph out = apply(g, drop_noops, 0);
  ASSERT_EQ(out.nodes.size(), 1u);
  EXPECT_EQ(out.nodes[0].op, OpType::kRelu);
  EXPECT_EQ(out.nodes[0].inputs[0], "x");
}

// A Swin V2-style attention scale: Cast of a gathered dimension, Pow -0.5, then a Mul of Q. The
// constants fold (reference backend), the Mul stays with a constant.
TEST(FoldConstants, ValuesComputedFromConstantsAreFolded) {
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3, 16})
                .ints("last", Shape{}, {2})
                .node(OpType::kShape, "shape", {"x"}, {"s"})
                .node(OpType::kGather, "dim", {"s", "last"}, {"c"}, AxisAttrs{0})
                .node(OpType::kCast, "cast", {"c"}, {"cf"}, CastAttrs{DataType::kFloat32})
                .node(OpType::kPow, "pow", {"cf", "minus_half"}, {"scale"})
                .node(OpType::kMul, "scale_q", {"x", "scale"}, {"y"})
                .output("y")
                .build();
  g.initializers["minus_half"] = scalar(-0.5f);
  const Graph out = apply(g, fold_constants);
  ASSERT_EQ(out.nodes.size(), 1u);
  const Tensor* s = out.initializer(out.nodes[0].inputs[1]);
  ASSERT_NE(s, nullptr);
  EXPECT_FLOAT_EQ(s->f32()[0], 0.25f);
}

}  // namespace
}  // namespace gpulab
