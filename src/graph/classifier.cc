#include "graph/classifier.h"

namespace gpulab {

bool outputs_class_probabilities(const Graph& graph) {
  if (graph.outputs.size() != 1) return false;
  std::string value = graph.outputs[0];
  for (int hops = 0; hops < 8; ++hops) {
    const int producer = graph.producer(value);
    if (producer < 0) return false;
    const Node& node = graph.nodes[producer];
    switch (node.op) {
      case OpType::kIdentity:
      case OpType::kDropout:
      case OpType::kFlatten:
      case OpType::kReshape: value = node.input(0); continue;
      case OpType::kSoftmax: return softmax_over_classes(graph, node);
      default: return false;
    }
  }
  return false;
}

}  // namespace gpulab
