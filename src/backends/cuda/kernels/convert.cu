/* Input and output conversion between the host's layouts and the device's NHWC activations.
 *
 * Algorithms:
 *   nchw_to_nhwc:     float32 NCHW -> NHWC of T, channels [c, c_out) written as zeros.
 *   normalize_u8:     uint8 NHWC -> (x / 255 - mean[c]) / std[c] as NHWC of T, computed as
 *                     x * scale[c] + shift[c] with scale = 1 / (255 std), shift = -mean / std,
 *                     channels [c, c_out) zero.
 *   nhwc_to_nchw_f32: NHWC of T (channel stride c_stored) -> float32 NCHW; h = w = 1 is a cast.
 *   nchw_to_space_to_depth: float32 NCHW -> the space-to-depth NHWC input of a rewritten stem
 *                     (kernel_desc.h), zeros outside the image and in the padding channels.
 * Layout: dense tensors.
 *   The two input conversions are staged through shared memory, one tile of kTilePixels = 512
 *   consecutive pixels of the flattened n*h*w axis at a time:
 *   1. load the tile's input into shared memory with 16-byte loads. NCHW: per channel plane, each
 *      thread reads one float4 (4 consecutive pixels of one image), so a warp reads 512
 *      contiguous bytes of a plane; the tile may span two images. uint8 NHWC: the tile's input is
 *      one contiguous run of 512 * c bytes, read as uint4.
 *   2. store: the tile's output, [512 pixels, c_out] of T, is one contiguous run too. Each thread
 *      assembles 16-byte vectors of it (kVec<T> elements: 8 halves = one fp16 pixel with
 *      c_out = 8) from shared memory, zeros in the padding channels, so a warp writes 512
 *      contiguous bytes per store instruction.
 *   Scalar paths, picked per launch: loads when h*w % 4 != 0 (NCHW) or x is not 16-byte aligned;
 *   stores when y is not 16-byte aligned; the last partial vector of the last tile is stored
 *   element by element. NCHW inputs with more than kMaxStagedChannels channels or any input with
 *   c_out > kMaxStagedChannelsOut (no image has them) take a one-thread-per-pixel kernel.
 *   NHWC -> NCHW with h*w > 1 goes through a 32x32 shared-memory tile so that both the reads and
 *   the writes are coalesced.
 * Launch: the input conversions use kStageThreads = 128 threads per block (4 pixels each in the
 *   load), one tile per block and a grid of ceil(pixels / 512) blocks (a grid-stride loop covers
 *   the rest beyond 2^31 - 1 blocks); 512-pixel tiles keep ResNet-18's batch 1 (98 tiles) spread
 *   over most of an H200's 132 SMs. nchw_to_nhwc: <= 40 registers, c * 2 KB of shared memory,
 *   12 blocks (1536 threads) per SM; normalize_u8: <= 32 registers, 2 KB of shared memory. The
 *   fallbacks and the cast use grid-stride loops of 256 threads; the tiled transpose uses 32x8
 *   threads per 32x32 tile and loops over batch and tile rows beyond the grid limits.
 * Expected time: memory-bound, bytes / 4.2 TB/s (the H200's measured device bandwidth; nothing
 *   is read twice). ResNet-18 input at batch 256, float32 [256, 3, 224, 224] -> fp16 NHWC
 *   c_out 8: 154 MB read + 206 MB written = 360 MB, ~0.086 ms (the former one-thread-per-pixel
 *   kernel took 0.393 ms, 916 GB/s). normalize_u8 to fp16 c_out 8 at batch 256: 38.5 + 206 MB,
 *   ~0.058 ms. Batch 1: 1.4 MB, ~0.3 us of traffic, so the launch latency (a few us) dominates.
 *   bench/kernels/convert_bench measures both.
 *   nchw_to_space_to_depth: one thread per output pixel builds its c_out channels in
 *   registers, kVec<T> at a time, and stores each vector with one 16-byte store (a warp writes
 *   32 consecutive pixels: 1 KB contiguous for fp16 with c_out = 16); its loads are one float
 *   per channel, block^2 c of them, from block adjacent columns of block rows, so a warp's loads
 *   of one (row, column offset) cover 32 * block consecutive floats and L1 serves the other
 *   offsets. ResNet-18 at batch 256 to fp16 (115x115x16): 154 MB read + 108 MB written, ~0.065 ms
 *   at 4 TB/s. Grid-stride loop of 256 threads. c_out % kVec<T> != 0 or an unaligned y: the same
 *   loop with scalar stores.
 * Tolerance vs the reference: float32 within 1e-6 relative (one fma differs from divide-subtract);
 *   float16/bfloat16 exactly the round-to-nearest-even of the float32 value. nchw_to_nhwc is
 *   exact: values pass through shared memory as float32 and are rounded once.
 */
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

// ---- input conversions: tiles staged in shared memory ------------------------------------------

constexpr int kStageThreads = 128;
constexpr int kTilePixels = 4 * kStageThreads;  // one float4 of pixels per thread and plane
// Bounds of the staged kernels: 8 float32 planes of a tile are 16 KB of shared memory; 64
// output channels keep a tile's output (512 * 64 elements) within int indexing.
constexpr int kMaxStagedChannels = 8;
constexpr int kMaxStagedChannelsOut = 64;
// Planes whose float4 loads a thread issues before storing them to shared memory (RGB in one go).
constexpr int kLoadBatch = 4;

// Stores one tile's output, y[npix, c_out] of T (a contiguous run), taking channel ch < c of
// tile pixel pix from src(pix, ch) and writing zeros for ch >= c. kVecStore: y is 16-byte aligned.
// Called by the whole block; reads only what the block staged before its __syncthreads().
template <typename T, bool kVecStore, typename Source>
__device__ __forceinline__ void store_tile(T* __restrict__ y, int npix, int c, int c_out, const Source& src) {
  const T zero = from_float<T>(0.0f);
  const int elems = npix * c_out;
  int scalar_from = 0;
  if constexpr (kVecStore) {
    constexpr int V = kVec<T>;
    const int vectors = elems / V;
    if (c_out % V == 0) {
      // A vector holds channels [ch0, ch0 + V) of one pixel (fp16 with c_out = 8: one pixel).
      for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        const int e = v * V, pix = e / c_out, ch0 = e - pix * c_out;
        Vec<T, V> out;
#pragma unroll
        for (int k = 0; k < V; ++k) out.v[k] = ch0 + k < c ? from_float<T>(src(pix, ch0 + k)) : zero;
        reinterpret_cast<Vec<T, V>*>(y)[v] = out;
      }
    } else {
      // A vector spans pixels: walk (pix, ch) element by element.
      for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        const int e = v * V;
        int pix = e / c_out, ch = e - pix * c_out;
        Vec<T, V> out;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          out.v[k] = ch < c ? from_float<T>(src(pix, ch)) : zero;
          if (++ch == c_out) {
            ch = 0;
            ++pix;
          }
        }
        reinterpret_cast<Vec<T, V>*>(y)[v] = out;
      }
    }
    scalar_from = vectors * V;
  }
  for (int e = scalar_from + threadIdx.x; e < elems; e += blockDim.x) {
    const int pix = e / c_out, ch = e - pix * c_out;
    y[e] = ch < c ? from_float<T>(src(pix, ch)) : zero;
  }
}

// x: float32 [n, c, hw]; y: [n * hw, c_out] of T; c <= kMaxStagedChannels, c_out <=
// kMaxStagedChannelsOut. kVecLoad: hw % 4 == 0 and x 16-byte aligned. Dynamic shared memory:
// c * kTilePixels floats, plane ch of the tile at [ch * kTilePixels, (ch + 1) * kTilePixels).
// Launch bounds of 12 blocks per SM: ptxas then fits the kernel in 40 registers without spilling
// (it takes 48 otherwise), so 1536 threads instead of 1280 are resident to hide memory latency.
template <typename T, bool kVecLoad, bool kVecStore>
__global__ void __launch_bounds__(kStageThreads, 12)
    nchw_to_nhwc_staged_kernel(const float* __restrict__ x, T* __restrict__ y, int64_t pixels, int c,
                               int64_t hw, int c_out) {
  extern __shared__ float4 staged_vec[];
  float* staged = reinterpret_cast<float*>(staged_vec);
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t base = tile * kTilePixels;
    const int npix = static_cast<int>(pixels - base < kTilePixels ? pixels - base : kTilePixels);
    if constexpr (kVecLoad) {
      // hw % 4 == 0, so base, npix and every image start are multiples of 4: a group of 4
      // pixels lies in one image and is 16-byte aligned in each of its planes.
      for (int g = threadIdx.x; g < npix / 4; g += blockDim.x) {
        const int64_t q = base + 4 * g, img = q / hw;
        const float* xp = x + img * c * hw + (q - img * hw);
        for (int ch0 = 0; ch0 < c; ch0 += kLoadBatch) {
          float4 v[kLoadBatch];  // loads first, so that up to kLoadBatch requests are in flight
#pragma unroll
          for (int k = 0; k < kLoadBatch; ++k) {
            if (ch0 + k < c) v[k] = *reinterpret_cast<const float4*>(xp + (ch0 + k) * hw);
          }
#pragma unroll
          for (int k = 0; k < kLoadBatch; ++k) {
            if (ch0 + k < c) staged_vec[(ch0 + k) * (kTilePixels / 4) + g] = v[k];
          }
        }
      }
    } else {
      for (int i = threadIdx.x; i < npix; i += blockDim.x) {
        const int64_t q = base + i, img = q / hw;
        const float* xp = x + img * c * hw + (q - img * hw);
        for (int ch = 0; ch < c; ++ch) staged[ch * kTilePixels + i] = xp[ch * hw];
      }
    }
    __syncthreads();
    store_tile<T, kVecStore>(y + base * c_out, npix, c, c_out,
                             [&](int pix, int ch) { return staged[ch * kTilePixels + pix]; });
    __syncthreads();  // the next tile overwrites the staging buffer
  }
}

// Any c and c_out: one thread per pixel. The reads of each channel plane are coalesced across
// the warp, and a warp's writes fill one contiguous run of 32 * c_out elements.
template <typename T>
__global__ void nchw_to_nhwc_pixel_kernel(const float* __restrict__ x, T* __restrict__ y, int64_t pixels,
                                          int64_t c, int64_t hw, int64_t c_out) {
  for (int64_t pixel = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pixel < pixels;
       pixel += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = pixel / hw, p = pixel - n * hw;
    const float* xp = x + n * c * hw + p;
    T* yp = y + pixel * c_out;
    for (int64_t ch = 0; ch < c; ++ch) yp[ch] = from_float<T>(xp[ch * hw]);
    for (int64_t ch = c; ch < c_out; ++ch) yp[ch] = from_float<T>(0.0f);
  }
}

struct SpaceToDepthParams {
  int64_t pixels;  // n * out_h * out_w
  int c, h, w, block, pad_top, pad_left, out_h, out_w, c_out;
};

// V: elements per store (kVec<T>, or 1 for the scalar path; c_out % V == 0).
template <typename T, int V>
__global__ void nchw_to_space_to_depth_kernel(const float* __restrict__ x, T* __restrict__ y,
                                              SpaceToDepthParams p) {
  const int c_valid = p.block * p.block * p.c;
  for (int64_t pixel = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pixel < p.pixels;
       pixel += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int ox = static_cast<int>(pixel % p.out_w);
    const int64_t t = pixel / p.out_w;
    const int oy = static_cast<int>(t % p.out_h);
    const int64_t n = t / p.out_h;
    const float* xn = x + n * p.c * p.h * p.w;
    T* yp = y + pixel * p.c_out;
    // Channel ch = (dy * block + dx) * c + cc, walked with counters instead of divisions.
    int cc = 0, dx = 0, dy = 0;
    for (int ch0 = 0; ch0 < p.c_out; ch0 += V) {
      Vec<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float v = 0.0f;
        if (ch0 + k < c_valid) {
          const int iy = oy * p.block + dy - p.pad_top, ix = ox * p.block + dx - p.pad_left;
          if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w)
            v = __ldg(xn + (static_cast<int64_t>(cc) * p.h + iy) * p.w + ix);
          if (++cc == p.c) {
            cc = 0;
            if (++dx == p.block) {
              dx = 0;
              ++dy;
            }
          }
        }
        out.v[k] = from_float<T>(v);
      }
      *reinterpret_cast<Vec<T, V>*>(yp + ch0) = out;
    }
  }
}

struct NormalizeParams {
  float scale[kMaxNormalizeChannels];
  float shift[kMaxNormalizeChannels];
};

__device__ __forceinline__ float normalize(uint8_t v, int ch, const NormalizeParams& params) {
  return fmaf(static_cast<float>(v), params.scale[ch], params.shift[ch]);
}

// x: uint8 [pixels, c]; y: [pixels, c_out] of T; c <= kMaxNormalizeChannels, c_out <=
// kMaxStagedChannelsOut. kVecLoad: x 16-byte aligned (a tile's input, 512 * c bytes, then starts
// 16-byte aligned too).
template <typename T, bool kVecLoad, bool kVecStore>
__global__ void __launch_bounds__(kStageThreads)
    normalize_u8_staged_kernel(const uint8_t* __restrict__ x, T* __restrict__ y, int64_t pixels, int c,
                               int c_out, NormalizeParams params) {
  __shared__ uint4 staged_vec[kTilePixels * kMaxNormalizeChannels / 16];
  // The coefficients in shared memory: indexed by a run-time channel, the kernel parameter would
  // be copied to local memory. The first tile's __syncthreads() publishes them.
  __shared__ NormalizeParams coef;
  if (threadIdx.x == 0) coef = params;
  uint8_t* staged = reinterpret_cast<uint8_t*>(staged_vec);
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t base = tile * kTilePixels;
    const int npix = static_cast<int>(pixels - base < kTilePixels ? pixels - base : kTilePixels);
    const uint8_t* xt = x + base * c;
    const int bytes = npix * c;
    int scalar_from = 0;
    if constexpr (kVecLoad) {
      const int vectors = bytes / 16;
      for (int v = threadIdx.x; v < vectors; v += blockDim.x) {
        staged_vec[v] = reinterpret_cast<const uint4*>(xt)[v];
      }
      scalar_from = vectors * 16;
    }
    for (int b = scalar_from + threadIdx.x; b < bytes; b += blockDim.x) staged[b] = xt[b];
    __syncthreads();
    store_tile<T, kVecStore>(y + base * c_out, npix, c, c_out,
                             [&](int pix, int ch) { return normalize(staged[pix * c + ch], ch, coef); });
    __syncthreads();  // the next tile overwrites the staging buffer
  }
}

// Any c_out: one thread per pixel.
template <typename T>
__global__ void normalize_u8_pixel_kernel(const uint8_t* __restrict__ x, T* __restrict__ y, int64_t pixels,
                                          int c, int64_t c_out, NormalizeParams params) {
  __shared__ NormalizeParams coef;  // see normalize_u8_staged_kernel
  if (threadIdx.x == 0) coef = params;
  __syncthreads();
  for (int64_t pixel = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; pixel < pixels;
       pixel += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* xp = x + pixel * c;
    T* yp = y + pixel * c_out;
    for (int ch = 0; ch < c; ++ch) yp[ch] = from_float<T>(normalize(xp[ch], ch, coef));
    for (int64_t ch = c; ch < c_out; ++ch) yp[ch] = from_float<T>(0.0f);
  }
}

// Calls fn(std::bool_constant<a>{}, std::bool_constant<b>{}): picks a staged kernel's
// load/store paths at run time.
template <typename Fn>
Status dispatch_vector_paths(bool vec_load, bool vec_store, Fn&& fn) {
  if (vec_load) {
    return vec_store ? fn(std::true_type{}, std::true_type{}) : fn(std::true_type{}, std::false_type{});
  }
  return vec_store ? fn(std::false_type{}, std::true_type{}) : fn(std::false_type{}, std::false_type{});
}

// Blocks for the staged kernels: one per tile, within the grid's x limit.
unsigned staged_grid(int64_t pixels) {
  const int64_t tiles = (pixels + kTilePixels - 1) / kTilePixels;
  return static_cast<unsigned>(std::min<int64_t>(tiles, INT32_MAX));
}

// ---- output conversion ----------------------------------------------------------------------

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
  const int64_t hw = desc.h * desc.w;
  const int64_t pixels = desc.n * hw;
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const float* xf = static_cast<const float*>(x);
    T* yt = static_cast<T*>(y);
    if (desc.c <= kMaxStagedChannels && desc.c_out <= kMaxStagedChannelsOut) {
      const bool vec_load = hw % 4 == 0 && is_aligned(x, 16);
      const size_t smem_bytes = static_cast<size_t>(desc.c) * kTilePixels * sizeof(float);
      return dispatch_vector_paths(vec_load, is_aligned(y, 16), [&](auto load, auto store) -> Status {
        nchw_to_nhwc_staged_kernel<T, decltype(load)::value, decltype(store)::value>
            <<<staged_grid(pixels), kStageThreads, smem_bytes, stream>>>(
                xf, yt, pixels, static_cast<int>(desc.c), hw, static_cast<int>(desc.c_out));
        return check_launch("launch_nchw_to_nhwc", "nchw_to_nhwc_staged_kernel");
      });
    }
    nchw_to_nhwc_pixel_kernel<T>
        <<<grid_for(pixels), kThreads, 0, stream>>>(xf, yt, pixels, desc.c, hw, desc.c_out);
    return check_launch("launch_nchw_to_nhwc", "nchw_to_nhwc_pixel_kernel");
  });
}

Status launch_nchw_to_space_to_depth(const SpaceToDepthDesc& desc, const void* x, void* y,
                                     cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const SpaceToDepthParams p{desc.n * desc.out_h * desc.out_w, static_cast<int>(desc.c),
                             static_cast<int>(desc.h),         static_cast<int>(desc.w),
                             static_cast<int>(desc.block),     static_cast<int>(desc.pad_top),
                             static_cast<int>(desc.pad_left),  static_cast<int>(desc.out_h),
                             static_cast<int>(desc.out_w),     static_cast<int>(desc.c_out)};
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const float* xf = static_cast<const float*>(x);
    T* yt = static_cast<T*>(y);
    if (desc.c_out % kVec<T> == 0 && is_aligned(y, 16))
      nchw_to_space_to_depth_kernel<T, kVec<T>><<<grid_for(p.pixels), kThreads, 0, stream>>>(xf, yt, p);
    else
      nchw_to_space_to_depth_kernel<T, 1><<<grid_for(p.pixels), kThreads, 0, stream>>>(xf, yt, p);
    return check_launch("launch_nchw_to_space_to_depth", "nchw_to_space_to_depth_kernel");
  });
}

Status launch_normalize_u8(const NormalizeU8Desc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  NormalizeParams params{};
  for (int i = 0; i < desc.c; ++i) {
    params.scale[i] = 1.0f / (255.0f * desc.std[i]);
    params.shift[i] = -desc.mean[i] / desc.std[i];
  }
  const int64_t pixels = desc.n * desc.h * desc.w;
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const uint8_t* xb = static_cast<const uint8_t*>(x);
    T* yt = static_cast<T*>(y);
    const int c = static_cast<int>(desc.c);
    if (desc.c_out <= kMaxStagedChannelsOut) {
      return dispatch_vector_paths(
          is_aligned(x, 16), is_aligned(y, 16), [&](auto load, auto store) -> Status {
            normalize_u8_staged_kernel<T, decltype(load)::value, decltype(store)::value>
                <<<staged_grid(pixels), kStageThreads, 0, stream>>>(xb, yt, pixels, c,
                                                                    static_cast<int>(desc.c_out), params);
            return check_launch("launch_normalize_u8", "normalize_u8_staged_kernel");
          });
    }
    normalize_u8_pixel_kernel<T>
        <<<grid_for(pixels), kThreads, 0, stream>>>(xb, yt, pixels, c, desc.c_out, params);
    return check_launch("launch_normalize_u8", "normalize_u8_pixel_kernel");
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

namespace {
// Eight elements per thread and 16-byte loads where both tensors allow them (kVec8), else one.
template <typename From, typename To, bool kVec8>
__global__ void float_cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t count) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec8) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count / 8; i += step) {
      From in[8];
      To out[8];
      *reinterpret_cast<uint4*>(in) = reinterpret_cast<const uint4*>(x)[i];
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = from_float<To>(to_float(in[j]));
      reinterpret_cast<uint4*>(y)[i] = *reinterpret_cast<const uint4*>(out);
    }
  } else {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count; i += step)
      y[i] = from_float<To>(to_float(x[i]));
  }
}
}  // namespace

Status launch_float_cast(const FloatCastDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.from, [&](auto from) -> Status {
    return dispatch_float_type(desc.to, [&](auto to) -> Status {
      using From = decltype(from);
      using To = decltype(to);
      const auto* xs = static_cast<const From*>(x);
      auto* ys = static_cast<To*>(y);
      // 16-bit to 16-bit with whole 16-byte vectors; float32 on either side goes one by one.
      if (sizeof(From) == 2 && sizeof(To) == 2 && desc.count % 8 == 0 && is_aligned(x, 16) &&
          is_aligned(y, 16))
        float_cast_kernel<From, To, true>
            <<<grid_for(desc.count / 8), kThreads, 0, stream>>>(xs, ys, desc.count);
      else
        float_cast_kernel<From, To, false><<<grid_for(desc.count), kThreads, 0, stream>>>(xs, ys, desc.count);
      return check_launch("launch_float_cast", "float_cast_kernel");
    });
  });
}

}  // namespace gpulab::kernels
