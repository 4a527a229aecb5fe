// The algebra of TensorViews (plan.h) that the lowering uses to turn transposes, reshapes and slices
// into views of a value instead of steps: each function returns the view of the same elements after
// the operation, or nullopt when no view of the same storage can describe them (the lowering then
// copies the elements into a dense value first). CUDA-free, no allocation beyond the result.
#pragma once

#include <optional>
#include <vector>

#include "plan/plan.h"

namespace gpulab {

// The view of `v`'s elements read in row-major order as a tensor of `dims` (the same element count):
// PyTorch's view() rule, strides merge or split where the memory allows it.
std::optional<TensorView> reshape_view(const TensorView& v, const std::vector<int64_t>& dims);

// Dims (and strides) reordered: result dim i is v's dim perm[i].
TensorView permute_view(const TensorView& v, const std::vector<int64_t>& perm);

// Elements first, first + step, ... (count of them) along `axis`; step >= 1.
TensorView slice_view(const TensorView& v, size_t axis, int64_t first, int64_t count, int64_t step);

// Element `index` along `axis`, the axis removed.
TensorView select_view(const TensorView& v, size_t axis, int64_t index);

// v's dims with those of size 1 given stride 0 where `dims` (same rank) is larger: a broadcast.
std::optional<TensorView> broadcast_view(const TensorView& v, const std::vector<int64_t>& dims);

// v with `count` leading dims of size 1 (stride 0) added.
TensorView lead_ones(const TensorView& v, size_t count);

// The dims of v before `keep` trailing ones merged into `into` dims (1 or more, the leading ones of
// size 1 when there are fewer): [a, b, c, T, D] into 2 with keep 2 -> [a * b, c, T, D]. nullopt
// when the merged dims' strides do not allow it.
std::optional<TensorView> merge_leading(const TensorView& v, size_t keep, size_t into);

// True when v reads a dense row-major block from offset 0 (the whole of a value of v.numel()
// elements, in v's order).
bool is_dense(const TensorView& v);

// True when v reads every element of a block of v.numel() elements from offset 0 exactly once, in
// some order of its dims (a transposed dense value). `order` (when not null) receives the dims
// from the outermost in memory to the innermost.
bool is_permuted_dense(const TensorView& v, std::vector<size_t>* order = nullptr);

}  // namespace gpulab
