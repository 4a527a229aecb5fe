#include <algorithm>
#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

bool all_equal(const Tensor* t, double want) {
  if (!t || t->numel() < 1) return false;
  if (t->dtype() == DataType::kInt64)
    return std::all_of(t->i64().begin(), t->i64().end(),
                       [&](int64_t v) { return static_cast<double>(v) == want; });
  if (t->dtype() == DataType::kFloat32)
    return std::all_of(t->f32().begin(), t->f32().end(),
                       [&](float v) { return static_cast<double>(v) == want; });
  return false;
}

// True when `node` returns its first input unchanged.
bool is_noop(const Graph& graph, const Node& node) {
  const ValueInfo* in = graph.value(node.input(0));
  const ValueInfo* out = node.outputs.size() == 1 ? graph.value(node.outputs[0]) : nullptr;
  if (!in || !out || in->shape != out->shape || in->dtype != out->dtype) return false;
  switch (node.op) {
    case OpType::kReshape:
    case OpType::kExpand:
    case OpType::kCast:
    case OpType::kSqueeze:
    case OpType::kUnsqueeze:
    case OpType::kFlatten: return true;
    case OpType::kTranspose: {
      const auto& perm = node.attr<TransposeAttrs>().perm;
      for (size_t i = 0; i < perm.size(); ++i)
        if (perm[i] != static_cast<int64_t>(i)) return false;
      return !perm.empty() || in->shape.rank() <= 1;
    }
    case OpType::kPad: return all_equal(graph.initializer(node.input(1)), 0);
    case OpType::kSlice:  // the same shape and steps of 1: every element in place
      return !node.has_input(4) || all_equal(graph.initializer(node.input(4)), 1);
    case OpType::kMul:
    case OpType::kDiv:
      return node.input(1) != node.input(0) && all_equal(graph.initializer(node.input(1)), 1);
    case OpType::kAdd:
    case OpType::kSub:
      return node.input(1) != node.input(0) && all_equal(graph.initializer(node.input(1)), 0);
    default: return false;
  }
}

}  // namespace

Status drop_noops(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  bool changed = false;
  for (Node& node : graph.nodes) {
    if (!is_noop(graph, node)) continue;
    node.op = OpType::kIdentity;
    node.inputs.resize(1);
    node.attrs = std::monostate{};
    changed = true;
  }
  return changed ? drop_identity(graph) : Status::ok();
}

}  // namespace gpulab
