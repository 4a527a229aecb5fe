#include <limits>

#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {

// Matches F.normalize(x, dim=-1) as torch.onnx writes it:
//   n = ReduceL2(x, axes=[last], keepdims=1); c = Clip(n, min=eps); [e = Expand(c, shape of x)];
//   y = Div(x, e or c)
// and replaces it by LpNormalization(x, axis=-1, p=2) with epsilon eps.
Status fuse_l2_normalize(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& reduce = graph.nodes[i];
    if (reduce.op != OpType::kReduceL2) continue;
    const ValueInfo* xi = graph.value(reduce.input(0));
    if (!xi || xi->shape.rank() < 1) continue;
    const auto rank = static_cast<int64_t>(xi->shape.rank());
    const ReduceAttrs& ra = reduce.attr<ReduceAttrs>();
    if (!ra.keepdims || ra.axes.size() != 1 || (ra.axes[0] != -1 && ra.axes[0] != rank - 1)) continue;
    const std::string& x = reduce.input(0);
    const int c = pass::single_reader(graph, reduce.outputs[0]);
    if (c < 0) continue;
    const Node& clip = graph.nodes[static_cast<size_t>(c)];
    if (clip.op != OpType::kClip || clip.input(0) != reduce.outputs[0]) continue;
    const ClipAttrs& ca = clip.attr<ClipAttrs>();
    if (!(ca.min >= 0.0f) || ca.max != std::numeric_limits<float>::infinity()) continue;
    std::vector<size_t> gone{i, static_cast<size_t>(c)};
    std::string denominator = clip.outputs[0];
    int d = pass::single_reader(graph, denominator);
    if (d < 0) continue;
    if (graph.nodes[static_cast<size_t>(d)].op == OpType::kExpand) {
      const Node& expand = graph.nodes[static_cast<size_t>(d)];
      const ValueInfo* ei = graph.value(expand.outputs[0]);
      if (expand.input(0) != denominator || !ei || ei->shape != xi->shape) continue;
      gone.push_back(static_cast<size_t>(d));
      denominator = expand.outputs[0];
      d = pass::single_reader(graph, denominator);
      if (d < 0) continue;
    }
    const Node& div = graph.nodes[static_cast<size_t>(d)];
    if (div.op != OpType::kDiv || div.input(0) != x || div.input(1) != denominator) continue;
    const ValueInfo* yi = graph.value(div.outputs[0]);
    if (!yi || yi->shape != xi->shape) continue;  // Div broadcast x itself
    gone.push_back(static_cast<size_t>(d));
    Node norm{reduce.name + "/l2_normalize",
              OpType::kLpNormalization,
              {x},
              {div.outputs[0]},
              LpNormAttrs{.axis = -1, .p = 2, .epsilon = ca.min}};
    pass::replace_nodes(graph, gone, std::move(norm));
    i = static_cast<size_t>(-1);
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
