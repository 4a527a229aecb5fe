#include <algorithm>

#include "passes/passes.h"

namespace gpulab {
namespace {

bool is_shape_op(OpType op) {
  return op == OpType::kShape || op == OpType::kGather || op == OpType::kUnsqueeze || op == OpType::kConcat;
}

bool has_batch(const std::vector<int64_t>& v) {
  return std::find(v.begin(), v.end(), Shape::kBatch) != v.end();
}

}  // namespace

Status fold_constants(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  std::vector<bool> remove(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (is_shape_op(node.op)) {
      const ValueInfo* out = graph.value(node.outputs[0]);
      if (out && out->dtype == DataType::kInt64 && out->known_values && !has_batch(*out->known_values) &&
          !out->shape.has_batch()) {
        graph.initializers[node.outputs[0]] = Tensor::from_int64s(out->shape, *out->known_values);
        remove[i] = true;
      }
      continue;
    }
    if (node.op != OpType::kReshape || graph.is_initializer(node.input(1))) continue;
    const ValueInfo* target = graph.value(node.input(1));
    const ValueInfo* data = graph.value(node.input(0));
    if (!target || !target->known_values || !data) continue;
    std::vector<int64_t> dims = *target->known_values;
    const bool allowzero = node.attr<ReshapeAttrs>().allowzero;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] != Shape::kBatch) continue;
      if (allowzero || d >= data->shape.rank() || data->shape[d] != Shape::kBatch) {
        return Status::unsupported("node '" + node.name +
                                   "' (Reshape): its target shape uses the batch size at "
                                   "position " +
                                   std::to_string(d) + ", where input " + data->shape.to_string() +
                                   " does not have its batch dimension. Only reshapes that keep the batch as "
                                   "dimension 0 are supported.");
      }
      dims[d] = 0;  // ONNX Reshape: 0 copies the input's dimension
    }
    const std::string name = graph.unique_name(node.name + "/shape");
    graph.initializers[name] = Tensor::from_int64s(Shape{static_cast<int64_t>(dims.size())}, dims);
    node.inputs[1] = name;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!remove[i]) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
