#include "plan/views.h"

#include <algorithm>
#include <numeric>

namespace gpulab {

std::optional<TensorView> reshape_view(const TensorView& v, const std::vector<int64_t>& dims) {
  TensorView out;
  out.offset = v.offset;
  out.dims = dims;
  out.strides.assign(dims.size(), 0);
  const int64_t numel = v.numel();
  if (std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>()) != numel)
    return std::nullopt;
  if (numel == 0) return contiguous_view(dims);
  if (v.dims.empty()) {  // a scalar: every new dim is 1
    return out;
  }
  // Walk both shapes from the innermost dim; a run of old dims that is contiguous in memory (a
  // "chunk") may be split or merged into new dims freely.
  int64_t view_d = static_cast<int64_t>(dims.size()) - 1;
  int64_t chunk_base_stride = v.strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(v.dims.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= v.dims[static_cast<size_t>(tensor_d)];
    const bool chunk_ends =
        tensor_d == 0 || (v.dims[static_cast<size_t>(tensor_d - 1)] != 1 &&
                          v.strides[static_cast<size_t>(tensor_d - 1)] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || dims[static_cast<size_t>(view_d)] == 1)) {
      out.strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel *= dims[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = v.strides[static_cast<size_t>(tensor_d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

TensorView permute_view(const TensorView& v, const std::vector<int64_t>& perm) {
  TensorView out;
  out.offset = v.offset;
  for (int64_t p : perm) {
    out.dims.push_back(v.dims[static_cast<size_t>(p)]);
    out.strides.push_back(v.strides[static_cast<size_t>(p)]);
  }
  return out;
}

TensorView slice_view(const TensorView& v, size_t axis, int64_t first, int64_t count, int64_t step) {
  TensorView out = v;
  out.offset += first * v.strides[axis];
  out.dims[axis] = count;
  out.strides[axis] = v.strides[axis] * step;
  return out;
}

TensorView select_view(const TensorView& v, size_t axis, int64_t index) {
  TensorView out = v;
  out.offset += index * v.strides[axis];
  out.dims.erase(out.dims.begin() + static_cast<std::ptrdiff_t>(axis));
  out.strides.erase(out.strides.begin() + static_cast<std::ptrdiff_t>(axis));
  return out;
}

std::optional<TensorView> broadcast_view(const TensorView& v, const std::vector<int64_t>& dims) {
  if (dims.size() != v.dims.size()) return std::nullopt;
  TensorView out = v;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (v.dims[i] == dims[i]) continue;
    if (v.dims[i] != 1) return std::nullopt;
    out.dims[i] = dims[i];
    out.strides[i] = 0;
  }
  return out;
}

TensorView lead_ones(const TensorView& v, size_t count) {
  TensorView out = v;
  out.dims.insert(out.dims.begin(), count, 1);
  out.strides.insert(out.strides.begin(), count, 0);
  return out;
}

std::optional<TensorView> merge_leading(const TensorView& v, size_t keep, size_t into) {
  if (v.dims.size() < keep || into == 0) return std::nullopt;
  const size_t lead = v.dims.size() - keep;
  if (lead <= into) return lead_ones(v, into - lead);
  // Merge dims [0, lead - into + 1) into one; the other leading dims stay.
  const size_t merged = lead - into + 1;
  std::vector<int64_t> dims{std::accumulate(
      v.dims.begin(), v.dims.begin() + static_cast<std::ptrdiff_t>(merged), int64_t{1}, std::multiplies<>())};
  dims.insert(dims.end(), v.dims.begin() + static_cast<std::ptrdiff_t>(merged), v.dims.end());
  return reshape_view(v, dims);
}

bool is_dense(const TensorView& v) {
  if (v.offset != 0) return false;
  int64_t expect = 1;
  for (size_t i = v.dims.size(); i-- > 0;) {
    if (v.dims[i] != 1 && v.strides[i] != expect) return false;
    expect *= v.dims[i];
  }
  return true;
}

bool is_permuted_dense(const TensorView& v, std::vector<size_t>* order) {
  if (v.offset != 0) return false;
  std::vector<size_t> idx(v.dims.size());
  std::iota(idx.begin(), idx.end(), 0);
  // Outermost first: larger strides first; size-1 dims (any stride) go outside, in their order.
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const bool ua = v.dims[a] == 1, ub = v.dims[b] == 1;
    if (ua != ub) return ua;
    if (ua) return false;
    return v.strides[a] > v.strides[b];
  });
  int64_t expect = 1;
  for (size_t i = idx.size(); i-- > 0;) {
    const size_t d = idx[i];
    if (v.dims[d] == 1) continue;
    if (v.strides[d] != expect) return false;
    expect *= v.dims[d];
  }
  if (order) *order = idx;
  return true;
}

}  // namespace gpulab
