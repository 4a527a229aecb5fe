#include <algorithm>
#include <functional>

#include "passes/passes.h"

namespace gpulab {

Status matmul_to_gemm(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  std::vector<size_t> merged_adds;
  for (Node& node : graph.nodes) {
    if (node.op != OpType::kMatMul) continue;
    const ValueInfo* a = graph.value(node.input(0));
    const Tensor* b = graph.initializer(node.input(1));
    if (!a || a->shape.rank() != 2 || !b || b->dtype() != DataType::kFloat32 || b->shape().rank() != 2)
      continue;
    node.op = OpType::kGemm;
    node.attrs = GemmAttrs{};  // alpha = beta = 1, A and B as they are
    // MatMul -> Add of a constant vector of the outputs: the Gemm's C, and the Add goes.
    const std::vector<int> readers = graph.consumers(node.outputs[0]);
    if (readers.size() != 1 || graph.is_graph_output(node.outputs[0])) continue;
    const Node& add = graph.nodes[static_cast<size_t>(readers[0])];
    if (add.op != OpType::kAdd || add.input(0) == add.input(1)) continue;
    const std::string& other = add.input(0) == node.outputs[0] ? add.input(1) : add.input(0);
    const Tensor* bias = graph.initializer(other);
    const int64_t outputs = b->shape()[1];
    if (!bias || bias->dtype() != DataType::kFloat32 || bias->numel() != outputs || bias->shape().rank() > 2)
      continue;
    const std::string c = graph.unique_name(node.name + "/bias");
    graph.initializers[c] = Tensor::from_floats(Shape{outputs}, bias->f32());
    node.inputs = {node.input(0), node.input(1), c};
    node.outputs[0] = add.outputs[0];
    merged_adds.push_back(static_cast<size_t>(readers[0]));
  }
  std::sort(merged_adds.begin(), merged_adds.end(), std::greater<>());
  for (size_t i : merged_adds) graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
