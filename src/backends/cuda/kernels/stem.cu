/*
 * The fused stem (kernel_desc.h, FusedStemDesc): float32 NCHW image -> space-to-depth ->
 * 4x4/1 convolution + bias + ReLU -> 3x3/2 max pool -> float16 NHWC, in one kernel. This file
 * holds the mma.sync kernel (sm_80 and newer) and the launch; sm_90 GPUs run the wgmma kernel of
 * stem_rows_sm90.cu instead, which streams rows and pools in registers (its header comment).
 *
 * Why: unfused, ResNet-18's stem at batch 256 writes a 411 MB convolution output and reads it
 * back for the pool, and cuDNN runs the 12-channel convolution about five times slower than its
 * memory roofline. Here each thread block keeps one tile's convolution output in shared memory
 * and pools it there; only the pooled tile (a quarter of the pixels) reaches global memory.
 *
 * Work decomposition. A tile is 8 x 7 pooled pixels of one image, all 64 channels. Its pool
 * windows cover 17 x 15 convolution pixels (the 1-pixel halo is recomputed by the neighbouring
 * tile, 14% more arithmetic than the layer's own), which read 20 x 18 space-to-depth pixels,
 * that is 40 x 36 image pixels. Per tile:
 *   1. the float32 image patch arrives in shared memory by asynchronous copies (cp.async, zero
 *      fill outside the image; 16-byte pieces when the image width is a multiple of 4) issued
 *      while the previous tile computed; it is rounded to float16 into a second buffer in
 *      space-to-depth order: pixel (Y, X), channel (dy * 2 + dx) * c + ci;
 *   2. the convolution is an implicit GEMM, M = 256 pixels (255 and a spare), N = 64, K = 192
 *      (16 taps x the 12 data channels; the weights' padding channels 12..15 are dropped, and so
 *      are the K pairs whose weights are all 0: ResNet's 7x7 in its 8x8 window leaves 154 of the
 *      192, that is 10 K steps of 16 instead of 12). The A operand comes straight from the patch
 *      (an im2col view: 32-bit loads at offsets listed once per block) into registers; the B
 *      operand is the weights, compacted into shared memory once per block. FP16 inputs, FP32
 *      accumulators. Each of the 8 warps owns 32 pixels x 64 channels and runs CuTe's m16n8k16
 *      mma.sync atom, loading B with ldmatrix;
 *   3. bias and ReLU, rounded to float16 into shared memory; pixels outside the convolution's
 *      output are stored as 0, which a max over ReLU outputs ignores (every window holds at least
 *      one real pixel);
 *   4. the max pool reads 16-byte vectors from shared memory and writes 128 contiguous bytes per
 *      pooled pixel.
 * Blocks are persistent (as many as fit on the GPU: two per SM, 97 KiB of shared memory each)
 * and loop over tiles.
 *
 * Shared memory strides are padded so that the fragment loads hit distinct banks: 24 halves per
 * space-to-depth pixel (8 consecutive pixels' 48-byte rows tile the 32 banks), 200 halves per
 * weight row, 72 halves per convolution
 * pixel.
 */
#include "backends/cuda/kernels/stem_kernel.cuh"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"
#include "cute/arch/copy_sm75.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/arch/mma_sm80.hpp"

namespace gpulab::kernels {
namespace stem {
namespace {

constexpr int kTileH = 8, kTileW = 7;                              // pooled pixels per tile
constexpr int kConvH = 2 * kTileH + 1, kConvW = 2 * kTileW + 1;    // 17 x 15 convolution pixels
constexpr int kConvPixels = kConvH * kConvW;                       // 255
constexpr int kRows = 256;                                         // GEMM M (a spare row)
constexpr int kPatchH = kConvH + 3, kPatchW = kConvW + 3;          // 20 x 18 space-to-depth pixels
constexpr int kImageRows = 2 * kPatchH, kImageCols = 2 * kPatchW;  // 40 x 36 image pixels
constexpr int kTapsTotal = static_cast<int>(kStemTaps * kStemTaps);
constexpr int kGemmK = kTapsTotal * kDataChannels;  // 192
constexpr int kPixStride = 24;                      // halves per space-to-depth pixel in shared memory
constexpr int kWStride = 200;                       // halves per weight row
constexpr int kCStride = 72;                        // halves per convolution pixel
constexpr int kStemThreads = 256, kWarps = kStemThreads / 32;

constexpr int kRawCols = kImageCols + 4;  // floats per image row of `raw`
constexpr int kRawFloats = static_cast<int>(kStemMaxChannels) * kImageRows * kRawCols;  // the float32 patch
constexpr int kPatchHalves = kPatchH * kPatchW * kPixStride;
constexpr int kWeightHalves = kOut * kWStride;  // [64][kWStride] rows for ldmatrix
constexpr int kConvHalves = kRows * kCStride;
constexpr int kKPairs = kGemmK / 2;  // K pairs before compaction (the mma's A registers hold two K values)
constexpr size_t kSmemBytes = kRawFloats * sizeof(float) + (kPatchHalves + kWeightHalves + kConvHalves) * 2 +
                              kOut * sizeof(float) + (2 * kKPairs + kKPairs / 32) * sizeof(int);

static_assert(kRows == kWarps * 32 && kRows >= kConvPixels, "each warp owns 32 GEMM rows");
static_assert(kGemmK % 16 == 0 && kDataChannels % 2 == 0, "K steps of 16, channel pairs within a tap");
static_assert((kPatchHalves * 2) % 16 == 0 && (kWeightHalves * 2) % 16 == 0 && (kWStride * 2) % 16 == 0,
              "16-byte aligned shared arrays and ldmatrix rows");

struct StemParams : StemImage {
  int tiles_x, tiles_per_image, tiles;  // tiles < 2^30 (validate(FusedStemDesc) checks), so that
                                        // tile + gridDim.x stays below 2^31
};

// TOut: __half, or __nv_bfloat16 rounded from the float16 result, or Q8Out quantized from it
// (FusedStemDesc::out_dtype; stem_out).
template <typename TOut>
__global__ void __launch_bounds__(kStemThreads, 2) fused_stem_kernel(StemParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char smem[];
  float* raw = reinterpret_cast<float*>(smem);
  __half* patch = reinterpret_cast<__half*>(raw + kRawFloats);
  __half* wts = patch + kPatchHalves;
  __half* conv = wts + kWeightHalves;
  float* bias = reinterpret_cast<float*>(conv + kConvHalves);
  int* klist = reinterpret_cast<int*>(bias + kOut);  // the used K pairs, padded to whole K steps
  int* koffs = klist + kKPairs;                      // their patch offsets
  int* kcount = koffs + kKPairs;                     // used pairs per warp of 32
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Once per block: the weights without their padding channels into `conv` (free until the first
  // epilogue), the bias, and a zeroed patch (channels 4c..23 of each pixel are never written again).
  __half* wfull = conv;  // [64][192]
  for (int i = tid; i < kOut * kTapsTotal * (kDataChannels / 2); i += kStemThreads) {
    const int pair = i % (kDataChannels / 2), tap = (i / (kDataChannels / 2)) % kTapsTotal;
    const int k = i / (kDataChannels / 2) / kTapsTotal;
    reinterpret_cast<__half2*>(wfull)[i] =
        *reinterpret_cast<const __half2*>(p.weight + (k * kTapsTotal + tap) * kStemS2dChannels + 2 * pair);
  }
  if (tid < kOut) bias[tid] = p.bias == nullptr ? 0.0f : load_bias<__half>(p.bias, p.bias_f32, tid);
  for (int i = tid; i < kPatchHalves / 8; i += kStemThreads) reinterpret_cast<uint4*>(patch)[i] = uint4{};
  __syncthreads();
  // K pairs (two consecutive channels of a tap) whose weights are 0 for every output channel add
  // nothing: the rewritten 7x7 has a zero tap row and column in its 8x8 window, and a gray image
  // leaves 8 of the 12 channels empty. Threads 0..95 test one pair each; a ballot per warp...
  static_assert(kKPairs % 32 == 0 && kKPairs <= kStemThreads, "whole warps of K pairs");
  bool used = false;
  uint32_t ballot = 0;
  if (tid < kKPairs) {
#pragma unroll 8
    for (int k = 0; k < kOut; ++k)
      used |= !__hbeq2(reinterpret_cast<const __half2*>(wfull)[k * kKPairs + tid], __float2half2_rn(0.0f));
    ballot = __ballot_sync(0xffffffffu, used);
    if (lane == 0) kcount[warp] = __popc(ballot);
  }
  __syncthreads();
  // ...gives each used pair its place in the list, which is padded to whole K steps of 8 pairs
  // (the padding reads patch offset 0 against zero weights).
  int used_pairs = 0, before = 0;
#pragma unroll
  for (int w = 0; w < kKPairs / 32; ++w) {
    before += w < warp ? kcount[w] : 0;
    used_pairs += kcount[w];
  }
  const int ksteps = (used_pairs + 7) / 8;
  if (used) klist[before + __popc(ballot & ((1u << lane) - 1u))] = tid;
  if (tid >= used_pairs && tid < 8 * ksteps) klist[tid] = -1;
  __syncthreads();
  // The weights compacted to the list's order, and each listed pair's offset within a
  // space-to-depth pixel window of the patch.
  for (int i = tid; i < kOut * 8 * ksteps; i += kStemThreads) {
    const int k = i / (8 * ksteps), j = i - k * 8 * ksteps, q = klist[j];
    const __half2 v =
        q >= 0 ? reinterpret_cast<const __half2*>(wfull)[k * kKPairs + q] : __float2half2_rn(0.0f);
    reinterpret_cast<__half2*>(wts + k * kWStride)[j] = v;
  }
  if (tid < 8 * ksteps) {
    const int q = klist[tid], tap = q / (kDataChannels / 2), ch = 2 * q - tap * kDataChannels;
    koffs[tid] = q < 0 ? 0 : ((tap / kStemTaps) * kPatchW + tap % kStemTaps) * kPixStride + ch;
  }
  __syncthreads();

  // A tile's image, and its row and column among that image's tiles (numbered image-major, then
  // row-major).
  struct TileAt {
    int img, ty, tx;
  };
  auto tile_at = [&](int tile) {
    const int img = tile / p.tiles_per_image, in_img = tile - img * p.tiles_per_image;
    const int ty = in_img / p.tiles_x;
    return TileAt{img, ty, in_img - ty * p.tiles_x};
  };
  // Convolution pixel (2 oy - 1) starts the pool window of pooled row oy; space-to-depth row Y
  // holds image rows 2 Y - pad_top and the next. So a tile's patch starts at image column:
  auto patch_col0 = [&](int tx) { return 2 * (2 * kTileW * tx - 1) - p.pad_left; };
  // Copies the patch's rows (every channel) into `raw` in pieces of Word (4 or 16 bytes) from
  // image column first_col on; pieces outside the image are zero-filled.
  auto copy_rows = [&]<typename Word>(int img, int row0, int first_col, int pieces_per_row) {
    constexpr int kFloats = sizeof(Word) / sizeof(float);
    const float* xi = p.x + static_cast<int64_t>(img) * p.c * p.h * p.w;
#pragma unroll 1
    for (int e = tid; e < p.c * kImageRows * pieces_per_row; e += kStemThreads) {
      const int row = e / pieces_per_row, piece = e - row * pieces_per_row;  // row: ci * 40 + ry
      const int ci = row / kImageRows, iy = row0 + row - ci * kImageRows, ix = first_col + kFloats * piece;
      const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
      const float* src = inside ? xi + (ci * p.h + iy) * p.w + ix : xi;
      cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<Word, Word>::copy(
          *reinterpret_cast<const Word*>(src),
          *reinterpret_cast<Word*>(raw + row * kRawCols + kFloats * piece), inside);
    }
  };
  // The float32 image patch of a tile into `raw` with asynchronous copies (zero-filled outside
  // the image), so that the next tile's loads run while this one computes. `raw` holds, per
  // channel and patch row, kRawCols image columns from column col0 rounded down to a multiple
  // of 4, so that rows of an image whose width is a multiple of 4 arrive in aligned 16-byte
  // pieces (p.vec16); otherwise it is filled 4 bytes at a time from col0 itself.
  auto fetch_raw = [&](int tile) {
    const TileAt t = tile_at(tile);
    const int row0 = 2 * (2 * kTileH * t.ty - 1) - p.pad_top, col0 = patch_col0(t.tx);
    if (p.vec16)
      copy_rows.template operator()<cute::uint128_t>(t.img, row0, col0 & ~3, kRawCols / 4);
    else
      copy_rows.template operator()<uint32_t>(t.img, row0, col0, kImageCols);
    cute::cp_async_fence();
  };
  // `raw`, rounded to float16, into the patch in space-to-depth order: one thread per
  // space-to-depth pixel writes its 4c channels ((dy * 2 + dx) * c + ci) in two stores.
  auto convert_raw = [&](int tx) {
    const int col0 = patch_col0(tx);
    const int off = p.vec16 ? col0 - (col0 & ~3) : 0;  // the patch's first column within `raw`
#pragma unroll 1
    for (int e = tid; e < kPatchH * kPatchW; e += kStemThreads) {
      const int y = e / kPatchW, x = e - y * kPatchW;
      const float* r = raw + 2 * y * kRawCols + off + 2 * x;
      __align__(16) __half v[kDataChannels];
      if (p.c == 3)
        s2d_pixel<3, kImageRows * kRawCols, kRawCols>(r, v);
      else if (p.c == 2)
        s2d_pixel<2, kImageRows * kRawCols, kRawCols>(r, v);
      else
        s2d_pixel<1, kImageRows * kRawCols, kRawCols>(r, v);
      __half* dst = patch + e * kPixStride;
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
      *reinterpret_cast<uint2*>(dst + 8) = *reinterpret_cast<const uint2*>(v + 8);
    }
  };

  // The first GEMM row of this warp's i-th 16-row tile: each warp owns 32 consecutive rows. The
  // fragments of a 16-row tile have mma.m16n8k16's layout (A: rows g and g + 8, K pairs t4 and
  // t4 + 4; accumulators: rows g and g + 8, columns 8 j + 2 t4 and the next).
  auto row0 = [&](int i) { return warp * 32 + i * 16; };
  // This lane's GEMM rows (fragment rows g and g + 8 of the warp's two 16-row tiles).
  const int g = lane >> 2, t4 = lane & 3;
  int pix[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int m = min(row0(i) + g + 8 * hh, kConvPixels - 1);
      pix[i][hh] = ((m / kConvW) * kPatchW + m % kConvW) * kPixStride;
    }
  if (blockIdx.x < p.tiles) fetch_raw(blockIdx.x);
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const auto [img, ty, tx] = tile_at(tile);
    cute::cp_async_wait<0>();
    __syncthreads();  // this tile's image patch has landed; the last tile's pool is done
    convert_raw(tx);
    __syncthreads();  // the patch is complete; `raw` is free again
    if (tile + gridDim.x < p.tiles) fetch_raw(tile + gridDim.x);

    float acc[2][8][4] = {};
    // This lane's A fragments of K step ks: K pairs t4 and t4 + 4 of the step's 8 listed pairs.
    auto load_a = [&](int ks, uint32_t(&a)[2][4]) {
      const int koff[2] = {koffs[8 * ks + t4], koffs[8 * ks + t4 + 4]};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        a[i][0] = load_u32(patch + pix[i][0] + koff[0]);
        a[i][1] = load_u32(patch + pix[i][1] + koff[0]);
        a[i][2] = load_u32(patch + pix[i][0] + koff[1]);
        a[i][3] = load_u32(patch + pix[i][1] + koff[1]);
      }
    };
    // ldmatrix: lanes 8q..8q+7 address the rows of matrix q (n8 tile 2jp + q / 2, K half q % 2).
    const __half* wrow = wts + ((lane >> 4) * 8 + (lane & 7)) * kWStride + ((lane >> 3) & 1) * 8;
    // Unrolled by 2 only: fully unrolled, the compiler keeps all 96 fragment addresses of the K
    // loop live across the tile loop (they do not depend on the tile) and spills.
#pragma unroll 2
    for (int ks = 0; ks < ksteps; ++ks) {
      uint32_t a[2][4];
      load_a(ks, a);
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        uint32_t b[4];
        cute::SM75_U32x4_LDSM_N::copy(
            *reinterpret_cast<const cute::uint128_t*>(wrow + jp * 16 * kWStride + ks * 16), b[0], b[1], b[2],
            b[3]);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            float* d = acc[i][2 * jp + q];
            cute::SM80_16x8x16_F32F16F16F32_TN::fma(d[0], d[1], d[2], d[3], a[i][0], a[i][1], a[i][2],
                                                    a[i][3], b[2 * q], b[2 * q + 1], d[0], d[1], d[2], d[3]);
          }
      }
    }

    // Epilogue: bias, ReLU, float16 into shared memory; 0 outside the convolution's output. Per
    // 16-row tile and pair of n8 tiles, the four 8x8 accumulator blocks go out in one stmatrix
    // (sm_90) or as four 32-bit stores per lane.
    const int cy0 = 2 * kTileH * ty - 1, cx0 = 2 * kTileW * tx - 1;
    bool real[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int m = row0(i) + g + 8 * hh;
        const int cy = cy0 + m / kConvW, cx = cx0 + m % kConvW;
        real[i][hh] = m < kConvPixels && cy >= 0 && cy < p.conv_h && cx >= 0 && cx < p.conv_w;
      }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        uint32_t r[4];  // block (n8 tile 2 jp + q, rows 8 hh..8 hh + 7) in r[2 q + hh]
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int j = 2 * jp + q, n = 8 * j + 2 * t4;
            const float v0 = real[i][hh] ? fmaxf(acc[i][j][2 * hh] + bias[n], 0.0f) : 0.0f;
            const float v1 = real[i][hh] ? fmaxf(acc[i][j][2 * hh + 1] + bias[n + 1], 0.0f) : 0.0f;
            const __half2 h2 = __floats2half2_rn(v0, v1);
            r[2 * q + hh] = *reinterpret_cast<const uint32_t*>(&h2);
          }
#if __CUDA_ARCH__ >= 900
        // Lanes 8b..8b+7 address the rows of block b.
        const int b = lane >> 3, row = row0(i) + (b & 1) * 8 + (lane & 7);
        cute::SM90_U32x4_STSM_N::copy(
            r[0], r[1], r[2], r[3],
            *reinterpret_cast<cute::uint128_t*>(conv + row * kCStride + 8 * (2 * jp + (b >> 1))));
#else
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh)
            *reinterpret_cast<uint32_t*>(conv + (row0(i) + g + 8 * hh) * kCStride + 8 * (2 * jp + q) +
                                         2 * t4) = r[2 * q + hh];
#endif
      }
    __syncthreads();

    // Max pool: one pooled pixel's 8 channels per thread and step.
    for (int item = tid; item < kTileH * kTileW * (kOut / 8); item += kStemThreads) {
      const int px_i = item / (kOut / 8), chunk = item % (kOut / 8);
      const int py = px_i / kTileW, px = px_i % kTileW;
      const int oy = kTileH * ty + py, ox = kTileW * tx + px;
      if (oy >= p.out_h || ox >= p.out_w) continue;
      const __half* base = conv + ((2 * py) * kConvW + 2 * px) * kCStride + chunk * 8;
      uint4 best = *reinterpret_cast<const uint4*>(base);
#pragma unroll
      for (int dy = 0; dy < 3; ++dy)
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) {
          const uint4 v = *reinterpret_cast<const uint4*>(base + (dy * kConvW + dx) * kCStride);
          __half2* b2 = reinterpret_cast<__half2*>(&best);
          const __half2* v2 = reinterpret_cast<const __half2*>(&v);
#pragma unroll
          for (int q = 0; q < 4; ++q) b2[q] = __hmax2(b2[q], v2[q]);
        }
      TOut* dst = static_cast<TOut*>(p.y) +
                  ((static_cast<int64_t>(img) * p.out_h + oy) * p.out_w + ox) * kOut + chunk * 8;
      if constexpr (std::is_same_v<TOut, __half>) {
        *reinterpret_cast<uint4*>(dst) = best;
      } else {
        const __half* h = reinterpret_cast<const __half*>(&best);
        StemOut8<TOut> out;
        TOut* o = reinterpret_cast<TOut*>(&out);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = stem_out<TOut>(__half2float(h[e]), p.inv_out_scale);
        *reinterpret_cast<StemOut8<TOut>*>(dst) = out;
      }
    }
  }
#else
  __trap();  // launch_fused_stem refuses GPUs below sm_80
#endif
}

}  // namespace
}  // namespace stem

namespace {

using namespace stem;

// Per device ordinal and kernel (0 mma.sync, 1 wgmma): persistent blocks to launch (SMs x blocks
// per SM), 0 until known, -1 when the GPU cannot run that kernel.
constexpr int kMaxDevices = 64;
std::atomic<int> g_persistent_blocks[kMaxDevices][2];

// The first call per device and kernel sets the kernel's shared-memory limit and queries its
// occupancy.
Result<int> persistent_blocks(bool wgmma) {
  int device = 0;
  GPULAB_CUDA_TRY(cudaGetDevice(&device));
  std::atomic<int>* known =
      device >= 0 && device < kMaxDevices ? &g_persistent_blocks[device][wgmma] : nullptr;
  const int before = known ? known->load(std::memory_order_relaxed) : 0;
  if (before > 0) return before;
  const Status no_wgmma = Status::unsupported(
      "launch_fused_stem: the wgmma kernel needs an sm_90 GPU (Hopper) and this gpulab's sm_90a code.");
  if (before < 0) return no_wgmma;
  int major = 0, minor = 0, sms = 0, per_sm = 0;
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major < 8)
    return Status::unsupported(
        "launch_fused_stem: the fused stem needs an sm_80 or newer GPU (tensor-core "
        "mma.sync with FP32 accumulation); build the plan without it.");
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (wgmma) {
    // sm_90a code runs on compute capability 9.0 alone; elsewhere it is not even tried.
    const cudaError_t e =
        major == 9 && minor == 0 ? rows_blocks_per_sm(&per_sm) : cudaErrorNoKernelImageForDevice;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so that later checks do not see it
      if (known) known->store(-1, std::memory_order_relaxed);
      return no_wgmma;
    }
  } else {
    // Every output type: the fewest blocks of them (the same kernel but for the store).
    per_sm = INT_MAX;
    for (auto kernel : {fused_stem_kernel<__half>, fused_stem_kernel<__nv_bfloat16>,
                        fused_stem_kernel<Q8Out<false>>, fused_stem_kernel<Q8Out<true>>}) {
      int blocks = 0;
      GPULAB_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmemBytes)));
      GPULAB_CUDA_TRY(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kStemThreads, kSmemBytes));
      per_sm = std::min(per_sm, blocks);
    }
  }
  if (per_sm < 1)
    return Status::unsupported(
        "launch_fused_stem: a block of the fused stem does not fit on an SM of this GPU.");
  if (known) known->store(sms * per_sm, std::memory_order_relaxed);
  return sms * per_sm;
}

}  // namespace

Status launch_fused_stem(const FusedStemDesc& d, const void* x, const void* weight, const void* bias, void* y,
                         cudaStream_t stream, StemKernel kernel) {
  GPULAB_TRY(validate(d));
  if (x == nullptr || weight == nullptr || y == nullptr)
    return Status::invalid_argument("launch_fused_stem: null input, weight or output pointer.");
  if (!is_aligned(weight, 16) || !is_aligned(y, 16) || !is_aligned(x, 4) ||
      !is_aligned(bias, d.bias_float32 ? 4 : 2))
    return Status::invalid_argument(
        "launch_fused_stem: weight and output must be 16-byte aligned, the input and bias aligned to their "
        "element size.");
  // GPULAB_FUSED_STEM=mma makes kAuto take the mma.sync kernel (to compare the two).
  static const bool auto_mma = [] {
    const char* env = std::getenv("GPULAB_FUSED_STEM");
    return env != nullptr && std::string_view(env) == "mma";
  }();
  const bool wgmma = kernel == StemKernel::kWgmma ||
                     (kernel == StemKernel::kAuto && !auto_mma && persistent_blocks(true).is_ok());
  GPULAB_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(wgmma));
  StemImage image{};
  image.x = static_cast<const float*>(x);
  image.weight = static_cast<const __half*>(weight);
  image.bias = bias;
  image.bias_f32 = d.bias_float32;
  image.y = y;
  image.inv_out_scale = 1.0f / d.out_scale;  // as the cast kernel's launcher computes it
  image.c = static_cast<int>(d.c);
  image.h = static_cast<int>(d.h);
  image.w = static_cast<int>(d.w);
  image.pad_top = static_cast<int>(d.pad_top);
  image.pad_left = static_cast<int>(d.pad_left);
  image.conv_h = static_cast<int>(d.conv_h);
  image.conv_w = static_cast<int>(d.conv_w);
  image.out_h = static_cast<int>(d.out_h);
  image.out_w = static_cast<int>(d.out_w);
  image.vec16 = d.w % 4 == 0 && is_aligned(x, 16);
  if (wgmma) {
    const StemRowPlan plan = plan_stem_rows(d, kRowsConsumers * blocks);
    RowsParams p{image};
    p.strips = static_cast<int>(plan.strips);
    p.chunk_rows = static_cast<int>(plan.chunk_rows);
    p.chunks = static_cast<int>(plan.chunks);
    p.items = static_cast<int>(plan.items);  // <= pooled pixels < 2^30 (validate)
    launch_rows(p, std::min((p.items + kRowsConsumers - 1) / kRowsConsumers, blocks), d.out_dtype, stream);
    return check_launch("launch_fused_stem", "fused_stem_rows_kernel");
  }
  StemParams p{image};
  const int64_t tiles_x = (d.out_w + kTileW - 1) / kTileW,
                tiles_per_image = (d.out_h + kTileH - 1) / kTileH * tiles_x;
  p.tiles_x = static_cast<int>(tiles_x);
  p.tiles_per_image = static_cast<int>(tiles_per_image);
  p.tiles = static_cast<int>(d.n * tiles_per_image);  // < 2^30: validate bounds the pooled pixels
  const int grid = std::min(p.tiles, blocks);
  with_out_type(d.out_dtype, [&](auto out) {
    fused_stem_kernel<decltype(out)><<<grid, kStemThreads, kSmemBytes, stream>>>(p);
  });
  return check_launch("launch_fused_stem", "fused_stem_kernel");
}

}  // namespace gpulab::kernels
