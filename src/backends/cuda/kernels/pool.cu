/* Max, average and global average pooling over NHWC activations.
 *
 * Algorithm: direct. Window pooling gives each thread one output pixel and V consecutive
 *   channels; it walks the (dilated) window, skipping positions in the padding, and keeps a
 *   float32 max or sum per channel. Average pooling divides by the number of real inputs in the
 *   window, or with count_include_pad by the window clipped to the padded input (PyTorch's
 *   divisor, which the reference backend uses too). A max window that holds no input (possible
 *   only with dilation) yields -inf. Global average pooling sums H*W pixels per channel in float32
 *   across 8 thread rows, reduces them in shared memory in a fixed order (deterministic) and
 *   multiplies by 1 / (H*W).
 * Layout: NHWC, C innermost. V = 16 bytes / sizeof(T) (4 float32 or 8 float16/bfloat16 channels,
 *   one 16-byte load) when C % V == 0 and both pointers are 16-byte aligned, else V = 1.
 * Launch: window pooling: grid-stride loop over N*out_h*out_w*C/V items, 256 threads per block.
 *   Global average: blocks of 32x8 threads, x over channel vectors, y over pixel slices; grid
 *   (ceil(C/V/32), min(N, 65535)), looping over the batch beyond that.
 * Tolerance vs the reference (double accumulation): max pooling is exact; average pooling
 *   float32 within 1e-6 relative, float16/bfloat16 within the rounding of the stored result.
 */
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

struct PoolParams {
  int h, w, c;
  int out_h, out_w;
  int kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  int pad_top, pad_left, pad_bottom, pad_right;
  bool count_include_pad;
};

// Index: int64_t in general, uint32_t when every element offset of x and y fits (the divisions
// that split the item index are then 32-bit, several times cheaper than 64-bit ones).
template <typename T, int V, bool kIsMax, typename Index>
__global__ void pool_kernel(const T* __restrict__ x, T* __restrict__ y, Index total, PoolParams p) {
  using VecT = Vec<T, V>;
  const Index c_vecs = static_cast<Index>(p.c / V);
  for (Index i = blockIdx.x * static_cast<Index>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const int cv = static_cast<int>(i % c_vecs);
    Index rest = i / c_vecs;
    const int ow = static_cast<int>(rest % static_cast<Index>(p.out_w));
    rest /= static_cast<Index>(p.out_w);
    const int oh = static_cast<int>(rest % static_cast<Index>(p.out_h));
    const Index n = rest / static_cast<Index>(p.out_h);
    const int h0 = oh * p.stride_h - p.pad_top;
    const int w0 = ow * p.stride_w - p.pad_left;

    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = kIsMax ? -CUDART_INF_F : 0.0f;
    int count = 0;
    const T* xn = x + n * static_cast<Index>(p.h * p.w * p.c) + cv * V;
    for (int kh = 0; kh < p.kernel_h; ++kh) {
      const int ih = h0 + kh * p.dilation_h;
      if (ih < 0 || ih >= p.h) continue;
      for (int kw = 0; kw < p.kernel_w; ++kw) {
        const int iw = w0 + kw * p.dilation_w;
        if (iw < 0 || iw >= p.w) continue;
        const VecT v = *reinterpret_cast<const VecT*>(xn + static_cast<Index>((ih * p.w + iw) * p.c));
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float f = to_float(v.v[j]);
          acc[j] = kIsMax ? fmaxf(acc[j], f) : acc[j] + f;
        }
        ++count;
      }
    }
    if constexpr (!kIsMax) {
      int divisor = count;
      if (p.count_include_pad) {
        const int h_end = min(h0 + p.kernel_h, p.h + p.pad_bottom);
        const int w_end = min(w0 + p.kernel_w, p.w + p.pad_right);
        divisor = (h_end - h0) * (w_end - w0);
      }
      const float inv = divisor > 0 ? 1.0f / static_cast<float>(divisor) : 0.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] *= inv;
    }
    VecT out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(acc[j]);
    *reinterpret_cast<VecT*>(y + i * V) = out;
  }
}

constexpr int kGapRows = 8;  // pixel slices per global-average block
constexpr int kGapCols = 32;

template <typename T, int V>
__global__ void global_avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t hw,
                                       int c, float inv_hw) {
  using VecT = Vec<T, V>;
  __shared__ float partial[kGapRows][kGapCols * V];
  const int c_vecs = c / V;
  const int cv = blockIdx.x * kGapCols + threadIdx.x;
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    if (cv < c_vecs) {
      const T* xi = x + img * hw * c + static_cast<int64_t>(cv) * V;
      for (int64_t p = threadIdx.y; p < hw; p += kGapRows) {
        const VecT v = *reinterpret_cast<const VecT*>(xi + p * c);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += to_float(v.v[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) partial[threadIdx.y][threadIdx.x * V + j] = acc[j];
    __syncthreads();
    if (threadIdx.y == 0 && cv < c_vecs) {
      VecT out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float s = 0.0f;
        for (int r = 0; r < kGapRows; ++r) s += partial[r][threadIdx.x * V + j];
        out.v[j] = from_float<T>(s * inv_hw);
      }
      *reinterpret_cast<VecT*>(y + img * c + static_cast<int64_t>(cv) * V) = out;
    }
    __syncthreads();
  }
}

// Fits in int: the spatial sizes and channel counts of image models, checked before narrowing.
Status check_int_range(const PoolDesc& d) {
  const int64_t limit = std::numeric_limits<int>::max();
  if (d.h > limit || d.w > limit || d.c > limit || d.h * d.w * d.c > limit) {
    return Status::invalid_argument("launch_pool: one image of " + std::to_string(d.h) + "x" +
                                    std::to_string(d.w) + "x" + std::to_string(d.c) +
                                    " elements exceeds the kernel's int32 range.");
  }
  return Status::ok();
}

// pool_kernel with 32-bit index math when `narrow` (every element offset of x and y fits).
template <typename T, int V, bool kIsMax>
void launch_pool_kernel(const T* x, T* y, int64_t total, bool narrow, const PoolParams& p,
                        cudaStream_t stream) {
  if (narrow)
    pool_kernel<T, V, kIsMax, uint32_t>
        <<<grid_for(total), kThreads, 0, stream>>>(x, y, static_cast<uint32_t>(total), p);
  else
    pool_kernel<T, V, kIsMax, int64_t><<<grid_for(total), kThreads, 0, stream>>>(x, y, total, p);
}

template <typename T, int V>
Status launch_pool_typed(const PoolDesc& d, const T* x, T* y, cudaStream_t stream) {
  const PoolParams p{static_cast<int>(d.h),          static_cast<int>(d.w),
                     static_cast<int>(d.c),          static_cast<int>(d.out_h),
                     static_cast<int>(d.out_w),      static_cast<int>(d.kernel.h),
                     static_cast<int>(d.kernel.w),   static_cast<int>(d.stride.h),
                     static_cast<int>(d.stride.w),   static_cast<int>(d.dilation.h),
                     static_cast<int>(d.dilation.w), static_cast<int>(d.pads.top),
                     static_cast<int>(d.pads.left),  static_cast<int>(d.pads.bottom),
                     static_cast<int>(d.pads.right), d.count_include_pad};
  const int64_t total = d.n * d.out_h * d.out_w * (d.c / V);
  const int64_t largest = std::max(d.n * d.h * d.w * d.c, d.n * d.out_h * d.out_w * d.c);
  const bool narrow = largest < (int64_t{1} << 31);
  if (d.kind == PoolKind::kMax) {
    launch_pool_kernel<T, V, true>(x, y, total, narrow, p, stream);
    return check_launch("launch_pool", "max_pool_kernel");
  }
  launch_pool_kernel<T, V, false>(x, y, total, narrow, p, stream);
  return check_launch("launch_pool", "avg_pool_kernel");
}

template <typename T, int V>
Status launch_gap_typed(const GlobalAvgPoolDesc& d, const T* x, T* y, cudaStream_t stream) {
  const int64_t c_vecs = d.c / V;
  const dim3 grid(static_cast<unsigned>((c_vecs + kGapCols - 1) / kGapCols),
                  static_cast<unsigned>(d.n < 65535 ? d.n : 65535));
  const int64_t hw = d.h * d.w;
  global_avg_pool_kernel<T, V><<<grid, dim3(kGapCols, kGapRows), 0, stream>>>(
      x, y, d.n, hw, static_cast<int>(d.c), static_cast<float>(1.0 / static_cast<double>(hw)));
  return check_launch("launch_global_avg_pool", "global_avg_pool_kernel");
}

}  // namespace

Status launch_pool(const PoolDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  GPULAB_TRY(check_int_range(desc));
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (desc.c % kVec<T> == 0 && is_aligned(x, 16) && is_aligned(y, 16)) {
      return launch_pool_typed<T, kVec<T>>(desc, xt, yt, stream);
    }
    return launch_pool_typed<T, 1>(desc, xt, yt, stream);
  });
}

Status launch_global_avg_pool(const GlobalAvgPoolDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  if (desc.c > std::numeric_limits<int>::max()) {
    return Status::invalid_argument("launch_global_avg_pool: c " + std::to_string(desc.c) +
                                    " exceeds the kernel's int32 range.");
  }
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (desc.c % kVec<T> == 0 && is_aligned(x, 16) && is_aligned(y, 16)) {
      return launch_gap_typed<T, kVec<T>>(desc, xt, yt, stream);
    }
    return launch_gap_typed<T, 1>(desc, xt, yt, stream);
  });
}

}  // namespace gpulab::kernels
