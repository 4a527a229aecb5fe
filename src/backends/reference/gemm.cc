// Reference Gemm (Y = alpha * op(A) * op(B) + beta * C, C broadcast to [M, N]) and MatMul (numpy
// semantics: 1-D operands promoted, batch dimensions broadcast). Each output element is one dot
// product accumulated in double; output elements are split across threads.
#include <algorithm>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

// Numpy broadcast of two dimension lists aligned at the right; nullopt when incompatible.
std::optional<std::vector<int64_t>> broadcast_dims(const std::vector<int64_t>& a,
                                                   const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Offset (in matrices) of batch index `flat` of the broadcast batch `out_batch` in an operand with
// batch dims `dims` (right-aligned, size-1 dims broadcast).
int64_t batch_offset(int64_t flat, const std::vector<int64_t>& out_batch, const std::vector<int64_t>& dims) {
  int64_t offset = 0, stride = 1;
  for (size_t i = out_batch.size(); i-- > 0;) {
    const int64_t idx = flat % out_batch[i];
    flat /= out_batch[i];
    const size_t lead = out_batch.size() - dims.size();
    if (i >= lead) {
      const int64_t d = dims[i - lead];
      if (d != 1) offset += idx * stride;
      stride *= d;
    }
  }
  return offset;
}

}  // namespace

Status run_gemm(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const GemmAttrs attrs, attrs_or_default<GemmAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 2, 1));
  const Tensor& a = *inputs[0];
  const Tensor& b = *inputs[1];
  const Tensor* c = inputs.size() > 2 ? inputs[2] : nullptr;
  GPULAB_TRY(check_dtype(node, a, DataType::kFloat32, "A"));
  GPULAB_TRY(check_dtype(node, b, DataType::kFloat32, "B"));
  GPULAB_TRY(check_rank(node, a, 2, "A"));
  GPULAB_TRY(check_rank(node, b, 2, "B"));
  const int64_t m = attrs.trans_a ? a.shape()[1] : a.shape()[0];
  const int64_t k = attrs.trans_a ? a.shape()[0] : a.shape()[1];
  const int64_t kb = attrs.trans_b ? b.shape()[1] : b.shape()[0];
  const int64_t n = attrs.trans_b ? b.shape()[0] : b.shape()[1];
  if (k != kb) {
    return Status::invalid_argument(
        where(node) + ": A " + a.shape().to_string() + (attrs.trans_a ? " (transposed)" : "") + " and B " +
        b.shape().to_string() + (attrs.trans_b ? " (transposed)" : "") +
        " disagree on the inner dimension (" + std::to_string(k) + " vs " + std::to_string(kb) + ").");
  }
  // C broadcasts unidirectionally to [M, N]: right-aligned, each dim 1 or equal.
  int64_t c_row_stride = 0, c_col_stride = 0;
  if (c) {
    GPULAB_TRY(check_dtype(node, *c, DataType::kFloat32, "C"));
    const auto& cd = c->shape().dims;
    const int64_t c_rows = cd.size() == 2 ? cd[0] : 1;
    const int64_t c_cols = cd.empty() ? 1 : cd.back();
    if (cd.size() > 2 || (c_rows != 1 && c_rows != m) || (c_cols != 1 && c_cols != n)) {
      return Status::invalid_argument(where(node) + ": C has shape " + c->shape().to_string() +
                                      ", which does not broadcast to [" + std::to_string(m) + "," +
                                      std::to_string(n) + "].");
    }
    c_row_stride = c_rows == 1 ? 0 : c_cols;
    c_col_stride = c_cols == 1 ? 0 : 1;
  }
  Tensor y(DataType::kFloat32, Shape{m, n});
  const float* ap = a.f32().data();
  const float* bp = b.f32().data();
  const float* cp = c ? c->f32().data() : nullptr;
  float* yp = y.f32().data();
  // Element strides of op(A)[i, kk] and op(B)[kk, j].
  const int64_t a_i = attrs.trans_a ? 1 : k, a_k = attrs.trans_a ? m : 1;
  const int64_t b_k = attrs.trans_b ? 1 : n, b_j = attrs.trans_b ? k : 1;
  parallel_for(m * n, k, options, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const int64_t i = e / n, j = e % n;
      double dot = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        dot += static_cast<double>(ap[i * a_i + kk * a_k]) * bp[kk * b_k + j * b_j];
      double v = static_cast<double>(attrs.alpha) * dot;
      if (cp) v += static_cast<double>(attrs.beta) * cp[i * c_row_stride + j * c_col_stride];
      yp[e] = static_cast<float>(v);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_matmul(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 2));
  const Tensor& a = *inputs[0];
  const Tensor& b = *inputs[1];
  GPULAB_TRY(check_dtype(node, a, DataType::kFloat32, "A"));
  GPULAB_TRY(check_dtype(node, b, DataType::kFloat32, "B"));
  if (a.shape().rank() == 0 || b.shape().rank() == 0) {
    return Status::invalid_argument(where(node) + ": A " + a.shape().to_string() + " and B " +
                                    b.shape().to_string() + " must have rank >= 1.");
  }
  // Promote 1-D operands: A [K] -> [1, K], B [K] -> [K, 1]; the added dim is dropped at the end.
  std::vector<int64_t> ad = a.shape().dims, bd = b.shape().dims;
  const bool a_vector = ad.size() == 1, b_vector = bd.size() == 1;
  if (a_vector) ad.insert(ad.begin(), 1);
  if (b_vector) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back();
  const int64_t kb = bd[bd.size() - 2], n = bd.back();
  const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  const auto out_batch = broadcast_dims(a_batch, b_batch);
  if (k != kb || !out_batch) {
    return Status::invalid_argument(
        where(node) + ": A " + a.shape().to_string() + " and B " + b.shape().to_string() +
        " are not compatible for a matrix product (inner dims " + std::to_string(k) + " vs " +
        std::to_string(kb) + ", batch dims must broadcast).");
  }
  std::vector<int64_t> out_dims = *out_batch;
  if (!a_vector) out_dims.push_back(m);
  if (!b_vector) out_dims.push_back(n);
  Tensor y(DataType::kFloat32, Shape(out_dims));
  int64_t batches = 1;
  for (int64_t d : *out_batch) batches *= d;
  const float* ap = a.f32().data();
  const float* bp = b.f32().data();
  float* yp = y.f32().data();
  // One output row per work item, accumulated row of B by row of B (contiguous, so the inner loop
  // vectorizes; each output element is still one float64 sum over k in order).
  parallel_for(batches * m, k * n, options, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / m, i = r % m;
      const float* arow = ap + batch_offset(bi, *out_batch, a_batch) * m * k + i * k;
      const float* bm = bp + batch_offset(bi, *out_batch, b_batch) * k * n;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double a = arow[kk];
        const float* brow = bm + kk * n;
        for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(j)] += a * brow[j];
      }
      float* yrow = yp + r * n;
      for (int64_t j = 0; j < n; ++j) yrow[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
