// The tensor-core INT8/FP8 convolution (launch_q8_conv with Q8ConvKernel::kMma): an implicit GEMM
// on mma.sync with 8-bit operands, with quant.h's epilogue fused.
//
// The GEMM: M = the output pixels (n, oh, ow), N = the output channels, K = the weights' r * s * c
// bytes in KRSC order. One 16-byte chunk of K lies inside one tap (c is a multiple of 16), so the
// activation row of pixel m at chunk q is x[n, ih, iw, c0 .. c0 + 15] of tap q / (c / 16): no
// im2col buffer, and no K padding up to a tile (the last chunks past r * s * c are zero-filled).
// A thread block computes 128 pixels x 64 channels with four warps (2 x 2, 64 x 32 each), K in
// stages of 64 bytes through a three-stage cp.async pipeline (zero fill outside the image). Each
// stage is two m16n8k32 steps: INT8 sums in int32 (s8 x s8), E4M3 in float32 (sm_89 and newer).
//
// Exactness: INT8 sums are exact in any order, and the epilogue is q8_conv_kernel's (quant.cu)
// step for step, so INT8 outputs equal the direct kernel's and the plan interpreter's bit for bit.
// The tensor cores sum E4M3 products in their own order and internal precision: FP8 outputs agree
// with the interpreter within one E4M3 step, as the direct kernel's do.
//
// Shared memory: per stage, 128 activation rows and 64 weight rows of 64 bytes, each padded to 80
// bytes: the fragment loads (8 rows x 4 consecutive words per instruction) then fall on 32
// distinct banks, and every 16-byte cp.async destination stays aligned.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant.cuh"
#include "backends/cuda/kernels/quant_kernels.h"

namespace gpulab::kernels {
namespace {

constexpr int kBM = 128, kBN = 64, kBK = 64;  // pixels, channels, K bytes per stage
constexpr int kStages = 3;
constexpr int kRowBytes = kBK + 16;
constexpr int kABytes = kBM * kRowBytes;  // 10240
constexpr int kBBytes = kBN * kRowBytes;  // 5120
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kMmaThreads = 128;
static_assert(kStages * kStageBytes <= 48 * 1024, "static shared memory");

struct MmaParams {
  int h, w, c, k, s;  // s: the kernel's width (taps per kernel row)
  int out_h, out_w;
  int stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  int64_t m_total;  // n * out_h * out_w
  int k_total;      // r * s * c: bytes of one weight row
  int c_chunks;     // c / 16
  float x_scale, residual_scale, inv_y;
  ActParams act;
};

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* src, bool fill) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int bytes = fill ? 16 : 0;  // 0: the 16 bytes are zeroed, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// D += A (16 x 32, row) x B (32 x 8, col) for 8-bit A and B: int32 sums for int8, float32 for E4M3.
__device__ __forceinline__ void mma_16x8x32(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_16x8x32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // launch_q8_conv checks the device before launching an FP8 kernel
#endif
}

template <bool kFp8, typename Y>
__global__ void __launch_bounds__(kMmaThreads)
    q8_mma_conv_kernel(MmaParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                       const float* bias, const uint8_t* residual, Y* y) {
  using Acc = std::conditional_t<kFp8, float, int32_t>;
  __shared__ __align__(128) uint8_t smem[kStages * kStageBytes];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int wm = warp >> 1, wn = warp & 1;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int n0 = static_cast<int>(blockIdx.y) * kBN;

  // This thread copies 16-byte chunk `j` of K of activation rows row0 + 32 i (i < 4) and of
  // weight rows row0 + 32 i (i < 2) in every stage.
  const int j = tid & 3, row0 = tid >> 2;
  const uint8_t* a_img[4];
  int a_ih[4], a_iw[4];
  bool a_ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + row0 + 32 * i;
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
  const uint8_t* b_row[2];
  bool b_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int n = n0 + row0 + 32 * i;
    b_ok[i] = n < p.k;
    b_row[i] = w + static_cast<int64_t>(b_ok[i] ? n : 0) * p.k_total;
  }

  auto load_stage = [&](int kt, int buf) {
    uint8_t* sa = smem + buf * kStageBytes;
    uint8_t* sb = sa + kABytes;
    const int q = kt * (kBK / 16) + j;  // this thread's 16-byte chunk of K
    const bool q_ok = q * 16 < p.k_total;
    const int tap = q_ok ? q / p.c_chunks : 0;
    const int c0 = (q - tap * p.c_chunks) * 16;
    const int r = tap / p.s, s = tap - r * p.s;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int ih = a_ih[i] + r * p.dil_h, iw = a_iw[i] + s * p.dil_w;
      const bool inside = q_ok && a_ok[i] && ih >= 0 && ih < p.h && iw >= 0 && iw < p.w;
      const uint8_t* src = inside ? a_img[i] + (static_cast<int64_t>(ih) * p.w + iw) * p.c + c0 : x;
      cp_async16(sa + (row0 + 32 * i) * kRowBytes + j * 16, src, inside);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool ok = q_ok && b_ok[i];
      cp_async16(sb + (row0 + 32 * i) * kRowBytes + j * 16, ok ? b_row[i] + q * 16 : w, ok);
    }
  };

  Acc acc[4][4][4];
#pragma unroll
  for (int im = 0; im < 4; ++im)
#pragma unroll
    for (int jn = 0; jn < 4; ++jn)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[im][jn][e] = Acc(0);

  const int kt_total = (p.k_total + kBK - 1) / kBK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < kt_total) load_stage(st, st);
    cp_async_commit();
  }
  for (int kt = 0; kt < kt_total; ++kt) {
    cp_async_wait<kStages - 2>();  // stage kt has landed (this thread's copies) ...
    __syncthreads();               // ... and everyone's; everyone is done with stage kt - 1's buffer
    const int next = kt + kStages - 1;
    if (next < kt_total) load_stage(next, next % kStages);
    cp_async_commit();  // always one group per iteration, so that the wait count stays right
    const uint8_t* sa = smem + (kt % kStages) * kStageBytes;
    const uint8_t* sb = sa + kABytes;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 32) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int im = 0; im < 4; ++im) {
        const uint8_t* ra = sa + (wm * 64 + im * 16 + g) * kRowBytes + kk + tig * 4;
        af[im][0] = lds32(ra);
        af[im][1] = lds32(ra + 8 * kRowBytes);
        af[im][2] = lds32(ra + 16);
        af[im][3] = lds32(ra + 8 * kRowBytes + 16);
      }
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
        const uint8_t* rb = sb + (wn * 32 + jn * 8 + g) * kRowBytes + kk + tig * 4;
        bf[jn][0] = lds32(rb);
        bf[jn][1] = lds32(rb + 16);
      }
#pragma unroll
      for (int im = 0; im < 4; ++im)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) mma_16x8x32(acc[im][jn], af[im], bf[jn]);
    }
  }
  cp_async_wait<0>();  // nothing is in flight when the block exits

  // quant.h's epilogue (store_q8_output, as the direct kernel ends). Accumulator e of (im, jn) is
  // pixel row g + 8 (e / 2), channel 2 tig + e % 2 of the 16 x 8 tile.
#pragma unroll
  for (int im = 0; im < 4; ++im) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm * 64 + im * 16 + g + 8 * half;
      if (m >= p.m_total) continue;
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = n0 + wn * 32 + jn * 8 + 2 * tig + e;
          if (k >= p.k) continue;
          const int64_t i = m * p.k + k;
          const Acc a = acc[im][jn][2 * half + e];
          float conv;
          if constexpr (kFp8) {
            conv = a;
          } else {
            conv = __int2float_rn(a);
          }
          store_q8_output<kFp8>(conv, p.x_scale, w_scale[k], bias ? bias[k] : 0.0f,
                                residual ? residual + i : nullptr, p.residual_scale, p.act, p.inv_y, y + i);
        }
      }
    }
  }
}

// OK when the current device runs the FP8 tensor-core instructions (sm_89 and newer).
Status check_fp8_device() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::unavailable("launch_q8_conv: cannot read the current device's compute capability.");
  }
  if (major * 10 + minor < 89)
    return Status::unsupported("launch_q8_conv: the FP8 tensor-core convolution needs sm_89 or newer.");
  return Status::ok();
}

}  // namespace

Status launch_q8_mma_conv(const Q8ConvDesc& d, const void* x, const void* w, const float* w_scale,
                          const float* bias, const void* residual, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate_q8_mma(d));
  GPULAB_TRY(check_q8_conv_pointers(d, w_scale, residual));
  if (!is_aligned(x, 16) || !is_aligned(w, 16))
    return Status::invalid_argument("launch_q8_conv: the tensor-core kernel needs x and w 16-byte aligned.");
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
  p.c_chunks = static_cast<int>(d.c / 16);
  p.x_scale = d.x_scale;
  p.residual_scale = d.residual_scale;
  p.inv_y = 1.0f / d.y_scale;  // as the direct kernel and the interpreter compute it
  p.act = ActParams{d.activation, d.clip_min, d.clip_max};
  const dim3 grid(static_cast<unsigned>((p.m_total + kBM - 1) / kBM),
                  static_cast<unsigned>((d.k + kBN - 1) / kBN));
  const auto* xb = static_cast<const uint8_t*>(x);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* rb = static_cast<const uint8_t*>(residual);
  return dispatch_output(d.y_dtype, [&](auto tag) -> Status {
    using Y = decltype(tag);
    if (fp8)
      q8_mma_conv_kernel<true, Y>
          <<<grid, kMmaThreads, 0, stream>>>(p, xb, wb, w_scale, bias, rb, static_cast<Y*>(y));
    else
      q8_mma_conv_kernel<false, Y>
          <<<grid, kMmaThreads, 0, stream>>>(p, xb, wb, w_scale, bias, rb, static_cast<Y*>(y));
    return check_launch("launch_q8_conv", "q8_mma_conv_kernel");
  });
}

}  // namespace gpulab::kernels
