// The 8-bit kernels of INT8/FP8 plans: the input conversion that quantizes, casts between 8-bit and
// float types, the convolution (and Gemm) with quant.h's epilogue, max pooling and global average
// pooling of 8-bit values.
//
// Algorithm: plain grid-stride loops, one output element per thread (the convolution: NHWC, the
// output channel fastest, so a warp reads one input patch and 32 weight rows). They are the
// correct baseline every faster 8-bit kernel is tested against, not fast ones: the tensor-core
// convolution is quant_mma.cu. The input conversion and the max pool have a second kernel for
// 16-channel multiples that moves 16-byte vectors, depthwise convolutions one for 4 channels per
// thread (ResNet-18's INT8 plan at batch 256 spent 22% of its time in the one-byte-per-thread max
// pool, 2026-12-06 at 5b3cf93), and INT8 depthwise 3x3 convolutions one for 16 channels of 2-4
// output pixels per thread on __dp4a (MobileNetV2's).
// Tolerance: bit for bit with the plan interpreter (src/plan/interpret.cc): the integer sums are
// exact, E4M3 sums run in the interpreter's order where it is defined (pixel order in the global
// pool), and every float step of the epilogue is an explicitly rounded intrinsic in quant.h's
// order. The FP8 convolution's float32 sum runs in tap-then-channel order, the interpreter's in
// eight interleaved partial sums: FP8 convolutions agree within one E4M3 step of the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant.cuh"
#include "backends/cuda/kernels/quant_kernels.h"

namespace gpulab::kernels {
namespace {

// Element i of an NHWC tensor [*, h, w, c] as (n, y, x, ch). In 32 bits where i and the sizes
// fit, which is every tensor below 2^31 elements: a 64-bit division is a long software routine on
// the GPU, and these kernels did three per element.
struct NhwcAt {
  int64_t n, y, x, c;
};
__device__ __forceinline__ NhwcAt nhwc_at(int64_t i, int64_t h, int64_t w, int64_t c) {
  if (i <= INT32_MAX && h <= INT32_MAX && w <= INT32_MAX && c <= INT32_MAX) {
    auto t = static_cast<uint32_t>(i);
    const auto uh = static_cast<uint32_t>(h), uw = static_cast<uint32_t>(w), uc = static_cast<uint32_t>(c);
    const uint32_t ch = t % uc;
    t /= uc;
    const uint32_t x = t % uw;
    t /= uw;
    return {t / uh, t % uh, x, ch};
  }
  const int64_t ch = i % c, p = i / c, x = p % w, q = p / w;
  return {q / h, q % h, x, ch};
}

// The float behind space-to-depth channel `ch` of output pixel (n, oy, ox) of the NCHW image x:
// channel (cell, cin), cell = dy * block + dx; 0 in the padding and in the channels past block^2 c.
__device__ __forceinline__ float s2d_value(const float* x, const SpaceToDepthDesc& d, int64_t n, int64_t oy,
                                           int64_t ox, int64_t ch) {
  if (ch >= d.block * d.block * d.c) return 0.0f;
  const int64_t cell = ch / d.c, cin = ch % d.c;
  const int64_t iy = oy * d.block + cell / d.block - d.pad_top;
  const int64_t ix = ox * d.block + cell % d.block - d.pad_left;
  return iy >= 0 && iy < d.h && ix >= 0 && ix < d.w ? x[((n * d.c + cin) * d.h + iy) * d.w + ix] : 0.0f;
}

// f(pixel) for each input pixel (index n h w + ...) inside the window of output (n, oh, ow), rows
// then columns.
template <typename F>
__device__ __forceinline__ void for_each_window_pixel(const PoolDesc& d, int64_t n, int64_t oh, int64_t ow,
                                                      F f) {
  for (int64_t r = 0; r < d.kernel.h; ++r) {
    const int64_t ih = oh * d.stride.h - d.pads.top + r * d.dilation.h;
    if (ih < 0 || ih >= d.h) continue;
    for (int64_t q = 0; q < d.kernel.w; ++q) {
      const int64_t iw = ow * d.stride.w - d.pads.left + q * d.dilation.w;
      if (iw >= 0 && iw < d.w) f((n * d.h + ih) * d.w + iw);
    }
  }
}

template <bool kFp8>
__global__ void quantize_input_kernel(const float* x, uint8_t* y, SpaceToDepthDesc d, int64_t total,
                                      float inv_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oy, ox, ch] = nhwc_at(i, d.out_h, d.out_w, d.c_out);
    y[i] = quantize_q8<kFp8>(s2d_value(x, d, n, oy, ox, ch), inv_scale);
  }
}

// The same conversion, one output pixel per thread and its c_out channels (a multiple of 16) stored
// as 16-byte vectors: a warp reads 32 neighbouring pixels of each image row and writes 512
// contiguous bytes, where the kernel above has consecutive threads read from different channel
// planes. The same quantize_q8 of the same float per byte: the same codes.
template <bool kFp8>
__global__ void quantize_input16_kernel(const float* x, uint4* y, SpaceToDepthDesc d, int64_t pixels,
                                        float inv_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pixels;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oy, ox, ch] = nhwc_at(i, d.out_h, d.out_w, 1);  // ch: always 0
    for (int64_t ch0 = 0; ch0 < d.c_out; ch0 += 16) {
      alignas(16) uint8_t q[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) q[j] = quantize_q8<kFp8>(s2d_value(x, d, n, oy, ox, ch0 + j), inv_scale);
      y[(i * d.c_out + ch0) / 16] = *reinterpret_cast<const uint4*>(q);
    }
  }
}

template <bool kFp8, typename T>
__global__ void dequantize_kernel(const uint8_t* x, T* y, int64_t count, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(__fmul_rn(q8_to_float<kFp8>(x[i]), scale));
}

template <bool kFp8, typename T>
__global__ void quantize_kernel(const T* x, uint8_t* y, int64_t count, float inv_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = quantize_q8<kFp8>(to_float(x[i]), inv_scale);
}

// The same, eight elements per thread (one 8-byte store; x read in 16- or 32-byte vectors): an INT8
// ResNet-18's float16 stem output took 0.117 ms at batch 256 on the H100 through the kernel above, 1.3
// TB/s (bench/results/2026-12-06-8fdabf2).
template <bool kFp8, typename T>
__global__ void quantize8_kernel(const Vec<T, 8>* x, uint2* y, int64_t vectors, float inv_scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Vec<T, 8> v = x[i];
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      lo |= static_cast<uint32_t>(quantize_q8<kFp8>(to_float(v.v[e]), inv_scale)) << (8 * e);
      hi |= static_cast<uint32_t>(quantize_q8<kFp8>(to_float(v.v[4 + e]), inv_scale)) << (8 * e);
    }
    y[i] = make_uint2(lo, hi);
  }
}

struct ConvParams {
  Q8ConvDesc d;
  float inv_y;  // 1 / y_scale, computed on the host as the interpreter does
};

// Sum of x * w over one tap's cg channels: int32 for int8 (4 at a time with __dp4a when aligned),
// float32 for E4M3.
template <bool kFp8, bool kDp4a>
__device__ __forceinline__ void accumulate_tap(const uint8_t* xp, const uint8_t* wp, int64_t cg,
                                               int32_t& acc_i, float& acc_f) {
  if constexpr (kFp8) {
    for (int64_t c = 0; c < cg; ++c) acc_f = fmaf(e4m3_to_float(xp[c]), e4m3_to_float(wp[c]), acc_f);
  } else if constexpr (kDp4a) {
    const int* xv = reinterpret_cast<const int*>(xp);
    const int* wv = reinterpret_cast<const int*>(wp);
    for (int64_t c = 0; c < cg / 4; ++c) acc_i = __dp4a(xv[c], wv[c], acc_i);
  } else {
    for (int64_t c = 0; c < cg; ++c)
      acc_i +=
          static_cast<int32_t>(static_cast<int8_t>(xp[c])) * static_cast<int32_t>(static_cast<int8_t>(wp[c]));
  }
}

// f(r, s, pixel) for each tap (r, s) of the convolution window of output (n, oh, ow) that lies
// inside the image, pixel its input pixel's index (n h w + ...), rows then columns.
template <typename F>
__device__ __forceinline__ void for_each_conv_tap(const Q8ConvDesc& d, int64_t n, int64_t oh, int64_t ow,
                                                  F f) {
  for (int64_t r = 0; r < d.r; ++r) {
    const int64_t ih = oh * d.stride.h - d.pads.top + r * d.dilation.h;
    if (ih < 0 || ih >= d.h) continue;
    for (int64_t s = 0; s < d.s; ++s) {
      const int64_t iw = ow * d.stride.w - d.pads.left + s * d.dilation.w;
      if (iw >= 0 && iw < d.w) f(r, s, (n * d.h + ih) * d.w + iw);
    }
  }
}

template <bool kFp8, bool kDp4a, typename Y>
__global__ void q8_conv_kernel(ConvParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                               const float* bias, const uint8_t* residual, Y* y, int64_t total) {
  const Q8ConvDesc& d = p.d;
  const int64_t cg = d.c / d.groups, kg = d.k / d.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oh, ow, ko] = nhwc_at(i, d.out_h, d.out_w, d.k);
    const int64_t g = ko / kg;
    int32_t acc_i = 0;
    float acc_f = 0.0f;
    for_each_conv_tap(d, n, oh, ow, [&](int64_t r, int64_t s, int64_t pixel) {
      accumulate_tap<kFp8, kDp4a>(x + pixel * d.c + g * cg, w + ((ko * d.r + r) * d.s + s) * cg, cg, acc_i,
                                  acc_f);
    });
    // A missing bias adds 0, as the interpreter does.
    store_q8_output<kFp8>(kFp8 ? acc_f : __int2float_rn(acc_i), d.x_scale, w_scale[ko],
                          bias ? bias[ko] : 0.0f, residual ? residual + i : nullptr, d.residual_scale,
                          ActParams{d.activation, d.clip_min, d.clip_max}, p.inv_y, y + i);
  }
}

// Depthwise convolutions (groups == c == k) four channels per thread (c a multiple of 4, x and
// the residual 4-byte aligned): one 4-byte input load per tap instead of four threads' one-byte
// loads and index arithmetic. Each channel's sum runs over the taps in q8_conv_kernel's order (its
// one channel per tap), and store_q8_output ends it: the same bytes as that kernel.
template <bool kFp8, typename Y>
__global__ void q8_depthwise4_kernel(ConvParams p, const uint8_t* x, const uint8_t* w, const float* w_scale,
                                     const float* bias, const uint8_t* residual, Y* y, int64_t total4) {
  const Q8ConvDesc& d = p.d;
  const int64_t quads = d.k / 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oh, ow, quad] = nhwc_at(i, d.out_h, d.out_w, quads);
    const int64_t k0 = 4 * quad;
    int32_t acc_i[4] = {0, 0, 0, 0};
    float acc_f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for_each_conv_tap(d, n, oh, ow, [&](int64_t r, int64_t s, int64_t pixel) {
      const uint32_t xv = *reinterpret_cast<const uint32_t*>(x + pixel * d.c + k0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const auto xb = static_cast<uint8_t>(xv >> (8 * j));
        const uint8_t wb = w[((k0 + j) * d.r + r) * d.s + s];
        if constexpr (kFp8) {
          acc_f[j] = fmaf(e4m3_to_float(xb), e4m3_to_float(wb), acc_f[j]);
        } else {
          acc_i[j] +=
              static_cast<int32_t>(static_cast<int8_t>(xb)) * static_cast<int32_t>(static_cast<int8_t>(wb));
        }
      }
    });
    const int64_t o = 4 * i;  // channel k0's output: k is the fastest axis
#pragma unroll
    for (int j = 0; j < 4; ++j)
      store_q8_output<kFp8>(kFp8 ? acc_f[j] : __int2float_rn(acc_i[j]), d.x_scale, w_scale[k0 + j],
                            bias ? bias[k0 + j] : 0.0f, residual ? residual + o + j : nullptr,
                            d.residual_scale, ActParams{d.activation, d.clip_min, d.clip_max}, p.inv_y,
                            y + o + j);
  }
}

// Depthwise 3x3 INT8 convolutions with an INT8 output (groups == c == k, c a multiple of 16,
// dilation 1, the same stride kStride along both axes; x, y and the residual 16-byte aligned):
// each thread computes 16 channels of kPixels neighbouring output pixels of one row, so one
// 16-byte load brings 16 channels of an input pixel and each loaded column serves every output of
// the row whose window holds it. The sums run on __dp4a: for a channel, one window row's three
// taps are packed into one word with a fourth byte that the weight's zero fourth byte cancels;
// four neighbouring columns' words of four channels are transposed to per-channel words with
// eight byte permutes. The block's weights sit in shared memory as such words, [row][channel].
// The integer sums are exact in any order, and q8_epilogue ends each channel as in
// q8_conv_kernel: the same bytes as launch_q8_conv's other kernels. The 4-channel kernel above
// (its one-byte weight loads, 64-bit index arithmetic and byte stores per channel) held
// MobileNetV2's INT8 plan at 12.3 ms at batch 256 on the H100, 2.7x its FP16 plan, with its 17
// depthwise layers three quarters of that (bench/results/2026-12-06-4feb628).
constexpr int kDepthwiseThreads = 128;
constexpr int64_t kMaxDepthwise3x3Channels = 4096;  // 48 KiB of weight words: the default shared-memory limit

// Byte-transposes words a, b, c, d (bytes a0..a3, ...) so that out[j] = (a_j, b_j, c_j, d_j).
__device__ __forceinline__ void transpose_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d,
                                                uint32_t (&out)[4]) {
  const uint32_t ab01 = __byte_perm(a, b, 0x5140), cd01 = __byte_perm(c, d, 0x5140);  // a0 b0 a1 b1
  const uint32_t ab23 = __byte_perm(a, b, 0x7362), cd23 = __byte_perm(c, d, 0x7362);  // a2 b2 a3 b3
  out[0] = __byte_perm(ab01, cd01, 0x5410);
  out[1] = __byte_perm(ab01, cd01, 0x7632);
  out[2] = __byte_perm(ab23, cd23, 0x5410);
  out[3] = __byte_perm(ab23, cd23, 0x7632);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int q) {
  return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

template <int kStride, int kPixels>
__global__ void __launch_bounds__(kDepthwiseThreads)
    q8_depthwise3x3_kernel(ConvParams p, const uint4* x, const uint8_t* w, const float* w_scale,
                           const float* bias, const uint4* residual, uint4* y, int64_t items) {
  extern __shared__ uint32_t taps[];  // [3][c]: channel ch's weights of window row r, bytes 0-2
  const Q8ConvDesc& d = p.d;
  const auto c = static_cast<int>(d.c);
  for (int i = threadIdx.x; i < 3 * c; i += blockDim.x) {
    const int r = i / c, ch = i % c;
    const uint8_t* t = w + ch * 9 + r * 3;
    taps[i] =
        static_cast<uint32_t>(t[0]) | static_cast<uint32_t>(t[1]) << 8 | static_cast<uint32_t>(t[2]) << 16;
  }
  __syncthreads();
  const int vectors = c / 16;
  const int64_t row_blocks = (d.out_w + kPixels - 1) / kPixels;
  constexpr int kSpan = (kPixels - 1) * kStride + 3;  // input columns under the kPixels windows
  const ActParams act{d.activation, d.clip_min, d.clip_max};
  for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oh, ob, cv] = nhwc_at(item, d.out_h, row_blocks, vectors);
    const int k0 = static_cast<int>(cv) * 16;
    const int64_t ow0 = ob * kPixels, iw0 = ow0 * kStride - d.pads.left;
    int32_t acc[kPixels][16];
#pragma unroll
    for (int t = 0; t < kPixels; ++t)
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[t][j] = 0;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      const int64_t ih = oh * kStride - d.pads.top + r;
      if (ih < 0 || ih >= d.h) continue;
      const uint4* row = x + (n * d.h + ih) * d.w * vectors + cv;
      uint4 col[kSpan + 1];  // zeros outside the image: they add nothing to an integer sum
#pragma unroll
      for (int j = 0; j < kSpan; ++j) {
        const int64_t iw = iw0 + j;
        col[j] = iw >= 0 && iw < d.w ? row[iw * vectors] : make_uint4(0, 0, 0, 0);
      }
      col[kSpan] = col[kSpan - 1];  // the fourth byte of the last window's words: times weight 0
      uint32_t wr[16];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = *reinterpret_cast<const uint4*>(taps + r * c + k0 + 4 * q);
        wr[4 * q] = v.x;
        wr[4 * q + 1] = v.y;
        wr[4 * q + 2] = v.z;
        wr[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int t = 0; t < kPixels; ++t) {
        const int j0 = t * kStride;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t packed[4];
          transpose_bytes(word_of(col[j0], q), word_of(col[j0 + 1], q), word_of(col[j0 + 2], q),
                          word_of(col[j0 + 3], q), packed);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            acc[t][4 * q + e] =
                __dp4a(static_cast<int>(packed[e]), static_cast<int>(wr[4 * q + e]), acc[t][4 * q + e]);
        }
      }
    }
    float ws[16], bs[16];
#pragma unroll
    for (int j = 0; j < 16; j += 4) {
      const float4 sv = *reinterpret_cast<const float4*>(w_scale + k0 + j);
      const float4 bv = bias ? *reinterpret_cast<const float4*>(bias + k0 + j) : make_float4(0, 0, 0, 0);
      ws[j] = sv.x, ws[j + 1] = sv.y, ws[j + 2] = sv.z, ws[j + 3] = sv.w;
      bs[j] = bv.x, bs[j + 1] = bv.y, bs[j + 2] = bv.z, bs[j + 3] = bv.w;
    }
#pragma unroll
    for (int t = 0; t < kPixels; ++t) {
      if (ow0 + t >= d.out_w) break;
      const int64_t o = ((n * d.out_h + oh) * d.out_w + ow0 + t) * vectors + cv;  // in 16-byte vectors
      const uint4 res = residual ? residual[o] : make_uint4(0, 0, 0, 0);
      y[o] = q8_epilogue16<false>([&](int e) { return __int2float_rn(acc[t][e]); },
                                  [&](int e) { return ws[e]; }, [&](int e) { return bs[e]; }, d.x_scale,
                                  residual != nullptr, res, d.residual_scale, act, p.inv_y);
    }
  }
}

template <bool kFp8>
__global__ void q8_max_pool_kernel(const uint8_t* x, uint8_t* y, PoolDesc d, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oh, ow, c] = nhwc_at(i, d.out_h, d.out_w, d.c);
    uint8_t best = kFp8 ? 0xfe : 0x80;  // -448 / -128: the smallest value of the type
    float best_v = q8_to_float<kFp8>(best);
    for_each_window_pixel(d, n, oh, ow, [&](int64_t pixel) {
      const uint8_t b = x[pixel * d.c + c];
      const float v = q8_to_float<kFp8>(b);
      if (v > best_v) {
        best_v = v;
        best = b;
      }
    });
    y[i] = best;
  }
}

// Max pooling of 16 channels per thread (c a multiple of 16, both tensors 16-byte aligned): one
// 16-byte load per window tap and one store. INT8 takes the signed byte maximum four at a time
// (__vmaxs4), which is the scalar kernel's result: an int8 code is its value. FP8 keeps the scalar
// kernel's comparison per byte in the same tap order, so ties (+0 and -0) and NaN (never greater)
// leave the same code.
template <bool kFp8>
__global__ void q8_max_pool16_kernel(const uint4* x, uint4* y, PoolDesc d, int64_t total) {
  const int64_t vectors = d.c / 16;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto [n, oh, ow, cv] = nhwc_at(i, d.out_h, d.out_w, vectors);
    alignas(16) uint8_t best[16];
    float best_v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      best[j] = kFp8 ? 0xfe : 0x80;  // -448 / -128: the smallest value of the type
      best_v[j] = q8_to_float<kFp8>(best[j]);
    }
    uint4 m = *reinterpret_cast<const uint4*>(best);
    for_each_window_pixel(d, n, oh, ow, [&](int64_t pixel) {
      const uint4 v = x[pixel * vectors + cv];
      if constexpr (kFp8) {
        const auto* b = reinterpret_cast<const uint8_t*>(&v);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float f = e4m3_to_float(b[j]);
          if (f > best_v[j]) {
            best_v[j] = f;
            best[j] = b[j];
          }
        }
      } else {
        m = make_uint4(__vmaxs4(m.x, v.x), __vmaxs4(m.y, v.y), __vmaxs4(m.z, v.z), __vmaxs4(m.w, v.w));
      }
    });
    y[i] = kFp8 ? *reinterpret_cast<const uint4*>(best) : m;
  }
}

template <bool kFp8, typename Y>
__global__ void q8_global_pool_kernel(const uint8_t* x, Y* y, Q8GlobalPoolDesc d, float multiplier,
                                      float inv_y) {
  const int64_t total = d.n * d.c, pixels = d.h * d.w;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / d.c, c = i % d.c;
    const uint8_t* xp = x + n * pixels * d.c + c;
    int32_t sum_i = 0;
    float sum_f = 0.0f;  // pixel order, as the interpreter sums
    for (int64_t p = 0; p < pixels; ++p) {
      if constexpr (kFp8) {
        sum_f = __fadd_rn(sum_f, e4m3_to_float(xp[p * d.c]));
      } else {
        sum_i += static_cast<int8_t>(xp[p * d.c]);
      }
    }
    const float v = __fmul_rn(kFp8 ? sum_f : __int2float_rn(sum_i), multiplier);
    if constexpr (sizeof(Y) == 1) {
      y[i] = quantize_q8<kFp8>(v, inv_y);
    } else {
      y[i] = from_float<Y>(v);
    }
  }
}

}  // namespace

Status launch_quantize_input(const QuantizeInputDesc& desc, const float* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const SpaceToDepthDesc& d = desc.layout;
  const int64_t total = d.n * d.out_h * d.out_w * d.c_out;
  if (d.c_out % 16 == 0 && is_aligned(y, 16)) {
    const int64_t pixels = total / d.c_out;
    return dispatch_8bit(desc.dtype, [&](auto fp8) -> Status {
      quantize_input16_kernel<decltype(fp8)::value><<<grid_for(pixels), kThreads, 0, stream>>>(
          x, static_cast<uint4*>(y), d, pixels, 1.0f / desc.scale);
      return check_launch("launch_quantize_input", "quantize_input16_kernel");
    });
  }
  return dispatch_8bit(desc.dtype, [&](auto fp8) -> Status {
    quantize_input_kernel<decltype(fp8)::value>
        <<<grid_for(total), kThreads, 0, stream>>>(x, static_cast<uint8_t*>(y), d, total, 1.0f / desc.scale);
    return check_launch("launch_quantize_input", "quantize_input_kernel");
  });
}

Status launch_quant_cast(const QuantCastDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  if (is_kernel_8bit_type(desc.from))
    return dispatch_8bit(desc.from, [&](auto fp8) -> Status {
      return dispatch_float_type(desc.to, [&](auto tag) -> Status {
        using T = decltype(tag);
        dequantize_kernel<decltype(fp8)::value, T><<<grid_for(desc.count), kThreads, 0, stream>>>(
            static_cast<const uint8_t*>(x), static_cast<T*>(y), desc.count, desc.scale);
        return check_launch("launch_quant_cast", "dequantize_kernel");
      });
    });
  return dispatch_8bit(desc.to, [&](auto fp8) -> Status {
    return dispatch_float_type(desc.from, [&](auto tag) -> Status {
      using T = decltype(tag);
      constexpr bool kFp8 = decltype(fp8)::value;
      const float inv_scale = 1.0f / desc.scale;
      const auto* xt = static_cast<const T*>(x);
      auto* yb = static_cast<uint8_t*>(y);
      // Whole vectors of 8 where the pointers allow, then the rest one element per thread.
      const int64_t vectors = is_aligned(x, sizeof(Vec<T, 8>)) && is_aligned(y, 8) ? desc.count / 8 : 0;
      if (vectors > 0) {
        quantize8_kernel<kFp8, T><<<grid_for(vectors), kThreads, 0, stream>>>(
            reinterpret_cast<const Vec<T, 8>*>(xt), reinterpret_cast<uint2*>(yb), vectors, inv_scale);
        GPULAB_TRY(check_launch("launch_quant_cast", "quantize8_kernel"));
      }
      const int64_t done = 8 * vectors, rest = desc.count - done;
      if (rest == 0) return Status::ok();
      quantize_kernel<kFp8, T>
          <<<grid_for(rest), kThreads, 0, stream>>>(xt + done, yb + done, rest, inv_scale);
      return check_launch("launch_quant_cast", "quantize_kernel");
    });
  });
}

Status launch_q8_conv(const Q8ConvDesc& desc, const void* x, const void* w, const float* w_scale,
                      const float* bias, const void* residual, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  GPULAB_TRY(check_q8_conv_pointers(desc, w_scale, residual));
  const int64_t total = desc.n * desc.out_h * desc.out_w * desc.k;
  const ConvParams p{desc, 1.0f / desc.y_scale};
  const int64_t cg = desc.c / desc.groups;
  const bool dp4a = desc.x_dtype == DataType::kInt8 && cg % 4 == 0 && desc.c % 4 == 0 && is_aligned(x, 4) &&
                    is_aligned(w, 4);
  const bool depthwise4 = desc.groups == desc.c && desc.k == desc.c && desc.c % 4 == 0 && is_aligned(x, 4) &&
                          (residual == nullptr || is_aligned(residual, 4));
  const bool depthwise3x3 =
      depthwise4 && desc.x_dtype == DataType::kInt8 && desc.y_dtype == DataType::kInt8 && desc.c % 16 == 0 &&
      desc.c <= kMaxDepthwise3x3Channels && desc.r == 3 && desc.s == 3 && desc.dilation.h == 1 &&
      desc.dilation.w == 1 && desc.stride.h == desc.stride.w && (desc.stride.h == 1 || desc.stride.h == 2) &&
      is_aligned(x, 16) && is_aligned(y, 16) && (residual == nullptr || is_aligned(residual, 16)) &&
      is_aligned(w_scale, 16) && (bias == nullptr || is_aligned(bias, 16));
  if (depthwise3x3) {
    // Stride 2 takes two pixels per thread: four would hold 10 input columns beside 64 sums.
    const auto launch = [&](auto kernel, int pixels) {
      const int64_t items = desc.n * desc.out_h * ((desc.out_w + pixels - 1) / pixels) * (desc.c / 16);
      kernel<<<grid_for(items, kDepthwiseThreads), kDepthwiseThreads, 3 * desc.c * sizeof(uint32_t),
               stream>>>(p, static_cast<const uint4*>(x), static_cast<const uint8_t*>(w), w_scale, bias,
                         static_cast<const uint4*>(residual), static_cast<uint4*>(y), items);
      return check_launch("launch_q8_conv", "q8_depthwise3x3_kernel");
    };
    return desc.stride.h == 1 ? launch(q8_depthwise3x3_kernel<1, 4>, 4)
                              : launch(q8_depthwise3x3_kernel<2, 2>, 2);
  }
  const auto* xb = static_cast<const uint8_t*>(x);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* rb = static_cast<const uint8_t*>(residual);
  return dispatch_8bit(desc.x_dtype, [&](auto fp8) -> Status {
    constexpr bool kFp8 = decltype(fp8)::value;
    return dispatch_output(desc.y_dtype, [&](auto tag) -> Status {
      using Y = decltype(tag);
      if (depthwise4) {
        q8_depthwise4_kernel<kFp8, Y><<<grid_for(total / 4), kThreads, 0, stream>>>(
            p, xb, wb, w_scale, bias, rb, static_cast<Y*>(y), total / 4);
        return check_launch("launch_q8_conv", "q8_depthwise4_kernel");
      }
      if (!kFp8 && dp4a)
        q8_conv_kernel<kFp8, true, Y><<<grid_for(total), kThreads, 0, stream>>>(p, xb, wb, w_scale, bias, rb,
                                                                                static_cast<Y*>(y), total);
      else
        q8_conv_kernel<kFp8, false, Y><<<grid_for(total), kThreads, 0, stream>>>(p, xb, wb, w_scale, bias, rb,
                                                                                 static_cast<Y*>(y), total);
      return check_launch("launch_q8_conv", "q8_conv_kernel");
    });
  });
}

Status launch_q8_max_pool(const PoolDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate_q8_max_pool(desc));
  const int64_t total = desc.n * desc.out_h * desc.out_w * desc.c;
  if (desc.c % 16 == 0 && is_aligned(x, 16) && is_aligned(y, 16))
    return dispatch_8bit(desc.dtype, [&](auto fp8) -> Status {
      q8_max_pool16_kernel<decltype(fp8)::value><<<grid_for(total / 16), kThreads, 0, stream>>>(
          static_cast<const uint4*>(x), static_cast<uint4*>(y), desc, total / 16);
      return check_launch("launch_q8_max_pool", "q8_max_pool16_kernel");
    });
  return dispatch_8bit(desc.dtype, [&](auto fp8) -> Status {
    q8_max_pool_kernel<decltype(fp8)::value><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), desc, total);
    return check_launch("launch_q8_max_pool", "q8_max_pool_kernel");
  });
}

Status launch_q8_global_avg_pool(const Q8GlobalPoolDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  // As the interpreter computes them: x_scale / pixels, 1 / y_scale, in float32 on the host.
  const float multiplier = desc.x_scale / static_cast<float>(desc.h * desc.w);
  const float inv_y = 1.0f / desc.y_scale;
  return dispatch_8bit(desc.x_dtype, [&](auto fp8) -> Status {
    return dispatch_output(desc.y_dtype, [&](auto tag) -> Status {
      using Y = decltype(tag);
      q8_global_pool_kernel<decltype(fp8)::value, Y><<<grid_for(desc.n * desc.c), kThreads, 0, stream>>>(
          static_cast<const uint8_t*>(x), static_cast<Y*>(y), desc, multiplier, inv_y);
      return check_launch("launch_q8_global_avg_pool", "q8_global_pool_kernel");
    });
  });
}

}  // namespace gpulab::kernels
