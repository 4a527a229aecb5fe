// The 64-channel 3x3 convolution on wgmma (wgmma_conv.h says what and why).
//
// Seven variants, each a tactic (tactic timing keeps the fastest per layer):
//   wg2, wg3  8x8-pixel output blocks (numbered image-major, then row-major), a unit of work being
//             two consecutive blocks; one persistent thread block per SM (174 or 224 KiB of shared
//             memory) with two or three warpgroups. Per unit and block: 36 m64n64k16 wgmmas (9
//             taps x 4 steps of 16 channels), pixels x channels, A (the patch) and B (the
//             weights, in shared memory for the whole kernel) both read by the tensor cores. The
//             epilogue adds bias and residual (whose loads are issued before the wait for the
//             MMAs), applies the activation and stores float16 pairs from the accumulators.
//   rs14, rs16  the transposed problem (below, before wgmma_conv3x3_rs_kernel): units of 14 or 16
//             output rows x 8 columns, one m64n112k16 or m64n128k16 wgmma per K step, the weights
//             in registers; rs14r5 is rs14 with a ring of five patch buffers instead of two.
//   ps14      the transposed problem with the weights in shared memory and two accumulator sets,
//             pipelined (before wgmma_conv3x3_ps_kernel): a unit's epilogue runs while the next
//             unit's MMAs do.
//   ws14      the same problem, warp-specialised (before wgmma_conv3x3_ws_kernel): a producer
//             warpgroup keeps a ring of six patch buffers full, two consumer warpgroups take
//             turns with MMAs and epilogues. The fastest on layer1 at batch 256.
// In the others each warpgroup loops over units with its own patch buffers, so that the next
// unit's patch arrives (cp.async, zero fill outside the image) while the current one computes.
//
// Shared memory:
//   weights  per K step of 16: two K halves [64 output channels][16 bytes] (1 KB each; the
//            descriptor's leading offset between them, its stride offset 128 bytes between groups
//            of 8 rows);
//   patches  per warpgroup [buffer][block][8 channel chunks][10][10][16 bytes].
// The two K halves of an operand lie 64 bytes past a multiple of 128 apart (patch planes of 1600
// bytes; weight halves 1088 bytes apart), so that 4 rows of both halves together cover the 32
// banks once, should the tensor cores read them that way.
// A's descriptor for block b, tap (dy, dx) and K step s: start at chunk 2 s, pixel (dy, dx); the
// 8 rows of a group are 8 consecutive pixels of a patch row (16 bytes apart, as the no-swizzle
// layout wants); groups (output rows) 160 bytes apart; the second K half one chunk plane further.
#include "backends/cuda/wgmma_conv.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "cute/arch/copy_sm80.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/arch/mma_sm90_gmma_ext.hpp"
#include "cutlass/arch/barrier.h"

namespace gpulab::cuda {
namespace {

constexpr int kC = 64;              // input and output channels
constexpr int kBlock = 8;           // output block edge: 8 x 8 pixels = one m64 block
constexpr int kPatch = kBlock + 2;  // input patch edge
constexpr int kChunks = kC / 8;     // 16-byte channel chunks per pixel
constexpr int kPatchPixels = kPatch * kPatch;
constexpr int kPlaneBytes = kPatchPixels * 16;  // one chunk plane (1600 bytes: 64 past a multiple of 128)
constexpr int kPatchBytes = kChunks * kPlaneBytes;
constexpr int kUnitBlocks = 2;        // blocks per unit of work
constexpr int kKSteps = 9 * kC / 16;  // 36
// Per K step of the weights: two K halves of 64 rows x 16 bytes, the second 1088 bytes after the
// first (64 past a multiple of 128, like the patch planes), 2112 bytes in all.
constexpr int kHalfOffset = kC * 16 + 64;
constexpr int kStepBytes = kHalfOffset + kC * 16;
constexpr int kWeightBytes = kKSteps * kStepBytes;            // 76032
constexpr int kWgPatchBytes = 2 * kUnitBlocks * kPatchBytes;  // two buffers of a unit's patches
static_assert(kPlaneBytes % 128 == 64 && kHalfOffset % 128 == 64, "K halves in opposite halves of the banks");

// The tactics (see the top of the file).
constexpr std::string_view kTactics[] = {"wgmma-conv3x3:wg2",  "wgmma-conv3x3:wg3",  "wgmma-conv3x3:rs14",
                                         "wgmma-conv3x3:rs16", "wgmma-conv3x3:ps14", "wgmma-conv3x3:rs14r5",
                                         "wgmma-conv3x3:ws14"};
template <int kWarpgroups>
constexpr size_t smem_bytes() {
  return kWeightBytes + static_cast<size_t>(kWarpgroups) * kWgPatchBytes;
}
static_assert(smem_bytes<3>() <= 227 * 1024, "one block per SM fits");

struct Params {
  const __half* x;
  const __half* weight;
  const void* bias;  // [64] or null
  bool bias_f32;
  const __half* residual;  // or null
  __half* y;
  int h, w;
  int blocks_x, blocks_per_image;
  int blocks, units;  // 8x8 blocks in all, and units of kUnitBlocks of them
  kernels::ActParams act;
};

__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// A no-swizzle K-major wgmma descriptor: start address, leading (K half) and stride (8-row group)
// offsets, all in bytes.
__device__ __forceinline__ uint64_t make_desc(const void* smem, int lead_bytes, int stride_bytes) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(cute::cast_smem_ptr_to_uint(smem) >> 4);
  desc.bitfield.leading_byte_offset_ = static_cast<uint16_t>(lead_bytes >> 4);
  desc.bitfield.stride_byte_offset_ = static_cast<uint16_t>(stride_bytes >> 4);
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::INTERLEAVE);
  return desc.desc_;
}

struct BlockAt {
  int img, oy0, ox0;
};

// Tile `tile`'s image and top-left output pixel, for tiles of `rows` x 8 output pixels
// (p.blocks_x per row of tiles, p.blocks_per_image per image).
__device__ __forceinline__ BlockAt block_at(const Params& p, int tile, int rows) {
  const int img = tile / p.blocks_per_image, in_img = tile - img * p.blocks_per_image;
  const int by = in_img / p.blocks_x;
  return BlockAt{img, by * rows, (in_img - by * p.blocks_x) * kBlock};
}

// The input patch of the output tile at `at` (kPixels / 10 rows of 10 pixels, all 64 channels,
// zero outside the image) into `dst` as 8 chunk planes `plane_bytes` apart, by the warpgroup's
// 128 threads (wtid: the thread's index among them). The caller commits the copies.
template <int kPixels>
__device__ __forceinline__ void copy_patch(const Params& p, unsigned char* dst, int plane_bytes, BlockAt at,
                                           int wtid) {
  static_assert(kPixels % 4 == 0, "whole groups of 4 pixels");
  const __half* xi = p.x + static_cast<int64_t>(at.img) * p.h * p.w * kC;
#pragma unroll 1
  for (int e = wtid; e < kPixels * kChunks; e += 128) {
    // 8 consecutive threads: chunks 2 q and 2 q + 1 of 4 consecutive pixels (32-byte global
    // reads; 8 distinct 16-byte bank groups in shared memory, the planes being 64 bytes past a
    // multiple of 128 apart); a warp reads 4 whole pixels.
    const int chunk = 2 * ((e >> 3) & 3) + (e & 1), pix = 4 * (e >> 5) + ((e >> 1) & 3);
    const int py = pix / kPatch, px = pix - py * kPatch;
    const int iy = at.oy0 - 1 + py, ix = at.ox0 - 1 + px;
    const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
    const __half* src = inside ? xi + (static_cast<int64_t>(iy) * p.w + ix) * kC + chunk * 8 : xi;
    cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>::copy(
        *reinterpret_cast<const cute::uint128_t*>(src),
        *reinterpret_cast<cute::uint128_t*>(dst + chunk * plane_bytes + pix * 16), inside);
  }
}

// A unit's patches into `dst` ([block][chunk][10][10][16 bytes]). A missing second block leaves
// its patch as it was: its MMAs then compute on stale data, and the epilogue stores nothing.
__device__ __forceinline__ void fetch_unit(const Params& p, unsigned char* dst, int unit, int wtid) {
#pragma unroll
  for (int b = 0; b < kUnitBlocks; ++b) {
    const int blk = kUnitBlocks * unit + b;
    if (blk >= p.blocks) break;
    copy_patch<kPatchPixels>(p, dst + b * kPatchBytes, kPlaneBytes, block_at(p, blk, kBlock), wtid);
  }
  cute::cp_async_fence();
}

// The weights, once per thread block, by its `threads` threads: global [n][72 chunks] -> shared
// [K step][K half][n] (kStepBytes per step, kHalfOffset between halves). The caller waits.
__device__ __forceinline__ void copy_weights(const Params& p, unsigned char* wts, int tid, int threads) {
  for (int i = tid; i < kC * 2 * kKSteps; i += threads) {
    const int n = i / (2 * kKSteps), q = i - n * 2 * kKSteps;
    cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>::copy(
        *reinterpret_cast<const cute::uint128_t*>(p.weight + n * 9 * kC + q * 8),
        *reinterpret_cast<cute::uint128_t*>(wts + (q / 2) * kStepBytes + (q % 2) * kHalfOffset + n * 16));
  }
  cute::cp_async_fence();
}

template <int kWarpgroups>
__global__ void __launch_bounds__(128 * kWarpgroups, 1) wgmma_conv3x3_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kThreads = 128 * kWarpgroups;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* wts = smem;
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid & 31;
  const int wwarp = wtid / 32, g = lane >> 2, t4 = lane & 3;
  unsigned char* patches = smem + kWeightBytes + wg * kWgPatchBytes;

  copy_weights(p, wts, tid, kThreads);
  // This thread's bias (channels 8 j + 2 t4 and the next).
  float bias[8][2];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      bias[j][e] =
          p.bias == nullptr ? 0.0f : kernels::load_bias<__half>(p.bias, p.bias_f32, 8 * j + 2 * t4 + e);
  cute::cp_async_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the weights, for wgmma's reads
  __syncthreads();

  const uint64_t b_desc = make_desc(wts, kHalfOffset, 128);

  const int stride = gridDim.x * kWarpgroups;
  int unit = blockIdx.x * kWarpgroups + wg, buf = 0;
  auto fetch = [&](int u, int into) { fetch_unit(p, patches + into * kUnitBlocks * kPatchBytes, u, wtid); };
  if (unit < p.units) fetch(unit, 0);
  for (; unit < p.units; unit += stride, buf ^= 1) {
    if (unit + stride < p.units) {
      fetch(unit + stride, buf ^ 1);
      cute::cp_async_wait<1>();
    } else {
      cute::cp_async_wait<0>();
    }
    // cp.async writes through the generic proxy, wgmma reads through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_sync(1 + wg, 128);  // the whole warpgroup's copies of this unit have landed

    uint64_t a_desc[kUnitBlocks];
#pragma unroll
    for (int b = 0; b < kUnitBlocks; ++b)
      a_desc[b] = make_desc(patches + (buf * kUnitBlocks + b) * kPatchBytes, kPlaneBytes, kPatch * 16);
    float acc[kUnitBlocks][32];
#pragma unroll
    for (int b = 0; b < kUnitBlocks; ++b)
#pragma unroll
      for (int r = 0; r < 32; ++r) {
        acc[b][r] = 0.0f;
        cute::warpgroup_fence_operand(acc[b][r]);
      }
    cute::warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int tap = ks / 4, s = ks % 4, dy = tap / 3, dx = tap % 3;
      // In 16-byte units: chunk 2 s's plane, pixel (dy, dx).
      const uint64_t a_off = static_cast<uint64_t>(2 * s * (kPlaneBytes / 16) + dy * kPatch + dx);
      const uint64_t bd = b_desc + static_cast<uint64_t>(ks * (kStepBytes / 16));
#pragma unroll
      for (int b = 0; b < kUnitBlocks; ++b) {
        float* d = acc[b];
        cute::SM90::GMMA::MMA_64x64x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>::
            fma(a_desc[b] + a_off, bd, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10],
                d[11], d[12], d[13], d[14], d[15], d[16], d[17], d[18], d[19], d[20], d[21], d[22], d[23],
                d[24], d[25], d[26], d[27], d[28], d[29], d[30], d[31]);
      }
    }
    cute::warpgroup_commit_batch();

    // While the MMAs run: this thread's output addresses and residual. Rows g and g + 8 of the
    // warp's 16 are output pixels (2 wwarp + hh, g) of the block; its columns 8 j + 2 t4, +1.
    int64_t at[kUnitBlocks][2];
    bool valid[kUnitBlocks][2];
    __half2 res[kUnitBlocks][2][8];
#pragma unroll
    for (int b = 0; b < kUnitBlocks; ++b) {
      const int blk = kUnitBlocks * unit + b;
      const BlockAt o = block_at(p, min(blk, p.blocks - 1), kBlock);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int oy = o.oy0 + 2 * wwarp + hh, ox = o.ox0 + g;
        valid[b][hh] = blk < p.blocks && oy < p.h && ox < p.w;
        at[b][hh] = ((static_cast<int64_t>(o.img) * p.h + oy) * p.w + ox) * kC + 2 * t4;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          res[b][hh][j] = p.residual != nullptr && valid[b][hh]
                              ? *reinterpret_cast<const __half2*>(p.residual + at[b][hh] + 8 * j)
                              : __float2half2_rn(0.0f);
      }
    }
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int b = 0; b < kUnitBlocks; ++b)
#pragma unroll
      for (int r = 0; r < 32; ++r) cute::warpgroup_fence_operand(acc[b][r]);
    bar_sync(1 + wg, 128);  // every warp's MMAs are done with this buffer: the next fetch may refill it

#pragma unroll
    for (int b = 0; b < kUnitBlocks; ++b)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        if (!valid[b][hh]) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float2 r = __half22float2(res[b][hh][j]);
          const float v0 = kernels::apply_act(acc[b][4 * j + 2 * hh] + bias[j][0] + r.x, p.act);
          const float v1 = kernels::apply_act(acc[b][4 * j + 2 * hh + 1] + bias[j][1] + r.y, p.act);
          *reinterpret_cast<__half2*>(p.y + at[b][hh] + 8 * j) = __floats2half2_rn(v0, v1);
        }
      }
  }
#else
  __trap();  // launch_wgmma_conv launches this on sm_90 alone
#endif
}

// The "rs" variants: the problem transposed, D^T = W x P^T, so that the weights are wgmma's A
// operand, held in registers for the whole kernel (36 K steps x 4 registers per thread), and the
// patch is its B operand. A unit is R output rows x 8 columns, and one wgmma per K step covers it
// all: N = 8 R pixels (112 or 128), the 8-pixel groups one patch row (160 bytes) apart. Wide N is
// what the tensor cores need to run near their rate (the m64n64 instructions of the variants above
// reach 37% of it in Nsight Compute), and only the patch is read from shared memory.
// The accumulators hold channels x pixels, so the epilogue adds the bias, rounds to float16 and
// transposes through shared memory (stmatrix.trans into the unit's patch buffer, free once the
// MMAs are done), then adds the residual and stores 16-byte pixel rows. (The convolution plus bias
// is rounded to float16 before the residual is added: the unfused order, one rounding more than
// the variants above.)
constexpr int plane_bytes(int pixels) {  // pixels x 16 bytes, padded to 64 past a multiple of 128
  return pixels * 16 + ((64 - pixels * 16 % 128) + 128) % 128;
}
template <int R>
struct RsShape {
  static constexpr int kN = 8 * R;  // pixels per unit: the wgmma's N
  static constexpr int kPixels = (R + 2) * kPatch;
  static constexpr int kPlane = plane_bytes(kPixels);
  static constexpr int kBytes = kChunks * kPlane;  // one patch
  // The staged tile: 128 bytes per pixel, its 16-byte chunk c at position c ^ (pixel % 8), so
  // that both stmatrix's 8 rows and a quarter warp's 8 chunks of one pixel hit 8 distinct bank
  // groups.
  static constexpr int kStageBytes = kN * 128;
  using Mma = std::conditional_t<
      R == 14,
      cute::SM90::GMMA::MMA_64x112x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>,
      cute::SM90::GMMA::MMA_64x128x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>>;
  using MmaSS = std::conditional_t<
      R == 14,
      cute::SM90::GMMA::MMA_64x112x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>,
      cute::SM90::GMMA::MMA_64x128x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>>;
  static_assert(R == 14 || R == 16, "an instantiated wgmma shape");
  static_assert(kStageBytes <= kBytes, "the staged tile fits in a patch buffer");
};

template <class Mma, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t desc, float* d,
                                         std::index_sequence<I...>) {
  Mma::fma(a[0], a[1], a[2], a[3], desc, d[I]...);
}

template <class Mma, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a_desc, uint64_t b_desc, float* d,
                                         std::index_sequence<I...>) {
  Mma::fma(a_desc, b_desc, d[I]...);
}

// A unit's 36 MMAs with both operands in shared memory (the ps and ws variants): the weights at
// `a_desc`, the unit's patch in `patch`; zeroes `acc` first and commits them as one batch.
template <int R>
__device__ __forceinline__ void issue_ss(uint64_t a_desc, const unsigned char* patch, float (&acc)[4 * R]) {
  using S = RsShape<R>;
  const uint64_t b_desc = make_desc(patch, S::kPlane, kPatch * 16);
#pragma unroll
  for (int r = 0; r < 4 * R; ++r) {
    acc[r] = 0.0f;
    cute::warpgroup_fence_operand(acc[r]);
  }
  cute::warpgroup_arrive();
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    const int tap = ks / 4, s = ks % 4, dy = tap / 3, dx = tap % 3;
    const uint64_t off = static_cast<uint64_t>(2 * s * (S::kPlane / 16) + dy * kPatch + dx);
    wgmma_ss<typename S::MmaSS>(a_desc + static_cast<uint64_t>(ks * (kStepBytes / 16)), b_desc + off, acc,
                                std::make_index_sequence<4 * R>{});
  }
  cute::warpgroup_commit_batch();
}

// The transposed variants' accumulator rows of this thread (wtid: its index in the warpgroup) are
// output channels c0 and c0 + 8, c0 = 16 warp + lane / 4; their bias (0 without one).
struct RowBias {
  float lo, hi;
};
__device__ __forceinline__ RowBias row_bias(const Params& p, int wtid) {
  const int c0 = 16 * (wtid >> 5) + ((wtid & 31) >> 2);
  if (p.bias == nullptr) return {0.0f, 0.0f};
  return {kernels::load_bias<__half>(p.bias, p.bias_f32, c0),
          kernels::load_bias<__half>(p.bias, p.bias_f32, c0 + 8)};
}

// Of the units first, first + stride, ... those below `units`: how many.
__device__ __forceinline__ int units_from(int first, int stride, int units) {
  return first < units ? (units - first + stride - 1) / stride : 0;
}

// The epilogue of the transposed variants, once `acc` holds unit `unit`'s result and `stage`
// (kStageBytes of shared memory) is free for the whole warpgroup (the caller's barrier): bias,
// rounding to float16, transposition through `stage`, residual, activation and the stores of the
// unit's R x 8 output pixels. Leaves `stage` being read; the caller synchronizes the warpgroup
// before writing it again.
template <int R>
__device__ __forceinline__ void store_tile(const Params& p, const float (&acc)[4 * R], unsigned char* stage,
                                           int unit, RowBias bias, int wg, int wtid) {
  using S = RsShape<R>;
  const int lane = wtid & 31, c16 = 16 * (wtid / 32);  // this warp's 16 accumulator rows (channels)
  // Accumulator (channel c16 + lane / 4 + 8 h, pixel 8 j + 2 (lane % 4) + e) = acc[4 j + 2 h + e].
  // Per output row j and channel half h, an 8x8 matrix (channels x pixels) in mma fragment order;
  // stored transposed, each of its rows is one pixel's 8 channels, 16 bytes (swizzled, see
  // kStageBytes).
#pragma unroll
  for (int j = 0; j < R; j += 2) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int jj = j + q / 2, h = q % 2;
      const float bb = h ? bias.hi : bias.lo;
      const __half2 v = __floats2half2_rn(acc[4 * jj + 2 * h] + bb, acc[4 * jj + 2 * h + 1] + bb);
      r[q] = *reinterpret_cast<const uint32_t*>(&v);
    }
    const int q = lane >> 3, i = lane & 7;  // this lane addresses row i of matrix q
    cute::SM90_U16x8_STSM_T::copy(r[0], r[1], r[2], r[3],
                                  *reinterpret_cast<cute::uint128_t*>(stage + (8 * (j + q / 2) + i) * 128 +
                                                                      ((c16 / 8 + q % 2) ^ i) * 16));
  }
  bar_sync(1 + wg, 128);  // the staged tile is complete

  // Read out: 16 bytes (8 channels of a pixel) per item; the residual's loads first, all at once.
  constexpr int kItems = S::kN * kChunks / 128;
  const BlockAt t = block_at(p, unit, R);
  const int oy0 = t.oy0, ox0 = t.ox0;
  int64_t at[kItems];
  bool ok[kItems];
  uint4 res[kItems];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int item = wtid + 128 * it, pix = item / kChunks, chunk = item % kChunks;
    const int oy = oy0 + pix / 8, ox = ox0 + pix % 8;
    ok[it] = oy < p.h && ox < p.w;
    at[it] = ((static_cast<int64_t>(t.img) * p.h + oy) * p.w + ox) * kC + chunk * 8;
    res[it] = ok[it] && p.residual != nullptr ? *reinterpret_cast<const uint4*>(p.residual + at[it])
                                              : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    if (!ok[it]) continue;
    const int item = wtid + 128 * it, pix = item / kChunks, chunk = item % kChunks;
    const uint4 conv = *reinterpret_cast<const uint4*>(stage + pix * 128 + (chunk ^ (pix % 8)) * 16);
    const __half2* cv = reinterpret_cast<const __half2*>(&conv);
    const __half2* rv = reinterpret_cast<const __half2*>(&res[it]);
    uint4 out;
    __half2* ov = reinterpret_cast<__half2*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 c = __half22float2(cv[e]), r = __half22float2(rv[e]);
      ov[e] = __floats2half2_rn(kernels::apply_act(c.x + r.x, p.act), kernels::apply_act(c.y + r.y, p.act));
    }
    *reinterpret_cast<uint4*>(p.y + at[it]) = out;
  }
}

// Shared memory of the rs variants: per warpgroup, a ring of kBufs patch buffers.
template <int R, int kBufs>
constexpr size_t rs_smem_bytes() {
  return 2 * kBufs * static_cast<size_t>(RsShape<R>::kBytes);
}

template <int R, int kBufs>
__global__ void __launch_bounds__(256, 1) wgmma_conv3x3_rs_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = RsShape<R>;
  constexpr int kWarpgroups = 2, kAcc = S::kN / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid & 31;
  const int wwarp = wtid / 32, g = lane >> 2, t4 = lane & 3;
  unsigned char* patches = smem + wg * kBufs * S::kBytes;

  // The weights as A fragments: rows (output channels) 16 wwarp + g and + 8, K pairs t4 and t4 + 4
  // of each step of 16 (KRSC: K = tap * 64 + channel, contiguous per output channel).
  uint32_t wa[kKSteps][4];
  {
    const __half* w0 = p.weight + (16 * wwarp + g) * 9 * kC + 2 * t4;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      wa[ks][0] = *reinterpret_cast<const uint32_t*>(w0 + 16 * ks);
      wa[ks][1] = *reinterpret_cast<const uint32_t*>(w0 + 8 * 9 * kC + 16 * ks);
      wa[ks][2] = *reinterpret_cast<const uint32_t*>(w0 + 16 * ks + 8);
      wa[ks][3] = *reinterpret_cast<const uint32_t*>(w0 + 8 * 9 * kC + 16 * ks + 8);
    }
  }
  const RowBias bias = row_bias(p, wtid);

  // Units are R x 8 tiles of the output. Unit u's patch into buffer `buf`; always one commit
  // group, empty past the last unit.
  auto fetch = [&](int u, int buf) {
    if (u < p.units) copy_patch<S::kPixels>(p, patches + buf * S::kBytes, S::kPlane, block_at(p, u, R), wtid);
    cute::cp_async_fence();
  };

  // The warpgroup's units are first + k stride; unit k's patch goes into buffer k % kBufs, kBufs - 1
  // units ahead of the one computing.
  const int stride = gridDim.x * kWarpgroups, first = blockIdx.x * kWarpgroups + wg;
#pragma unroll
  for (int b = 0; b < kBufs - 1; ++b) fetch(first + b * stride, b);
  int buf = 0;
  for (int unit = first; unit < p.units; unit += stride, buf = buf + 1 == kBufs ? 0 : buf + 1) {
    unsigned char* cur = patches + buf * S::kBytes;
    // Into the buffer of the unit before, read out before the barrier that ended its iteration.
    fetch(unit + (kBufs - 1) * stride, buf == 0 ? kBufs - 1 : buf - 1);
    cute::cp_async_wait<kBufs - 1>();  // this unit's group
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_sync(1 + wg, 128);  // the whole warpgroup's copies of this unit have landed

    const uint64_t b_desc = make_desc(cur, S::kPlane, kPatch * 16);
    float acc[kAcc];
#pragma unroll
    for (int r = 0; r < kAcc; ++r) {
      acc[r] = 0.0f;
      cute::warpgroup_fence_operand(acc[r]);
    }
    cute::warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int tap = ks / 4, s = ks % 4, dy = tap / 3, dx = tap % 3;
      const uint64_t off = static_cast<uint64_t>(2 * s * (S::kPlane / 16) + dy * kPatch + dx);
      wgmma_rs<typename S::Mma>(wa[ks], b_desc + off, acc, std::make_index_sequence<kAcc>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
    bar_sync(1 + wg, 128);  // every warp's MMAs are done with `cur`: it becomes the staging area

    store_tile<R>(p, acc, cur, unit, bias, wg, wtid);
    bar_sync(1 + wg, 128);  // `cur` is read out: the next iteration's fetch may refill it
  }
#else
  __trap();  // launch_wgmma_conv launches this on sm_90 alone
#endif
}

// The pipelined variant ("ps"): the transposed problem of the rs variants, with the weights in
// shared memory (wgmma's A operand from a descriptor, like B in the wg variants). That frees the
// registers for two sets of accumulators, so that a warpgroup's epilogue no longer waits for its
// own MMAs: step k issues unit k's MMAs, and while the tensor cores run them, the epilogue of unit
// k - 1 runs through a staging area of its own. Three patch buffers per warpgroup: unit k's (read
// by the MMAs), and units k + 1 and k + 2 arriving; unit k + 2 is fetched as soon as unit k - 1's
// MMAs have released its buffer.
constexpr int kPsBuffers = 3;
template <int R>
constexpr size_t ps_smem_bytes() {
  return kWeightBytes + 2 * (kPsBuffers * static_cast<size_t>(RsShape<R>::kBytes) + RsShape<R>::kStageBytes);
}
static_assert(ps_smem_bytes<14>() <= 227 * 1024 && rs_smem_bytes<14, 5>() <= 227 * 1024,
              "one block per SM fits");

template <int R>
__global__ void __launch_bounds__(256, 1) wgmma_conv3x3_ps_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = RsShape<R>;
  constexpr int kWarpgroups = 2, kAcc = S::kN / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // wg through a shuffle: ptxas then knows it is warp-uniform, and so the branches on the unit,
  // and does not serialize the wgmmas behind them.
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  unsigned char* wts = smem;
  unsigned char* patches = smem + kWeightBytes + wg * (kPsBuffers * S::kBytes + S::kStageBytes);
  unsigned char* stage = patches + kPsBuffers * S::kBytes;
  const int stride = gridDim.x * kWarpgroups, first = blockIdx.x * kWarpgroups + wg;
  // Unit k's patch (k counts this warpgroup's units, first + k stride) into buffer k % 3; always
  // one commit group, empty past the last unit.
  auto fetch = [&](int k) {
    const int u = first + k * stride;
    if (u < p.units)
      copy_patch<S::kPixels>(p, patches + (k % kPsBuffers) * S::kBytes, S::kPlane, block_at(p, u, R), wtid);
    cute::cp_async_fence();
  };

  copy_weights(p, wts, tid, 128 * kWarpgroups);
#pragma unroll
  for (int k = 0; k < kPsBuffers; ++k) fetch(k);
  const RowBias bias = row_bias(p, wtid);
  cute::cp_async_wait<kPsBuffers>();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();  // the weights, for both warpgroups' MMAs
  const uint64_t a_desc = make_desc(wts, kHalfOffset, 128);

  // begin(k, acc): wait for unit k's patch and issue its MMAs into `acc`. finish(last, k, acc):
  // wait until unit k's MMAs are done (all MMAs when `last`, else all but the batch just issued),
  // fetch unit k + 3 into the buffer they release, and run unit k's epilogue.
  // Every begin issues MMAs and the control flow is uniform, so that ptxas can follow which batch
  // each wait retires and leaves the wgmmas asynchronous.
  // cp.async groups: at begin(k) the newest committed is unit k + 1's (fetched by finish(k - 2))
  // or, for k < 2, unit 2's (fetched before the loop).
  const int n = units_from(first, stride, p.units);
  auto begin = [&](int k, float(&acc)[kAcc]) {
    if (k == 0)
      cute::cp_async_wait<2>();
    else
      cute::cp_async_wait<1>();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    // Every copy of unit k has landed, and every thread is done reading the staging area.
    bar_sync(1 + wg, 128);
    issue_ss<R>(a_desc, patches + (k % kPsBuffers) * S::kBytes, acc);
  };
  auto finish = [&](bool last, int k, float(&acc)[kAcc]) {
    if (last)
      cute::warpgroup_wait<0>();
    else
      cute::warpgroup_wait<1>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
    bar_sync(1 + wg, 128);  // every warp's MMAs of unit k are done with its buffer
    fetch(k + kPsBuffers);
    store_tile<R>(p, acc, stage, first + k * stride, bias, wg, wtid);
  };
  float acc0[kAcc], acc1[kAcc];
  if (n > 0) begin(0, acc0);
  for (int k = 1; k < n; k += 2) {
    begin(k, acc1);
    finish(false, k - 1, acc0);
    if (k + 1 == n) {
      finish(true, k, acc1);
      return;
    }
    begin(k + 1, acc0);
    finish(false, k, acc1);
  }
  if (n % 2 == 1) finish(true, n - 1, acc0);
#else
  __trap();  // launch_wgmma_conv launches this on sm_90 alone
#endif
}

// The warp-specialised variant ("ws"): the transposed problem with the weights in shared memory
// (as ps), but the roles split across three warpgroups. Warpgroup 0 is the producer: it keeps a
// ring of kWsStages patch buffers full with cp.async, signalling each buffer's arrival on its
// `full` mbarrier (cp.async.mbarrier.arrive: the arrival lands when the copies have). Warpgroups 1
// and 2 are consumers, taking the block's units in turn: wait for the unit's buffer, run its MMAs,
// release the buffer on its `empty` mbarrier as soon as they are done, then run the epilogue
// through a staging tile of their own while the other consumer's MMAs run. So neither the loads
// nor the epilogue sit between one unit's MMAs and the next, and the ring lets the loads run
// several units ahead.
constexpr int kWsStages = 6;
template <int R>
constexpr size_t ws_smem_bytes() {
  return kWeightBytes + kWsStages * static_cast<size_t>(RsShape<R>::kBytes) + 2 * RsShape<R>::kStageBytes +
         2 * kWsStages * sizeof(uint64_t);
}
static_assert(ws_smem_bytes<14>() <= 227 * 1024, "one block per SM fits");

template <int R>
__global__ void __launch_bounds__(384, 1) wgmma_conv3x3_ws_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = RsShape<R>;
  using Barrier = cutlass::arch::ClusterBarrier;
  constexpr int kAcc = S::kN / 2;
  extern __shared__ __align__(128) unsigned char smem[];
  // wg through a shuffle, so that ptxas knows it is warp-uniform (see the ps kernel).
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  unsigned char* wts = smem;
  unsigned char* ring = smem + kWeightBytes;
  unsigned char* staging = ring + kWsStages * S::kBytes;  // consumer c's at c * kStageBytes
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + 2 * S::kStageBytes);
  uint64_t* empty = full + kWsStages;
  if (tid == 0) {
    for (int s = 0; s < kWsStages; ++s) {
      Barrier::init(&full[s], 128);   // the producer's threads, each once its copies have landed
      Barrier::init(&empty[s], 128);  // the consuming warpgroup's threads, once its MMAs are done
    }
  }
  copy_weights(p, wts, tid, 384);
  cute::cp_async_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();  // the weights and the barriers, for everyone

  // The block's units: blockIdx.x + j gridDim.x, j < nj; unit j uses ring buffer j % kWsStages
  // for the (j / kWsStages)-th time, and consumer j % 2.
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const int nj = units_from(block, blocks, p.units);
  const auto unit_of = [&](int j) { return block + j * blocks; };
  if (wg == 0) {
    for (int j = 0; j < nj; ++j) {
      const int s = j % kWsStages, use = j / kWsStages;
      if (use > 0) Barrier::wait(&empty[s], (use - 1) & 1);
      copy_patch<S::kPixels>(p, ring + s * S::kBytes, S::kPlane, block_at(p, unit_of(j), R), wtid);
      cutlass::arch::cpasync_barrier_arrive_noinc(&full[s]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  const int c = wg - 1;
  unsigned char* stage = staging + c * S::kStageBytes;
  const RowBias bias = row_bias(p, wtid);
  const uint64_t a_desc = make_desc(wts, kHalfOffset, 128);
  float acc[kAcc];
  for (int j = c; j < nj; j += 2) {
    const int s = j % kWsStages;
    Barrier::wait(&full[s], (j / kWsStages) & 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async's writes, for wgmma's reads
    issue_ss<R>(a_desc, ring + s * S::kBytes, acc);
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
    Barrier::arrive(&empty[s]);  // this thread's part of the MMAs is done with the buffer
    bar_sync(1 + wg, 128);       // the whole warpgroup is done reading the staging tile
    store_tile<R>(p, acc, stage, unit_of(j), bias, wg, wtid);
  }
#else
  __trap();  // launch_wgmma_conv launches this on sm_90 alone
#endif
}

// Per device ordinal: SMs once the shared-memory limit is set, 0 until known, -1 when the device
// is not sm_90 or has no code for the kernel.
constexpr int kMaxDevices = 64;
std::atomic<int> g_sms[kMaxDevices];

Result<int> device_sms() {
  int device = 0;
  GPULAB_CUDA_TRY(cudaGetDevice(&device));
  std::atomic<int>* known = device >= 0 && device < kMaxDevices ? &g_sms[device] : nullptr;
  const int before = known ? known->load(std::memory_order_relaxed) : 0;
  if (before > 0) return before;
  const Status unsupported =
      Status::unsupported("wgmma_conv: needs an sm_90 GPU (Hopper) and this gpulab's sm_90a code.");
  if (before < 0) return unsupported;
  int major = 0, minor = 0, sms = 0;
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaError_t e = major == 9 && minor == 0 ? cudaSuccess : cudaErrorNoKernelImageForDevice;
  // Every kernel's shared-memory limit, the sizes its launch below asks for.
  const auto allow = [&e](auto kernel, size_t bytes) {
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  };
  allow(wgmma_conv3x3_kernel<2>, smem_bytes<2>());
  allow(wgmma_conv3x3_kernel<3>, smem_bytes<3>());
  allow(wgmma_conv3x3_rs_kernel<14, 2>, rs_smem_bytes<14, 2>());
  allow(wgmma_conv3x3_rs_kernel<14, 5>, rs_smem_bytes<14, 5>());
  allow(wgmma_conv3x3_rs_kernel<16, 2>, rs_smem_bytes<16, 2>());
  allow(wgmma_conv3x3_ps_kernel<14>, ps_smem_bytes<14>());
  allow(wgmma_conv3x3_ws_kernel<14>, ws_smem_bytes<14>());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it so that later checks do not report it
    if (known) known->store(-1, std::memory_order_relaxed);
    return unsupported;
  }
  if (known) known->store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace

Status validate_wgmma_conv(const DirectConvDesc& d) {
  const auto& a = d.attrs;
  if (d.dtype != DataType::kFloat16)
    return Status::unsupported("wgmma_conv: float16 storage only, not " + std::string(dtype_name(d.dtype)) +
                               ".");
  if (d.c != kC || d.k != kC || a.groups != 1)
    return Status::unsupported("wgmma_conv: 64 input and 64 output channels, groups 1, only " + describe(d) +
                               ".");
  if (a.kernel.h != 3 || a.kernel.w != 3 || a.stride.h != 1 || a.stride.w != 1 || a.dilation.h != 1 ||
      a.dilation.w != 1 || a.pads.top != 1 || a.pads.left != 1 || a.pads.bottom != 1 || a.pads.right != 1)
    return Status::unsupported("wgmma_conv: 3x3 kernels with stride 1, dilation 1 and pads 1 only " +
                               describe(d) + ".");
  if (d.out_h != d.h || d.out_w != d.w)
    return Status::invalid_argument("wgmma_conv: output size differs from the convolution's " + describe(d) +
                                    ".");
  if (d.n < 1 || d.h < 1 || d.w < 1 || d.h > INT_MAX / 2 || d.w > INT_MAX / 2)
    return Status::invalid_argument("wgmma_conv: sizes must be positive and below 2^30 " + describe(d) + ".");
  const int64_t blocks = d.n * ((d.h + kBlock - 1) / kBlock) * ((d.w + kBlock - 1) / kBlock);
  if (blocks > INT_MAX / 2)
    return Status::unsupported("wgmma_conv: more than 2^30 output blocks of 8x8 pixels " + describe(d) + ".");
  return Status::ok();
}

bool wgmma_conv_supports(const DirectConvDesc& desc) {
  return validate_wgmma_conv(desc).is_ok() && device_sms().is_ok();
}

std::span<const std::string_view> wgmma_conv_tactics() {
  return kTactics;
}

Status launch_wgmma_conv(std::string_view tactic, const DirectConvDesc& d, const void* x, const void* weight,
                         const void* bias, const void* residual, void* y, cudaStream_t stream) {
  if (std::find(std::begin(kTactics), std::end(kTactics), tactic) == std::end(kTactics))
    return Status::invalid_argument("wgmma_conv: unknown tactic \"" + std::string(tactic) + "\".");
  GPULAB_TRY(validate_wgmma_conv(d));
  const bool has_residual = d.attrs.has_residual;
  if (x == nullptr || weight == nullptr || y == nullptr || (has_residual && residual == nullptr))
    return Status::invalid_argument("wgmma_conv: null input, weight, residual or output pointer.");
  using kernels::is_aligned;
  if (!is_aligned(x, 16) || !is_aligned(weight, 16) || !is_aligned(y, 16) ||
      (has_residual && !is_aligned(residual, 16)) || !is_aligned(bias, d.bias_float32 ? 4 : 2))
    return Status::invalid_argument(
        "wgmma_conv: input, weight, residual and output must be 16-byte aligned, the bias aligned to its "
        "element size.");
  GPULAB_ASSIGN_OR_RETURN(const int sms, device_sms());
  Params p{};
  p.x = static_cast<const __half*>(x);
  p.weight = static_cast<const __half*>(weight);
  p.bias = bias;
  p.bias_f32 = d.bias_float32;
  p.residual = has_residual ? static_cast<const __half*>(residual) : nullptr;
  p.y = static_cast<__half*>(y);
  p.h = static_cast<int>(d.h);
  p.w = static_cast<int>(d.w);
  p.blocks_x = static_cast<int>((d.w + kBlock - 1) / kBlock);
  p.blocks_per_image = static_cast<int>((d.h + kBlock - 1) / kBlock) * p.blocks_x;
  p.blocks = static_cast<int>(d.n * p.blocks_per_image);  // validate bounds it
  p.units = (p.blocks + kUnitBlocks - 1) / kUnitBlocks;
  const auto& a = d.attrs;
  p.act = a.activation == Activation::kRelu   ? kernels::ActParams{Activation::kRelu, 0.0f, INFINITY}
          : a.activation == Activation::kClip ? kernels::ActParams{Activation::kClip, a.clip_min, a.clip_max}
                                              : kernels::ActParams{Activation::kNone, -INFINITY, INFINITY};
  if (tactic == kTactics[0]) {
    wgmma_conv3x3_kernel<2><<<std::min(sms, (p.units + 1) / 2), 256, smem_bytes<2>(), stream>>>(p);
  } else if (tactic == kTactics[1]) {
    wgmma_conv3x3_kernel<3><<<std::min(sms, (p.units + 2) / 3), 384, smem_bytes<3>(), stream>>>(p);
  } else {
    // Units of R x 8 output pixels, counted in the same fields.
    const int r = tactic == kTactics[3] ? 16 : 14;
    p.blocks_per_image = static_cast<int>((d.h + r - 1) / r) * p.blocks_x;
    p.blocks = p.units = static_cast<int>(d.n * p.blocks_per_image);
    const int grid = std::min(sms, (p.units + 1) / 2);
    if (tactic == kTactics[4])
      wgmma_conv3x3_ps_kernel<14><<<grid, 256, ps_smem_bytes<14>(), stream>>>(p);
    else if (tactic == kTactics[5])
      wgmma_conv3x3_rs_kernel<14, 5><<<grid, 256, rs_smem_bytes<14, 5>(), stream>>>(p);
    else if (tactic == kTactics[6])  // one block of a producer and two consumers per SM
      wgmma_conv3x3_ws_kernel<14><<<std::min(sms, p.units), 384, ws_smem_bytes<14>(), stream>>>(p);
    else if (r == 14)
      wgmma_conv3x3_rs_kernel<14, 2><<<grid, 256, rs_smem_bytes<14, 2>(), stream>>>(p);
    else
      wgmma_conv3x3_rs_kernel<16, 2><<<grid, 256, rs_smem_bytes<16, 2>(), stream>>>(p);
  }
  return kernels::check_launch("launch_wgmma_conv", "wgmma_conv3x3_kernel");
}

}  // namespace gpulab::cuda
