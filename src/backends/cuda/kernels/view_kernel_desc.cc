#include "backends/cuda/kernels/view_kernel_desc.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpulab::kernels {
namespace {

bool float_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

Status bad(const char* desc, const std::string& what) {
  return Status::invalid_argument(fmt::format("{}: {}", desc, what));
}

Status check_view(const char* desc, const char* name, const StridedView& v) {
  if (v.rank < 1 || v.rank > kMaxStridedRank)
    return bad(desc, fmt::format("{} has rank {} (1..{})", name, v.rank, kMaxStridedRank));
  if (v.offset < 0 || v.image_stride < 0)
    return bad(desc, fmt::format("{} has a negative offset or image stride", name));
  for (int i = 0; i < v.rank; ++i)
    if (v.dims[i] < 1 || v.strides[i] < 0)
      return bad(desc, fmt::format("{} dim {} is {} (stride {})", name, i, v.dims[i], v.strides[i]));
  return Status::ok();
}

bool same_dims(const StridedView& a, const StridedView& b) {
  return a.rank == b.rank && std::equal(a.dims.begin(), a.dims.begin() + a.rank, b.dims.begin());
}

}  // namespace

int64_t StridedView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

StridedView dense_strided_view(std::initializer_list<int64_t> dims) {
  StridedView v;
  v.rank = static_cast<int>(std::min<size_t>(dims.size(), kMaxStridedRank));
  std::copy_n(dims.begin(), v.rank, v.dims.begin());
  int64_t stride = 1;
  for (int k = v.rank - 1; k >= 0; --k) {
    v.strides[k] = stride;
    stride *= v.dims[k];
  }
  v.image_stride = stride;
  return v;
}

Status validate(const CopyDesc& d) {
  if (d.n < 1) return bad("CopyDesc", fmt::format("n is {}", d.n));
  GPULAB_TRY(check_view("CopyDesc", "x", d.x));
  GPULAB_TRY(check_view("CopyDesc", "y", d.y));
  if (!same_dims(d.x, d.y)) return bad("CopyDesc", "x and y differ in dims");
  if (!float_type(d.x_dtype) || !float_type(d.y_dtype))
    return bad("CopyDesc", "types must be float32/16-bit floats");
  return Status::ok();
}

Status validate(const EltwiseDesc& d) {
  if (d.n < 1) return bad("EltwiseDesc", fmt::format("n is {}", d.n));
  GPULAB_TRY(check_view("EltwiseDesc", "a", d.a));
  GPULAB_TRY(check_view("EltwiseDesc", "b", d.b));
  GPULAB_TRY(check_view("EltwiseDesc", "y", d.y));
  if (!same_dims(d.a, d.y) || !same_dims(d.b, d.y)) return bad("EltwiseDesc", "a, b and y differ in dims");
  if (!float_type(d.dtype)) return bad("EltwiseDesc", "dtype must be a float type");
  return Status::ok();
}

Status validate(const LayerNormDesc& d) {
  if (d.n < 1 || d.rows < 1 || d.c < 1)
    return bad("LayerNormDesc", fmt::format("n {} rows {} c {}", d.n, d.rows, d.c));
  if (d.x_offset < 0 || d.y_offset < 0 || d.x_row_stride < d.c || d.y_row_stride < d.c ||
      d.x_image_stride < 0 || d.y_image_stride < 0)
    return bad("LayerNormDesc", "offsets and strides must be >= 0, row strides >= c");
  if (!(d.epsilon >= 0)) return bad("LayerNormDesc", "epsilon must be >= 0");
  if (!float_type(d.dtype)) return bad("LayerNormDesc", "dtype must be a float type");
  return Status::ok();
}

Status validate(const AttentionDesc& d) {
  if (d.n < 1) return bad("AttentionDesc", fmt::format("n is {}", d.n));
  for (const auto& [name, v] :
       {std::pair{"q", &d.q}, std::pair{"k", &d.k}, std::pair{"v", &d.v}, std::pair{"y", &d.y}}) {
    GPULAB_TRY(check_view("AttentionDesc", name, *v));
    if (v->rank != 4) return bad("AttentionDesc", fmt::format("{} is not [B, H, T, D]", name));
  }
  const auto& q = d.q.dims;
  const auto& k = d.k.dims;
  const auto& v = d.v.dims;
  const auto& y = d.y.dims;
  if (q[0] != k[0] || q[0] != v[0] || q[1] != k[1] || q[1] != v[1] || q[3] != k[3] || k[2] != v[2] ||
      y[0] != q[0] || y[1] != q[1] || y[2] != q[2] || y[3] != v[3])
    return bad("AttentionDesc", "Q [B,H,T,D], K [B,H,S,D], V [B,H,S,Dv] and y [B,H,T,Dv] do not fit");
  if (k[2] > kMaxAttentionKeys)
    return bad("AttentionDesc", fmt::format("{} keys, at most {}", k[2], kMaxAttentionKeys));
  if (d.has_bias) {
    GPULAB_TRY(check_view("AttentionDesc", "bias", d.bias));
    if (d.bias.rank != 4 || d.bias.dims[0] != q[0] || d.bias.dims[1] != q[1] || d.bias.dims[2] != q[2] ||
        d.bias.dims[3] != k[2])
      return bad("AttentionDesc", "the bias is not [B, H, T, S]");
  }
  if (!float_type(d.dtype)) return bad("AttentionDesc", "dtype must be a float type");
  return Status::ok();
}

}  // namespace gpulab::kernels
