#include <algorithm>

#include "backends/reference/reference_executor.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

// Largest output (bytes) a folded node may have: far above any shape tensor, mask or bias table of
// a classifier, far below a weight-sized surprise.
constexpr size_t kMaxFoldedBytes = size_t{64} << 20;

bool has_batch(const std::vector<int64_t>& v) {
  return std::any_of(v.begin(), v.end(), [](int64_t d) { return Shape::is_batch(d); });
}

// An int64 or bool initializer holding `info`'s known values.
Tensor known_tensor(const ValueInfo& info) {
  if (info.dtype == DataType::kInt64) return Tensor::from_int64s(info.shape, *info.known_values);
  Tensor t(DataType::kBool, info.shape);
  for (size_t i = 0; i < info.known_values->size(); ++i)
    t.data()[i] = static_cast<std::byte>((*info.known_values)[i] != 0);
  return t;
}

// Every output of `node` has known values that do not depend on the batch size.
bool outputs_known(const Graph& graph, const Node& node) {
  for (const std::string& o : node.outputs) {
    const ValueInfo* info = graph.value(o);
    if (o.empty() || !info || !info->known_values || has_batch(*info->known_values) ||
        info->shape.has_batch() || (info->dtype != DataType::kInt64 && info->dtype != DataType::kBool))
      return false;
  }
  return !node.outputs.empty();
}

bool inputs_constant(const Graph& graph, const Node& node) {
  for (const std::string& in : node.inputs)
    if (!in.empty() && !graph.is_initializer(in)) return false;
  return true;
}

// Computes `node` from its constant inputs with the reference backend.
Result<std::vector<Tensor>> evaluate(const Graph& graph, const Node& node) {
  std::vector<const Tensor*> inputs;
  for (const std::string& in : node.inputs) inputs.push_back(in.empty() ? nullptr : graph.initializer(in));
  std::vector<Tensor> outputs;
  ReferenceOptions options;
  options.num_threads = 1;
  GPULAB_TRY(run_reference_node(node, inputs, outputs, options));
  return outputs;
}

// The Reshape target `dims` (known values, possibly with the batch) as a constant ONNX can read: the
// batch at the input's batch position is 0 ("copy this dimension"); any other batch dimension (a
// batch folded into another dimension, N * k) is -1, with every other dimension concrete.
Result<std::vector<int64_t>> constant_target(const Node& node, const ValueInfo& data, const ValueInfo& out,
                                             std::vector<int64_t> dims) {
  const bool allowzero = node.attr<ReshapeAttrs>().allowzero;
  int batch_dims = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (!Shape::is_batch(dims[d])) continue;
    ++batch_dims;
    if (!allowzero && d < data.shape.rank() && data.shape[d] == dims[d]) {
      dims[d] = 0;  // ONNX Reshape: 0 copies the input's dimension
      continue;
    }
    // -1: the one dimension inferred from the element count; every other one as inferred.
    if (out.shape.rank() != dims.size() || std::count(dims.begin(), dims.end(), -1) > 0)
      return Status::unsupported("node '" + node.name + "' (Reshape): its target shape " +
                                 out.shape.to_string() + " uses the batch size at position " +
                                 std::to_string(d) +
                                 " together with another inferred dimension. Only reshapes with one batch "
                                 "dimension are supported.");
    for (size_t e = 0; e < dims.size(); ++e)
      if (e != d && !Shape::is_batch(dims[e]) && dims[e] != 0) dims[e] = out.shape[e];
    dims[d] = -1;
  }
  if (batch_dims > 1)
    return Status::unsupported("node '" + node.name + "' (Reshape): its target shape uses the batch size " +
                               std::to_string(batch_dims) + " times.");
  return dims;
}

}  // namespace

Status fold_constants(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  std::vector<bool> remove(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    // Values shape inference computed (an export's shape code, Shape of a static dimension).
    if (outputs_known(graph, node)) {
      for (const std::string& o : node.outputs) graph.initializers[o] = known_tensor(*graph.value(o));
      remove[i] = true;
      continue;
    }
    // Anything else computed from constants alone (masks, relative position biases, the cast and
    // power of an attention scale), by the reference backend.
    if (inputs_constant(graph, node) && node.op != OpType::kConstant) {
      size_t bytes = 0;
      for (const std::string& o : node.outputs)
        if (const ValueInfo* info = graph.value(o); info && !info->shape.has_batch())
          bytes += static_cast<size_t>(info->shape.numel()) * dtype_size(info->dtype);
      if (bytes <= kMaxFoldedBytes) {
        auto outputs = evaluate(graph, node);
        if (!outputs.is_ok()) return outputs.status().with_context("folding node '" + node.name + "'");
        for (size_t o = 0; o < node.outputs.size(); ++o)
          if (!node.outputs[o].empty()) graph.initializers[node.outputs[o]] = std::move((*outputs)[o]);
        remove[i] = true;  // later nodes see the new initializers; their inferred shapes stay valid
        continue;
      }
    }
    if (node.op != OpType::kReshape || graph.is_initializer(node.input(1))) continue;
    const ValueInfo* target = graph.value(node.input(1));
    const ValueInfo* data = graph.value(node.input(0));
    const ValueInfo* out = graph.value(node.outputs[0]);
    if (!target || !target->known_values || !data || !out) continue;
    GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims,
                            constant_target(node, *data, *out, *target->known_values));
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
