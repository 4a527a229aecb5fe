// The INT8 tensor-core convolution on wgmma (tactics "wgmma-q8:64x128", "wgmma-q8:128x128" and
// "wgmma-q8:128x256"; compiled for sm_90a alone): quant_mma.cu's implicit GEMM, with Hopper's
// warpgroup MMAs in place of mma.sync. On the H100, quant_mma.cu's mma.sync tiles ran ResNet-18's
// INT8 3x3 layers at 295-448 TOP/s against 1,437 TOP/s for cuBLASLt's INT8 GEMM on wgmma
// (bench/results/2026-12-06-4feb628), and the INT8 plan at batch 256 in 3.09 ms against FP16's 1.93
// (bench/results/2026-12-06-a4a184a).
//
// The GEMM is quant_mma.cu's: M = output pixels, N = output channels, K = the weights' r * s * c
// bytes in 16-byte chunks, each inside one tap, so no im2col buffer. A thread block is one or two
// warpgroups over 64 or 128 pixels x BN channels; warpgroup g takes pixels 64 g .. 64 g + 63 with one
// m64nBNk32 wgmma (s8 x s8 into int32) per 32 bytes of K, both operands read from shared memory
// through descriptors (8-bit wgmma takes both K-major, which is how the activation rows and the
// KRSC weight rows lie).
//
// Shared memory, per stage of kBK = 128 bytes of K: the activation rows then the weight rows, 128
// bytes each, in wgmma's K-major 128-byte swizzle: chunk c of row r at chunk c ^ (r % 8), 8-row atoms
// of 1024 bytes (the descriptors' stride offset), every stage 1024-byte aligned; the descriptors of
// the four 32-byte steps of a stage start 32 bytes apart. A warp's cp.async writes (4 rows of 8
// chunks) fill 512 contiguous bytes.
// (The first version, 58f49a2, used the no-swizzle layout, chunk planes of 16-byte rows: correct,
// bit for bit, but 1.3-2.5x slower than the mma.sync tiles on every ResNet-18 and MobileNetV2
// layer of the H100 at batch 1024, bench/results/2026-12-06-58f49a2.)
//
// Pipeline: kStages buffers, loads kStages - 2 stages ahead of the MMAs (cp.async, zero fill outside
// the image and past K), one batch of wgmmas in flight: the loads of iteration kt go into the
// buffer of stage kt - 2, whose wgmmas the barrier at the top of iteration kt has seen finish in
// every warpgroup (warpgroup_wait<1> at the end of iteration kt - 1 leaves only stage kt - 1's
// in flight).
//
// Epilogue: quant_mma.cu's finish_fragment, 64 channels at a time: the accumulators of m64nN lie as
// mma.sync's m16n8 fragments (warp w of the warpgroup: rows 16 w + lane / 4 and + 8; fragment j:
// channels 8 j + 2 (lane % 4) and + 1), so each warp finishes its 16 pixels exactly as the mma.sync
// tiles' warps do, and the outputs are the same bytes (integer sums are exact in any order). Split-K
// (where the blocks would fill less than half the GPU) writes the raw sums as they do.
//
// No FP8: the E4M3 wgmma sums (float32 accumulators on the H100, in the tensor cores' own order and
// internal precision) landed more than one E4M3 step from the plan interpreter on 1-4 outputs of
// the kernel tests' 3x3 and 1x1 cases (58f49a2's run), where the mma.sync tiles stay within one.
// Summing each 128-byte stage of K fresh and adding it to float32 accumulators (c702ad6, CUTLASS's
// FP8 GEMM promotion) left 1-3 outputs of those cases and 0.02-0.12% of ResNet-18's layers'
// outputs off (bench/results/2026-12-07-deaa762), a one-stage 1x1 case too: it was reverted.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/kernels/quant_mma.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "cute/arch/mma_sm90_gmma.hpp"

namespace gpulab::kernels::q8mma {
namespace {

template <int BM_, int BN_, int Stages_, int MinBlocks_>
struct WgmmaTile {
  static constexpr int BM = BM_, BN = BN_, kStages = Stages_, kMinBlocks = MinBlocks_;
  static constexpr int kThreads = 2 * BM;     // a warpgroup per 64 pixels
  static constexpr int kAhead = kStages - 2;  // stages loaded ahead of the one computing
  static constexpr int kBK = 128;             // K bytes per stage: one swizzled 128-byte row
  static constexpr int kChunks = kBK / 16;
  static constexpr int kABytes = BM * kBK, kBBytes = BN * kBK;
  static constexpr int kStageBytes = kABytes + kBBytes;  // a multiple of the 1024-byte atom
  // Copies: thread t takes chunk t % 8 of rows t / 8 + kRowStep i.
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kAIters = BM / kRowStep, kBIters = BN / kRowStep;
  static constexpr int kAcc = BN / 2;  // accumulators per thread
  // Epilogue staging: per warp 16 rows of 64 floats (finish_fragment<64>), padded by 4.
  static constexpr int kStagePitch = 64 + 4;
  static constexpr int kEpilogueBytes = kThreads / 32 * 16 * kStagePitch * 4;
  // The stages from a 1024-byte aligned start inside the dynamic shared memory (1 KB of slack).
  static constexpr int kSmemBytes =
      (kStages * kStageBytes > kEpilogueBytes ? kStages * kStageBytes : kEpilogueBytes) + 1024;
  static_assert((BM == 64 || BM == 128) && kAhead >= 1 && BN % 64 == 0 && BN % kRowStep == 0);
  static_assert(kSmemBytes * kMinBlocks <= 227 * 1024, "kMinBlocks blocks fit an SM");
  // The m64nBNk32 instruction, s8 x s8 into int32, both operands in shared memory.
  using Op = std::conditional_t<BN == 64, cute::SM90::GMMA::MMA_64x64x32_S32S8S8_SS_TN,
                                std::conditional_t<BN == 128, cute::SM90::GMMA::MMA_64x128x32_S32S8S8_SS_TN,
                                                   cute::SM90::GMMA::MMA_64x256x32_S32S8S8_SS_TN>>;
};

// The int32 accumulators as the instruction's operands (uint32_t).
__device__ __forceinline__ uint32_t& operand(int32_t& a) {
  return reinterpret_cast<uint32_t&>(a);
}

template <typename T, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a_desc, uint64_t b_desc, int32_t* d,
                                         std::index_sequence<I...>) {
  T::Op::fma(a_desc, b_desc, operand(d[I])...);
}

template <typename T>
__device__ __forceinline__ void fence_accumulators(int32_t (&acc)[T::kAcc / 4][4]) {
#pragma unroll
  for (int j = 0; j < T::kAcc / 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) cute::warpgroup_fence_operand(operand(acc[j][e]));
}

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    q8_wgmma_conv_kernel(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                         const float* bias, const uint8_t* residual, uint8_t* y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t smem[];
  // The swizzle works on shared-memory address bits: every stage starts on a 1024-byte boundary.
  uint8_t* const stages = smem + (1024 - cute::cast_smem_ptr_to_uint(smem) % 1024) % 1024;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Through a shuffle, so that ptxas knows it is warp-uniform (sm90's wgmma_conv.cu does the same).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  // Channel tiles vary fastest, so that the blocks of one pixel tile run together and read its
  // activations from L2 once.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x / p.n_tiles) * T::BM;
  const int n0 = static_cast<int>(blockIdx.x % p.n_tiles) * T::BN;

  // This thread copies 16-byte chunk `j` of K of activation rows row0 + kRowStep i and of weight
  // rows row0 + kRowStep i in every stage, to chunk j ^ (row % 8) of the row (the 128-byte swizzle).
  const int j = tid % T::kChunks, row0 = tid / T::kChunks;
  const TileRows<T::kAIters, T::kBIters, T::kRowStep> rows(p, x, w, m0, n0, row0);
  auto load_stage = [&](int kt, int buf) {
    uint8_t* sa = stages + buf * T::kStageBytes;
    uint8_t* sb = sa + T::kABytes;
    const auto c = rows.chunk(p, kt * T::kChunks + j);
#pragma unroll
    for (int i = 0; i < T::kAIters; ++i) {
      const int row = row0 + T::kRowStep * i;
      bool inside;
      const uint8_t* src = rows.a_src(p, x, i, c, inside);
      cp_async16(sa + row * T::kBK + ((j ^ (row & 7)) << 4), src, inside);
    }
#pragma unroll
    for (int i = 0; i < T::kBIters; ++i) {
      const int row = row0 + T::kRowStep * i;
      bool ok;
      const uint8_t* src = rows.template b_src<false>(p, w, i, c, ok);
      cp_async16(sb + row * T::kBK + ((j ^ (row & 7)) << 4), src, ok);
    }
  };

  int32_t acc[T::kAcc / 4][4];
#pragma unroll
  for (int jn = 0; jn < T::kAcc / 4; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[jn][e] = 0;

  const int kt0 = static_cast<int>(blockIdx.y) * p.kt_per_split;
  const int kt_total = min((p.k_chunks * 16 + T::kBK - 1) / T::kBK - kt0, p.kt_per_split);
#pragma unroll
  for (int st = 0; st < T::kAhead; ++st) {
    if (st < kt_total) load_stage(kt0 + st, st);
    cp_async_commit();
  }
  for (int kt = 0; kt < kt_total; ++kt) {
    cp_async_wait<T::kAhead - 1>();  // stage kt has landed (this thread's copies),
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // is visible to the wgmmas,
    __syncthreads();  // and everyone's; every warpgroup's wgmmas of stage kt - 2 are done
    const int next = kt + T::kAhead;
    if (next < kt_total) load_stage(kt0 + next, next % T::kStages);
    cp_async_commit();  // one group per iteration, so that the wait count stays right
    // This warpgroup's 64 activation rows and all the weight rows; a step of 32 bytes of K moves
    // the descriptors' start 32 bytes along the rows (the hardware applies the swizzle).
    const uint8_t* sa = stages + (kt % T::kStages) * T::kStageBytes + wg * 64 * T::kBK;
    const uint8_t* sb = stages + (kt % T::kStages) * T::kStageBytes + T::kABytes;
    fence_accumulators<T>(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < T::kChunks / 2; ++ks)
      wgmma_ss<T>(sm90::make_desc_sw128(sa + 32 * ks, 8 * T::kBK),
                  sm90::make_desc_sw128(sb + 32 * ks, 8 * T::kBK), &acc[0][0],
                  std::make_index_sequence<T::kAcc>{});
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_accumulators<T>(acc);
  }
  cute::warpgroup_wait<0>();
  fence_accumulators<T>(acc);
  cp_async_wait<0>();  // nothing is in flight ...
  __syncthreads();     // ... or still read: the pipeline's shared memory becomes the staging area

  // This warp's 16 pixels: rows 16 (warp % 4) .. + 15 of its warpgroup's 64.
  const int64_t m_warp = m0 + wg * 64 + (warp % 4) * 16;
  if (p.partial) {  // split-K: this split's raw sums; accumulator e of jn is row g + 8 (e / 2)
    const int g = lane >> 2, tig = lane & 3;
    int32_t* part = p.partial + static_cast<int64_t>(blockIdx.y) * p.m_total * p.k;
#pragma unroll
    for (int jn = 0; jn < T::kAcc / 4; ++jn)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = m_warp + g + 8 * (e >> 1);
        const int n = n0 + jn * 8 + 2 * tig + (e & 1);
        if (m < p.m_total && n < p.k) part[m * p.k + n] = acc[jn][e];
      }
    return;
  }
  float* stage = reinterpret_cast<float*>(stages) + warp * 16 * T::kStagePitch;
#pragma unroll
  for (int h = 0; h < T::BN / 64; ++h) {
    if (n0 + 64 * h >= p.k) break;
    using Fragment = int32_t[8][4];
    finish_fragment<64, false>(
        reinterpret_cast<const Fragment&>(acc[8 * h]), stage, lane, n0 + 64 * h + (lane % 4) * 16, p, w_scale,
        bias, residual, y, [&](int row) -> int64_t { return m_warp + row < p.m_total ? m_warp + row : -1; });
  }
#else
  __trap();  // launch_q8_wgmma launches this on sm_90 alone
#endif
}

// The tiles, in kWgmmaTiles' order: pixels x channels, stages, thread blocks per SM.
using Tile64x128 = WgmmaTile<64, 128, 4, 2>;
using Tile128x128 = WgmmaTile<128, 128, 6, 1>;
using Tile128x256 = WgmmaTile<128, 256, 4, 1>;

template <typename T>
Status launch_as(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale, const float* bias,
                 const uint8_t* residual, uint8_t* y, cudaStream_t stream, void* workspace,
                 int64_t workspace_bytes) {
  static DeviceSms ready{};
  GPULAB_ASSIGN_OR_RETURN(const int sms, prepare_device(q8_wgmma_conv_kernel<T>, T::kSmemBytes, ready));
  p.n_tiles = (p.k + T::BN - 1) / T::BN;
  const int64_t blocks = (p.m_total + T::BM - 1) / T::BM * p.n_tiles;
  const int splits = plan_split_k(p, blocks, (p.k_chunks * 16 + T::kBK - 1) / T::kBK, false, sms, workspace,
                                  workspace_bytes);
  q8_wgmma_conv_kernel<T><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)), T::kThreads,
                            T::kSmemBytes, stream>>>(p, x, w, w_scale, bias, residual, y);
  GPULAB_TRY(check_launch("launch_q8_mma_conv", "q8_wgmma_conv_kernel"));
  if (splits == 1) return Status::ok();
  return launch_q8_split_finish(p, splits, w_scale, bias, residual, y, stream);
}

}  // namespace

Status launch_q8_wgmma(size_t tile, const MmaParams& p, const uint8_t* x, const uint8_t* w,
                       const float* w_scale, const float* bias, const uint8_t* residual, uint8_t* y,
                       cudaStream_t stream, void* workspace, int64_t workspace_bytes) {
  GPULAB_TRY(check_sm90("the wgmma tiles"));
  switch (tile) {
    case 0:
      return launch_as<Tile64x128>(p, x, w, w_scale, bias, residual, y, stream, workspace, workspace_bytes);
    case 1:
      return launch_as<Tile128x128>(p, x, w, w_scale, bias, residual, y, stream, workspace, workspace_bytes);
    default:
      return launch_as<Tile128x256>(p, x, w, w_scale, bias, residual, y, stream, workspace, workspace_bytes);
  }
}

}  // namespace gpulab::kernels::q8mma
