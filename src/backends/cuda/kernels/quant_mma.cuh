// What the 8-bit tensor-core convolutions share (quant_mma.cu's mma.sync tiles and
// quant_wgmma_sm90.cu's wgmma tiles, compiled for sm_90a alone): the launch parameters, the
// cp.async copies, quant.h's epilogue over a warp's 16-pixel accumulator fragments, the split-K
// rule, and the per-device shared-memory setup. quant_mma.cu's top comment says how the implicit GEMM
// works.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant.cuh"

namespace gpulab::kernels::q8mma {

struct MmaParams {
  int h, w, c, k, s;  // s: the kernel's width (taps per kernel row)
  int out_h, out_w;
  int stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  int64_t m_total;  // n * out_h * out_w
  int k_total;      // r * s * c: bytes of one weight row
  int c_chunks;     // 16-byte chunks of K per tap: c / 16, rounded up
  int k_chunks;     // r * s * c_chunks: chunks of the reduction, the last of each tap zero-padded
  bool c_half;      // c % 16 == 8: rows of x and w are 8-byte aligned only, copied 8 bytes at a time
  // Split-K (INT8 only): blockIdx.y takes K stages [y kt_per_split, (y + 1) kt_per_split) and
  // writes its raw int32 sums to partial[y][m][k]; q8_split_finish_kernel adds them up and runs the
  // epilogue. partial null: one split, the epilogue in the kernel.
  int kt_per_split;
  int32_t* partial;
  int n_tiles;    // thread-block tiles across the output channels
  bool vec_out;   // 16 output channels of a pixel are one aligned 16-byte store (8-bit y, k % 16 == 0)
  bool vec8_out;  // else 8-byte stores and residual loads (8-bit y, k % 16 == 8, 8-byte aligned)
  float x_scale, residual_scale, inv_y;
  ActParams act;
};

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* src, bool fill) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int bytes = fill ? 16 : 0;  // 0: the 16 bytes are zeroed, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// 8 bytes: `fill` false zeroes them (nothing is read). For rows that are only 8-byte aligned.
__device__ __forceinline__ void cp_async8(void* smem_dst, const void* src, bool fill) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int bytes = fill ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// The 16-byte chunk at the 8-byte aligned `src`, its second half zeros unless `full`: two 8-byte
// copies (c % 16 == 8).
__device__ __forceinline__ void copy_half_chunks(void* smem_dst, const uint8_t* src, bool fill, bool full) {
  cp_async8(smem_dst, src, fill);
  cp_async8(static_cast<uint8_t*>(smem_dst) + 8, src + 8, fill && full);
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The rows of a thread-block tile that one thread copies in every stage: activation rows m0 + row0 +
// kRowStep i (i < kAIters: output pixels, kept as their image and top-left input pixel) and weight
// rows n0 + row0 + kRowStep i (i < kBIters: output channels), and where a 16-byte chunk of K lies in
// each. Rows past the output (pixels past m_total, channels past k) and chunks past the reduction
// are zero-filled: their `ok` is false and the source a valid dummy address (x or w).
template <int kAIters, int kBIters, int kRowStep>
struct TileRows {
  const uint8_t* a_img[kAIters];
  int a_ih[kAIters], a_iw[kAIters];
  bool a_ok[kAIters];
  const uint8_t* b_row[kBIters];
  bool b_ok[kBIters];

  __device__ __forceinline__ TileRows(const MmaParams& p, const uint8_t* x, const uint8_t* w, int64_t m0,
                                      int n0, int row0) {
#pragma unroll
    for (int i = 0; i < kAIters; ++i) {
      const int64_t m = m0 + row0 + kRowStep * i;
      a_ok[i] = m < p.m_total;
      const int64_t mm = a_ok[i] ? m : 0;
      const int ow = static_cast<int>(mm % p.out_w);
      const int64_t t = mm / p.out_w;
      const int oh = static_cast<int>(t % p.out_h);
      const int64_t n = t / p.out_h;
      a_img[i] = x + n * p.h * p.w * static_cast<int64_t>(p.c);
      a_ih[i] = oh * p.stride_h - p.pad_top;
      a_iw[i] = ow * p.stride_w - p.pad_left;
    }
#pragma unroll
    for (int i = 0; i < kBIters; ++i) {
      const int n = n0 + row0 + kRowStep * i;
      b_ok[i] = n < p.k;
      b_row[i] = w + static_cast<int64_t>(b_ok[i] ? n : 0) * p.k_total;
    }
  }

  // Chunk q of K: its tap (kernel row r, column s) and first channel c0; ok false past the reduction.
  struct Chunk {
    int q, tap, c0, r, s;
    bool ok;
  };
  static __device__ __forceinline__ Chunk chunk(const MmaParams& p, int q) {
    Chunk c;
    c.q = q;
    c.ok = q < p.k_chunks;
    c.tap = c.ok ? q / p.c_chunks : 0;
    c.c0 = (q - c.tap * p.c_chunks) * 16;
    c.r = c.tap / p.s;
    c.s = c.tap - c.r * p.s;
    return c;
  }

  // Chunk c of activation row i, or x where `inside` comes back false (outside the image, past the
  // output or the reduction).
  __device__ __forceinline__ const uint8_t* a_src(const MmaParams& p, const uint8_t* x, int i, const Chunk& c,
                                                  bool& inside) const {
    const int ih = a_ih[i] + c.r * p.dil_h, iw = a_iw[i] + c.s * p.dil_w;
    inside = c.ok && a_ok[i] && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
    return inside ? a_img[i] + (static_cast<int64_t>(ih) * p.w + iw) * p.c + c.c0 : x;
  }

  // Chunk c of weight row i, or w where `ok` comes back false. kHalf (c % 16 == 8): KRSC rows, tap
  // `tap` at byte tap c, not at 16 c_chunks.
  template <bool kHalf>
  __device__ __forceinline__ const uint8_t* b_src(const MmaParams& p, const uint8_t* w, int i, const Chunk& c,
                                                  bool& ok) const {
    ok = c.ok && b_ok[i];
    if (!ok) return w;
    return kHalf ? b_row[i] + c.tap * p.c + c.c0 : b_row[i] + c.q * 16;
  }
};

// Channels k_base .. k_base + 15 of the output pixel whose row starts at i0 - k_base, from their
// sums conv(e) (as float): one 16-byte store where `vec` (8-bit y, k % 16 == 0, aligned; `res` the
// residual's 16 bytes, which the caller reads); two 8-byte stores, or one for the last 8 channels,
// where p.vec8_out (8-bit y, k % 16 == 8: MobileNetV2's 24-channel project layers, whose bytes went
// one at a time and ran 2.6x FP16's time at batch 32 on the H100, bench/results/2026-12-07-9df951c;
// with these stores mma-q8 took them in 0.093 and 0.130 ms at batch 256 against 0.144 and 0.174,
// though cuDNN's engine 4 is faster there, bench/results/2026-12-07-d9cedc6), the residual read here
// 8 bytes at a time; else store_q8_output per channel below p.k.
template <bool kFp8, typename Y, typename Conv>
__device__ __forceinline__ void store_16_channels(Conv conv, bool vec, uint4 res, int k_base, int64_t i0,
                                                  const MmaParams& p, const float* w_scale, const float* bias,
                                                  const uint8_t* residual, Y* y) {
  if constexpr (sizeof(Y) == 1) {
    if (vec) {
      *reinterpret_cast<uint4*>(y + i0) = q8_epilogue16<kFp8>(
          conv, [&](int e) { return w_scale[k_base + e]; },
          [&](int e) { return bias ? bias[k_base + e] : 0.0f; }, p.x_scale, residual != nullptr, res,
          p.residual_scale, p.act, p.inv_y);
      return;
    }
    if (p.vec8_out) {
      if (k_base >= p.k) return;
      const bool both = k_base + 16 <= p.k;  // else only the first 8 channels exist
      uint4 r8 = make_uint4(0, 0, 0, 0);
      if (residual) {
        const uint2 lo = *reinterpret_cast<const uint2*>(residual + i0);
        const uint2 hi = both ? *reinterpret_cast<const uint2*>(residual + i0 + 8) : make_uint2(0, 0);
        r8 = make_uint4(lo.x, lo.y, hi.x, hi.y);
      }
      const uint4 out = q8_epilogue16<kFp8>(
          conv, [&](int e) { return k_base + e < p.k ? w_scale[k_base + e] : 0.0f; },
          [&](int e) { return bias && k_base + e < p.k ? bias[k_base + e] : 0.0f; }, p.x_scale,
          residual != nullptr, r8, p.residual_scale, p.act, p.inv_y);
      *reinterpret_cast<uint2*>(y + i0) = make_uint2(out.x, out.y);
      if (both) *reinterpret_cast<uint2*>(y + i0 + 8) = make_uint2(out.z, out.w);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const int k = k_base + e;
    if (k >= p.k) break;
    store_q8_output<kFp8>(conv(e), p.x_scale, w_scale[k], bias ? bias[k] : 0.0f,
                          residual ? residual + i0 + e : nullptr, p.residual_scale, p.act, p.inv_y,
                          y + i0 + e);
  }
}

// The epilogue of one 16-pixel fragment row of a warp's accumulators (kWarpN channels): staged as
// float in the warp's 16 x (kWarpN + 4) shared-memory area, then each lane finishes 16 consecutive
// channels of one pixel with quant.h's epilogue (q8_epilogue in registers; store_q8_output where the
// bytes go one at a time), the residual read and the bytes written 16 at a time where p.vec_out
// allows. k_base: the lane's first channel;
// pixel_of(row): the output pixel (n h w index) of fragment row `row`, or -1 where there is none.
// Accumulator e of (jn) is fragment row g + 8 (e / 2), channel jn * 8 + 2 tig + e % 2.
template <int kWarpN, bool kFp8, typename Acc, typename Y, typename PixelOf>
__device__ __forceinline__ void finish_fragment(const Acc (&acc)[kWarpN / 8][4], float* stage, int lane,
                                                int k_base, const MmaParams& p, const float* w_scale,
                                                const float* bias, const uint8_t* residual, Y* y,
                                                PixelOf pixel_of) {
  static_assert(kWarpN == 32 || kWarpN == 64, "a lane finishes 16 channels");
  constexpr int kPitch = kWarpN + 4;
  constexpr int kLanesPerRow = kWarpN / 16;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  constexpr int kPasses = 16 / kRowsPerPass;
  const int g = lane >> 2, tig = lane & 3;
  const int lc = (lane % kLanesPerRow) * 16;
  // The pixels this lane finishes, and their residual bytes read before the staging (not after,
  // where each pass would wait for its load).
  int64_t pixel[kPasses];
  uint4 res[kPasses];
  const bool vec = sizeof(Y) == 1 && p.vec_out && k_base < p.k;  // k % 16 == 0: all 16 channels exist
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    pixel[pass] = pixel_of(pass * kRowsPerPass + lane / kLanesPerRow);
    res[pass] = make_uint4(0, 0, 0, 0);
    if (vec && residual && pixel[pass] >= 0)
      res[pass] = *reinterpret_cast<const uint4*>(residual + pixel[pass] * p.k + k_base);
  }
  __syncwarp();  // the lanes are done reading the last fragment's rows
#pragma unroll
  for (int jn = 0; jn < kWarpN / 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float conv;
      if constexpr (kFp8) {
        conv = acc[jn][e];
      } else {
        conv = __int2float_rn(acc[jn][e]);
      }
      stage[(g + 8 * (e >> 1)) * kPitch + jn * 8 + 2 * tig + (e & 1)] = conv;
    }
  __syncwarp();
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int row = pass * kRowsPerPass + lane / kLanesPerRow;
    const int64_t m = pixel[pass];
    if (m < 0) continue;
    const float* src = stage + row * kPitch + lc;
    store_16_channels<kFp8>([&](int e) { return src[e]; }, vec, res[pass], k_base, m * p.k + k_base, p,
                            w_scale, bias, residual, y);
  }
}

// The current device's compute capability as 10 major + minor; unavailable (naming `launcher`)
// where it cannot be read.
inline Result<int> current_compute_capability(const char* launcher) {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::unavailable(std::string(launcher) +
                               ": cannot read the current device's compute capability.");
  }
  return 10 * major + minor;
}

// OK on a GPU of compute capability 9.0, the only one that runs sm_90a code (the wgmma and CUTLASS
// tiles); unsupported, naming `tiles`, elsewhere.
inline Status check_sm90(const char* tiles) {
  GPULAB_ASSIGN_OR_RETURN(const int cc, current_compute_capability("launch_q8_mma_conv"));
  if (cc != 90)
    return Status::unsupported(std::string("launch_q8_mma_conv: ") + tiles +
                               " run on compute capability 9.0 only.");
  return Status::ok();
}

// Per device ordinal: its SM count once a kernel's dynamic shared-memory limit is set there, 0
// before.
using DeviceSms = std::array<std::atomic<int>, 64>;

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on the current device, once per device
// (`ready`; the attribute is per device context, and setting it is no stream operation, so it also
// works while a CUDA graph is being captured), and gives the device's SM count.
template <typename Kernel>
Result<int> prepare_device(Kernel kernel, int bytes, DeviceSms& ready) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::unavailable("launch_q8_mma_conv: cannot read the current device.");
  }
  std::atomic<int>* known = device >= 0 && device < static_cast<int>(ready.size()) ? &ready[device] : nullptr;
  if (known)
    if (const int sms = known->load(std::memory_order_relaxed); sms > 0) return sms;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::unavailable("launch_q8_mma_conv: cannot read the device's SM count.");
  }
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::device_error("launch_q8_mma_conv: cannot allow " + std::to_string(bytes) +
                                " bytes of shared memory per block: " + cudaGetErrorString(e));
  }
  if (known) known->store(sms, std::memory_order_relaxed);
  return sms;
}

// How many splits of K a launch of `blocks` thread blocks over `k_stages` stages takes: where the
// blocks fill less than half the GPU (a batch of one or a few images: ResNet-18's INT8 plan took
// 0.578 ms at batch 1 on the H100 against 0.157 ms in FP16, its last layers a few blocks each with
// 72 stages of K), enough splits to reach one block per SM, each at least 4 stages, at most 16,
// and their int32 sums within the workspace. 1: no split.
inline int split_k(int64_t blocks, int k_stages, int64_t m_total, int64_t k, int sms,
                   int64_t workspace_bytes) {
  if (2 * blocks > sms) return 1;
  int64_t splits = std::min<int64_t>({sms / blocks, k_stages / 4, 16});
  while (splits > 1 && splits * m_total * k * static_cast<int64_t>(sizeof(int32_t)) > workspace_bytes)
    --splits;
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

// Split-K for a launch of `blocks` thread blocks over `k_stages` stages of K: sets p.kt_per_split
// (all the stages when there is no split) and p.partial (the workspace, or null), and gives the
// number of splits, none of them empty. FP8 and launches without a workspace never split.
inline int plan_split_k(MmaParams& p, int64_t blocks, int k_stages, bool fp8, int sms, void* workspace,
                        int64_t workspace_bytes) {
  int splits = fp8 || !workspace ? 1 : split_k(blocks, k_stages, p.m_total, p.k, sms, workspace_bytes);
  p.kt_per_split = (k_stages + splits - 1) / splits;
  splits = (k_stages + p.kt_per_split - 1) / p.kt_per_split;
  p.partial = splits > 1 ? static_cast<int32_t*>(workspace) : nullptr;
  return splits;
}

// Split-K's second half for 8-bit outputs (q8_split_finish_kernel in quant_mma.cu): the `splits`
// int32 sums in p.partial added up and quant.h's epilogue run over them.
Status launch_q8_split_finish(const MmaParams& p, int splits, const float* w_scale, const float* bias,
                              const uint8_t* residual, uint8_t* y, cudaStream_t stream);

// The wgmma tiles (quant_wgmma_sm90.cu), `tile` an index into kWgmmaTiles: INT8 operands and
// outputs, c a multiple of 16. Unsupported on any GPU but compute capability 9.0, the only one that
// runs sm_90a code.
inline constexpr std::string_view kWgmmaTiles[] = {"wgmma-q8:64x128", "wgmma-q8:128x128", "wgmma-q8:128x256"};
Status launch_q8_wgmma(size_t tile, const MmaParams& p, const uint8_t* x, const uint8_t* w,
                       const float* w_scale, const float* bias, const uint8_t* residual, uint8_t* y,
                       cudaStream_t stream, void* workspace, int64_t workspace_bytes);

// CUTLASS's Hopper INT8 implicit GEMM with quant.h's epilogue (quant_cutlass_sm90.cu), `tile` an
// index into kCutlassTiles: INT8 operands, residual and output, c and k multiples of 16.
// Unsupported on any GPU but compute capability 9.0, or where CUTLASS's can_implement refuses the
// layer. Never splits K.
inline constexpr std::string_view kCutlassTiles[] = {"cutlass-q8:64x128", "cutlass-q8:128x128",
                                                     "cutlass-q8:64x256"};
Status launch_q8_cutlass(size_t tile, const Q8ConvDesc& d, const MmaParams& p, const uint8_t* x,
                         const uint8_t* w, const float* w_scale, const float* bias, const uint8_t* residual,
                         uint8_t* y, cudaStream_t stream);

}  // namespace gpulab::kernels::q8mma
