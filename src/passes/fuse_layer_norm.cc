#include <algorithm>
#include <numeric>

#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

using pass::producer_of;
using pass::scalar_constant;
using pass::single_reader;

// The normalized axes of a keepdims ReduceMean over the trailing `count` axes of a rank-`rank`
// tensor, as that count; 0 when the node is not such a mean.
int64_t trailing_mean_axes(const Node& n, int64_t rank) {
  if (n.op != OpType::kReduceMean || !n.attr<ReduceAttrs>().keepdims) return 0;
  std::vector<int64_t> axes = n.attr<ReduceAttrs>().axes;
  if (axes.empty()) return 0;
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i)) return 0;
  return static_cast<int64_t>(axes.size());
}

// The other input of a binary node, given one of them; "" when `known` is not an input.
std::string other_input(const Node& n, const std::string& known) {
  if (n.input(0) == known) return n.input(1);
  if (n.input(1) == known) return n.input(0);
  return "";
}

}  // namespace

// Matches the decomposition torch.onnx writes for nn.LayerNorm below opset 17:
//   m = ReduceMean(x, last k axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2), same axes);
//   y = Div(d, Sqrt(Add(v, eps))) [Mul(·, gamma)] [Add(·, beta)]
// and replaces it by LayerNormalization(x, gamma (ones without a Mul), [beta], axis = -k, eps).
Status fuse_layer_norm(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& mean = graph.nodes[i];
    const ValueInfo* xi = mean.op == OpType::kReduceMean ? graph.value(mean.input(0)) : nullptr;
    if (!xi) continue;
    const int64_t rank = static_cast<int64_t>(xi->shape.rank());
    const int64_t k = trailing_mean_axes(mean, rank);
    if (k == 0) continue;
    const std::string x = mean.input(0);
    // Sub(x, m), read by Pow and Div.
    const std::vector<int> m_readers = graph.consumers(mean.outputs[0]);
    if (m_readers.size() != 1 || graph.use_count(mean.outputs[0]) != 1) continue;
    const Node& sub = graph.nodes[static_cast<size_t>(m_readers[0])];
    if (sub.op != OpType::kSub || sub.input(0) != x || sub.input(1) != mean.outputs[0]) continue;
    const std::string d = sub.outputs[0];
    const std::vector<int> d_readers = graph.consumers(d);
    if (d_readers.size() != 2 || graph.use_count(d) != 2) continue;
    const Node* pow = nullptr;
    const Node* div = nullptr;
    for (int r : d_readers) {
      const Node& n = graph.nodes[static_cast<size_t>(r)];
      if (n.op == OpType::kPow && n.input(0) == d && scalar_constant(graph, n.input(1)) == 2.0f) pow = &n;
      if (n.op == OpType::kDiv && n.input(0) == d) div = &n;
    }
    if (!pow || !div) continue;
    int r = single_reader(graph, pow->outputs[0]);
    if (r < 0) continue;
    const Node& var = graph.nodes[static_cast<size_t>(r)];
    if (var.op != OpType::kReduceMean || trailing_mean_axes(var, rank) != k) continue;
    r = single_reader(graph, var.outputs[0]);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kAdd) continue;
    const Node& add_eps = graph.nodes[static_cast<size_t>(r)];
    const auto eps = scalar_constant(graph, other_input(add_eps, var.outputs[0]));
    if (!eps || *eps < 0) continue;
    r = single_reader(graph, add_eps.outputs[0]);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kSqrt) continue;
    const Node& sqrt = graph.nodes[static_cast<size_t>(r)];
    if (div->input(1) != sqrt.outputs[0] || graph.use_count(sqrt.outputs[0]) != 1) continue;
    // The optional affine part: Mul by a constant gamma, then Add of a constant beta, each of the
    // normalized shape (broadcast).
    const Shape normalized(std::vector<int64_t>(xi->shape.dims.end() - k, xi->shape.dims.end()));
    const auto affine_param = [&](const Node& n, const std::string& from) -> std::string {
      const std::string p = other_input(n, from);
      const Tensor* t = graph.initializer(p);
      if (!t || t->dtype() != DataType::kFloat32 || t->shape().rank() > normalized.rank()) return "";
      for (size_t a = 0; a < t->shape().rank(); ++a) {
        const int64_t dim = t->shape()[a], want = normalized[normalized.rank() - t->shape().rank() + a];
        if (dim != want && dim != 1) return "";
      }
      return p;
    };
    std::string out = div->outputs[0], gamma, beta;
    std::vector<size_t> gone{i,
                             static_cast<size_t>(m_readers[0]),
                             static_cast<size_t>(pow - graph.nodes.data()),
                             static_cast<size_t>(&var - graph.nodes.data()),
                             static_cast<size_t>(&add_eps - graph.nodes.data()),
                             static_cast<size_t>(&sqrt - graph.nodes.data()),
                             static_cast<size_t>(div - graph.nodes.data())};
    r = single_reader(graph, out);
    if (r >= 0 && graph.nodes[static_cast<size_t>(r)].op == OpType::kMul) {
      gamma = affine_param(graph.nodes[static_cast<size_t>(r)], out);
      if (!gamma.empty()) {
        out = graph.nodes[static_cast<size_t>(r)].outputs[0];
        gone.push_back(static_cast<size_t>(r));
        r = single_reader(graph, out);
        if (r >= 0 && graph.nodes[static_cast<size_t>(r)].op == OpType::kAdd) {
          beta = affine_param(graph.nodes[static_cast<size_t>(r)], out);
          if (!beta.empty()) {
            out = graph.nodes[static_cast<size_t>(r)].outputs[0];
            gone.push_back(static_cast<size_t>(r));
          }
        }
      }
    }
    // LayerNormalization's scale and bias: the normalized shape, broadcast values written out.
    const auto full = [&](const std::string& p, float fill) {
      Tensor t(DataType::kFloat32, normalized);
      std::fill(t.f32().begin(), t.f32().end(), fill);
      if (const Tensor* src = graph.initializer(p)) {
        const int64_t n = t.numel();
        const int64_t sn = src->numel();
        // Broadcast along the leading normalized axes only ([C] or [1, C] against [H, W, C] ...).
        for (int64_t e = 0; e < n; ++e)
          t.f32()[static_cast<size_t>(e)] = src->f32()[static_cast<size_t>(e % sn)];
      }
      return t;
    };
    if (const Tensor* g = graph.initializer(gamma); g && normalized.numel() % g->numel() != 0) continue;
    const std::string scale_name = graph.unique_name(mean.name + "/layer_norm_scale");
    graph.initializers[scale_name] = full(gamma, 1.0f);
    std::vector<std::string> inputs{x, scale_name};
    if (!beta.empty()) {
      const std::string bias_name = graph.unique_name(mean.name + "/layer_norm_bias");
      graph.initializers[bias_name] = full(beta, 0.0f);
      inputs.push_back(bias_name);
    }
    Node ln{mean.name + "/layer_norm", OpType::kLayerNormalization, inputs, {out}, LayerNormAttrs{-k, *eps}};
    pass::replace_nodes(graph, gone, std::move(ln));
    i = static_cast<size_t>(-1);  // indices moved: rescan (the loop's ++i wraps this to 0)
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
