#include <fmt/format.h>

#include "core/log.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

// Why an INT8 plan cannot take the pair over, or "" when it can.
std::string why_not_foldable(const QuantizeAttrs& a) {
  if (a.qmin != -128 || a.qmax != 127) return fmt::format("it quantizes to [{}, {}] (uint8)", a.qmin, a.qmax);
  if (a.scale.size() != 1)
    return fmt::format("it has {} scales along axis {} (per channel)", a.scale.size(), a.axis);
  if (a.zero_point[0] != 0) return fmt::format("its zero point is {}", a.zero_point[0]);
  return "";
}

}  // namespace

// Pattern: x -> QuantizeLinear+DequantizeLinear -> y, symmetric int8 per tensor: y's readers read x,
// and x's scale is recorded. Anything else stays, with a warning.
Status fold_qdq(Graph& graph) {
  for (size_t i = 0; i < graph.nodes.size();) {
    const Node& node = graph.nodes[i];
    if (node.op != OpType::kQuantizeDequantize) {
      ++i;
      continue;
    }
    const auto& a = node.attr<QuantizeAttrs>();
    const std::string why = why_not_foldable(a);
    if (!why.empty() || graph.is_graph_output(node.outputs[0])) {
      log_warning(
          "node '{}' (QuantizeLinear+DequantizeLinear) on '{}': {}; INT8 plans are symmetric and per tensor "
          "([-128, 127], zero point 0), so it runs as its float equivalent (quantize and dequantize in "
          "float) "
          "and its scale is not used",
          node.name, node.input(0), why.empty() ? "it gives the model's output" : why);
      ++i;
      continue;
    }
    const std::string x = node.input(0), y = node.outputs[0];
    // A value quantized twice at different scales keeps the first scale (the pairs are folded in
    // graph order); both roundings disappear.
    graph.quantization.activation_scales.emplace(x, a.scale[0]);
    graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    graph.replace_uses(y, x);
    graph.values.erase(y);
  }
  return Status::ok();
}

}  // namespace gpulab
