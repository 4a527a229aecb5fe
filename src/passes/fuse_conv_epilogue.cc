#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

using pass::single_reader;

void erase_node(Graph& graph, int index) {
  graph.nodes.erase(graph.nodes.begin() + index);
}

}  // namespace

Status fuse_conv_epilogue(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op != OpType::kConv) continue;
    {
      const ConvAttrs& a = graph.nodes[i].attr<ConvAttrs>();
      if (a.has_residual || a.activation != Activation::kNone) continue;
    }
    const ValueInfo* conv_info = graph.value(graph.nodes[i].outputs[0]);
    if (!conv_info) continue;
    const Shape conv_shape = conv_info->shape;

    // Residual: Conv -> Add(conv, other) with `other` of the same shape, defined before the Conv.
    int r = single_reader(graph, graph.nodes[i].outputs[0]);
    if (r >= 0 && graph.nodes[r].op == OpType::kAdd) {
      const Node& add = graph.nodes[r];
      const std::string& out = graph.nodes[i].outputs[0];
      const std::string other = add.input(0) == out ? add.input(1) : add.input(0);
      const ValueInfo* other_info = graph.value(other);
      const ValueInfo* add_info = graph.value(add.outputs[0]);
      if (!other.empty() && other != out && !graph.is_initializer(other) && other_info &&
          other_info->shape == conv_shape && add_info && add_info->shape == conv_shape &&
          graph.producer(other) < static_cast<int>(i)) {
        Node& conv = graph.nodes[i];
        conv.inputs.resize(3);  // X, W, B ("" when absent)
        conv.inputs.push_back(other);
        conv.attr<ConvAttrs>().has_residual = true;
        conv.outputs[0] = add.outputs[0];
        erase_node(graph, r);
      }
    }

    // Activation: Relu or Clip.
    r = single_reader(graph, graph.nodes[i].outputs[0]);
    if (r >= 0 && (graph.nodes[r].op == OpType::kRelu || graph.nodes[r].op == OpType::kClip)) {
      Node& conv = graph.nodes[i];
      ConvAttrs& a = conv.attr<ConvAttrs>();
      const Node& act = graph.nodes[r];
      if (act.op == OpType::kRelu) {
        a.activation = Activation::kRelu;
      } else {
        a.activation = Activation::kClip;
        a.clip_min = act.attr<ClipAttrs>().min;
        a.clip_max = act.attr<ClipAttrs>().max;
      }
      conv.outputs[0] = act.outputs[0];
      erase_node(graph, r);
    }
  }
  return graph.infer_shapes();
}

}  // namespace gpulab
