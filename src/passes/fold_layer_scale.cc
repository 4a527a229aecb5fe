#include <algorithm>
#include <numeric>

#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

// The per-feature factors of a constant `c` multiplying a tensor of rank `rank` that is the linear
// layer's output (features on the last axis) permuted by `perm` (empty: not permuted): one factor
// per feature, or nullopt when c varies along any other axis.
std::optional<std::vector<float>> per_feature(const Tensor& c, size_t rank, const std::vector<int64_t>& perm,
                                              int64_t features) {
  if (c.dtype() != DataType::kFloat32 || c.shape().rank() > rank) return std::nullopt;
  std::vector<int64_t> dims(rank - c.shape().rank(), 1);
  dims.insert(dims.end(), c.shape().dims.begin(), c.shape().dims.end());
  // The axis of the permuted tensor that holds the features.
  size_t feature_axis = rank - 1;
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] == static_cast<int64_t>(rank) - 1) feature_axis = i;
  for (size_t i = 0; i < rank; ++i)
    if (i != feature_axis && dims[i] != 1) return std::nullopt;
  const int64_t n = dims[feature_axis];
  if (n != 1 && n != features) return std::nullopt;
  std::vector<float> f(static_cast<size_t>(features));
  for (int64_t j = 0; j < features; ++j)
    f[static_cast<size_t>(j)] = c.f32()[static_cast<size_t>(n == 1 ? 0 : j)];
  return f;
}

}  // namespace

// A Mul by a constant after a linear layer, MatMul(x, W) [+ b] (ConvNeXt's layer scale, after the
// Transpose back to NCHW), whose factor is one per output feature: folded into W's columns and b.
Status fold_layer_scale(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (Node& mul : graph.nodes) {
    if (mul.op != OpType::kMul) continue;
    const int ci = graph.is_initializer(mul.input(1)) ? 1 : graph.is_initializer(mul.input(0)) ? 0 : -1;
    if (ci < 0) continue;
    const std::string c_name = mul.input(static_cast<size_t>(ci));
    std::string z = mul.input(static_cast<size_t>(1 - ci));
    const ValueInfo* out = graph.value(mul.outputs[0]);
    const ValueInfo* zi = graph.value(z);
    if (!out || !zi || out->shape != zi->shape || graph.use_count(z) != 1) continue;
    std::vector<int64_t> perm;
    const Node* t = pass::producer_of(graph, z);
    const std::string transposed = z;
    if (t && t->op == OpType::kTranspose) {
      perm = t->attr<TransposeAttrs>().perm;
      z = t->input(0);
      if (perm.empty() || graph.use_count(z) != 1) continue;
    }
    // z = Add(MatMul(x, W), b) or MatMul(x, W), W and b constants.
    const Node* add = pass::producer_of(graph, z);
    const Node* mm = add;
    std::string bias;
    if (add && add->op == OpType::kAdd) {
      const int bi = graph.is_initializer(add->input(1)) ? 1 : graph.is_initializer(add->input(0)) ? 0 : -1;
      if (bi < 0) continue;
      bias = add->input(static_cast<size_t>(bi));
      mm = pass::producer_of(graph, add->input(static_cast<size_t>(1 - bi)));
      if (!mm || graph.use_count(add->input(static_cast<size_t>(1 - bi))) != 1) continue;
    }
    if (!mm || mm->op != OpType::kMatMul) continue;
    const Tensor* w = graph.initializer(mm->input(1));
    if (!w || w->dtype() != DataType::kFloat32 || w->shape().rank() != 2) continue;
    const int64_t features = w->shape()[1];
    const Tensor* b = bias.empty() ? nullptr : graph.initializer(bias);
    if (b && (b->dtype() != DataType::kFloat32 || b->numel() != features)) continue;
    const auto f = per_feature(*graph.initializer(c_name), out->shape.rank(), perm, features);
    if (!f) continue;
    Tensor w2 = *w;
    for (int64_t k = 0; k < w->shape()[0]; ++k)
      for (int64_t j = 0; j < features; ++j)
        w2.f32()[static_cast<size_t>(k * features + j)] *= (*f)[static_cast<size_t>(j)];
    const std::string w_name = graph.unique_name(mm->input(1) + "/scaled");
    graph.initializers[w_name] = std::move(w2);
    const_cast<Node*>(mm)->inputs[1] = w_name;
    if (b) {
      Tensor b2 = *b;
      for (int64_t j = 0; j < features; ++j) b2.f32()[static_cast<size_t>(j)] *= (*f)[static_cast<size_t>(j)];
      const std::string b_name = graph.unique_name(bias + "/scaled");
      graph.initializers[b_name] = std::move(b2);
      Node* a = const_cast<Node*>(add);
      for (std::string& in : a->inputs)
        if (in == bias) in = b_name;
    }
    mul.op = OpType::kIdentity;
    mul.inputs = {transposed};
    mul.attrs = std::monostate{};
  }
  GPULAB_TRY(drop_identity(graph));
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
