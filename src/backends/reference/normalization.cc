// Reference ReduceMean, ReduceL2 (over any axes), LayerNormalization (over the axes from `axis`
// to the end, with ONNX's biased variance) and LpNormalization (along one axis). Sums in double, one
// rounding to float32.
#include <algorithm>
#include <cmath>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

Status run_reduce(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const ReduceAttrs a, attrs_or_default<ReduceAttrs>(node));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  std::vector<bool> reduced(static_cast<size_t>(rank), a.axes.empty());
  for (int64_t axis : a.axes) {
    GPULAB_ASSIGN_OR_RETURN(const int64_t ax, normalize_axis(node, axis, rank));
    reduced[static_cast<size_t>(ax)] = true;
  }
  // Output dims with the reduced ones kept as 1; the output element of an input element is found
  // through the output's strides (0 along reduced dims).
  std::vector<int64_t> kept, out_dims;
  int64_t count = 1;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = x.shape()[static_cast<size_t>(i)];
    kept.push_back(reduced[static_cast<size_t>(i)] ? 1 : d);
    if (reduced[static_cast<size_t>(i)]) count *= d;
    if (!reduced[static_cast<size_t>(i)] || a.keepdims)
      out_dims.push_back(reduced[static_cast<size_t>(i)] ? 1 : d);
  }
  const std::vector<int64_t> kept_strides = broadcast_strides(Shape(kept), static_cast<size_t>(rank));
  int64_t out_count = 1;
  for (int64_t d : kept) out_count *= d;
  std::vector<double> acc(static_cast<size_t>(out_count), 0.0);
  const bool l2 = node.op == OpType::kReduceL2;
  const float* xp = x.f32().data();
  for_each_index(x.shape().dims, [&](int64_t e, const std::vector<int64_t>& c) {
    int64_t o = 0;
    for (size_t i = 0; i < c.size(); ++i) o += c[i] * kept_strides[i];
    const double v = xp[e];
    acc[static_cast<size_t>(o)] += l2 ? v * v : v;
  });
  (void)options;
  Tensor y(DataType::kFloat32, Shape(out_dims));
  for (size_t i = 0; i < acc.size(); ++i)
    y.f32()[i] = static_cast<float>(l2 ? std::sqrt(acc[i])
                                       : acc[i] / static_cast<double>(std::max<int64_t>(count, 1)));
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_layer_norm(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 2, 1));
  GPULAB_ASSIGN_OR_RETURN(const LayerNormAttrs a, attrs_or_default<LayerNormAttrs>(node));
  for (size_t o = 1; o < node.outputs.size(); ++o)
    if (!node.outputs[o].empty())
      return Status::unsupported(where(node) + ": the Mean and InvStdDev outputs are not supported.");
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, a.axis, rank));
  const Shape normalized(std::vector<int64_t>(x.shape().dims.begin() + axis, x.shape().dims.end()));
  const int64_t inner = normalized.numel();
  const int64_t rows = inner == 0 ? 0 : x.numel() / inner;
  // Scale and bias broadcast to the normalized shape.
  std::vector<const float*> params;
  std::vector<std::vector<int64_t>> strides;
  for (size_t i = 1; i < 3; ++i) {
    if (i >= inputs.size() || !inputs[i]) continue;
    GPULAB_TRY(check_dtype(node, *inputs[i], DataType::kFloat32, i == 1 ? "scale" : "B"));
    GPULAB_ASSIGN_OR_RETURN(const Shape b, broadcast_shape(node, normalized, inputs[i]->shape()));
    if (b != normalized)
      return Status::invalid_argument(where(node) + ": " + (i == 1 ? "scale " : "B ") +
                                      inputs[i]->shape().to_string() + " does not broadcast to " +
                                      normalized.to_string() + ".");
    params.push_back(inputs[i]->f32().data());
    strides.push_back(broadcast_strides(inputs[i]->shape(), normalized.rank()));
  }
  // Offsets of each normalized element into scale and bias.
  std::vector<std::vector<int64_t>> offsets(params.size(), std::vector<int64_t>(static_cast<size_t>(inner)));
  for_each_index(normalized.dims, [&](int64_t e, const std::vector<int64_t>& c) {
    for (size_t p = 0; p < params.size(); ++p) {
      int64_t at = 0;
      for (size_t i = 0; i < c.size(); ++i) at += c[i] * strides[p][i];
      offsets[p][static_cast<size_t>(e)] = at;
    }
  });
  Tensor y(DataType::kFloat32, x.shape());
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  const bool has_bias = params.size() > 1;
  parallel_for(rows, inner * 4, options, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * inner;
      double mean = 0;
      for (int64_t i = 0; i < inner; ++i) mean += row[i];
      mean /= static_cast<double>(inner);
      double var = 0;
      for (int64_t i = 0; i < inner; ++i) var += (row[i] - mean) * (row[i] - mean);
      var /= static_cast<double>(inner);
      const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(a.epsilon));
      for (int64_t i = 0; i < inner; ++i) {
        double v = (row[i] - mean) * inv_std * params[0][offsets[0][static_cast<size_t>(i)]];
        if (has_bias) v += params[1][offsets[1][static_cast<size_t>(i)]];
        yp[r * inner + i] = static_cast<float>(v);
      }
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

// y = x / max(||x||_p, epsilon) along the axis; a zero denominator gives zeros.
Status run_lp_norm(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const LpNormAttrs a, attrs_or_default<LpNormAttrs>(node));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, a.axis, rank));
  int64_t outer = 1, n = x.shape()[static_cast<size_t>(axis)], inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[static_cast<size_t>(i)];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= x.shape()[static_cast<size_t>(i)];
  Tensor y(DataType::kFloat32, x.shape());
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      double norm = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = xp[base + j * inner];
        norm += a.p == 1 ? std::abs(v) : v * v;
      }
      if (a.p == 2) norm = std::sqrt(norm);
      const double d = std::max(norm, static_cast<double>(a.epsilon));
      for (int64_t j = 0; j < n; ++j)
        yp[base + j * inner] = d > 0 ? static_cast<float>(xp[base + j * inner] / d) : 0.0f;
    }
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace

Status run_normalization(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  if (node.op == OpType::kLayerNormalization) return run_layer_norm(node, inputs, outputs, options);
  if (node.op == OpType::kLpNormalization) return run_lp_norm(node, inputs, outputs);
  return run_reduce(node, inputs, outputs, options);
}

}  // namespace gpulab::reference
