#include <gtest/gtest.h>

#include "graph/cost.h"
#include "unit/graph/graph_builder.h"

namespace gpulab {
namespace {

using testing::GraphBuilder;
constexpr int64_t N = Shape::kBatch;

Graph small_net() {
  GemmAttrs gemm;
  gemm.trans_b = true;
  Graph g = GraphBuilder()
                .input("x", Shape{N, 3, 224, 224})
                .weight("w", Shape{32, 3, 3, 3})
                .weight("b", Shape{32})
                .weight("fc.w", Shape{10, 32})
                .weight("fc.b", Shape{10})
                .node(OpType::kConv, "conv", {"x", "w", "b"}, {"c"}, testing::conv_attrs(3, 2, 1))
                .node(OpType::kRelu, "relu", {"c"}, {"r"})
                .node(OpType::kGlobalAveragePool, "gap", {"r"}, {"p"})
                .node(OpType::kFlatten, "flat", {"p"}, {"f"}, FlattenAttrs{1})
                .node(OpType::kGemm, "fc", {"f", "fc.w", "fc.b"}, {"y"}, gemm)
                .output("y")
                .build();
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

TEST(Cost, ConvFlopsAndBytes) {
  Graph g = small_net();
  const Node& conv = g.nodes[0];
  const double out = 32.0 * 112 * 112;
  for (int64_t batch : {1, 4}) {
    const NodeCost c = node_cost(g, conv, batch);
    EXPECT_DOUBLE_EQ(c.flops, batch * (2.0 * out * 3 * 3 * 3 + out));  // MACs + bias
    EXPECT_EQ(c.param_bytes, (32 * 27 + 32) * 4);
    EXPECT_EQ(c.input_bytes, batch * 3 * 224 * 224 * 4);
    EXPECT_EQ(c.output_bytes, batch * 32 * 112 * 112 * 4);
    EXPECT_EQ(c.bytes(), c.param_bytes + c.input_bytes + c.output_bytes);
  }
  // Half-precision activations halve every byte count.
  EXPECT_EQ(node_cost(g, conv, 1, DataType::kFloat16).bytes() * 2, node_cost(g, conv, 1).bytes());
}

TEST(Cost, FusedEpilogueAddsOneOpPerOutputElement) {
  Graph g = small_net();
  Node fused = g.nodes[0];
  fused.attr<ConvAttrs>().activation = Activation::kRelu;
  const double out = 32.0 * 112 * 112;
  EXPECT_DOUBLE_EQ(node_cost(g, fused, 1).flops, node_cost(g, g.nodes[0], 1).flops + out);
}

TEST(Cost, GemmElementwiseAndViews) {
  Graph g = small_net();
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes[4], 2).flops, 2.0 * 2 * 10 * 32 + 2 * 10);  // Gemm + C
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes[1], 1).flops, 32.0 * 112 * 112);            // Relu
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes[2], 1).flops, 32.0 * 112 * 112);            // GAP reads all
  const NodeCost flat = node_cost(g, g.nodes[3], 1);
  EXPECT_EQ(flat.flops, 0);
  EXPECT_EQ(flat.bytes(), 0);  // a view

  const NodeCost total = graph_cost(g, 3);
  double flops = 0;
  int64_t bytes = 0;
  for (const Node& n : g.nodes) {
    flops += node_cost(g, n, 3).flops;
    bytes += node_cost(g, n, 3).bytes();
  }
  EXPECT_DOUBLE_EQ(total.flops, flops);
  EXPECT_EQ(total.bytes(), bytes);
}

TEST(Cost, PoolCountsWindowElements) {
  Graph g = GraphBuilder()
                .input("x", Shape{1, 8, 8, 8})
                .node(OpType::kMaxPool, "mp", {"x"}, {"y"}, testing::pool_attrs(2, 2))
                .output("y")
                .build();
  ASSERT_TRUE(g.infer_shapes().is_ok());
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes[0], 1).flops, 8.0 * 4 * 4 * 4);
}

}  // namespace
}  // namespace gpulab
