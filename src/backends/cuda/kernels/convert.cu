/* Input and output conversion between the host's layouts and the device's NHWC activations.
 *
 * Algorithms:
 *   nchw_to_nhwc:     float32 NCHW -> NHWC of T, channels [c, c_out) written as zeros.
 *   normalize_u8:     uint8 NHWC -> (x / 255 - mean[c]) / std[c] as NHWC of T, computed as
 *                     x * scale[c] + shift[c] with scale = 1 / (255 std), shift = -mean / std,
 *                     channels [c, c_out) zero.
 *   nhwc_to_nchw_f32: NHWC of T (channel stride c_stored) -> float32 NCHW; h = w = 1 is a cast.
 * Layout: dense tensors. The two input conversions give each thread one pixel (all its c_out
 *   channels): channel-plane reads are coalesced across a warp and its writes fill one contiguous
 *   run. They suit the few channels of images; c_out is bounded only by the caller's padding.
 *   NHWC -> NCHW with h*w > 1 goes through a 32x32 shared-memory tile so that both the reads and
 *   the writes are coalesced.
 * Launch: grid-stride loops, 256 threads per block; the tiled transpose uses 32x8 threads per
 *   32x32 tile and loops over batch and tile rows beyond the grid limits.
 * Tolerance vs the reference: float32 within 1e-6 relative (one fma differs from divide-subtract);
 *   float16/bfloat16 exactly the round-to-nearest-even of the float32 value.
 */
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

// One thread per pixel: the reads of each channel plane are coalesced across the warp, and a
// warp's writes fill one contiguous run of 32 * c_out elements.
template <typename T>
__global__ void nchw_to_nhwc_kernel(const float* __restrict__ x, T* __restrict__ y, int64_t pixels, int64_t c,
                                    int64_t hw, int64_t c_out) {
  for (int64_t pixel = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pixel < pixels;
       pixel += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = pixel / hw, p = pixel - n * hw;
    const float* xp = x + n * c * hw + p;
    T* yp = y + pixel * c_out;
    for (int64_t ch = 0; ch < c; ++ch) yp[ch] = from_float<T>(xp[ch * hw]);
    for (int64_t ch = c; ch < c_out; ++ch) yp[ch] = from_float<T>(0.0f);
  }
}

struct NormalizeParams {
  float scale[kMaxNormalizeChannels];
  float shift[kMaxNormalizeChannels];
};

template <typename T>
__global__ void normalize_u8_kernel(const uint8_t* __restrict__ x, T* __restrict__ y, int64_t pixels, int c,
                                    int64_t c_out, NormalizeParams params) {
  for (int64_t pixel = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pixel < pixels;
       pixel += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* xp = x + pixel * c;
    T* yp = y + pixel * c_out;
    for (int ch = 0; ch < c; ++ch) {
      yp[ch] = from_float<T>(fmaf(static_cast<float>(xp[ch]), params.scale[ch], params.shift[ch]));
    }
    for (int64_t ch = c; ch < c_out; ++ch) yp[ch] = from_float<T>(0.0f);
  }
}

// NC -> NC with the channel padding dropped.
template <typename T>
__global__ void cast_rows_kernel(const T* __restrict__ x, float* __restrict__ y, int64_t total, int64_t c,
                                 int64_t c_stored) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = to_float(x[(i / c) * c_stored + i % c]);
  }
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// Per image: x is [hw, c_stored] of T, y is [c, hw] float32. Tile (p0, c0) covers pixels
// [p0, p0+32) and channels [c0, c0+32).
template <typename T>
__global__ void nhwc_to_nchw_tiled_kernel(const T* __restrict__ x, float* __restrict__ y, int64_t n,
                                          int64_t hw, int64_t c, int64_t c_stored) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int64_t p_tiles = (hw + kTile - 1) / kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const T* xi = x + img * hw * c_stored;
    float* yi = y + img * c * hw;
    for (int64_t pt = blockIdx.y; pt < p_tiles; pt += gridDim.y) {
      const int64_t p0 = pt * kTile;
      for (int r = threadIdx.y; r < kTile; r += kTileRows) {
        const int64_t p = p0 + r, ch = c0 + threadIdx.x;
        tile[r][threadIdx.x] = (p < hw && ch < c) ? to_float(xi[p * c_stored + ch]) : 0.0f;
      }
      __syncthreads();
      for (int r = threadIdx.y; r < kTile; r += kTileRows) {
        const int64_t ch = c0 + r, p = p0 + threadIdx.x;
        if (ch < c && p < hw) yi[ch * hw + p] = tile[threadIdx.x][r];
      }
      __syncthreads();
    }
  }
}

}  // namespace

Status launch_nchw_to_nhwc(const NchwToNhwcDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t pixels = desc.n * desc.h * desc.w;
    nchw_to_nhwc_kernel<T><<<grid_for(pixels), kThreads, 0, stream>>>(
        static_cast<const float*>(x), static_cast<T*>(y), pixels, desc.c, desc.h * desc.w, desc.c_out);
    return check_launch("launch_nchw_to_nhwc", "nchw_to_nhwc_kernel");
  });
}

Status launch_normalize_u8(const NormalizeU8Desc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  NormalizeParams params{};
  for (int i = 0; i < desc.c; ++i) {
    params.scale[i] = 1.0f / (255.0f * desc.std[i]);
    params.shift[i] = -desc.mean[i] / desc.std[i];
  }
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const int64_t pixels = desc.n * desc.h * desc.w;
    normalize_u8_kernel<T>
        <<<grid_for(pixels), kThreads, 0, stream>>>(static_cast<const uint8_t*>(x), static_cast<T*>(y),
                                                    pixels, static_cast<int>(desc.c), desc.c_out, params);
    return check_launch("launch_normalize_u8", "normalize_u8_kernel");
  });
}

Status launch_nhwc_to_nchw_f32(const NhwcToNchwF32Desc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const int64_t c_stored = desc.c_stored == 0 ? desc.c : desc.c_stored;
  const int64_t hw = desc.h * desc.w;
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if (hw == 1) {
      const int64_t total = desc.n * desc.c;
      cast_rows_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<float*>(y), total, desc.c, c_stored);
      return check_launch("launch_nhwc_to_nchw_f32", "cast_rows_kernel");
    }
    const int64_t c_tiles = (desc.c + kTile - 1) / kTile;
    const int64_t p_tiles = (hw + kTile - 1) / kTile;
    if (c_tiles > INT32_MAX) {
      return Status::invalid_argument("launch_nhwc_to_nchw_f32: too many channels for one grid row (" +
                                      std::to_string(desc.c) + ").");
    }
    const dim3 grid(static_cast<unsigned>(c_tiles), static_cast<unsigned>(p_tiles < 65535 ? p_tiles : 65535),
                    static_cast<unsigned>(desc.n < 65535 ? desc.n : 65535));
    nhwc_to_nchw_tiled_kernel<T><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
        static_cast<const T*>(x), static_cast<float*>(y), desc.n, hw, desc.c, c_stored);
    return check_launch("launch_nhwc_to_nchw_f32", "nhwc_to_nchw_tiled_kernel");
  });
}

}  // namespace gpulab::kernels
