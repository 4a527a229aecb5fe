#include "passes/passes.h"

namespace gpulab {
namespace {

// Every reader of `value` is a Gemm reading it as A, and it is not a graph output.
bool feeds_only_gemm_a(const Graph& graph, const std::string& value) {
  if (graph.is_graph_output(value)) return false;
  const std::vector<int> readers = graph.consumers(value);
  if (readers.empty()) return false;
  for (int r : readers) {
    const Node& n = graph.nodes[r];
    if (n.op != OpType::kGemm || n.input(0) != value || n.input(1) == value || n.input(2) == value)
      return false;
  }
  return true;
}

}  // namespace

Status fold_flatten_into_gemm(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size();) {
    Node& node = graph.nodes[i];
    if ((node.op != OpType::kReshape && node.op != OpType::kFlatten) ||
        !feeds_only_gemm_a(graph, node.outputs[0])) {
      ++i;
      continue;
    }
    const ValueInfo* in = graph.value(node.input(0));
    const ValueInfo* out = graph.value(node.outputs[0]);
    if (!in || !out || in->shape.rank() < 1 || out->shape.rank() != 2 || out->shape[0] != in->shape[0]) {
      ++i;
      continue;
    }
    if (in->shape.rank() == 2) {  // already [N, K]: the flatten does nothing
      const std::string from = node.outputs[0], to = node.input(0);
      graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      graph.replace_uses(from, to);
      continue;
    }
    if (node.op == OpType::kReshape) {
      node.op = OpType::kFlatten;
      node.attrs = FlattenAttrs{1};
      node.inputs.resize(1);
    }
    ++i;
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
