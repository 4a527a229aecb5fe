// The 64-channel 3x3 convolution on wgmma (wgmma_conv.h says what and why).
//
// Two variants, each a tactic (tactic timing keeps the fastest per layer). Both solve the
// transposed problem (before wgmma_conv3x3_rs_kernel): units of 14 output rows x 8 columns, one
// m64n112k16 wgmma per K step, channels x pixels.
//   rs14      the weights in registers; each of two warpgroups per thread block loops over its
//             units with two patch buffers, so that the next unit's patch arrives (cp.async, zero
//             fill outside the image) while the current one computes. The fastest at batch 8.
//   ws14      warp-specialised (before wgmma_conv3x3_ws_kernel), the weights in shared memory: a
//             producer warpgroup keeps a ring of six patch buffers full, two consumer warpgroups
//             take turns with MMAs and epilogues. The fastest on layer1 at batch 1, 32, 128, 256.
// (Earlier versions also had wg2/wg3, pixels x channels on m64n64k16; rs16 and rs14r5, rs14 with
// N = 128 or five buffers; ps14, rs14 with the weights in shared memory and two accumulator sets.
// None of them won a layer at batch 1 to 256 in tactic timing on the H200, and fab23d3 removed
// them. ws14 with three consumers, and with the residual loaded while the MMAs run, moved layer1
// by less than 1%. docs/performance.md's "what we tried" lists them.)
//
// Shared memory:
//   weights  per K step of 16: two K halves [64 output channels][16 bytes] (1 KB each; the
//            descriptor's leading offset between them, its stride offset 128 bytes between groups
//            of 8 rows);
//   patches  [8 channel chunks][16][10][16 bytes], each chunk plane padded to 64 bytes past a
//            multiple of 128.
// The two K halves of an operand lie 64 bytes past a multiple of 128 apart (weight halves 1088
// bytes apart), so that 4 rows of both halves together cover the 32 banks once, should the tensor
// cores read them that way.
#include "backends/cuda/wgmma_conv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "cute/arch/copy_sm80.hpp"
#include "cute/arch/copy_sm90.hpp"
#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/arch/mma_sm90_gmma_ext.hpp"
#include "cutlass/arch/barrier.h"

namespace gpulab::cuda {
namespace {

constexpr int kC = 64;                // input and output channels
constexpr int kBlock = 8;             // output columns per unit: one 8-pixel group of the wgmma's N
constexpr int kPatch = kBlock + 2;    // input patch width
constexpr int kChunks = kC / 8;       // 16-byte channel chunks per pixel
constexpr int kKSteps = 9 * kC / 16;  // 36
// Per K step of the weights: two K halves of 64 rows x 16 bytes, the second 1088 bytes after the
// first (64 past a multiple of 128, like the patch planes), 2112 bytes in all.
constexpr int kHalfOffset = kC * 16 + 64;
constexpr int kStepBytes = kHalfOffset + kC * 16;
constexpr int kWeightBytes = kKSteps * kStepBytes;  // 76032
static_assert(kHalfOffset % 128 == 64, "K halves in opposite halves of the banks");
constexpr int plane_bytes(int pixels) {  // pixels x 16 bytes, padded to 64 past a multiple of 128
  return pixels * 16 + ((64 - pixels * 16 % 128) + 128) % 128;
}
constexpr int kRows = 14;                      // output rows per unit
constexpr int kN = 8 * kRows;                  // pixels per unit: the wgmma's N
constexpr int kPixels = (kRows + 2) * kPatch;  // patch pixels
constexpr int kPlane = plane_bytes(kPixels);   // one chunk plane of the patch
constexpr int kBytes = kChunks * kPlane;       // one patch
// The staged tile: 128 bytes per pixel, its 16-byte chunk c at position c ^ (pixel % 8), so that
// both stmatrix's 8 rows and a quarter warp's 8 chunks of one pixel hit 8 distinct bank groups.
constexpr int kStageBytes = kN * 128;
constexpr int kAcc = kN / 2;                // accumulators per thread
constexpr int kItems = kN * kChunks / 128;  // 16-byte output pieces per thread and unit
static_assert(kStageBytes <= kBytes, "the staged tile fits in a patch buffer");

// The tactics (see the top of the file).
constexpr std::string_view kTactics[] = {"wgmma-conv3x3:rs14", "wgmma-conv3x3:ws14"};

// T: __half or __nv_bfloat16, the storage of x, the weights, the residual and y.
template <typename T>
struct Params {
  const T* x;
  const T* weight;
  const void* bias;  // [64] T or float32, or null
  bool bias_f32;
  const T* residual;  // or null
  T* y;
  int h, w;
  int units_x, units_per_image;  // units per row of units and per image
  int units;                     // in all
  kernels::ActParams act;
};

using kernels::sm90::bar_sync;
using kernels::sm90::make_desc;

struct UnitAt {
  int img, oy0, ox0;
};

// Unit `unit`'s image and top-left output pixel (p.units_x units per row of units,
// p.units_per_image per image).
template <typename T>
__device__ __forceinline__ UnitAt unit_at(const Params<T>& p, int unit) {
  const int img = unit / p.units_per_image, in_img = unit - img * p.units_per_image;
  const int by = in_img / p.units_x;
  return UnitAt{img, by * kRows, (in_img - by * p.units_x) * kBlock};
}

// The input patch of the unit at `at` (kRows + 2 rows of 10 pixels, all 64 channels, zero outside
// the image) into `dst` as 8 chunk planes kPlane bytes apart, by a warpgroup's 128 threads (wtid:
// the thread's index among them). The caller commits the copies.
template <typename T>
__device__ __forceinline__ void copy_patch(const Params<T>& p, unsigned char* dst, UnitAt at, int wtid) {
  static_assert(kPixels % 4 == 0, "whole groups of 4 pixels");
  const T* xi = p.x + static_cast<int64_t>(at.img) * p.h * p.w * kC;
#pragma unroll 1
  for (int e = wtid; e < kPixels * kChunks; e += 128) {
    // 8 consecutive threads: chunks 2 q and 2 q + 1 of 4 consecutive pixels (32-byte global
    // reads; 8 distinct 16-byte bank groups in shared memory, the planes being 64 bytes past a
    // multiple of 128 apart); a warp reads 4 whole pixels.
    const int chunk = 2 * ((e >> 3) & 3) + (e & 1), pix = 4 * (e >> 5) + ((e >> 1) & 3);
    const int py = pix / kPatch, px = pix - py * kPatch;
    const int iy = at.oy0 - 1 + py, ix = at.ox0 - 1 + px;
    const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
    const T* src = inside ? xi + (static_cast<int64_t>(iy) * p.w + ix) * kC + chunk * 8 : xi;
    cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>::copy(
        *reinterpret_cast<const cute::uint128_t*>(src),
        *reinterpret_cast<cute::uint128_t*>(dst + chunk * kPlane + pix * 16), inside);
  }
}

// The weights, once per thread block, by its `threads` threads: global [n][72 chunks] -> shared
// [K step][K half][n] (kStepBytes per step, kHalfOffset between halves). The caller waits.
template <typename T>
__device__ __forceinline__ void copy_weights(const Params<T>& p, unsigned char* wts, int tid, int threads) {
  for (int i = tid; i < kC * 2 * kKSteps; i += threads) {
    const int n = i / (2 * kKSteps), q = i - n * 2 * kKSteps;
    cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>::copy(
        *reinterpret_cast<const cute::uint128_t*>(p.weight + n * 9 * kC + q * 8),
        *reinterpret_cast<cute::uint128_t*>(wts + (q / 2) * kStepBytes + (q % 2) * kHalfOffset + n * 16));
  }
  cute::cp_async_fence();
}

// The problem transposed, D^T = W x P^T: the weights are wgmma's A operand (rs: in registers for
// the whole kernel, 36 K steps x 4 registers per thread; ws: in shared memory), the patch is its B
// operand. A unit is kRows output rows x 8 columns, and one wgmma per K step covers it all: N =
// 8 kRows = 112 pixels, the 8-pixel groups one patch row (160 bytes) apart. Wide N is what the
// tensor cores need to run near their rate (the m64n64 pixels x channels instructions of the first
// version, c9ebd4c, reached 37% of it in Nsight Compute).
// The accumulators hold channels x pixels, so the epilogue adds the bias, rounds to T and
// transposes through shared memory (stmatrix.trans into a staging tile), then adds the residual
// and stores 16-byte pixel rows. (The convolution plus bias is rounded to T before the
// residual is added: the unfused order, one rounding more than a pixels x channels epilogue.)
// Per storage type: the m64n112k16 instructions (A from registers, RS, or shared memory, SS; both
// operands K-major; float32 accumulators) and the packing of two floats into a 32-bit register.
// The two types differ in nothing else: same sizes, same layouts, the tensor cores' same rate.
template <typename T>
struct Types;
template <>
struct Types<__half> {
  using RS =
      cute::SM90::GMMA::MMA_64x112x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  using SS =
      cute::SM90::GMMA::MMA_64x112x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  using T2 = __half2;
  static __device__ __forceinline__ T2 pack(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(T2 v) { return __half22float2(v); }
};
template <>
struct Types<__nv_bfloat16> {
  using RS =
      cute::SM90::GMMA::MMA_64x112x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  using SS =
      cute::SM90::GMMA::MMA_64x112x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ T2 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float2 unpack(T2 v) { return __bfloat1622float2(v); }
};

template <typename T, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t (&a)[4], uint64_t desc, float* d,
                                         std::index_sequence<I...>) {
  Types<T>::RS::fma(a[0], a[1], a[2], a[3], desc, d[I]...);
}

template <typename T, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a_desc, uint64_t b_desc, float* d,
                                         std::index_sequence<I...>) {
  Types<T>::SS::fma(a_desc, b_desc, d[I]...);
}

// A unit's 36 MMAs with both operands in shared memory (the ws variant): the weights at `a_desc`,
// the unit's patch in `patch`; zeroes `acc` first and commits them as one batch.
template <typename T>
__device__ __forceinline__ void issue_ss(uint64_t a_desc, const unsigned char* patch, float (&acc)[kAcc]) {
  const uint64_t b_desc = make_desc(patch, kPlane, kPatch * 16);
#pragma unroll
  for (int r = 0; r < kAcc; ++r) {
    acc[r] = 0.0f;
    cute::warpgroup_fence_operand(acc[r]);
  }
  cute::warpgroup_arrive();
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    const int tap = ks / 4, s = ks % 4, dy = tap / 3, dx = tap % 3;
    const uint64_t off = static_cast<uint64_t>(2 * s * (kPlane / 16) + dy * kPatch + dx);
    wgmma_ss<T>(a_desc + static_cast<uint64_t>(ks * (kStepBytes / 16)), b_desc + off, acc,
                std::make_index_sequence<kAcc>{});
  }
  cute::warpgroup_commit_batch();
}

// The accumulator rows of this thread (wtid: its index in the warpgroup) are output channels c0
// and c0 + 8, c0 = 16 warp + lane / 4; their bias (0 without one).
struct RowBias {
  float lo, hi;
};
template <typename T>
__device__ __forceinline__ RowBias row_bias(const Params<T>& p, int wtid) {
  const int c0 = 16 * (wtid >> 5) + ((wtid & 31) >> 2);
  if (p.bias == nullptr) return {0.0f, 0.0f};
  return {kernels::load_bias<T>(p.bias, p.bias_f32, c0), kernels::load_bias<T>(p.bias, p.bias_f32, c0 + 8)};
}

// Of the units first, first + stride, ... those below `units`: how many.
__device__ __forceinline__ int units_from(int first, int stride, int units) {
  return first < units ? (units - first + stride - 1) / stride : 0;
}

// The epilogue, once `acc` holds unit `unit`'s result and `stage` (kStageBytes of shared memory) is
// free for the whole warpgroup (the caller's barrier): bias, rounding to T, transposition
// through `stage`, residual, activation and the stores of the unit's kRows x 8 output pixels.
// Leaves `stage` being read; the caller synchronizes the warpgroup before writing it again.
template <typename T>
__device__ __forceinline__ void store_tile(const Params<T>& p, const float (&acc)[kAcc], unsigned char* stage,
                                           int unit, RowBias bias, int wg, int wtid) {
  const int lane = wtid & 31, c16 = 16 * (wtid / 32);  // this warp's 16 accumulator rows (channels)
  // Accumulator (channel c16 + lane / 4 + 8 h, pixel 8 j + 2 (lane % 4) + e) = acc[4 j + 2 h + e].
  // Per output row j and channel half h, an 8x8 matrix (channels x pixels) in mma fragment order;
  // stored transposed, each of its rows is one pixel's 8 channels, 16 bytes (swizzled, see
  // kStageBytes).
#pragma unroll
  for (int j = 0; j < kRows; j += 2) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int jj = j + q / 2, h = q % 2;
      const float bb = h ? bias.hi : bias.lo;
      const typename Types<T>::T2 v = Types<T>::pack(acc[4 * jj + 2 * h] + bb, acc[4 * jj + 2 * h + 1] + bb);
      r[q] = *reinterpret_cast<const uint32_t*>(&v);
    }
    const int q = lane >> 3, i = lane & 7;  // this lane addresses row i of matrix q
    cute::SM90_U16x8_STSM_T::copy(r[0], r[1], r[2], r[3],
                                  *reinterpret_cast<cute::uint128_t*>(stage + (8 * (j + q / 2) + i) * 128 +
                                                                      ((c16 / 8 + q % 2) ^ i) * 16));
  }
  bar_sync(1 + wg, 128);  // the staged tile is complete

  // Read out: 16 bytes (8 channels of a pixel) per item; the residual's loads first, all at once.
  const UnitAt t = unit_at(p, unit);
  int64_t at[kItems];
  bool ok[kItems];
  uint4 res[kItems];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int item = wtid + 128 * it, pix = item / kChunks, chunk = item % kChunks;
    const int oy = t.oy0 + pix / 8, ox = t.ox0 + pix % 8;
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
    using T2 = typename Types<T>::T2;
    const T2* cv = reinterpret_cast<const T2*>(&conv);
    const T2* rv = reinterpret_cast<const T2*>(&res[it]);
    uint4 out;
    T2* ov = reinterpret_cast<T2*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 c = Types<T>::unpack(cv[e]), r = Types<T>::unpack(rv[e]);
      ov[e] = Types<T>::pack(kernels::apply_act(c.x + r.x, p.act), kernels::apply_act(c.y + r.y, p.act));
    }
    *reinterpret_cast<uint4*>(p.y + at[it]) = out;
  }
}

// The rs variant: two warpgroups per thread block, each looping over its units with two patch
// buffers, the weights in registers; the epilogue stages in the unit's own patch buffer (free once
// the MMAs are done).
constexpr int kRsBuffers = 2;
constexpr size_t kRsSmemBytes = 2 * kRsBuffers * static_cast<size_t>(kBytes);

template <typename T>
__global__ void __launch_bounds__(256, 1) wgmma_conv3x3_rs_kernel(Params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kWarpgroups = 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, lane = tid & 31;
  const int wwarp = wtid / 32, g = lane >> 2, t4 = lane & 3;
  unsigned char* patches = smem + wg * kRsBuffers * kBytes;

  // The weights as A fragments: rows (output channels) 16 wwarp + g and + 8, K pairs t4 and t4 + 4
  // of each step of 16 (KRSC: K = tap * 64 + channel, contiguous per output channel).
  uint32_t wa[kKSteps][4];
  {
    const T* w0 = p.weight + (16 * wwarp + g) * 9 * kC + 2 * t4;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      wa[ks][0] = *reinterpret_cast<const uint32_t*>(w0 + 16 * ks);
      wa[ks][1] = *reinterpret_cast<const uint32_t*>(w0 + 8 * 9 * kC + 16 * ks);
      wa[ks][2] = *reinterpret_cast<const uint32_t*>(w0 + 16 * ks + 8);
      wa[ks][3] = *reinterpret_cast<const uint32_t*>(w0 + 8 * 9 * kC + 16 * ks + 8);
    }
  }
  const RowBias bias = row_bias(p, wtid);

  // Unit u's patch into buffer `buf`; always one commit group, empty past the last unit.
  auto fetch = [&](int u, int buf) {
    if (u < p.units) copy_patch(p, patches + buf * kBytes, unit_at(p, u), wtid);
    cute::cp_async_fence();
  };

  // The warpgroup's units are first + k stride; unit k's patch goes into buffer k % kRsBuffers,
  // kRsBuffers - 1 units ahead of the one computing.
  const int stride = gridDim.x * kWarpgroups, first = blockIdx.x * kWarpgroups + wg;
#pragma unroll
  for (int b = 0; b < kRsBuffers - 1; ++b) fetch(first + b * stride, b);
  int buf = 0;
  for (int unit = first; unit < p.units; unit += stride, buf = buf + 1 == kRsBuffers ? 0 : buf + 1) {
    unsigned char* cur = patches + buf * kBytes;
    // Into the buffer of the unit before, read out before the barrier that ended its iteration.
    fetch(unit + (kRsBuffers - 1) * stride, buf == 0 ? kRsBuffers - 1 : buf - 1);
    cute::cp_async_wait<kRsBuffers - 1>();  // this unit's group
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    bar_sync(1 + wg, 128);  // the whole warpgroup's copies of this unit have landed

    const uint64_t b_desc = make_desc(cur, kPlane, kPatch * 16);
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
      const uint64_t off = static_cast<uint64_t>(2 * s * (kPlane / 16) + dy * kPatch + dx);
      wgmma_rs<T>(wa[ks], b_desc + off, acc, std::make_index_sequence<kAcc>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
    bar_sync(1 + wg, 128);  // every warp's MMAs are done with `cur`: it becomes the staging area

    store_tile(p, acc, cur, unit, bias, wg, wtid);
    bar_sync(1 + wg, 128);  // `cur` is read out: the next iteration's fetch may refill it
  }
#else
  __trap();  // launch_wgmma_conv launches this on sm_90 alone
#endif
}

// The warp-specialised variant ("ws"): the weights in shared memory (wgmma's A operand from a
// descriptor) and the roles split across three warpgroups, after the structure of CUTLASS's Hopper
// kernels. Warpgroup 0 is the producer: it keeps a ring of kWsStages patch buffers full with
// cp.async, signalling each buffer's arrival on its `full` mbarrier (cp.async.mbarrier.arrive: the
// arrival lands when the copies have). Warpgroups 1 and 2 are consumers, taking the block's units
// in turn: wait for the unit's buffer, run its MMAs, release the buffer on its `empty` mbarrier as
// soon as they are done, then run the epilogue through a staging tile of their own while the other
// consumer's MMAs run. So neither the loads nor the epilogue sit between one unit's MMAs and the
// next, and the ring lets the loads run several units ahead.
constexpr int kWsConsumers = 2, kWsStages = 6;
constexpr size_t kWsSmemBytes = kWeightBytes + kWsStages * static_cast<size_t>(kBytes) +
                                kWsConsumers * static_cast<size_t>(kStageBytes) +
                                2 * kWsStages * sizeof(uint64_t);
static_assert(kWsSmemBytes <= 227 * 1024, "one block per SM fits");

template <typename T>
__global__ void __launch_bounds__(128 * (1 + kWsConsumers), 1) wgmma_conv3x3_ws_kernel(Params<T> p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Barrier = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(128) unsigned char smem[];
  // wg through a shuffle, so that ptxas knows it is warp-uniform, and so the branches on it, and
  // does not serialize the wgmmas behind them.
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  unsigned char* wts = smem;
  unsigned char* ring = smem + kWeightBytes;
  unsigned char* staging = ring + kWsStages * kBytes;  // consumer c's at c * kStageBytes
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + kWsConsumers * kStageBytes);
  uint64_t* empty = full + kWsStages;
  if (tid == 0) {
    for (int s = 0; s < kWsStages; ++s) {
      Barrier::init(&full[s], 128);   // the producer's threads, each once its copies have landed
      Barrier::init(&empty[s], 128);  // the consuming warpgroup's threads, once its MMAs are done
    }
  }
  copy_weights(p, wts, tid, 128 * (1 + kWsConsumers));
  cute::cp_async_wait<0>();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();  // the weights and the barriers, for everyone

  // The block's units: blockIdx.x + j gridDim.x, j < nj; unit j uses ring buffer j % kWsStages
  // for the (j / kWsStages)-th time, and consumer j % kWsConsumers.
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const int nj = units_from(block, blocks, p.units);
  const auto unit_of = [&](int j) { return block + j * blocks; };
  if (wg == 0) {
    for (int j = 0; j < nj; ++j) {
      const int s = j % kWsStages, use = j / kWsStages;
      if (use > 0) Barrier::wait(&empty[s], (use - 1) & 1);
      copy_patch(p, ring + s * kBytes, unit_at(p, unit_of(j)), wtid);
      cutlass::arch::cpasync_barrier_arrive_noinc(&full[s]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  const int c = wg - 1;
  unsigned char* stage = staging + c * kStageBytes;
  const RowBias bias = row_bias(p, wtid);
  const uint64_t a_desc = make_desc(wts, kHalfOffset, 128);
  float acc[kAcc];
  for (int j = c; j < nj; j += kWsConsumers) {
    const int s = j % kWsStages;
    Barrier::wait(&full[s], (j / kWsStages) & 1);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async's writes, for wgmma's reads
    issue_ss<T>(a_desc, ring + s * kBytes, acc);
    cute::warpgroup_wait<0>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
    Barrier::arrive(&empty[s]);  // this thread's part of the MMAs is done with the buffer
    bar_sync(1 + wg, 128);       // the whole warpgroup is done reading the staging tile
    store_tile(p, acc, stage, unit_of(j), bias, wg, wtid);
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
  allow(wgmma_conv3x3_rs_kernel<__half>, kRsSmemBytes);
  allow(wgmma_conv3x3_ws_kernel<__half>, kWsSmemBytes);
  allow(wgmma_conv3x3_rs_kernel<__nv_bfloat16>, kRsSmemBytes);
  allow(wgmma_conv3x3_ws_kernel<__nv_bfloat16>, kWsSmemBytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; clear it so that later checks do not report it
    if (known) known->store(-1, std::memory_order_relaxed);
    return unsupported;
  }
  if (known) known->store(sms, std::memory_order_relaxed);
  return sms;
}

// The kernel launch of one storage type, once launch_wgmma_conv has checked the arguments.
template <typename T>
void launch(std::string_view tactic, const DirectConvDesc& d, const void* x, const void* weight,
            const void* bias, const void* residual, void* y, int sms, cudaStream_t stream) {
  Params<T> p{};
  p.x = static_cast<const T*>(x);
  p.weight = static_cast<const T*>(weight);
  p.bias = bias;
  p.bias_f32 = d.bias_float32;
  p.residual = d.attrs.has_residual ? static_cast<const T*>(residual) : nullptr;
  p.y = static_cast<T*>(y);
  p.h = static_cast<int>(d.h);
  p.w = static_cast<int>(d.w);
  p.units_x = static_cast<int>((d.w + kBlock - 1) / kBlock);
  p.units_per_image = static_cast<int>((d.h + kRows - 1) / kRows) * p.units_x;
  p.units = static_cast<int>(d.n * p.units_per_image);  // validate bounds it
  const auto& a = d.attrs;
  p.act = a.activation == Activation::kRelu   ? kernels::ActParams{Activation::kRelu, 0.0f, INFINITY}
          : a.activation == Activation::kClip ? kernels::ActParams{Activation::kClip, a.clip_min, a.clip_max}
                                              : kernels::ActParams{Activation::kNone, -INFINITY, INFINITY};
  // One block per SM: two warpgroups (rs), or a producer and two consumers (ws).
  if (tactic == kTactics[0])
    wgmma_conv3x3_rs_kernel<T><<<std::min(sms, (p.units + 1) / 2), 256, kRsSmemBytes, stream>>>(p);
  else
    wgmma_conv3x3_ws_kernel<T><<<std::min(sms, p.units), 128 * (1 + kWsConsumers), kWsSmemBytes, stream>>>(p);
}

}  // namespace

Status validate_wgmma_conv(const DirectConvDesc& d) {
  const auto& a = d.attrs;
  if ((d.dtype != DataType::kFloat16 && d.dtype != DataType::kBFloat16) || input_dtype(d) != d.dtype)
    return Status::unsupported("wgmma_conv: float16 or bfloat16 storage (x too) only, not " +
                               std::string(dtype_name(d.dtype)) + ".");
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
  if (d.dtype == DataType::kBFloat16)
    launch<__nv_bfloat16>(tactic, d, x, weight, bias, residual, y, sms, stream);
  else
    launch<__half>(tactic, d, x, weight, bias, residual, y, sms, stream);
  return kernels::check_launch("launch_wgmma_conv", "wgmma_conv3x3_kernel");
}

}  // namespace gpulab::cuda
