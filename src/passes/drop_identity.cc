#include "passes/passes.h"

namespace gpulab {

Status drop_identity(Graph& graph) {
  for (size_t i = 0; i < graph.nodes.size();) {
    const Node& node = graph.nodes[i];
    if ((node.op != OpType::kIdentity && node.op != OpType::kDropout) || !node.has_input(0)) {
      ++i;
      continue;
    }
    const std::string in = node.input(0);
    const std::string out = node.outputs[0];
    if (!graph.is_graph_output(out)) {
      graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      graph.replace_uses(out, in);
      continue;
    }
    // `out` is a graph output: keep its name by renaming the value it copies, when that value is
    // an ordinary intermediate (not a graph input, initializer or another graph output).
    const int p = graph.producer(in);
    if (p >= 0 && !graph.is_graph_output(in)) {
      graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      for (std::string& o : graph.nodes[static_cast<size_t>(p)].outputs)
        if (o == in) o = out;
      graph.replace_uses(in, out);
      continue;
    }
    ++i;
  }
  return graph.infer_shapes();
}

}  // namespace gpulab
