/* A fully connected layer for tiny batches: y[r, o] = sum_k x[r, k] * w[o, k] + bias[o].
 *
 * Algorithm: one warp per output feature o and group of up to kRowsPerWarp rows. The lanes walk
 *   the weight row w[o, :] with 16-byte loads, each weight vector used for every row of the
 *   group, keeping one float32 partial sum per row; a butterfly shuffle reduces the 32 partials.
 *   The weight matrix is read once per row group, so for batch <= kRowsPerWarp the kernel runs at
 *   the speed of reading the weights (a 1280 -> 1000 float16 head is 2.5 MB). For larger batches
 *   a GEMM library (cuBLASLt) is the better tactic.
 * Layout: x [rows, in] and w [out, in] row-major (ONNX Gemm with transB = 1), y [rows, out].
 *   V = 16 bytes / sizeof(T) elements per load when in % V == 0 and x, w are 16-byte aligned,
 *   else V = 1.
 * Launch: 256 threads (8 warps, 8 output features) per block; grid (ceil(out / 8),
 *   min(ceil(rows / kRowsPerWarp), 65535)), looping over row groups beyond that.
 * Tolerance vs the reference (double accumulation): float32 within 1e-6 relative for in <= 4096;
 *   float16/bfloat16 within the rounding of the stored result.
 */
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

constexpr int kRowsPerWarp = 4;
constexpr int kWarpsPerBlock = kThreads / 32;

template <typename T, typename TOut, int V>
__global__ void linear_kernel(const T* __restrict__ x, const T* __restrict__ w,
                              const float* __restrict__ bias, TOut* __restrict__ y, int64_t rows, int64_t in,
                              int64_t out) {
  using VecT = Vec<T, V>;
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (o >= out) return;  // whole warps only: the kernel uses no block-wide barrier
  const T* wr = w + o * in;
  const float b = bias != nullptr ? bias[o] : 0.0f;
  const int64_t groups = (rows + kRowsPerWarp - 1) / kRowsPerWarp;
  for (int64_t g = blockIdx.y; g < groups; g += gridDim.y) {
    const int64_t r0 = g * kRowsPerWarp;
    const int nr = static_cast<int>(rows - r0 < kRowsPerWarp ? rows - r0 : kRowsPerWarp);
    float acc[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[r] = 0.0f;
    for (int64_t k = static_cast<int64_t>(lane) * V; k < in; k += 32 * V) {
      const VecT wv = *reinterpret_cast<const VecT*>(wr + k);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (r < nr) {
          const VecT xv = *reinterpret_cast<const VecT*>(x + (r0 + r) * in + k);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[r] = fmaf(to_float(wv.v[j]), to_float(xv.v[j]), acc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      for (int offset = 16; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
    }
    if (lane == 0) {
      for (int r = 0; r < nr; ++r) y[(r0 + r) * out + o] = from_float<TOut>(acc[r] + b);
    }
  }
}

template <typename T, typename TOut>
Status launch_linear_typed(const LinearDesc& d, const T* x, const T* w, const float* bias, TOut* y,
                           cudaStream_t stream) {
  const int64_t blocks_x = (d.out_features + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t groups = (d.rows + kRowsPerWarp - 1) / kRowsPerWarp;
  if (blocks_x > INT32_MAX) {
    return Status::invalid_argument("launch_linear: out_features " + std::to_string(d.out_features) +
                                    " exceed one grid dimension. Use the GEMM tactic.");
  }
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(groups < 65535 ? groups : 65535));
  if (d.in_features % kVec<T> == 0 && is_aligned(x, 16) && is_aligned(w, 16)) {
    linear_kernel<T, TOut, kVec<T>>
        <<<grid, kThreads, 0, stream>>>(x, w, bias, y, d.rows, d.in_features, d.out_features);
  } else {
    linear_kernel<T, TOut, 1>
        <<<grid, kThreads, 0, stream>>>(x, w, bias, y, d.rows, d.in_features, d.out_features);
  }
  return check_launch("launch_linear", "linear_kernel");
}

}  // namespace

Status launch_linear(const LinearDesc& desc, const void* x, const void* w, const float* bias, void* y,
                     cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    const T* wt = static_cast<const T*>(w);
    if (desc.out_dtype == DataType::kFloat32) {
      return launch_linear_typed<T, float>(desc, xt, wt, bias, static_cast<float*>(y), stream);
    }
    return launch_linear_typed<T, T>(desc, xt, wt, bias, static_cast<T*>(y), stream);
  });
}

}  // namespace gpulab::kernels
