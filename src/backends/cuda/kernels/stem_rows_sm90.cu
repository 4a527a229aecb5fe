// The fused stem's kernel for sm_90 (StemKernel::kWgmma; compiled for sm_90a alone). Same
// computation as stem.cu's mma.sync kernel (space-to-depth image -> 4x4/1 convolution + bias
// + ReLU -> 3x3/2 max pool -> float16 NHWC), organised so that the image loads, the rounding and
// the pool run beside the MMAs rather than between them:
//
// - The problem is transposed, D^T = W x P^T: the 64 output channels are wgmma's M, the
//   convolution pixels its N. The weights are the A operand, in registers for the whole kernel
//   (16 taps x 4 registers per thread); the space-to-depth image is the B operand, read by the
//   MMAs straight from shared memory through descriptors. There is no im2col and no operand load
//   through registers.
// - A work item is a strip of one image: up to 56 pooled columns (113 convolution columns,
//   computed as N = 120) by a run of pooled rows. It is computed one convolution row at a time:
//   16 m64n120k16 MMAs, one per 4x4 tap, each reading 16 channels of 120 consecutive
//   space-to-depth pixels of space-to-depth row cy + ty from offset tx. Shared memory holds each
//   space-to-depth row as two planes of 8 channels (16 bytes per pixel), which is the canonical
//   K-major layout: 8-pixel core matrices 128 bytes apart, the planes one K half apart.
// - The max pool happens in registers: each thread holds 2 channels x pairs of adjacent columns of
//   a row, so the pool's horizontal max takes one shuffle per value, and the vertical max runs
//   along the rows (each pooled row is the max of three convolution rows, the first shared with
//   the pooled row above). Bias and ReLU commute with the max and are applied once per pooled
//   pixel; pixels outside the convolution's output count as -inf. A pooled row goes out through
//   a staging tile in 128-byte pixel rows.
// - Warp specialisation, after CUTLASS's Hopper kernels: warpgroup 0 produces, warpgroups 1 and 2
//   consume, each on its own items. Two producer warps per consumer copy image rows (float32,
//   cp.async, zero-filled outside the image) several rows ahead into a raw ring, round them to
//   float16 in space-to-depth order into a ring of 8 space-to-depth rows, and signal each row on
//   its `full` mbarrier; the consumer releases a row on its `empty` mbarrier once its last
//   convolution row (cy = the row's index) has run. The consumers take turns issuing a row's MMAs
//   (consumer_rows), so that while one consumer's pool epilogue runs, the other's MMAs keep the
//   tensor cores busy. setmaxnreg moves registers from the producer to the
//   consumers (56 / 224).
#include "backends/cuda/kernels/sm90.cuh"
#include "backends/cuda/kernels/stem_kernel.cuh"

#include <algorithm>
#include <utility>

#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/arch/mma_sm90_gmma_ext.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"

namespace gpulab::kernels::stem {
namespace {

constexpr int kN = 120;                       // convolution columns per MMA (>= 2 * 56 + 1)
constexpr int kS2dCols = kN + kStemTaps - 1;  // 123 space-to-depth pixels read per row
constexpr int kPlaneBytes = 128 * 16;         // one plane: 8 channels of 128 pixels
constexpr int kRowBytes = 2 * kPlaneBytes;    // a space-to-depth row: channels 0..7, 8..15
constexpr int kRing = 8;                      // space-to-depth rows per consumer
constexpr int kRawStages = 6;                 // image rows in flight: kRawStages - 1 ahead
constexpr int kRowCols = 2 * kS2dCols + 6;    // image columns per raw row (and alignment slack)
constexpr int kRowPieces = kRowCols / 4;      // 16-byte pieces per raw row
constexpr int kRawFloats = static_cast<int>(kStemMaxChannels) * 2 * kRowCols;  // per stage
constexpr int kStagePitch = 72;                                  // halves per staged pooled pixel
constexpr int kStageBytes = kRowsStripPooled * kStagePitch * 2;  // one pooled row, 64 channels
constexpr int kPooledBlocks = kRowsStripPooled / 4;              // n8 blocks holding pooled columns
constexpr int kAcc = kN / 2;                                     // accumulators per thread
constexpr int kTaps = static_cast<int>(kStemTaps * kStemTaps);
constexpr int kProducerThreads = 64;  // two warps per consumer
constexpr size_t kConsumerBytes = kRing * kRowBytes + kRawStages * kRawFloats * sizeof(float) +
                                  2 * kStageBytes + 2 * kRing * sizeof(uint64_t);
constexpr size_t kRowsSmemBytes = kRowsConsumers * kConsumerBytes;

static_assert(kRowCols % 4 == 0 && kRowCols >= 2 * kS2dCols + 3, "16-byte pieces, alignment slack");
static_assert(kN % 8 == 0 && kN >= 2 * kRowsStripPooled + 1 && kS2dCols <= 128, "a strip fits the MMA");
static_assert(kConsumerBytes % 16 == 0 && kRowsSmemBytes <= 227 * 1024, "one block per SM fits");
static_assert(kStemOutChannels == 64 && kStemS2dChannels == 16, "m64, one k16 per tap");

using Mma =
    cute::SM90::GMMA::MMA_64x120x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
using Barrier = cutlass::arch::ClusterBarrier;

using sm90::bar_sync;
using sm90::make_desc;

__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Named barriers: 1 + c, consumer c's staging tile; 3 + c, producer pair c's raw ring; kTurn0 and
// kTurn1, the consumers' turns.
constexpr int kTurn0 = 5, kTurn1 = 6;

template <size_t... I>
__device__ __forceinline__ void mma(const uint32_t (&a)[4], uint64_t desc, float (&d)[kAcc],
                                    cute::SM90::GMMA::ScaleOut scale, std::index_sequence<I...>) {
  Mma::fma(a[0], a[1], a[2], a[3], desc, d[I]..., scale);
}

// A work item: image `img`, pooled rows oy0..oy1-1, pooled columns from ox0 (convolution column
// cx0 = 2 ox0 - 1 is the strip's column 0); it computes convolution rows cy_lo..cy_hi and reads
// space-to-depth rows cy_lo..cy_hi + 3.
struct Item {
  int img, ox0, cx0, oy0, oy1, cy_lo, cy_hi;
};

__device__ __forceinline__ Item item_at(const RowsParams& p, int item) {
  const int strip = item % p.strips, rest = item / p.strips;
  const int chunk = rest % p.chunks;
  Item it;
  it.img = rest / p.chunks;
  it.ox0 = strip * kRowsStripPooled;
  it.cx0 = 2 * it.ox0 - 1;
  it.oy0 = chunk * p.chunk_rows;
  it.oy1 = min(it.oy0 + p.chunk_rows, p.out_h);
  it.cy_lo = max(2 * it.oy0 - 1, 0);
  it.cy_hi = min(2 * it.oy1 - 1, p.conv_h - 1);
  return it;
}

// The convolution rows of a consumer's items (first, first + stride, ...). A block's two
// consumers take turns issuing their rows' MMAs, consumer 0 first, while both have rows left: the
// tensor cores run one consumer's row while the other consumer pools, as in CUTLASS's ping-pong
// kernels (issued together, the two rows' MMAs would interleave and both epilogues would then
// leave the tensor cores idle).
__device__ __forceinline__ int consumer_rows(const RowsParams& p, int first, int stride) {
  int rows = 0;
  for (int item = first; item < p.items; item += stride) {
    const Item it = item_at(p, item);
    rows += it.cy_hi - it.cy_lo + 1;
  }
  return rows;
}

// Walks the space-to-depth rows of a consumer's items (first, first + stride, ...) in order.
struct RowCursor {
  int item, y;
  Item it;
  __device__ bool valid(const RowsParams& p) const { return item < p.items; }
  __device__ void start(const RowsParams& p) {
    if (valid(p)) {
      it = item_at(p, item);
      y = it.cy_lo;
    }
  }
  __device__ void next(const RowsParams& p, int stride) {
    if (++y > it.cy_hi + kStemTaps - 1) {
      item += stride;
      start(p);
    }
  }
};

// The image rows of space-to-depth row `y` of an item (2 per channel), from image column
// 2 cx0 - pad_left on, into `raw` ([channel][dy][kRowCols] floats) by the producer pair's 64
// threads: 16-byte pieces from that column rounded down to a multiple of 4 (p.vec16), else 4-byte
// ones from the column itself; zero outside the image. The caller commits the copies.
__device__ __forceinline__ void fetch_row(const RowsParams& p, const Item& it, int y, float* raw, int ptid) {
  const float* xi = p.x + static_cast<int64_t>(it.img) * p.c * p.h * p.w;
  const int row0 = 2 * y - p.pad_top, col0 = 2 * it.cx0 - p.pad_left;
  if (p.vec16) {
    const int first = col0 & ~3;
#pragma unroll 1
    for (int e = ptid; e < p.c * 2 * kRowPieces; e += kProducerThreads) {
      const int row = e / kRowPieces, piece = e - row * kRowPieces;  // row: ci * 2 + dy
      const int iy = row0 + (row & 1), ix = first + 4 * piece;
      const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
      const float* src = inside ? xi + ((row >> 1) * p.h + iy) * p.w + ix : xi;
      cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<cute::uint128_t, cute::uint128_t>::copy(
          *reinterpret_cast<const cute::uint128_t*>(src),
          *reinterpret_cast<cute::uint128_t*>(raw + row * kRowCols + 4 * piece), inside);
    }
  } else {
    constexpr int kCols = 2 * kS2dCols;
#pragma unroll 1
    for (int e = ptid; e < p.c * 2 * kCols; e += kProducerThreads) {
      const int row = e / kCols, col = e - row * kCols;
      const int iy = row0 + (row & 1), ix = col0 + col;
      const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
      const float* src = inside ? xi + ((row >> 1) * p.h + iy) * p.w + ix : xi;
      cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<uint32_t, uint32_t>::copy(
          *reinterpret_cast<const uint32_t*>(src), *reinterpret_cast<uint32_t*>(raw + row * kRowCols + col),
          inside);
    }
  }
}

// `raw` rounded to float16 into a space-to-depth row of the ring: pixel x's channel
// (dy * 2 + dx) * C + ci (12..15 zero) in plane 0 (channels 0..7) and plane 1 (8..15).
template <int C>
__device__ __forceinline__ void convert_row(const float* raw, unsigned char* row, int ptid) {
#pragma unroll 1
  for (int x = ptid; x < kS2dCols; x += kProducerThreads) {
    __align__(16) __half v[16];
    s2d_pixel<C, 2 * kRowCols, kRowCols>(raw + 2 * x, v);
#pragma unroll
    for (int ch = kDataChannels; ch < 16; ++ch) v[ch] = __float2half(0.0f);
    *reinterpret_cast<uint4*>(row + x * 16) = *reinterpret_cast<const uint4*>(v);
    *reinterpret_cast<uint4*>(row + kPlaneBytes + x * 16) = *reinterpret_cast<const uint4*>(v + 8);
  }
}

// TOut: __half, or __nv_bfloat16 rounded from the float16 result, or Q8Out quantized from it
// (FusedStemDesc::out_dtype; stem_out).
template <typename TOut>
__global__ void __launch_bounds__(128 * (1 + kRowsConsumers), 1) fused_stem_rows_kernel(RowsParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  // Consumer c's part of shared memory (and its producer pair's).
  const auto part = [&](int c) { return smem + c * kConsumerBytes; };
  const auto ring_of = [&](int c) { return part(c); };
  const auto raw_of = [&](int c) { return reinterpret_cast<float*>(part(c) + kRing * kRowBytes); };
  const auto stage_of = [&](int c) {
    return reinterpret_cast<TOut*>(part(c) + kRing * kRowBytes + kRawStages * kRawFloats * sizeof(float));
  };
  const auto full_of = [&](int c) {
    return reinterpret_cast<uint64_t*>(reinterpret_cast<unsigned char*>(stage_of(c)) + 2 * kStageBytes);
  };
  if (tid == 0) {
    for (int c = 0; c < kRowsConsumers; ++c)
      for (int s = 0; s < kRing; ++s) {
        Barrier::init(&full_of(c)[s], kProducerThreads);  // the producer pair, once the row is written
        Barrier::init(&full_of(c)[kRing + s], 128);       // the consumer, once its MMAs are done with it
      }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  const int stride = kRowsConsumers * static_cast<int>(gridDim.x);
  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<56>();
    const int c = __shfl_sync(0xffffffffu, tid / kProducerThreads, 0), ptid = tid % kProducerThreads;
    unsigned char* ring = ring_of(c);
    float* raw = raw_of(c);
    uint64_t* full = full_of(c);
    uint64_t* empty = full + kRing;
    RowCursor fetch{kRowsConsumers * static_cast<int>(blockIdx.x) + c, 0, {}};
    fetch.start(p);
    RowCursor conv = fetch;
#pragma unroll 1
    for (int s = 0; s < kRawStages - 1; ++s) {
      if (fetch.valid(p)) {
        fetch_row(p, fetch.it, fetch.y, raw + s * kRawFloats, ptid);
        fetch.next(p, stride);
      }
      cute::cp_async_fence();
    }
#pragma unroll 1
    for (int q = 0; conv.valid(p); ++q, conv.next(p, stride)) {
      cute::cp_async_wait<kRawStages - 2>();  // this thread's copies of row q
      bar_sync(3 + c, kProducerThreads);      // the pair's copies of row q; row q - 1 converted
      if (fetch.valid(p)) {
        fetch_row(p, fetch.it, fetch.y, raw + (q + kRawStages - 1) % kRawStages * kRawFloats, ptid);
        fetch.next(p, stride);
      }
      cute::cp_async_fence();
      const int s = q % kRing;
      if (q >= kRing) Barrier::wait(&empty[s], (q / kRing - 1) & 1);
      const float* r = raw + (q % kRawStages) * kRawFloats;
      // The first column within `raw`: image column 2 cx0 - pad_left, less the rounding down.
      const int col0 = 2 * conv.it.cx0 - p.pad_left, off = p.vec16 ? col0 - (col0 & ~3) : 0;
      if (p.c == 3)
        convert_row<3>(r + off, ring + s * kRowBytes, ptid);
      else if (p.c == 2)
        convert_row<2>(r + off, ring + s * kRowBytes, ptid);
      else
        convert_row<1>(r + off, ring + s * kRowBytes, ptid);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, for wgmma's reads
      Barrier::arrive(&full[s]);
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<224>();
  const int c = wg - 1, wtid = tid % 128, lane = tid & 31, ww = wtid / 32, g = lane >> 2, t4 = lane & 3;
  unsigned char* ring = ring_of(c);
  TOut* stage = stage_of(c);
  uint64_t* full = full_of(c);
  uint64_t* empty = full + kRing;

  // The weights as A fragments: rows (output channels) 16 ww + g and + 8, K pairs t4 and t4 + 4
  // of each tap's 16 channels ([k][tap][channel], 256 halves per output channel).
  uint32_t wa[kTaps][4];
  {
    const __half* w0 = p.weight + (16 * ww + g) * kTaps * 16 + 2 * t4;
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      wa[t][0] = load_u32(w0 + 16 * t);
      wa[t][1] = load_u32(w0 + 8 * kTaps * 16 + 16 * t);
      wa[t][2] = load_u32(w0 + 16 * t + 8);
      wa[t][3] = load_u32(w0 + 8 * kTaps * 16 + 16 * t + 8);
    }
  }
  const float bias[2] = {p.bias == nullptr ? 0.0f : load_bias<__half>(p.bias, p.bias_f32, 16 * ww + g),
                         p.bias == nullptr ? 0.0f : load_bias<__half>(p.bias, p.bias_f32, 16 * ww + g + 8)};
  // The space-to-depth rows as B: the 8-pixel core matrices 128 bytes apart (SBO), the K halves
  // one plane apart (LBO).
  const uint64_t desc0 = make_desc(ring, kPlaneBytes, 128);

  const float kNone = -CUDART_INF_F;
  // Turns (see consumer_rows): the two consumers issue their rows' MMAs alternately while both
  // have rows left, consumer 0 first.
  const int first = kRowsConsumers * static_cast<int>(blockIdx.x);
  const int rows0 = consumer_rows(p, first, stride), rows1 = consumer_rows(p, first + 1, stride);
  const int common = min(rows0, rows1);
  float acc[kAcc];
  int q = 0, k = 0, emitted = 0;  // the item's first space-to-depth row in the ring's sequence;
                                  // this consumer's convolution rows and pooled rows so far
#pragma unroll 1
  for (int item = first + c; item < p.items; item += stride) {
    const Item it = item_at(p, item);
    // Whether the strip's convolution columns 1..112 all exist (the usual case: only column 0 can
    // be missing, left of the image); else every column is checked.
    const bool inside = it.cx0 + 2 * kRowsStripPooled < p.conv_w;
    const bool left_edge = it.cx0 < 0 && t4 == 0;
    // Which of this thread's columns are convolution pixels: bit 3 j + e for column 8 j + 2 t4 + e.
    uint64_t valid = 0;
#pragma unroll
    for (int j = 0; j < kPooledBlocks; ++j)
#pragma unroll
      for (int e = 0; e < 3; ++e) {
        const int cx = it.cx0 + 8 * j + 2 * t4 + e;
        valid |= static_cast<uint64_t>(cx >= 0 && cx < p.conv_w) << (3 * j + e);
      }
    // The vertical pool's running max: after an even convolution row 2 oy, the max of rows
    // 2 oy - 1 and 2 oy; after an odd row 2 oy + 1, that row alone (the first of pooled row oy + 1).
    float run[kPooledBlocks][2];
#pragma unroll
    for (int j = 0; j < kPooledBlocks; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) run[j][hh] = kNone;
    for (int r = 0; r < kStemTaps - 1; ++r) Barrier::wait(&full[(q + r) % kRing], ((q + r) / kRing) & 1);
    const int rows = it.cy_hi - it.cy_lo + 1;
#pragma unroll 1
    for (int i = 0; i < rows; ++i, ++k) {
      const int cy = it.cy_lo + i, last = q + i + kStemTaps - 1;
      Barrier::wait(&full[last % kRing], (last / kRing) & 1);
      if (c == 0 ? k > 0 && k - 1 < common : k < common) bar_sync(c == 0 ? kTurn1 : kTurn0, 256);
#pragma unroll
      for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
      cute::warpgroup_arrive();
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        const int ty = t / static_cast<int>(kStemTaps), tx = t % static_cast<int>(kStemTaps);
        const int s = (q + i + ty) % kRing;
        mma(wa[t], desc0 + static_cast<uint64_t>((s * kRowBytes + tx * 16) >> 4), acc,
            t == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One,
            std::make_index_sequence<kAcc>{});
      }
      cute::warpgroup_commit_batch();
      if (c == 0 ? k < common : k < common && k + 1 < rows0) bar_arrive(c == 0 ? kTurn0 : kTurn1, 256);
      cute::warpgroup_wait<0>();
#pragma unroll
      for (int r = 0; r < kAcc; ++r) cute::warpgroup_fence_operand(acc[r]);
      Barrier::arrive(&empty[(q + i) % kRing]);  // convolution row cy is the last to read s2d row cy

      // The row's horizontal pool: pooled column 4 j + t4 is the max of columns 8 j + 2 t4 .. + 2;
      // the third is the next lane's first (lane t4 = 3: lane t4 = 0's first of block j + 1).
      // Missing columns count as -inf.
      float h[kPooledBlocks][2];
      // One branch per row on the item's uniform `inside`, not one per value.
      const auto pool_row = [&]<bool kChecked>() {
#pragma unroll
        for (int j = 0; j < kPooledBlocks; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float a = acc[4 * j + 2 * hh], b = acc[4 * j + 2 * hh + 1];
            const float send = t4 == 0 ? acc[4 * (j + 1) + 2 * hh] : a;
            float n = __shfl_sync(0xffffffffu, send, (lane & ~3) | ((lane + 1) & 3));
            if constexpr (kChecked) {
              a = (valid >> (3 * j)) & 1 ? a : kNone;
              b = (valid >> (3 * j + 1)) & 1 ? b : kNone;
              n = (valid >> (3 * j + 2)) & 1 ? n : kNone;
            } else if (j == 0) {
              a = left_edge ? kNone : a;
            }
            h[j][hh] = fmaxf(fmaxf(a, b), n);
          }
      };
      if (inside)
        pool_row.template operator()<false>();
      else
        pool_row.template operator()<true>();
      // The vertical pool: pooled row oy is the max of convolution rows 2 oy - 1 .. 2 oy + 1, and
      // is stored once its last existing row is in.
      const bool even = (cy & 1) == 0;
      const int oy = even ? cy / 2 : (cy - 1) / 2;
      const bool emit = even ? cy == p.conv_h - 1 && oy < it.oy1 : oy >= it.oy0;
      float out[kPooledBlocks][2];
#pragma unroll
      for (int j = 0; j < kPooledBlocks; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          out[j][hh] = fmaxf(run[j][hh], h[j][hh]);
          run[j][hh] = even ? out[j][hh] : h[j][hh];
        }
      if (emit) {
        // Bias and ReLU, rounded to float16 into the staging tile (two, alternating: the barrier
        // of one pooled row's store is what frees the tile of the row before), then 128-byte
        // pixel rows to y.
        TOut* st = stage + (emitted & 1) * (kStageBytes / 2);
#pragma unroll
        for (int j = 0; j < kPooledBlocks; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const __half v = __float2half_rn(fmaxf(out[j][hh] + bias[hh], 0.0f));
            st[(4 * j + t4) * kStagePitch + 16 * ww + g + 8 * hh] =
                stem_out<TOut>(__half2float(v), p.inv_out_scale);
          }
        bar_sync(1 + c, 128);
        TOut* yrow = static_cast<TOut*>(p.y) +
                     ((static_cast<int64_t>(it.img) * p.out_h + oy) * p.out_w + it.ox0) * kStemOutChannels;
        const int cols = min(kRowsStripPooled, p.out_w - it.ox0);
        for (int e = wtid; e < cols * 8; e += 128)
          *reinterpret_cast<StemOut8<TOut>*>(yrow + (e >> 3) * kStemOutChannels + (e & 7) * 8) =
              *reinterpret_cast<const StemOut8<TOut>*>(st + (e >> 3) * kStagePitch + (e & 7) * 8);
        ++emitted;
      }
    }
    // The item's last three space-to-depth rows are read by no further convolution row.
    for (int r = rows; r < rows + kStemTaps - 1; ++r) Barrier::arrive(&empty[(q + r) % kRing]);
    q += rows + kStemTaps - 1;
  }
#else
  __trap();  // launch_fused_stem launches this on sm_90 alone
#endif
}

}  // namespace

cudaError_t rows_blocks_per_sm(int* blocks) {
  // Every output type: the fewest blocks of them (they are the same kernel but for the store).
  int per_type[4] = {0, 0, 0, 0};
  int i = 0;
  for (auto kernel : {fused_stem_rows_kernel<__half>, fused_stem_rows_kernel<__nv_bfloat16>,
                      fused_stem_rows_kernel<Q8Out<false>>, fused_stem_rows_kernel<Q8Out<true>>}) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kRowsSmemBytes));
        e != cudaSuccess)
      return e;
    if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_type[i++], kernel, 128 * (1 + kRowsConsumers), kRowsSmemBytes);
        e != cudaSuccess)
      return e;
  }
  *blocks = *std::min_element(per_type, per_type + 4);
  return cudaSuccess;
}

void launch_rows(const RowsParams& p, int grid, DataType out, cudaStream_t stream) {
  with_out_type(out, [&](auto element) {
    fused_stem_rows_kernel<decltype(element)>
        <<<grid, 128 * (1 + kRowsConsumers), kRowsSmemBytes, stream>>>(p);
  });
}

}  // namespace gpulab::kernels::stem
