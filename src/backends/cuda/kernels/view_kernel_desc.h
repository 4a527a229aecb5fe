// Descriptors of the kernels behind the plan's view steps (plan.h: kCopy, kEltwise, kLayerNorm,
// kAttention's fallback), and their validation. Plain C++ (no CUDA headers), so that the planner and
// the CPU-only unit tests can check descriptors without a GPU; view_kernels.cu launches them.
//
// Every tensor is described by a StridedView: per image, element (i0, i1, ...) lies at
// offset + sum(i_k * strides[k]), images image_stride apart (0: the same data for every image, a
// weight). Sizes and strides are in elements of the tensor's type; n is the batch.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab::kernels {

inline constexpr int kMaxStridedRank = 8;

struct StridedView {
  int rank = 0;
  std::array<int64_t, kMaxStridedRank> dims{};
  std::array<int64_t, kMaxStridedRank> strides{};
  int64_t offset = 0;
  int64_t image_stride = 0;
  int64_t numel() const;  // per image
};
// The dense row-major view of `dims` (rank <= kMaxStridedRank), images numel() apart.
StridedView dense_strided_view(std::initializer_list<int64_t> dims);

// y[view] = x[view], element by element (dims equal), converting float32/float16/bfloat16.
struct CopyDesc {
  int64_t n = 0;
  StridedView x, y;
  DataType x_dtype = DataType::kFloat32, y_dtype = DataType::kFloat32;
};
Status validate(const CopyDesc& desc);

enum class EltwiseKernelOp { kAdd, kSub, kMul, kDiv };
// y = a (op) b over the views' dims (equal; a 0 stride broadcasts), float32 arithmetic, one type.
struct EltwiseDesc {
  int64_t n = 0;
  EltwiseKernelOp op = EltwiseKernelOp::kAdd;
  StridedView a, b, y;
  DataType dtype = DataType::kFloat32;
};
Status validate(const EltwiseDesc& desc);

// Each of `rows` rows of `c` elements (per image; a row at x_offset + r * x_row_stride, elements
// contiguous): y = (x - mean) / sqrt(var + epsilon) * gamma + beta, mean and biased variance in
// float32; gamma and beta float32 [c] (beta may be null at launch).
struct LayerNormDesc {
  int64_t n = 0, rows = 0, c = 0;
  int64_t x_offset = 0, x_row_stride = 0, x_image_stride = 0;
  int64_t y_offset = 0, y_row_stride = 0, y_image_stride = 0;
  float epsilon = 1e-5f;
  DataType dtype = DataType::kFloat32;
  // y = x / max(||x||_2, epsilon) * gamma + beta per row (F.normalize) instead of the layer norm
  bool l2 = false;
};
Status validate(const LayerNormDesc& desc);

// Scaled dot-product attention over views of rank 4, [B, H, T, D] per image:
// y[b, h, t] = sum_s softmax_s(scale q[b, h, t] . k[b, h, s] + bias[b, h, t, s]) v[b, h, s];
// bias is optional (has_bias; a view over a weight of `dtype`, image_stride 0). Scores and softmax in
// float32. gpulab's plain kernel (one block per output row), for the FP32 plans and whatever cuDNN's
// fused SDPA refuses.
struct AttentionDesc {
  int64_t n = 0;
  StridedView q, k, v, y, bias;
  bool has_bias = false;
  float scale = 1.0f;
  DataType dtype = DataType::kFloat32;
};
Status validate(const AttentionDesc& desc);
// Largest key count the plain kernel holds in shared memory (its scores, float32).
inline constexpr int64_t kMaxAttentionKeys = 8192;

}  // namespace gpulab::kernels
