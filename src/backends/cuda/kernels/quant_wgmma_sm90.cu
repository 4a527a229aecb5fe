// The 8-bit tensor-core convolution on wgmma (tactics "wgmma-q8:128x64", "wgmma-q8:128x128" and
// "wgmma-q8:128x256"; compiled for sm_90a alone): quant_mma.cu's implicit GEMM, with Hopper's
// warpgroup MMAs in place of mma.sync. On the H100, quant_mma.cu's mma.sync tiles ran ResNet-18's
// INT8 3x3 layers at 295-402 TOP/s against 1,437 TOP/s for cuBLASLt's INT8 GEMM on wgmma
// (bench/results/2026-12-06-4feb628), and the INT8 plan at batch 256 in 3.15 ms against FP16's 1.91
// (bench/results/2026-12-06-279d535): mma.sync is the ceiling there, not the tiles.
//
// The GEMM is quant_mma.cu's: M = output pixels, N = output channels, K = the weights' r * s * c
// bytes in 16-byte chunks, each inside one tap, so no im2col buffer. A thread block is two
// warpgroups (256 threads) over 128 pixels x BN channels; warpgroup g takes pixels 64 g .. 64 g + 63
// with one m64nBNk32 wgmma per 32 bytes of K, both operands read from shared memory through
// descriptors (8-bit wgmma takes both K-major, which is how the activation rows and the KRSC weight
// rows lie). INT8 sums in int32 (s8 x s8), E4M3 in float32.
//
// Shared memory, per stage of kBK = 128 bytes of K: the activations as 8 chunk planes of [128 rows]
// [16 bytes] and the weights as 8 planes of [BN rows][16 bytes]. That is wgmma's no-swizzle K-major
// layout: a core matrix (8 rows x 16 bytes) is 128 contiguous bytes, core matrices 8 rows apart are
// 128 bytes apart (the descriptor's stride offset), those 16 bytes of K apart one plane apart (its
// leading offset). Each plane is padded to 64 bytes past a multiple of 128, so that the cp.async
// writes of a warp (8 chunks x 4 rows) spread over both halves of the banks.
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
// tiles' warps do, and INT8 outputs are the same bytes (integer sums are exact in any order). Split-K
// (INT8, where the blocks would fill less than half the GPU) writes the raw sums as they do.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/kernels/quant_mma.cuh"
#include "backends/cuda/kernels/sm90.cuh"
#include "cute/arch/mma_sm90_gmma.hpp"
#include "cute/arch/mma_sm90_gmma_ext.hpp"

namespace gpulab::kernels::q8mma {
namespace {

template <int BN_, int Stages_, bool kFp8>
struct WgmmaTile {
  static constexpr int BM = 128, BN = BN_, kStages = Stages_, kThreads = 256;
  static constexpr int kMinBlocks = BN == 64 ? 2 : 1;  // per SM: 128x64's shared memory fits two
  static constexpr int kAhead = kStages - 2;           // stages loaded ahead of the one computing
  static constexpr int kBK = 128;                      // K bytes per stage
  static constexpr int kChunks = kBK / 16;             // chunk planes per operand
  static constexpr int kAPlane = BM * 16 + 64, kBPlane = BN * 16 + 64;
  static constexpr int kABytes = kChunks * kAPlane, kBBytes = kChunks * kBPlane;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Copies: thread t takes chunk t % 8 of rows t / 8 + 32 i.
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kAIters = BM / kRowStep, kBIters = BN / kRowStep;
  static constexpr int kAcc = BN / 2;  // accumulators per thread
  // Epilogue staging: per warp 16 rows of 64 floats (finish_fragment<64>), padded by 4.
  static constexpr int kStagePitch = 64 + 4;
  static constexpr int kEpilogueBytes = kThreads / 32 * 16 * kStagePitch * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kEpilogueBytes ? kStages* kStageBytes : kEpilogueBytes;
  static_assert(kAhead >= 1 && BN % 64 == 0 && BN % kRowStep == 0 && kSmemBytes <= 227 * 1024);
  static_assert(kAPlane % 128 == 64 && kBPlane % 128 == 64, "planes in opposite halves of the banks");
  // The m64nBNk32 instruction with both operands in shared memory, per operand type.
  using Int8Op =
      std::conditional_t<BN == 64, cute::SM90::GMMA::MMA_64x64x32_S32S8S8_SS_TN,
                         std::conditional_t<BN == 128, cute::SM90::GMMA::MMA_64x128x32_S32S8S8_SS_TN,
                                            cute::SM90::GMMA::MMA_64x256x32_S32S8S8_SS_TN>>;
  using Fp8Op =
      std::conditional_t<BN == 64, cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>,
                         std::conditional_t<BN == 128, cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>,
                                            cute::SM90::GMMA::MMA_64x256x32_F32E4M3E4M3_SS_TN<>>>;
  using Op = std::conditional_t<kFp8, Fp8Op, Int8Op>;
  using Acc = std::conditional_t<kFp8, float, int32_t>;
};

// The accumulator registers as the instruction's operands: uint32_t for its int32 sums, float for
// float32 ones.
__device__ __forceinline__ uint32_t& operand(int32_t& a) {
  return reinterpret_cast<uint32_t&>(a);
}
__device__ __forceinline__ float& operand(float& a) {
  return a;
}

template <typename T, size_t... I>
__device__ __forceinline__ void wgmma_ss(uint64_t a_desc, uint64_t b_desc, typename T::Acc* d,
                                         std::index_sequence<I...>) {
  T::Op::fma(a_desc, b_desc, operand(d[I])...);
}

template <typename T>
__device__ __forceinline__ void fence_accumulators(typename T::Acc (&acc)[T::kAcc / 4][4]) {
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
  using Acc = typename T::Acc;
  constexpr bool kFp8 = std::is_same_v<Acc, float>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Through a shuffle, so that ptxas knows it is warp-uniform (sm90's wgmma_conv.cu does the same).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  // Channel tiles vary fastest, so that the blocks of one pixel tile run together and read its
  // activations from L2 once.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x / p.n_tiles) * T::BM;
  const int n0 = static_cast<int>(blockIdx.x % p.n_tiles) * T::BN;

  // This thread copies 16-byte chunk `j` of K of activation rows row0 + kRowStep i and of weight
  // rows row0 + kRowStep i in every stage, into chunk plane j of each operand.
  const int j = tid % T::kChunks, row0 = tid / T::kChunks;
  const TileRows<T::kAIters, T::kBIters, T::kRowStep> rows(p, x, w, m0, n0, row0);
  auto load_stage = [&](int kt, int buf) {
    uint8_t* sa = smem + buf * T::kStageBytes + j * T::kAPlane;
    uint8_t* sb = smem + buf * T::kStageBytes + T::kABytes + j * T::kBPlane;
    const auto c = rows.chunk(p, kt * T::kChunks + j);
#pragma unroll
    for (int i = 0; i < T::kAIters; ++i) {
      bool inside;
      const uint8_t* src = rows.a_src(p, x, i, c, inside);
      cp_async16(sa + (row0 + T::kRowStep * i) * 16, src, inside);
    }
#pragma unroll
    for (int i = 0; i < T::kBIters; ++i) {
      bool ok;
      const uint8_t* src = rows.template b_src<false>(p, w, i, c, ok);
      cp_async16(sb + (row0 + T::kRowStep * i) * 16, src, ok);
    }
  };

  Acc acc[T::kAcc / 4][4];
#pragma unroll
  for (int jn = 0; jn < T::kAcc / 4; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[jn][e] = Acc(0);

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
    const uint8_t* sa = smem + (kt % T::kStages) * T::kStageBytes + wg * 64 * 16;
    const uint8_t* sb = smem + (kt % T::kStages) * T::kStageBytes + T::kABytes;
    fence_accumulators<T>(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int ks = 0; ks < T::kChunks / 2; ++ks)
      wgmma_ss<T>(sm90::make_desc(sa + 2 * ks * T::kAPlane, T::kAPlane, 128),
                  sm90::make_desc(sb + 2 * ks * T::kBPlane, T::kBPlane, 128), &acc[0][0],
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
  if constexpr (!kFp8) {
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
  }
  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * T::kStagePitch;
#pragma unroll
  for (int h = 0; h < T::BN / 64; ++h) {
    if (n0 + 64 * h >= p.k) break;
    using Fragment = Acc[8][4];
    finish_fragment<64, kFp8>(
        reinterpret_cast<const Fragment&>(acc[8 * h]), stage, lane, n0 + 64 * h + (lane % 4) * 16, p, w_scale,
        bias, residual, y, [&](int row) -> int64_t { return m_warp + row < p.m_total ? m_warp + row : -1; });
  }
#else
  __trap();  // launch_q8_wgmma launches this on sm_90 alone
#endif
}

// The tiles, in kWgmmaTiles' order. 128x64 fits two blocks an SM (101 KB each); the others one.
template <int BN, int Stages>
struct TileSpec {
  static constexpr int kBN = BN, kStages = Stages;
};
using Tile64 = TileSpec<64, 4>;
using Tile128 = TileSpec<128, 6>;
using Tile256 = TileSpec<256, 4>;

template <typename Spec, bool kFp8>
Status launch_as(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale, const float* bias,
                 const uint8_t* residual, uint8_t* y, cudaStream_t stream, void* workspace,
                 int64_t workspace_bytes) {
  using T = WgmmaTile<Spec::kBN, Spec::kStages, kFp8>;
  static DeviceSms ready{};
  GPULAB_ASSIGN_OR_RETURN(const int sms, prepare_device(q8_wgmma_conv_kernel<T>, T::kSmemBytes, ready));
  p.n_tiles = (p.k + T::BN - 1) / T::BN;
  const int64_t blocks = (p.m_total + T::BM - 1) / T::BM * p.n_tiles;
  const int splits =
      plan_split_k(p, blocks, (p.k_chunks * 16 + T::kBK - 1) / T::kBK, kFp8, sms, workspace, workspace_bytes);
  q8_wgmma_conv_kernel<T><<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(splits)), T::kThreads,
                            T::kSmemBytes, stream>>>(p, x, w, w_scale, bias, residual, y);
  GPULAB_TRY(check_launch("launch_q8_mma_conv", "q8_wgmma_conv_kernel"));
  if (splits == 1) return Status::ok();
  return launch_q8_split_finish(p, splits, w_scale, bias, residual, y, stream);
}

// OK on a GPU of compute capability 9.0 (sm_90a code runs there alone).
Status check_sm90() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::unavailable("launch_q8_mma_conv: cannot read the current device's compute capability.");
  }
  if (major != 9 || minor != 0)
    return Status::unsupported("launch_q8_mma_conv: the wgmma tiles run on compute capability 9.0 only.");
  return Status::ok();
}

}  // namespace

Status launch_q8_wgmma(size_t tile, bool fp8, MmaParams p, const uint8_t* x, const uint8_t* w,
                       const float* w_scale, const float* bias, const uint8_t* residual, uint8_t* y,
                       cudaStream_t stream, void* workspace, int64_t workspace_bytes) {
  GPULAB_TRY(check_sm90());
  const auto launch = [&]<typename Spec>(Spec) -> Status {
    return fp8 ? launch_as<Spec, true>(p, x, w, w_scale, bias, residual, y, stream, workspace,
                                       workspace_bytes)
               : launch_as<Spec, false>(p, x, w, w_scale, bias, residual, y, stream, workspace,
                                        workspace_bytes);
  };
  switch (tile) {
    case 0: return launch(Tile64{});
    case 1: return launch(Tile128{});
    default: return launch(Tile256{});
  }
}

}  // namespace gpulab::kernels::q8mma
