// Reference scaled dot-product attention (the Attention node fuse_attention makes):
//   y[..., t, :] = sum_s p[t, s] V[..., s, :],  p[t, :] = softmax_s(scale * Q[..., t, :] . K[..., s, :] +
//   bias[..., t, s])
// with the leading dimensions of Q, K, V and the bias broadcast (numpy). Scores, softmax and the
// weighted sum in double; one rounding to float32. Rows (leading index, t) are split across threads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/reference/kernels.h"

namespace gpulab::reference {

Status run_attention(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 3, 1));
  GPULAB_ASSIGN_OR_RETURN(const AttentionAttrs a, attrs_or_default<AttentionAttrs>(node));
  const Tensor& q = *inputs[0];
  const Tensor& k = *inputs[1];
  const Tensor& v = *inputs[2];
  const Tensor* bias = inputs.size() > 3 ? inputs[3] : nullptr;
  for (const Tensor* t : {&q, &k, &v, bias})
    if (t) GPULAB_TRY(check_dtype(node, *t, DataType::kFloat32, "an input"));
  const size_t r = q.shape().rank();
  if (r < 2 || k.shape().rank() != r || v.shape().rank() != r || q.shape()[r - 1] != k.shape()[r - 1] ||
      k.shape()[r - 2] != v.shape()[r - 2])
    return Status::invalid_argument(where(node) + ": Q " + q.shape().to_string() + ", K " +
                                    k.shape().to_string() + ", V " + v.shape().to_string() +
                                    " do not fit (Q [..., T, D], K [..., S, D], V [..., S, Dv]).");
  const int64_t t_len = q.shape()[r - 2], d = q.shape()[r - 1], s_len = k.shape()[r - 2],
                dv = v.shape()[r - 1];
  const auto lead_of = [r](const Tensor& x) {
    return Shape(std::vector<int64_t>(x.shape().dims.begin(), x.shape().dims.end() - 2));
  };
  GPULAB_ASSIGN_OR_RETURN(Shape lead, broadcast_shape(node, lead_of(q), lead_of(k)));
  GPULAB_ASSIGN_OR_RETURN(lead, broadcast_shape(node, lead, lead_of(v)));
  Shape scores = lead;
  scores.dims.push_back(t_len);
  scores.dims.push_back(s_len);
  std::vector<int64_t> bias_strides;
  if (bias) {
    GPULAB_ASSIGN_OR_RETURN(const Shape b, broadcast_shape(node, scores, bias->shape()));
    if (b != scores)
      return Status::invalid_argument(where(node) + ": bias " + bias->shape().to_string() +
                                      " does not broadcast to " + scores.to_string() + ".");
    bias_strides = broadcast_strides(bias->shape(), scores.rank());
  }
  // Matrix strides of each operand over the broadcast leading dims (0 where it broadcasts).
  const std::vector<int64_t> qs = broadcast_strides(lead_of(q), lead.rank());
  const std::vector<int64_t> ks = broadcast_strides(lead_of(k), lead.rank());
  const std::vector<int64_t> vs = broadcast_strides(lead_of(v), lead.rank());
  const int64_t batches = lead.numel();
  Shape out_shape = lead;
  out_shape.dims.push_back(t_len);
  out_shape.dims.push_back(dv);
  Tensor y(DataType::kFloat32, out_shape);
  const float *qp = q.f32().data(), *kp = k.f32().data(), *vp = v.f32().data();
  const float* bp = bias ? bias->f32().data() : nullptr;
  float* yp = y.f32().data();
  parallel_for(batches * t_len, s_len * (d + dv), options, [&](int64_t begin, int64_t end) {
    std::vector<double> p(static_cast<size_t>(s_len)), acc(static_cast<size_t>(dv));
    std::vector<int64_t> coord(lead.rank());
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / t_len, t = row % t_len;
      int64_t rest = b, qo = 0, ko = 0, vo = 0, bo = 0;
      for (size_t i = lead.rank(); i-- > 0;) {
        coord[i] = rest % lead[i];
        rest /= lead[i];
        qo += coord[i] * qs[i], ko += coord[i] * ks[i], vo += coord[i] * vs[i];
        if (bp) bo += coord[i] * bias_strides[i];
      }
      if (bp) bo += t * bias_strides[lead.rank()];
      const float* qrow = qp + (qo * t_len + t) * d;
      const float* kmat = kp + ko * s_len * d;
      const float* vmat = vp + vo * s_len * dv;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < s_len; ++s) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += static_cast<double>(qrow[i]) * kmat[s * d + i];
        double score = static_cast<double>(a.scale) * dot;
        if (bp) score += bp[bo + s * bias_strides[lead.rank() + 1]];
        p[static_cast<size_t>(s)] = score;
        max_score = std::max(max_score, score);
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - max_score));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t s = 0; s < s_len; ++s) {
        const double w = p[static_cast<size_t>(s)] / sum;
        for (int64_t i = 0; i < dv; ++i) acc[static_cast<size_t>(i)] += w * vmat[s * dv + i];
      }
      for (int64_t i = 0; i < dv; ++i)
        yp[(b * t_len + t) * dv + i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
