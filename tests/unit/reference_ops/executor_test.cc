// ReferenceExecutor on a small graph built in C++: Conv -> Relu -> GlobalAveragePool -> a Reshape
// whose target comes from Shape/Gather/Unsqueeze/Concat -> Gemm.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

Node node(std::string name, OpType op, std::vector<std::string> inputs, std::string output,
          NodeAttrs attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = {std::move(output)};
  n.attrs = std::move(attrs);
  return n;
}

Graph small_graph() {
  Graph g;
  g.name = "small";
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.values["x"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 2, 4, 4}, std::nullopt};
  g.initializers["w"] = random_tensor({3, 2, 3, 3}, 100);
  g.initializers["b"] = random_tensor({3}, 101);
  g.initializers["fc_w"] = random_tensor({5, 3}, 102);
  g.initializers["fc_b"] = random_tensor({5}, 103);
  g.initializers["zero"] = int64s({}, {0});
  g.initializers["minus_one"] = int64s({1}, {-1});
  ConvAttrs conv;
  conv.kernel = {3, 3};
  conv.pads = {1, 1, 1, 1};
  UnsqueezeAttrs unsqueeze;
  unsqueeze.axes = {0};
  GemmAttrs gemm;
  gemm.trans_b = true;
  g.nodes = {
      node("conv", OpType::kConv, {"x", "w", "b"}, "c", conv),
      node("relu", OpType::kRelu, {"c"}, "r"),
      node("gap", OpType::kGlobalAveragePool, {"r"}, "p"),
      node("shape", OpType::kShape, {"p"}, "s"),
      node("gather", OpType::kGather, {"s", "zero"}, "n0", AxisAttrs{}),
      node("unsqueeze", OpType::kUnsqueeze, {"n0"}, "n1", unsqueeze),
      node("concat", OpType::kConcat, {"n1", "minus_one"}, "target", AxisAttrs{}),
      node("reshape", OpType::kReshape, {"p", "target"}, "f"),
      node("fc", OpType::kGemm, {"f", "fc_w", "fc_b"}, "y", gemm),
  };
  return g;
}

// The same computation, one run_reference_node call at a time.
Tensor op_by_op(const Graph& g, const Tensor& x) {
  std::map<std::string, Tensor> env{{"x", x}};
  for (const auto& [name, t] : g.initializers) env[name] = t;
  for (const Node& n : g.nodes) {
    std::vector<const Tensor*> in;
    for (const std::string& i : n.inputs) in.push_back(&env.at(i));
    std::vector<Tensor> out;
    EXPECT_TRUE(run_reference_node(n, in, out).is_ok()) << n.name;
    env[n.outputs[0]] = out[0];
  }
  return env.at("y");
}

TEST(ReferenceExecutor, RunsGraphLikeOpByOp) {
  const Graph g = small_graph();
  auto executor = ReferenceExecutor::create(g);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  for (int64_t batch : {1, 3}) {
    const Tensor x = random_tensor({batch, 2, 4, 4}, 7);
    std::vector<Tensor> inputs{x};
    auto y = executor->run(inputs);
    ASSERT_TRUE(y.is_ok()) << y.status().to_string();
    ASSERT_EQ(y->size(), 1u);
    EXPECT_EQ((*y)[0].shape(), (Shape{batch, 5}));
    EXPECT_TRUE(all_near((*y)[0], values_of(op_by_op(g, x)), 0));
  }
}

TEST(ReferenceExecutor, ThreadCountDoesNotChangeResults) {
  const Graph g = small_graph();
  const Tensor x = random_tensor({4, 2, 4, 4}, 8);
  std::vector<Tensor> inputs{x};
  ReferenceOptions one;
  one.num_threads = 1;
  ReferenceOptions four;
  four.num_threads = 4;
  auto a = ReferenceExecutor::create(g, one);
  auto b = ReferenceExecutor::create(g, four);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto ya = a->run(inputs);
  auto yb = b->run(inputs);
  ASSERT_TRUE(ya.is_ok() && yb.is_ok());
  EXPECT_TRUE(all_near((*ya)[0], values_of((*yb)[0]), 0));
}

TEST(ReferenceExecutor, KeepsIntermediatesWhenAsked) {
  const Graph g = small_graph();
  auto executor = ReferenceExecutor::create(g);
  ASSERT_TRUE(executor.is_ok());
  std::vector<Tensor> inputs{random_tensor({2, 2, 4, 4}, 9)};
  auto run = executor->run_with_values(inputs);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  for (const char* name : {"x", "c", "r", "p", "s", "target", "f", "y"})
    EXPECT_EQ(run->values.count(name), 1u) << name;
  EXPECT_EQ(run->values.at("c").shape(), (Shape{2, 3, 4, 4}));
  for (float v : run->values.at("r").f32()) EXPECT_GE(v, 0.0f);
  EXPECT_EQ(
      std::vector<int64_t>(run->values.at("target").i64().begin(), run->values.at("target").i64().end()),
      (std::vector<int64_t>{2, -1}));
}

TEST(ReferenceExecutor, BadInputsAreErrors) {
  const Graph g = small_graph();
  auto executor = ReferenceExecutor::create(g);
  ASSERT_TRUE(executor.is_ok());
  std::vector<Tensor> none;
  EXPECT_EQ(executor->run(none).status().code(), StatusCode::kInvalidArgument);
  std::vector<Tensor> wrong_channels{random_tensor({1, 3, 4, 4}, 1)};
  auto r = executor->run(wrong_channels);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("[N,2,4,4]"), std::string::npos) << r.status().message();
  std::vector<Tensor> wrong_rank{random_tensor({2, 4, 4}, 1)};
  EXPECT_EQ(executor->run(wrong_rank).status().code(), StatusCode::kInvalidArgument);
  std::vector<Tensor> wrong_dtype{Tensor(DataType::kInt64, Shape{1, 2, 4, 4})};
  EXPECT_EQ(executor->run(wrong_dtype).status().code(), StatusCode::kInvalidArgument);
}

TEST(ReferenceExecutor, NodeErrorsNameTheNode) {
  Graph g = small_graph();
  g.initializers["fc_w"] = random_tensor({5, 4}, 102);  // Gemm inner dim now disagrees
  auto executor = ReferenceExecutor::create(g);
  ASSERT_TRUE(executor.is_ok());
  std::vector<Tensor> inputs{random_tensor({1, 2, 4, 4}, 1)};
  auto r = executor->run(inputs);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Gemm 'fc'"), std::string::npos) << r.status().message();
}

TEST(ReferenceExecutor, RejectsMalformedGraphs) {
  Graph undefined = small_graph();
  undefined.nodes[1].inputs = {"nowhere"};
  EXPECT_EQ(ReferenceExecutor::create(undefined).status().code(), StatusCode::kInvalidModel);

  Graph constant = small_graph();
  constant.nodes.insert(constant.nodes.begin(), node("k", OpType::kConstant, {}, "k_out"));
  EXPECT_EQ(ReferenceExecutor::create(constant).status().code(), StatusCode::kUnsupported);

  ReferenceOptions negative;
  negative.num_threads = -1;
  const Graph g = small_graph();
  EXPECT_EQ(ReferenceExecutor::create(g, negative).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulab::testing
