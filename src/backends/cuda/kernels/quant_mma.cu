// The tensor-core INT8/FP8 convolution (launch_q8_mma_conv): an implicit GEMM on mma.sync with
// 8-bit operands, with quant.h's epilogue fused.
//
// The GEMM: M = the output pixels (n, oh, ow), N = the output channels, K = the weights' r * s * c
// bytes in KRSC order. One 16-byte chunk of K lies inside one tap, so the activation row of pixel m
// at chunk q is x[n, ih, iw, c0 .. c0 + 15] of tap q / ceil(c / 16): no im2col buffer, and no K
// padding up to a tile (the last chunks past the reduction are zero-filled). c is a multiple of 8:
// where it is not one of 16 (MobileNetV2's 24-channel layers), each tap's last chunk holds its 8
// remaining channels and 8 zero bytes in both operands, and the rows, only 8-byte aligned then, are
// copied 8 bytes at a time. MobileNetV2's two 1x1 convolutions of 24 channels into 144 took 1.66 ms
// each on the direct kernel at batch 256 on the H100, a quarter of its INT8 plan (4feb628).
// K moves in stages of 64 bytes through a cp.async pipeline (zero fill outside the image); each
// stage is two m16n8k32 steps per fragment: INT8 sums in int32 (s8 x s8), E4M3 in float32 (sm_89
// and newer). Operands reach the registers through ldmatrix (one instruction per 16 x 32-byte A
// fragment or pair of 8 x 32-byte B fragments).
//
// Thread-block tiles, one tactic each (q8_mma_tactics()):
//   mma-q8          128 pixels x  64 channels, 4 warps of 64 x 32, 3 stages (46 KB)
//   mma-q8:128x128  128 pixels x 128 channels, 4 warps of 64 x 64, 4 stages (80 KB)
//   mma-q8:256x128  256 pixels x 128 channels, 8 warps of 64 x 64, 4 stages (120 KB)
//   mma-q8:256x64   256 pixels x  64 channels, 8 warps of 64 x 32, 4 stages (100 KB)
//   mma-q8:3x3c64   3x3 convolutions of 64 channels into 64 alone: input patches shared by the
//                   nine taps, weights resident (q8_conv3x3_patch_kernel below)
//   dp4a-q8:1x1     not the tensor cores: INT8 1x1 convolutions over 8-32 channels, where a tile's
//                   64-byte K stage would be mostly zeros (q8_conv1x1_dp4a_kernel below)
//   wgmma-q8:64x128, wgmma-q8:128x128, wgmma-q8:128x256
//                   the same GEMM on Hopper's wgmma, INT8 only (quant_wgmma_sm90.cu, compiled
//                   for sm_90a; unsupported at launch elsewhere)
//   cutlass-q8:64x128, cutlass-q8:128x128, cutlass-q8:64x256
//                   CUTLASS's Hopper implicit GEMM (TMA im2col, wgmma, a producer warp) with
//                   quant.h's epilogue as an epilogue visitor tree, INT8 in and out only
//                   (quant_cutlass_sm90.cu, compiled for sm_90a; unsupported elsewhere)
// Why larger tiles: every stage brings (BM + BN) x 64 bytes from L2 for BM x BN x 64 multiply-adds,
// so 128 x 64 moves 43 multiply-adds per byte, 256 x 64 51, 128 x 128 64 and 256 x 128 85 (where
// the layer has that many output channels: ResNet's layer1 has 64). If L2 delivers some 5-7 TB/s
// (an estimate, not measured here), 43 multiply-adds per byte allow 450-600 TOP/s whatever the tensor
// cores do; the small tile measured 141-326 TOP/s on ResNet-18's layers on the H100
// (bench/results/2026-12-06-8fdabf2). A 64 x 64 warp tile also reads 32 multiply-adds per byte of
// shared memory against 21 for 64 x 32. The small tile stays for the layers with few pixels, where
// the large ones leave SMs idle; tactic timing chooses per layer. Measured at batch 256 on the H100
// (bench/results/2026-12-06-4feb628): 128x128 won layers 2-4's 3x3 convolutions at 295-402 TOP/s,
// 3x3c64 layer1's at 294-307, against 1,437 TOP/s for cuBLASLt's INT8 GEMM (wgmma): mma.sync,
// not the tiles, is the limit now.
//
// Epilogue: each warp stages its accumulators (16 pixel rows at a time, as float) in shared memory,
// then every lane finishes 16 consecutive channels of one pixel: quant.h's epilogue (q8_epilogue,
// the values in registers) per output, the residual read and the bytes written 16 at a time, so
// that a warp writes whole 32-byte sectors instead of 2 bytes per row (finish_fragment); 8 at a
// time where k % 16 == 8 leaves the rows only 8-byte aligned (store_16_channels).
//
// Exactness: INT8 sums are exact in any order, and the epilogue is the direct kernel's
// (q8_epilogue, which its store_q8_output calls, quant.cuh) step for step, so INT8 outputs equal the direct
// kernel's and the plan interpreter's bit for bit for every tile. The tensor cores sum E4M3 products in their
// own order and internal precision: FP8 outputs agree with the interpreter within one E4M3 step, as the
// direct kernel's do.
//
// Shared memory: per stage, BM activation rows and BN weight rows of 64 bytes, each padded to 80
// bytes: the eight 16-byte rows one ldmatrix phase reads then fall on 32 distinct banks, and every
// 16-byte cp.async destination stays aligned.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant.cuh"
#include "backends/cuda/kernels/quant_kernels.h"
#include "backends/cuda/kernels/quant_mma.cuh"

namespace gpulab::kernels {
namespace {

using namespace q8mma;

constexpr int kBK = 64;  // K bytes per stage
constexpr int kRowBytes = kBK + 16;

// One thread-block tile: BM pixels x BN channels, WM x WN warps.
template <int BM_, int BN_, int WM_, int WN_, int Stages_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, kStages = Stages_;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
  static constexpr int kFragM = kWarpM / 16, kFragN = kWarpN / 8;
  static constexpr int kABytes = BM * kRowBytes, kBBytes = BN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // 16-byte chunks per stage: 4 per row; each thread copies row0 + kRowStep * i, chunk tid % 4.
  static constexpr int kRowStep = kThreads / 4;
  static constexpr int kAIters = BM / kRowStep, kBIters = BN / kRowStep;
  // Epilogue staging: per warp 16 rows of kWarpN floats, padded by 4.
  static constexpr int kStagePitch = kWarpN + 4;
  static constexpr int kEpilogueBytes = WM * WN * 16 * kStagePitch * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kEpilogueBytes ? kStages* kStageBytes : kEpilogueBytes;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0 && BM % kRowStep == 0 && BN % kRowStep == 0);
  static_assert(kWarpN == 32 || kWarpN == 64, "the epilogue's lanes cover 16 channels each");
};
using SmallTile = MmaTile<128, 64, 2, 2, 3>;
using WideTile = MmaTile<128, 128, 2, 2, 4>;
using LargeTile = MmaTile<256, 128, 4, 2, 4>;
using TallTile = MmaTile<256, 64, 4, 2, 4>;

constexpr std::string_view kTactics[] = {
    "mma-q8",       "mma-q8:128x128", "mma-q8:256x128", "mma-q8:256x64",  "mma-q8:3x3c64",  "dp4a-q8:1x1",
    kWgmmaTiles[0], kWgmmaTiles[1],   kWgmmaTiles[2],   kCutlassTiles[0], kCutlassTiles[1], kCutlassTiles[2]};
constexpr size_t kPatchTactic = 4;
constexpr size_t kSmallKTactic = 5;
constexpr size_t kWgmmaFirst = 6;    // kWgmmaTiles, in their order
constexpr size_t kCutlassFirst = 9;  // kCutlassTiles, in their order
static_assert(kCutlassFirst == kWgmmaFirst + std::size(kWgmmaTiles));
static_assert(std::size(kTactics) == kCutlassFirst + std::size(kCutlassTiles));

// Four 8 x 16-byte matrices: lanes 8j .. 8j + 7 give the row addresses of matrix j, and register j
// of lane l receives the 4 bytes at offset 4 (l % 4) of row l / 4 of matrix j.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint8_t* smem_row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// D += A (16 x 32, row) x B (32 x 8, col) for 8-bit A and B: int32 sums for int8, float32 for E4M3.
__device__ __forceinline__ void mma_16x8x32(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_16x8x32(float (&d)[4], const uint32_t (&a)[4], const uint32_t* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // launch_q8_mma_conv checks the device before launching an FP8 kernel
#endif
}

// kHalf: c % 16 == 8 (MmaParams::c_half). A kernel of its own, so that the multiples of 16 keep the
// plain 16-byte copies: with the choice made per copy at run time, the 128x128 and 256x64 tiles ran
// ResNet-18's layers 9-14% slower on the H100 (279d535's tactic timing against 49f0e29's, same call).
template <typename T, bool kFp8, typename Y, bool kHalf>
__global__ void __launch_bounds__(T::kThreads)
    q8_mma_conv_kernel(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                       const float* bias, const uint8_t* residual, Y* y) {
  using Acc = std::conditional_t<kFp8, float, int32_t>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / T::WN, wn = warp % T::WN;
  // Channel tiles vary fastest, so that the blocks of one pixel tile run together and read its
  // activations from L2 once.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x / p.n_tiles) * T::BM;
  const int n0 = static_cast<int>(blockIdx.x % p.n_tiles) * T::BN;

  // This thread copies 16-byte chunk `j` of K of activation rows row0 + kRowStep i and of weight
  // rows row0 + kRowStep i in every stage.
  const int j = tid & 3, row0 = tid >> 2;
  const TileRows<T::kAIters, T::kBIters, T::kRowStep> rows(p, x, w, m0, n0, row0);
  auto load_stage = [&](int kt, int buf) {
    uint8_t* sa = smem + buf * T::kStageBytes;
    uint8_t* sb = sa + T::kABytes;
    const auto c = rows.chunk(p, kt * (kBK / 16) + j);  // this thread's 16-byte chunk of K
#pragma unroll
    for (int i = 0; i < T::kAIters; ++i) {
      bool inside;
      const uint8_t* src = rows.a_src(p, x, i, c, inside);
      uint8_t* dst = sa + (row0 + T::kRowStep * i) * kRowBytes + j * 16;
      if constexpr (kHalf) {
        copy_half_chunks(dst, src, inside, c.c0 + 16 <= p.c);
      } else {
        cp_async16(dst, src, inside);
      }
    }
#pragma unroll
    for (int i = 0; i < T::kBIters; ++i) {
      bool ok;
      const uint8_t* src = rows.template b_src<kHalf>(p, w, i, c, ok);
      uint8_t* dst = sb + (row0 + T::kRowStep * i) * kRowBytes + j * 16;
      if constexpr (kHalf) {
        copy_half_chunks(dst, src, ok, c.c0 + 16 <= p.c);
      } else {
        cp_async16(dst, src, ok);
      }
    }
  };

  Acc acc[T::kFragM][T::kFragN][4];
#pragma unroll
  for (int im = 0; im < T::kFragM; ++im)
#pragma unroll
    for (int jn = 0; jn < T::kFragN; ++jn)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[im][jn][e] = Acc(0);

  // ldmatrix row addresses of this lane: A fragment rows lane % 16, bytes 16 (lane / 16) of the
  // 32-byte step (registers: rows 0-7 / 8-15 x bytes 0-15 / 16-31, mma's a0..a3); B fragment pair
  // rows lane % 8 + 8 (lane / 16), bytes 16 ((lane / 8) % 2) (b0, b1 of one 8-channel fragment, then
  // of the next).
  const int a_lane = (wm * T::kWarpM + (lane & 15)) * kRowBytes + (lane >> 4) * 16;
  const int b_lane = (wn * T::kWarpN + (lane & 7) + ((lane >> 4) << 3)) * kRowBytes + ((lane >> 3) & 1) * 16;

  // This block's K stages: all of them, or its split's (kt0 + 0 .. kt_total - 1).
  const int kt0 = static_cast<int>(blockIdx.y) * p.kt_per_split;
  const int kt_total = min((p.k_chunks * 16 + kBK - 1) / kBK - kt0, p.kt_per_split);
#pragma unroll
  for (int st = 0; st < T::kStages - 1; ++st) {
    if (st < kt_total) load_stage(kt0 + st, st);
    cp_async_commit();
  }
  for (int kt = 0; kt < kt_total; ++kt) {
    cp_async_wait<T::kStages - 2>();  // stage kt has landed (this thread's copies) ...
    __syncthreads();                  // ... and everyone's; everyone is done with stage kt - 1's buffer
    const int next = kt + T::kStages - 1;
    if (next < kt_total) load_stage(kt0 + next, next % T::kStages);
    cp_async_commit();  // always one group per iteration, so that the wait count stays right
    const uint8_t* sa = smem + (kt % T::kStages) * T::kStageBytes;
    const uint8_t* sb = sa + T::kABytes;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 32) {
      uint32_t af[T::kFragM][4], bf[T::kFragN][2];
#pragma unroll
      for (int im = 0; im < T::kFragM; ++im) ldmatrix_x4(af[im], sa + a_lane + im * 16 * kRowBytes + kk);
#pragma unroll
      for (int jp = 0; jp < T::kFragN / 2; ++jp) {
        uint32_t r[4];
        ldmatrix_x4(r, sb + b_lane + jp * 16 * kRowBytes + kk);
        bf[2 * jp][0] = r[0];
        bf[2 * jp][1] = r[1];
        bf[2 * jp + 1][0] = r[2];
        bf[2 * jp + 1][1] = r[3];
      }
#pragma unroll
      for (int im = 0; im < T::kFragM; ++im)
#pragma unroll
        for (int jn = 0; jn < T::kFragN; ++jn) mma_16x8x32(acc[im][jn], af[im], bf[jn]);
    }
  }
  cp_async_wait<0>();  // nothing is in flight ...
  __syncthreads();     // ... or still read: the pipeline's shared memory becomes the staging area

  if constexpr (!kFp8) {
    if (p.partial) {  // split-K: this split's raw sums; accumulator e of (im, jn) is row g + 8 (e / 2)
      const int g = lane >> 2, tig = lane & 3;
      int32_t* part = p.partial + static_cast<int64_t>(blockIdx.y) * p.m_total * p.k;
#pragma unroll
      for (int im = 0; im < T::kFragM; ++im)
#pragma unroll
        for (int jn = 0; jn < T::kFragN; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t m = m0 + wm * T::kWarpM + im * 16 + g + 8 * (e >> 1);
            const int n = n0 + wn * T::kWarpN + jn * 8 + 2 * tig + (e & 1);
            if (m < p.m_total && n < p.k) part[m * p.k + n] = acc[im][jn][e];
          }
      return;
    }
  }
  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * T::kStagePitch;
  const int k_base = n0 + wn * T::kWarpN + (lane % (T::kWarpN / 16)) * 16;
#pragma unroll
  for (int im = 0; im < T::kFragM; ++im)
    finish_fragment<T::kWarpN, kFp8>(acc[im], stage, lane, k_base, p, w_scale, bias, residual, y,
                                     [&](int row) -> int64_t {
                                       const int64_t m = m0 + wm * T::kWarpM + im * 16 + row;
                                       return m < p.m_total ? m : -1;
                                     });
}

// Split-K's second half: per output pixel m and 16 channels, the splits' int32 sums added up (exact
// in any order) and quant.h's epilogue, as finish_fragment runs it, so that the bytes are those of
// the unsplit kernel.
template <typename Y>
__global__ void q8_split_finish_kernel(MmaParams p, int splits, const float* w_scale, const float* bias,
                                       const uint8_t* residual, Y* y) {
  const int groups = (p.k + 15) / 16;
  const int64_t total = p.m_total * groups, plane = p.m_total * p.k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / groups;
    const int k_base = static_cast<int>(i % groups) * 16;
    const int64_t i0 = m * p.k + k_base;
    int32_t sum[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) sum[e] = 0;
    for (int s = 0; s < splits; ++s) {
#pragma unroll
      for (int e = 0; e < 16; ++e)
        if (k_base + e < p.k) sum[e] += p.partial[s * plane + i0 + e];
    }
    // p.vec_out: an 8-bit y with k % 16 == 0, aligned: the residual and the output 16 bytes at a time.
    const uint4 res =
        p.vec_out && residual ? *reinterpret_cast<const uint4*>(residual + i0) : make_uint4(0, 0, 0, 0);
    store_16_channels<false>([&](int e) { return __int2float_rn(sum[e]); }, p.vec_out, res, k_base, i0, p,
                             w_scale, bias, residual, y);
  }
}

template <typename Y>
Status launch_split_finish(const MmaParams& p, int splits, const float* w_scale, const float* bias,
                           const uint8_t* residual, Y* y, cudaStream_t stream) {
  const int64_t pieces = p.m_total * ((p.k + 15) / 16);
  q8_split_finish_kernel<Y><<<grid_for(pieces), kThreads, 0, stream>>>(p, splits, w_scale, bias, residual, y);
  return check_launch("launch_q8_mma_conv", "q8_split_finish_kernel");
}

// The 3x3 convolution of 64 channels into 64 (stride 1, dilation 1, pads 1: ResNet's layer1), tactic
// mma-q8:3x3c64. The implicit GEMM above reads each input pixel from L2 once per tap, nine times:
// with 64 output channels no tile amortizes that (51 multiply-adds per byte at 256 x 64). Here a
// block keeps all the weights in shared memory (9 x 64 x 64 bytes) and walks over output tiles of 8
// rows x 16 columns of one image; for each it loads the input patch with its one-pixel halo (10 x 18
// pixels, zero outside the image) once, and the nine taps are nine shifted views of it: ldmatrix
// takes a row address per lane, so the A fragment of tap (dy, dx) is patch pixels (row + dy, column
// + dx). 11.5 KB from L2 per 128 outputs instead of 74 KB. The next tile's patch loads while this
// one computes (two buffers); four warps, each two output rows of 16 pixels by 64 channels.
namespace patch {
constexpr int kTileH = 8, kTileW = 16;
constexpr int kPatchH = kTileH + 2, kPatchW = kTileW + 2;
constexpr int kChannels = 64;
constexpr int kPitch =
    kChannels + 16;  // 80 bytes per pixel or weight row: ldmatrix's 8 rows on distinct banks
constexpr int kTaps = 9;
constexpr int kWeightBytes = kTaps * kChannels * kPitch;  // 46,080
constexpr int kPatchBytes = kPatchH * kPatchW * kPitch;   // 14,400
constexpr int kThreads = 128;
constexpr int kStagePitch = kChannels + 4;
constexpr int kEpilogueBytes = kThreads / 32 * 16 * kStagePitch * 4;  // 17,408
constexpr int kSmemBytes = kWeightBytes + 2 * kPatchBytes + kEpilogueBytes;
}  // namespace patch

template <bool kFp8>
__global__ void __launch_bounds__(patch::kThreads)
    q8_conv3x3_patch_kernel(MmaParams p, int tiles_w, int tiles_h, int64_t tiles, const uint8_t* x,
                            const uint8_t* w, const float* w_scale, const float* bias,
                            const uint8_t* residual, uint8_t* y) {
  using namespace patch;
  using Acc = std::conditional_t<kFp8, float, int32_t>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const sw = smem;
  uint8_t* const sp = smem + kWeightBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* const stage = reinterpret_cast<float*>(sp + 2 * kPatchBytes) + warp * 16 * kStagePitch;

  // All weights, row (tap, k) of 64 bytes: w is [k][tap][c] (KRSC with r * s = 9 taps).
  for (int i = tid; i < kTaps * kChannels * 4; i += kThreads) {
    const int chunk = i & 3, row = i >> 2, tap = row / kChannels, k = row % kChannels;
    cp_async16(sw + row * kPitch + chunk * 16, w + (k * kTaps + tap) * kChannels + chunk * 16, true);
  }
  const auto tile_origin = [&](int64_t tile, int64_t& n, int& oy, int& ox) {
    ox = static_cast<int>(tile % tiles_w) * kTileW;
    const int64_t rest = tile / tiles_w;
    oy = static_cast<int>(rest % tiles_h) * kTileH;
    n = rest / tiles_h;
  };
  const auto load_patch = [&](int64_t tile, int buf) {
    int64_t n;
    int oy, ox;
    tile_origin(tile, n, oy, ox);
    const uint8_t* img = x + n * p.h * p.w * static_cast<int64_t>(kChannels);
    uint8_t* dst = sp + buf * kPatchBytes;
    for (int i = tid; i < kPatchH * kPatchW * 4; i += kThreads) {
      const int chunk = i & 3, pix = i >> 2, py = pix / kPatchW, px = pix % kPatchW;
      const int iy = oy + py - 1, ix = ox + px - 1;
      const bool inside = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w;
      const uint8_t* src = inside ? img + (static_cast<int64_t>(iy) * p.w + ix) * kChannels + chunk * 16 : x;
      cp_async16(dst + pix * kPitch + chunk * 16, src, inside);
    }
  };

  int64_t tile = blockIdx.x;
  if (tile < tiles) load_patch(tile, 0);
  cp_async_commit();  // the weights and the first patch
  // ldmatrix rows of this lane (see q8_mma_conv_kernel): A row = output column lane % 16 of the
  // warp's first row, bytes 16 (lane / 16) of the 32-byte step; B rows as there.
  const int a_lane = ((2 * warp) * kPatchW + (lane & 15)) * kPitch + (lane >> 4) * 16;
  const int b_lane = ((lane & 7) + ((lane >> 4) << 3)) * kPitch + ((lane >> 3) & 1) * 16;
  const int k_base = (lane % (kChannels / 16)) * 16;
  for (int buf = 0; tile < tiles; tile += gridDim.x, buf ^= 1) {
    const int64_t next = tile + gridDim.x;
    if (next < tiles) load_patch(next, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's patch (and the weights) have landed: this thread's copies ...
    __syncthreads();     // ... and everyone's
    const uint8_t* sa = sp + buf * kPatchBytes;
    Acc acc[2][8][4];
#pragma unroll
    for (int im = 0; im < 2; ++im)
#pragma unroll
      for (int jn = 0; jn < 8; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[im][jn][e] = Acc(0);
#pragma unroll 1
    for (int tap = 0; tap < kTaps; ++tap) {
      const int dy = tap / 3, dx = tap % 3;
      const uint8_t* a_tap = sa + a_lane + (dy * kPatchW + dx) * kPitch;
      const uint8_t* b_tap = sw + tap * kChannels * kPitch + b_lane;
#pragma unroll
      for (int kk = 0; kk < kChannels; kk += 32) {
        uint32_t af[2][4], bf[8][2];
#pragma unroll
        for (int im = 0; im < 2; ++im) ldmatrix_x4(af[im], a_tap + im * kPatchW * kPitch + kk);
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
          uint32_t r[4];
          ldmatrix_x4(r, b_tap + jp * 16 * kPitch + kk);
          bf[2 * jp][0] = r[0];
          bf[2 * jp][1] = r[1];
          bf[2 * jp + 1][0] = r[2];
          bf[2 * jp + 1][1] = r[3];
        }
#pragma unroll
        for (int im = 0; im < 2; ++im)
#pragma unroll
          for (int jn = 0; jn < 8; ++jn) mma_16x8x32(acc[im][jn], af[im], bf[jn]);
      }
    }
    int64_t n;
    int oy, ox;
    tile_origin(tile, n, oy, ox);
#pragma unroll
    for (int im = 0; im < 2; ++im) {
      const int row_y = oy + 2 * warp + im;
      finish_fragment<kChannels, kFp8>(acc[im], stage, lane, k_base, p, w_scale, bias, residual, y,
                                       [&](int col) -> int64_t {
                                         const int col_x = ox + col;
                                         if (row_y >= p.h || col_x >= p.w) return -1;
                                         return (n * p.h + row_y) * p.w + col_x;
                                       });
    }
    __syncthreads();  // everyone is done with this patch before the next iteration loads into it
  }
  cp_async_wait<0>();  // nothing is in flight when the block exits
}

// OK when the current device runs the FP8 tensor-core instructions (sm_89 and newer).
Status check_fp8_device() {
  GPULAB_ASSIGN_OR_RETURN(const int cc, current_compute_capability("launch_q8_conv"));
  if (cc < 89)
    return Status::unsupported("launch_q8_conv: the FP8 tensor-core convolution needs sm_89 or newer.");
  return Status::ok();
}

// dp4a-q8:1x1, the 1x1 INT8 convolutions over few channels (c a multiple of 8 up to 32, stride 1,
// no padding, k a multiple of 16, INT8 outputs): MobileNetV2's expand layers over 16, 24 and 32
// channels and its first project layer. On the tensor-core tiles each thread block runs one K stage
// of 64 bytes that is half to three quarters zeros, then its epilogue: those layers ran at 5-6x
// their memory roofline on the H100 (0.71 ms for the 16-channel expand at 112x112, batch 256;
// bench/results/2026-12-06-279d535). Here a thread computes 16 output channels of kPixels pixels
// from the pixels' c bytes in registers and the weights in shared memory, summed with __dp4a (4
// channels per instruction), and quant.h's epilogue per output (q8_epilogue, as finish_fragment):
// the same bytes. Work item: (pixel block, 16-channel group), the group fastest, so that the
// threads of one pixel block read its bytes together and write its outputs as whole rows.
constexpr int kSmallKThreads = 256;
constexpr int kSmallKPixels = 4;
// Shared memory of the kernel's weight words for k output channels over c input channels: each
// group of 16 channels' 16 c / 4 words padded by one (q8_conv1x1_dp4a_kernel).
constexpr int64_t small_k_smem_bytes(int64_t k, int64_t c) {
  return k / 16 * (16 * (c / 4) + 1) * static_cast<int64_t>(sizeof(uint32_t));
}

template <int kWords>  // c / 4
__global__ void __launch_bounds__(kSmallKThreads)
    q8_conv1x1_dp4a_kernel(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                           const float* bias, const uint8_t* residual, uint8_t* y, int64_t items) {
  // Weights as words, [group][channel of 16][word], each group's 16 kWords words padded by one so
  // that threads of different groups read different banks.
  constexpr int kGroupPitch = 16 * kWords + 1;
  extern __shared__ uint32_t wsm[];
  const int groups = p.k / 16;
  for (int i = threadIdx.x; i < p.k * kWords; i += blockDim.x) {
    const int row = i / kWords, word = i % kWords;
    wsm[(row / 16) * kGroupPitch + (row % 16) * kWords + word] =
        *reinterpret_cast<const uint32_t*>(w + static_cast<int64_t>(row) * p.c + 4 * word);
  }
  __syncthreads();
  for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int g = static_cast<int>(item % groups);
    const int64_t m0 = item / groups * kSmallKPixels;
    uint32_t xr[kSmallKPixels][kWords];
#pragma unroll
    for (int q = 0; q < kSmallKPixels; ++q) {
      const int64_t m = m0 + q < p.m_total ? m0 + q : m0;  // a partial block repeats its first pixel
      const uint2* row = reinterpret_cast<const uint2*>(x + m * (4 * kWords));  // c % 8 == 0: 8-byte rows
#pragma unroll
      for (int t = 0; t < kWords / 2; ++t) {
        const uint2 v = row[t];
        xr[q][2 * t] = v.x;
        xr[q][2 * t + 1] = v.y;
      }
    }
    int32_t acc[kSmallKPixels][16];
    const uint32_t* wg = wsm + g * kGroupPitch;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      uint32_t wr[kWords];
#pragma unroll
      for (int t = 0; t < kWords; ++t) wr[t] = wg[j * kWords + t];
#pragma unroll
      for (int q = 0; q < kSmallKPixels; ++q) {
        int32_t a = 0;
#pragma unroll
        for (int t = 0; t < kWords; ++t) a = __dp4a(static_cast<int>(xr[q][t]), static_cast<int>(wr[t]), a);
        acc[q][j] = a;
      }
    }
    const int k_base = g * 16;
    float ws[16], bs[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      ws[j] = w_scale[k_base + j];
      bs[j] = bias ? bias[k_base + j] : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kSmallKPixels; ++q) {
      const int64_t m = m0 + q;
      if (m >= p.m_total) break;
      const int64_t i0 = m * p.k + k_base;
      const uint4 res = residual ? *reinterpret_cast<const uint4*>(residual + i0) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(y + i0) =
          q8_epilogue16<false>([&](int e) { return __int2float_rn(acc[q][e]); }, [&](int e) { return ws[e]; },
                               [&](int e) { return bs[e]; }, p.x_scale, residual != nullptr, res,
                               p.residual_scale, p.act, p.inv_y);
    }
  }
}

template <int kWords>
Status launch_small_k_as(const MmaParams& p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                         const float* bias, const uint8_t* residual, uint8_t* y, cudaStream_t stream) {
  const int64_t blocks_of_pixels = (p.m_total + kSmallKPixels - 1) / kSmallKPixels;
  const int64_t items = blocks_of_pixels * (p.k / 16);
  const auto smem = static_cast<size_t>(small_k_smem_bytes(p.k, p.c));
  q8_conv1x1_dp4a_kernel<kWords><<<grid_for(items, kSmallKThreads), kSmallKThreads, smem, stream>>>(
      p, x, w, w_scale, bias, residual, y, items);
  return check_launch("launch_q8_mma_conv", "q8_conv1x1_dp4a_kernel");
}

Status launch_small_k(const MmaParams& p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                      const float* bias, const uint8_t* residual, uint8_t* y, cudaStream_t stream) {
  switch (p.c) {
    case 8: return launch_small_k_as<2>(p, x, w, w_scale, bias, residual, y, stream);
    case 16: return launch_small_k_as<4>(p, x, w, w_scale, bias, residual, y, stream);
    case 24: return launch_small_k_as<6>(p, x, w, w_scale, bias, residual, y, stream);
    default: return launch_small_k_as<8>(p, x, w, w_scale, bias, residual, y, stream);  // 32
  }
}

template <typename T, bool kFp8, bool kHalf, typename Y>
Status launch_tile_as(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                      const float* bias, const uint8_t* residual, Y* y, cudaStream_t stream, void* workspace,
                      int64_t workspace_bytes) {
  static DeviceSms ready{};
  GPULAB_ASSIGN_OR_RETURN(const int sms,
                          prepare_device(q8_mma_conv_kernel<T, kFp8, Y, kHalf>, T::kSmemBytes, ready));
  p.n_tiles = (p.k + T::BN - 1) / T::BN;
  const int64_t blocks = (p.m_total + T::BM - 1) / T::BM * p.n_tiles;
  const int splits =
      plan_split_k(p, blocks, (p.k_chunks * 16 + kBK - 1) / kBK, kFp8, sms, workspace, workspace_bytes);
  q8_mma_conv_kernel<T, kFp8, Y, kHalf>
      <<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)), T::kThreads, T::kSmemBytes,
         stream>>>(p, x, w, w_scale, bias, residual, y);
  GPULAB_TRY(check_launch("launch_q8_mma_conv", "q8_mma_conv_kernel"));
  if (splits == 1) return Status::ok();
  return launch_split_finish(p, splits, w_scale, bias, residual, y, stream);
}

template <typename T, bool kFp8, typename Y>
Status launch_tile(const MmaParams& p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                   const float* bias, const uint8_t* residual, Y* y, cudaStream_t stream, void* workspace,
                   int64_t workspace_bytes) {
  if (p.c_half)
    return launch_tile_as<T, kFp8, true>(p, x, w, w_scale, bias, residual, y, stream, workspace,
                                         workspace_bytes);
  return launch_tile_as<T, kFp8, false>(p, x, w, w_scale, bias, residual, y, stream, workspace,
                                        workspace_bytes);
}

template <bool kFp8>
Status launch_patch(const MmaParams& p, int64_t n, const uint8_t* x, const uint8_t* w, const float* w_scale,
                    const float* bias, const uint8_t* residual, uint8_t* y, cudaStream_t stream) {
  static DeviceSms ready{};
  GPULAB_ASSIGN_OR_RETURN(const int sms,
                          prepare_device(q8_conv3x3_patch_kernel<kFp8>, patch::kSmemBytes, ready));
  const int tiles_w = (p.w + patch::kTileW - 1) / patch::kTileW,
            tiles_h = (p.h + patch::kTileH - 1) / patch::kTileH;
  const int64_t tiles = n * tiles_w * tiles_h;
  // Two blocks fit an SM (92 KB of shared memory each); each walks over tiles blockIdx.x + k grid.
  const int64_t blocks = std::min<int64_t>(tiles, 2 * static_cast<int64_t>(sms));
  q8_conv3x3_patch_kernel<kFp8>
      <<<static_cast<unsigned>(blocks), patch::kThreads, patch::kSmemBytes, stream>>>(
          p, tiles_w, tiles_h, tiles, x, w, w_scale, bias, residual, y);
  return check_launch("launch_q8_mma_conv", "q8_conv3x3_patch_kernel");
}

}  // namespace

Status q8mma::launch_q8_split_finish(const MmaParams& p, int splits, const float* w_scale, const float* bias,
                                     const uint8_t* residual, uint8_t* y, cudaStream_t stream) {
  return launch_split_finish(p, splits, w_scale, bias, residual, y, stream);
}

std::span<const std::string_view> q8_mma_tactics() {
  return kTactics;
}

namespace {

// The index of `tactic` in kTactics when that tactic runs `d`; q8_mma_tactic_supports' status
// otherwise.
Result<size_t> tactic_for(std::string_view tactic, const Q8ConvDesc& d) {
  GPULAB_TRY(validate_q8_mma(d));
  const auto* known = std::find(std::begin(kTactics), std::end(kTactics), tactic);
  if (known == std::end(kTactics))
    return Status::invalid_argument("launch_q8_mma_conv: unknown tactic \"" + std::string(tactic) + "\".");
  const size_t index = static_cast<size_t>(known - std::begin(kTactics));
  if (index > 0 && !is_kernel_8bit_type(d.y_dtype))
    return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                               " writes 8-bit outputs only; a " + std::string(dtype_name(d.y_dtype)) +
                               " output runs " + std::string(kTactics[0]) + ".");
  if (index == kPatchTactic &&
      (d.c != patch::kChannels || d.k != patch::kChannels || d.r != 3 || d.s != 3 || d.stride != Hw{1, 1} ||
       d.dilation != Hw{1, 1} || d.pads != Pads{1, 1, 1, 1} || d.out_h != d.h || d.out_w != d.w))
    return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                               " runs 3x3 convolutions of 64 channels into 64, stride 1, pads 1 only.");
  if (index == kSmallKTactic &&
      (d.x_dtype != DataType::kInt8 || d.y_dtype != DataType::kInt8 || d.r != 1 || d.s != 1 ||
       d.stride != Hw{1, 1} || d.pads != Pads{} || d.out_h != d.h || d.out_w != d.w || d.c % 8 != 0 ||
       d.c > 32 || d.k % 16 != 0 || small_k_smem_bytes(d.k, d.c) > 48 * 1024))
    return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                               " runs INT8 1x1 convolutions of 8 to 32 channels (a multiple of 8) into a "
                               "multiple of 16, stride 1, no padding, INT8 outputs only.");
  if (index >= kWgmmaFirst && index < kCutlassFirst && (d.x_dtype != DataType::kInt8 || d.c % 16 != 0))
    return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                               " runs INT8 layers of a multiple of 16 input channels only.");
  if (index >= kCutlassFirst &&
      (d.x_dtype != DataType::kInt8 || d.y_dtype != DataType::kInt8 || d.c % 16 != 0 || d.k % 16 != 0))
    return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                               " runs INT8 layers of multiples of 16 input and output channels, INT8 "
                               "outputs only.");
  return index;
}

}  // namespace

Status q8_mma_tactic_supports(std::string_view tactic, const Q8ConvDesc& d) {
  return tactic_for(tactic, d).status();
}

Status launch_q8_mma_conv(std::string_view tactic, const Q8ConvDesc& d, const void* x, const void* w,
                          const float* w_scale, const float* bias, const void* residual, void* y,
                          cudaStream_t stream, void* workspace, int64_t workspace_bytes) {
  GPULAB_ASSIGN_OR_RETURN(const size_t index, tactic_for(tactic, d));
  GPULAB_TRY(check_q8_conv_pointers(d, w_scale, residual));
  if (!is_aligned(x, 16) || !is_aligned(w, 16))
    return Status::invalid_argument(
        "launch_q8_mma_conv: the tensor-core kernel needs x and w 16-byte aligned.");
  const bool fp8 = d.x_dtype == DataType::kFp8E4M3;
  if (fp8) GPULAB_TRY(check_fp8_device());
  MmaParams p{};
  p.h = static_cast<int>(d.h);
  p.w = static_cast<int>(d.w);
  p.c = static_cast<int>(d.c);
  p.k = static_cast<int>(d.k);
  p.s = static_cast<int>(d.s);
  p.out_h = static_cast<int>(d.out_h);
  p.out_w = static_cast<int>(d.out_w);
  p.stride_h = static_cast<int>(d.stride.h);
  p.stride_w = static_cast<int>(d.stride.w);
  p.dil_h = static_cast<int>(d.dilation.h);
  p.dil_w = static_cast<int>(d.dilation.w);
  p.pad_top = static_cast<int>(d.pads.top);
  p.pad_left = static_cast<int>(d.pads.left);
  p.m_total = d.n * d.out_h * d.out_w;
  p.k_total = static_cast<int>(d.r * d.s * d.c);
  p.c_chunks = static_cast<int>((d.c + 15) / 16);
  p.k_chunks = static_cast<int>(d.r * d.s) * p.c_chunks;
  p.c_half = d.c % 16 != 0;
  p.vec_out = is_kernel_8bit_type(d.y_dtype) && d.k % 16 == 0 && is_aligned(y, 16) &&
              (!residual || is_aligned(residual, 16));
  p.vec8_out = !p.vec_out && is_kernel_8bit_type(d.y_dtype) && d.k % 16 == 8 && is_aligned(y, 8) &&
               (!residual || is_aligned(residual, 8));
  p.x_scale = d.x_scale;
  p.residual_scale = d.residual_scale;
  p.inv_y = 1.0f / d.y_scale;  // as the direct kernel and the interpreter compute it
  p.act = ActParams{d.activation, d.clip_min, d.clip_max};
  const auto* xb = static_cast<const uint8_t*>(x);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* rb = static_cast<const uint8_t*>(residual);
  return dispatch_8bit(d.x_dtype, [&](auto fp8_tag) -> Status {
    constexpr bool kFp8 = decltype(fp8_tag)::value;
    auto* yb = static_cast<uint8_t*>(y);
    switch (index) {
      case 0: break;
      case 1:
        return launch_tile<WideTile, kFp8>(p, xb, wb, w_scale, bias, rb, yb, stream, workspace,
                                           workspace_bytes);
      case 2:
        return launch_tile<LargeTile, kFp8>(p, xb, wb, w_scale, bias, rb, yb, stream, workspace,
                                            workspace_bytes);
      case 3:
        return launch_tile<TallTile, kFp8>(p, xb, wb, w_scale, bias, rb, yb, stream, workspace,
                                           workspace_bytes);
      case 4: return launch_patch<kFp8>(p, d.n, xb, wb, w_scale, bias, rb, yb, stream);
      case 5:
        if (!is_aligned(y, 16) || (rb && !is_aligned(rb, 16)))
          return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                                     " needs 16-byte aligned outputs and residuals.");
        return launch_small_k(p, xb, wb, w_scale, bias, rb, yb, stream);
      default:
        if (index >= kCutlassFirst) {
          if (!is_aligned(y, 16) || (rb && !is_aligned(rb, 16)) || !is_aligned(w_scale, 16) ||
              (bias && !is_aligned(bias, 16)))
            return Status::unsupported("launch_q8_mma_conv: " + std::string(tactic) +
                                       " needs 16-byte aligned outputs, residuals, scales and biases.");
          return launch_q8_cutlass(index - kCutlassFirst, d, p, xb, wb, w_scale, bias, rb, yb, stream);
        }
        return launch_q8_wgmma(index - kWgmmaFirst, p, xb, wb, w_scale, bias, rb, yb, stream, workspace,
                               workspace_bytes);
    }
    return dispatch_output(d.y_dtype, [&](auto tag) -> Status {
      using Y = decltype(tag);
      return launch_tile<SmallTile, kFp8>(p, xb, wb, w_scale, bias, rb, static_cast<Y*>(y), stream, workspace,
                                          workspace_bytes);
    });
  });
}

}  // namespace gpulab::kernels
