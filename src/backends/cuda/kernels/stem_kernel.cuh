// The fused stem's kernel body, shared by its two variants: stem.cu (mma.sync, sm_80 and newer)
// and stem_sm90.cu (Hopper's asynchronous warpgroup MMA, compiled for sm_90a alone). stem.cu's
// header comment describes the design; this file holds what both translation units compile.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/common.cuh"
#include "cute/arch/copy_sm75.hpp"
#include "cute/arch/copy_sm80.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/arch/mma_sm80.hpp"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"

namespace gpulab::kernels::stem {
constexpr int kTileH = 8, kTileW = 7;                              // pooled pixels per tile
constexpr int kConvH = 2 * kTileH + 1, kConvW = 2 * kTileW + 1;    // 17 x 15 convolution pixels
constexpr int kConvPixels = kConvH * kConvW;                       // 255
constexpr int kRows = 256;                                         // GEMM M (a spare row)
constexpr int kPatchH = kConvH + 3, kPatchW = kConvW + 3;          // 20 x 18 space-to-depth pixels
constexpr int kImageRows = 2 * kPatchH, kImageCols = 2 * kPatchW;  // 40 x 36 image pixels
constexpr int kDataChannels = 12;                                  // block^2 x 3
constexpr int kTapsTotal = static_cast<int>(kStemTaps * kStemTaps);
constexpr int kGemmK = kTapsTotal * kDataChannels;  // 192
constexpr int kOut = static_cast<int>(kStemOutChannels);
constexpr int kPixStride = 24;  // halves per space-to-depth pixel in shared memory
constexpr int kWStride = 200;   // halves per weight row
constexpr int kCStride = 72;    // halves per convolution pixel
constexpr int kStemThreads = 256, kWarps = kStemThreads / 32;

constexpr int kRawCols = kImageCols + 4;  // floats per image row of `raw`
constexpr int kRawFloats = static_cast<int>(kStemMaxChannels) * kImageRows * kRawCols;  // the float32 patch
constexpr int kPatchHalves = kPatchH * kPatchW * kPixStride;
// The weights: [64][kWStride] rows for ldmatrix (mma.sync), or wgmma's canonical K-major layout
// without swizzle, 2048 bytes per K step (kWgmmaStep halves, at most 12 steps), within the same space.
constexpr int kWeightHalves = kOut * kWStride;
constexpr int kWgmmaStep = kOut * 16;
constexpr int kConvHalves = kRows * kCStride;
constexpr int kKPairs = kGemmK / 2;  // K pairs before compaction (the mma's A registers hold two K values)
constexpr size_t kSmemBytes = kRawFloats * sizeof(float) + (kPatchHalves + kWeightHalves + kConvHalves) * 2 +
                              kOut * sizeof(float) + (2 * kKPairs + kKPairs / 32) * sizeof(int);

static_assert(kRows == kWarps * 32 && kRows >= kConvPixels, "each warp owns 32 GEMM rows");
static_assert(kGemmK % 16 == 0 && kDataChannels % 2 == 0, "K steps of 16, channel pairs within a tap");
static_assert(kWgmmaStep * kGemmK / 16 <= kWeightHalves, "wgmma's weight layout fits the weights' space");
static_assert((kPatchHalves * 2) % 16 == 0 && (kWeightHalves * 2) % 16 == 0 && (kWStride * 2) % 16 == 0,
              "16-byte aligned shared arrays and ldmatrix rows");

struct StemParams {
  const float* x;
  const __half* weight;  // [64, 4, 4, 16]
  const void* bias;      // [64] float16 or float32, or null
  bool bias_f32;
  __half* y;
  int c, h, w, pad_top, pad_left, conv_h, conv_w, out_h, out_w;
  int tiles_x, tiles_per_image, tiles;  // tiles < 2^30 (validate(FusedStemDesc) checks), so that
                                        // tile + gridDim.x stays below 2^31
  bool vec16;  // w % 4 == 0 and x 16-byte aligned: the patch rows arrive in 16-byte pieces
};

__device__ __forceinline__ uint32_t load_u32(const __half* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// One space-to-depth pixel's 12 channels from `raw` (r: its top-left image pixel of channel 0),
// (dy * 2 + dx) * C + ci, rounded to float16; channels 4C..11 are 0.
template <int C>
__device__ __forceinline__ void s2d_pixel(const float* r, __half* v) {
#pragma unroll
  for (int ch = 4 * C; ch < kDataChannels; ++ch) v[ch] = __float2half(0.0f);
#pragma unroll
  for (int ci = 0; ci < C; ++ci)
#pragma unroll
    for (int dy = 0; dy < 2; ++dy)
#pragma unroll
      for (int dx = 0; dx < 2; ++dx)
        v[(dy * 2 + dx) * C + ci] = __float2half_rn(r[(ci * kImageRows + dy) * kRawCols + dx]);
}

// How many persistent blocks of the wgmma variant fit on an SM of the current device (after
// setting its shared-memory limit); fails (cudaErrorNoKernelImageForDevice or similar) on GPUs
// other than sm_90, for which stem_sm90.cu has no code. And its launch, whose error the caller
// reads (check_launch).
cudaError_t wgmma_blocks_per_sm(int* blocks);
void launch_wgmma(const StemParams& p, int grid, cudaStream_t stream);

// kWgmma: the GEMM runs on wgmma (sm_90a only), else on mma.sync (sm_80 and newer).
template <bool kWgmma>
__device__ __forceinline__ void fused_stem_body(const StemParams& p) {
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
    if constexpr (kWgmma) {
      // Pair j is K index 2 (j % 8) of step j / 8: in the core matrix of its K half (LBO apart)
      // and of n's group of 8 rows (SBO = 128 bytes apart), row n % 8 of 16 bytes.
      const int jj = j % 8;
      *reinterpret_cast<__half2*>(wts + (j / 8) * kWgmmaStep + (jj / 4) * (kOut * 8) + k * 8 + 2 * (jj % 4)) =
          v;
    } else {
      reinterpret_cast<__half2*>(wts + k * kWStride)[j] = v;
    }
  }
  // wgmma reads its B operand through the async proxy: the weights written above must be made
  // visible to it.
  if constexpr (kWgmma) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
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
        s2d_pixel<3>(r, v);
      else if (p.c == 2)
        s2d_pixel<2>(r, v);
      else
        s2d_pixel<1>(r, v);
      __half* dst = patch + e * kPixStride;
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
      *reinterpret_cast<uint2*>(dst + 8) = *reinterpret_cast<const uint2*>(v + 8);
    }
  };

  // The first GEMM row of this warp's i-th 16-row tile. mma.sync: each warp owns 32 consecutive
  // rows. wgmma: warpgroup wg owns rows 128 wg .. 128 wg + 127 as two m64 blocks, whose 16-row
  // slices go to its four warps in order. Either way the fragments of a 16-row tile have
  // mma.m16n8k16's layout (A: rows g and g + 8, K pairs t4 and t4 + 4; accumulators: rows g and
  // g + 8, columns 8 j + 2 t4 and the next).
  auto row0 = [&](int i) {
    return kWgmma ? (warp >> 2) * 128 + i * 64 + (warp & 3) * 16 : warp * 32 + i * 16;
  };
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
  // wgmma's descriptor of the weights (K step 0; step ks starts ks * 2048 bytes further): K-major
  // without swizzle, K halves 1024 bytes apart (LBO), groups of 8 output channels 128 bytes apart
  // (SBO); both fields and the address count 16-byte units.
  uint64_t b_desc = 0;
  if constexpr (kWgmma) {
    cute::GmmaDescriptor desc;
    desc.bitfield.start_address_ = static_cast<uint16_t>(cute::cast_smem_ptr_to_uint(wts) >> 4);
    desc.bitfield.leading_byte_offset_ = kOut * 8 * 2 / 16;
    desc.bitfield.stride_byte_offset_ = 8 * 16 / 16;
    desc.bitfield.base_offset_ = 0;
    desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::INTERLEAVE);
    b_desc = desc.desc_;
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
    if constexpr (kWgmma) {
      // Per K step and m64 block, one m64n64k16 wgmma: A from registers, B (the step's 64 x 16
      // weights) read from shared memory by the tensor cores once for the warpgroup. The next
      // step's A fragments load while the current step's wgmmas run.
      using Wgmma =
          cute::SM90::GMMA::MMA_64x64x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
      uint32_t a_next[2][4];
      load_a(0, a_next);
#pragma unroll 1
      for (int ks = 0; ks < ksteps; ++ks) {
        uint32_t a[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) a[i][r] = a_next[i][r];
        const uint64_t desc = b_desc + static_cast<uint64_t>(ks * (kWgmmaStep * 2 / 16));
        cute::warpgroup_arrive();
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float(&d)[8][4] = acc[i];
          Wgmma::fma(a[i][0], a[i][1], a[i][2], a[i][3], desc, d[0][0], d[0][1], d[0][2], d[0][3], d[1][0],
                     d[1][1], d[1][2], d[1][3], d[2][0], d[2][1], d[2][2], d[2][3], d[3][0], d[3][1], d[3][2],
                     d[3][3], d[4][0], d[4][1], d[4][2], d[4][3], d[5][0], d[5][1], d[5][2], d[5][3], d[6][0],
                     d[6][1], d[6][2], d[6][3], d[7][0], d[7][1], d[7][2], d[7][3]);
        }
        cute::warpgroup_commit_batch();
        if (ks + 1 < ksteps) load_a(ks + 1, a_next);
        cute::warpgroup_wait<0>();
        // The wgmmas read `a` asynchronously until the wait: this keeps `a` live until here, so
        // that the compiler cannot give a_next (loaded meanwhile) the same registers.
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) cute::warpgroup_fence_operand(a[i][r]);
      }
      // Likewise the epilogue's reads of the accumulators stay after the last wait.
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) cute::warpgroup_fence_operand(acc[i][j][e]);
    } else {
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
              *reinterpret_cast<const cute::uint128_t*>(wrow + jp * 16 * kWStride + ks * 16), b[0], b[1],
              b[2], b[3]);
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              float* d = acc[i][2 * jp + q];
              cute::SM80_16x8x16_F32F16F16F32_TN::fma(d[0], d[1], d[2], d[3], a[i][0], a[i][1], a[i][2],
                                                      a[i][3], b[2 * q], b[2 * q + 1], d[0], d[1], d[2],
                                                      d[3]);
            }
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
      *reinterpret_cast<uint4*>(p.y + ((static_cast<int64_t>(img) * p.out_h + oy) * p.out_w + ox) * kOut +
                                chunk * 8) = best;
    }
  }
}

}  // namespace gpulab::kernels::stem
