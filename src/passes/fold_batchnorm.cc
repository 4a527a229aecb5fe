#include <cmath>
#include <optional>
#include <vector>

#include "passes/passes.h"

namespace gpulab {
namespace {

// A float32 initializer of `n` elements, or nullptr.
const Tensor* float_param(const Graph& graph, const std::string& name, int64_t n) {
  const Tensor* t = graph.initializer(name);
  return t && t->dtype() == DataType::kFloat32 && t->numel() == n ? t : nullptr;
}

// A BatchNormalization over `c` channels as y = (x - mean) * scale + beta, with scale =
// s / sqrt(var + eps) computed in double; nullopt when its parameters are not float32 [c]
// initializers.
struct BnAffine {
  std::vector<double> scale, mean, beta;
};
std::optional<BnAffine> bn_affine(const Graph& graph, const Node& bn, int64_t c) {
  const Tensor* s = float_param(graph, bn.input(1), c);
  const Tensor* beta = float_param(graph, bn.input(2), c);
  const Tensor* mean = float_param(graph, bn.input(3), c);
  const Tensor* var = float_param(graph, bn.input(4), c);
  if (!s || !beta || !mean || !var) return std::nullopt;
  const double eps = bn.attr<BatchNormAttrs>().epsilon;
  BnAffine a;
  for (int64_t k = 0; k < c; ++k) {
    a.scale.push_back(static_cast<double>(s->f32()[k]) / std::sqrt(static_cast<double>(var->f32()[k]) + eps));
    a.mean.push_back(mean->f32()[k]);
    a.beta.push_back(beta->f32()[k]);
  }
  return a;
}

bool plain_conv(const Node& conv) {
  const ConvAttrs& a = conv.attr<ConvAttrs>();
  return a.activation == Activation::kNone && !a.has_residual;
}

}  // namespace

Status fold_batchnorm(Graph& graph) {
  for (size_t i = 0; i < graph.nodes.size();) {
    const Node& bn = graph.nodes[i];
    if (bn.op != OpType::kBatchNormalization) {
      ++i;
      continue;
    }
    const int p = graph.producer(bn.input(0));
    if (p < 0 || graph.nodes[p].op != OpType::kConv || !plain_conv(graph.nodes[p]) ||
        graph.use_count(bn.input(0)) != 1) {
      ++i;
      continue;
    }
    Node& conv = graph.nodes[p];
    const Tensor* w = graph.initializer(conv.input(1));
    if (!w || w->dtype() != DataType::kFloat32 || w->shape().rank() != 4) {
      ++i;
      continue;
    }
    const int64_t k = w->shape()[0];
    const Tensor* bias = conv.has_input(2) ? float_param(graph, conv.input(2), k) : nullptr;
    const std::optional<BnAffine> affine = bn_affine(graph, bn, k);
    if ((conv.has_input(2) && !bias) || !affine) {
      ++i;
      continue;
    }
    Tensor new_w = *w;
    Tensor new_b(DataType::kFloat32, Shape{k});
    const int64_t per_channel = w->numel() / k;
    auto wv = new_w.f32();
    for (int64_t c = 0; c < k; ++c) {
      const double a = affine->scale[c];
      for (int64_t j = 0; j < per_channel; ++j) {
        float& x = wv[c * per_channel + j];
        x = static_cast<float>(static_cast<double>(x) * a);
      }
      const double b0 = bias ? bias->f32()[c] : 0.0;
      new_b.f32()[c] = static_cast<float>((b0 - affine->mean[c]) * a + affine->beta[c]);
    }
    // New initializers: the old ones may be shared with other nodes.
    const std::string w_name = graph.unique_name(conv.name + "/bn_folded_weight");
    graph.initializers[w_name] = std::move(new_w);
    const std::string b_name = graph.unique_name(conv.name + "/bn_folded_bias");
    graph.initializers[b_name] = std::move(new_b);
    conv.inputs = {conv.input(0), w_name, b_name};
    conv.outputs[0] = bn.outputs[0];
    graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

Status batchnorm_to_conv(Graph& graph) {
  for (Node& bn : graph.nodes) {
    if (bn.op != OpType::kBatchNormalization) continue;
    const ValueInfo* in = graph.value(bn.input(0));
    if (!in || in->shape.rank() != 4 || in->shape[1] < 1) continue;
    const int64_t c = in->shape[1];
    const std::optional<BnAffine> affine = bn_affine(graph, bn, c);
    if (!affine) continue;
    Tensor w(DataType::kFloat32, Shape{c, 1, 1, 1});
    Tensor b(DataType::kFloat32, Shape{c});
    for (int64_t k = 0; k < c; ++k) {
      w.f32()[k] = static_cast<float>(affine->scale[k]);
      b.f32()[k] = static_cast<float>(affine->beta[k] - affine->mean[k] * affine->scale[k]);
    }
    const std::string w_name = graph.unique_name(bn.name + "/as_conv_weight");
    graph.initializers[w_name] = std::move(w);
    const std::string b_name = graph.unique_name(bn.name + "/as_conv_bias");
    graph.initializers[b_name] = std::move(b);
    ConvAttrs a;
    a.kernel = {1, 1};
    a.groups = c;
    bn.op = OpType::kConv;
    bn.attrs = a;
    bn.inputs = {bn.input(0), w_name, b_name};
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
