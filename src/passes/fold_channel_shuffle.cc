#include <algorithm>
#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {

// ShuffleNet's channel shuffle, x.view(N, g, C / g, H, W).transpose(1, 2).reshape(N, C, H, W):
//   Reshape([N, C, H, W] -> [N, g, C/g, H, W]) -> Transpose(0, 2, 1, 3, 4) -> Reshape(-> [N, C, H, W])
// becomes one Gather of the channels (axis 1) with the constant permutation, output channel
// i * g + j reading input channel j * C/g + i: a single layout step for the reference backend and
// the plan.
Status fold_channel_shuffle(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& split = graph.nodes[i];
    if (split.op != OpType::kReshape) continue;
    const ValueInfo* x = graph.value(split.input(0));
    const ValueInfo* s = graph.value(split.outputs[0]);
    if (!x || !s || x->shape.rank() != 4 || s->shape.rank() != 5 || s->shape[0] != x->shape[0] ||
        Shape::is_batch(x->shape[1]))
      continue;
    const int64_t c = x->shape[1], g = s->shape[1], per = s->shape[2];
    if (g < 1 || g * per != c || s->shape[3] != x->shape[2] || s->shape[4] != x->shape[3]) continue;
    int r = pass::single_reader(graph, split.outputs[0]);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kTranspose ||
        graph.nodes[static_cast<size_t>(r)].attr<TransposeAttrs>().perm !=
            std::vector<int64_t>{0, 2, 1, 3, 4})
      continue;
    const size_t t_index = static_cast<size_t>(r);
    r = pass::single_reader(graph, graph.nodes[t_index].outputs[0]);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kReshape) continue;
    const Node& merge = graph.nodes[static_cast<size_t>(r)];
    const ValueInfo* y = graph.value(merge.outputs[0]);
    if (!y || y->shape != x->shape) continue;
    std::vector<int64_t> indices(static_cast<size_t>(c));
    for (int64_t a = 0; a < per; ++a)
      for (int64_t b = 0; b < g; ++b) indices[static_cast<size_t>(a * g + b)] = b * per + a;
    const std::string idx = graph.unique_name(split.name + "/shuffle_indices");
    graph.initializers[idx] = Tensor::from_int64s(Shape{c}, indices);
    Node gather{split.name + "/channel_shuffle",
                OpType::kGather,
                {split.input(0), idx},
                {merge.outputs[0]},
                AxisAttrs{1}};
    const size_t merge_index = static_cast<size_t>(r);
    graph.nodes[merge_index] = std::move(gather);
    pass::erase_nodes(graph, {i, t_index});
    i = static_cast<size_t>(-1);
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
