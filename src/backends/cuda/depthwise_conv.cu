// Depthwise NHWC convolution (groups == c == k) with fused bias, residual and ReLU/Clip.
//
// Algorithm: a block owns a tile of channels (blockDim.x channel vectors of V elements, V = 16
// bytes / element size, or V = 1 on the scalar path) and walks output pixels with blockDim.y
// rows of threads in a grid-stride loop. Each thread computes its channel vector for PW adjacent
// output pixels along W: per kernel row it loads the input window of those pixels (16-byte loads,
// consecutive threads on consecutive channel vectors of the same pixel, so a warp's loads are
// coalesced), multiplies by the tap weights from shared memory and accumulates in FP32.
// Weights: the plan stores them KRSC with one channel per group, [k][r][s][1], so one tap's
// channels are strided by r*s; the block transposes its slice once into shared memory as
// [tap][part][channel vector][4] floats, so that a warp's 16-byte reads of one part of its
// channel vectors are consecutive (no bank conflicts; threads of different pixel rows read the
// same words, a broadcast).
// Specialised for 3x3 and 5x5 at stride 1 (PW = 4; 2 for 5x5 with 16-bit types) and 2 (PW = 2)
// without dilation: the input window of a row, (PW - 1) * stride + kernel columns, stays in
// registers, so each input vector is loaded once per row instead of once per tap. At most 128
// registers (two resident blocks per SM). Other shapes run the generic loop (same layout; taps
// from runtime values).
// The scalar path (c not a multiple of V, or unaligned pointers) is the same kernel with V = 1.
// x may be float16/bfloat16 in a float32 layer (DirectConvDesc::x_dtype): V is then the output's
// (4), x's loads are 8 bytes, and each element converts to float32 as it loads (exactly), so the
// results equal those of a float32 copy of x without the cast that would write it. V = 8 there
// (one 16-byte load of x, 32-byte vectors of y) was tried and was slower on the H200: MobileNetV2
// BF16's depthwise layers took 2.83 ms at batch 256 against 2.69 ms with V = 4 (dc38638, reverted
// by d05b19e).
// Tolerance against the reference: FP32 summation order only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernel_desc.h"

namespace gpulab::cuda {
namespace {

using kernels::ActParams;
using kernels::apply_act;
using kernels::from_float;
using kernels::to_float;
using kernels::Vec;

// Channel vectors per block tile at most (one warp's width of channels).
constexpr int kMaxTileVectors = 32;
// Shared memory for the block's weights, within the default 48 KiB without opt-in.
constexpr int64_t kWeightSmemBytes = 48 * 1024;
// Blocks in all: the grid-stride loop covers the rest. A few dozen waves on an H200 (132 SMs,
// two or three resident blocks each) keep the tail short while each block amortises its weight
// load over many pixels.
constexpr int64_t kMaxBlocks = 8192;

struct Params {
  int n, h, w, c, out_h, out_w;
  int r, s, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  int cv;                // channel vectors per pixel (c / V)
  int tile_cv;           // channel vectors per block tile (blockDim.x)
  int ow_groups;         // ceil(out_w / PW)
  int64_t pixel_groups;  // n * out_h * ow_groups
  ActParams act;
  bool has_residual;
  bool bias_f32;  // bias stored as float32 (else T)
};

template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_float(v.v[i]);
}

// Shared-memory index of channel `cl` of the tile: [part][vector][4] within a tap (see above).
template <int V>
__device__ __forceinline__ int weight_slot(int cl, int tile_cv) {
  if constexpr (V % 4 == 0) {
    const int vec = cl / V, part = (cl % V) / 4, e = cl % 4;
    return (part * tile_cv + vec) * 4 + e;
  } else {
    return cl;
  }
}

// The V weights of this thread's channel vector for one tap (`tap_base` = tap * tile_c).
template <int V>
__device__ __forceinline__ void load_weights(const float* w_s, int tap_base, int vec, int tile_cv,
                                             float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int part = 0; part < V / 4; ++part) {
      const float4 q = *reinterpret_cast<const float4*>(w_s + tap_base + (part * tile_cv + vec) * 4);
      out[part * 4 + 0] = q.x;
      out[part * 4 + 1] = q.y;
      out[part * 4 + 2] = q.z;
      out[part * 4 + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = w_s[tap_base + vec * V + i];
  }
}

// KR, KS, KSTRIDE > 0: a square-stride kernel of that size without dilation (register window);
// all 0: sizes, strides and dilations from Params.
template <typename TX, typename T, int V, int PW, int KR, int KS, int KSTRIDE>
__global__ void __launch_bounds__(kernels::kThreads, 2)
    depthwise_conv_kernel(Params p, const TX* __restrict__ x, const T* __restrict__ wt,
                          const void* __restrict__ bias, const T* __restrict__ residual, T* __restrict__ y) {
  extern __shared__ float4 smem_vec[];  // float4: 16-byte alignment for the vector reads
  float* w_s = reinterpret_cast<float*>(smem_vec);
  constexpr bool kFixed = KR > 0;
  const int R = kFixed ? KR : p.r;
  const int S = kFixed ? KS : p.s;
  const int stride_h = kFixed ? KSTRIDE : p.stride_h;
  const int stride_w = kFixed ? KSTRIDE : p.stride_w;
  const int dil_h = kFixed ? 1 : p.dil_h;
  const int dil_w = kFixed ? 1 : p.dil_w;
  const int taps = R * S;
  const int tile_c = p.tile_cv * V;
  const int c0 = static_cast<int>(blockIdx.y) * tile_c;

  // Consecutive threads read consecutive weights (coalesced); the transposed writes conflict,
  // once per block.
  const int block_threads = static_cast<int>(blockDim.x * blockDim.y);
  for (int i = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x); i < taps * tile_c;
       i += block_threads) {
    const int cl = i / taps, tap = i - cl * taps;
    w_s[tap * tile_c + weight_slot<V>(cl, p.tile_cv)] =
        c0 + cl < p.c ? to_float(wt[static_cast<int64_t>(c0 + cl) * taps + tap]) : 0.0f;
  }
  __syncthreads();

  const int vec = static_cast<int>(threadIdx.x);
  const int ch = c0 + vec * V;
  if (ch >= p.c) return;  // a partial last tile; no barrier follows
  float b[V];
#pragma unroll
  for (int i = 0; i < V; ++i) b[i] = bias ? kernels::load_bias<T>(bias, p.bias_f32, ch + i) : 0.0f;

  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; g < p.pixel_groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int owg = static_cast<int>(g % p.ow_groups);
    const int64_t row = g / p.ow_groups;  // n * out_h + oh
    const int oh = static_cast<int>(row % p.out_h);
    const int64_t n = row / p.out_h;
    const int ow0 = owg * PW;
    const int ih0 = oh * stride_h - p.pad_top;
    const int iw0 = ow0 * stride_w - p.pad_left;
    float acc[PW][V];
#pragma unroll
    for (int j = 0; j < PW; ++j)
#pragma unroll
      for (int i = 0; i < V; ++i) acc[j][i] = 0.0f;

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int ih = ih0 + r * dil_h;
      if (ih < 0 || ih >= p.h) continue;
      const TX* x_row = x + ((n * p.h + ih) * p.w) * p.c + ch;
      const int tap_row = r * S * tile_c;
      if constexpr (kFixed) {
        constexpr int kCols = (PW - 1) * KSTRIDE + KS;
        float win[kCols][V];
#pragma unroll
        for (int col = 0; col < kCols; ++col) {
          const int iw = iw0 + col;
          if (iw >= 0 && iw < p.w) {
            load_vec<TX, V>(x_row + static_cast<int64_t>(iw) * p.c, win[col]);
          } else {
#pragma unroll
            for (int i = 0; i < V; ++i) win[col][i] = 0.0f;
          }
        }
#pragma unroll
        for (int s = 0; s < KS; ++s) {
          float wv[V];
          load_weights<V>(w_s, tap_row + s * tile_c, vec, p.tile_cv, wv);
#pragma unroll
          for (int j = 0; j < PW; ++j)
#pragma unroll
            for (int i = 0; i < V; ++i) acc[j][i] = fmaf(win[j * KSTRIDE + s][i], wv[i], acc[j][i]);
        }
      } else {
        for (int s = 0; s < S; ++s) {
          float wv[V];
          load_weights<V>(w_s, tap_row + s * tile_c, vec, p.tile_cv, wv);
#pragma unroll
          for (int j = 0; j < PW; ++j) {
            const int iw = iw0 + j * stride_w + s * dil_w;
            if (iw < 0 || iw >= p.w) continue;
            float xv[V];
            load_vec<TX, V>(x_row + static_cast<int64_t>(iw) * p.c, xv);
#pragma unroll
            for (int i = 0; i < V; ++i) acc[j][i] = fmaf(xv[i], wv[i], acc[j][i]);
          }
        }
      }
    }

    // Epilogue in the direct convolution's order: ((conv + bias) + residual), then activation.
#pragma unroll
    for (int j = 0; j < PW; ++j) {
      const int ow = ow0 + j;
      if (ow >= p.out_w) break;
      const int64_t idx = (row * p.out_w + ow) * p.c + ch;
      float res[V];
      if (p.has_residual) {
        load_vec<T, V>(residual + idx, res);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) res[i] = 0.0f;
      }
      Vec<T, V> out;
#pragma unroll
      for (int i = 0; i < V; ++i) out.v[i] = from_float<T>(apply_act(acc[j][i] + b[i] + res[i], p.act));
      *reinterpret_cast<Vec<T, V>*>(y + idx) = out;
    }
  }
}

template <typename TX, typename T, int V, int PW, int KR, int KS, int KSTRIDE>
Status launch_shape(const DirectConvDesc& d, Params p, const void* x, const void* w, const void* b,
                    const void* res, void* y, cudaStream_t stream) {
  const int64_t taps = d.attrs.kernel.h * d.attrs.kernel.w;
  p.cv = static_cast<int>(d.c / V);
  const int64_t max_tile = std::min<int64_t>(kMaxTileVectors, kWeightSmemBytes / (taps * V * 4));
  const int64_t tiles = (p.cv + max_tile - 1) / max_tile;
  if (tiles > 65535)
    return Status::unsupported("depthwise_conv: " + std::to_string(d.c) +
                               " channels need more than 65535 channel tiles. Use the direct convolution.");
  p.tile_cv = static_cast<int>((p.cv + tiles - 1) / tiles);  // balanced tiles, none nearly empty
  p.ow_groups = static_cast<int>((d.out_w + PW - 1) / PW);
  p.pixel_groups = d.n * d.out_h * p.ow_groups;
  const dim3 block(static_cast<unsigned>(p.tile_cv),
                   static_cast<unsigned>(std::max(1, kernels::kThreads / p.tile_cv)));
  const int64_t blocks_x = std::max<int64_t>(1, std::min<int64_t>((p.pixel_groups + block.y - 1) / block.y,
                                                                  std::max<int64_t>(1, kMaxBlocks / tiles)));
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(tiles));
  const size_t smem_bytes = static_cast<size_t>(taps * p.tile_cv * V) * sizeof(float);
  depthwise_conv_kernel<TX, T, V, PW, KR, KS, KSTRIDE>
      <<<grid, block, smem_bytes, stream>>>(p, static_cast<const TX*>(x), static_cast<const T*>(w), b,
                                            static_cast<const T*>(res), static_cast<T*>(y));
  return kernels::check_launch("launch_depthwise_conv", "depthwise_conv_kernel");
}

// TX: x's storage type; T: that of the weights, residual and y (and of the arithmetic's inputs).
template <typename TX, typename T>
Status launch_typed(const DirectConvDesc& d, const void* x, const void* w, const void* b, const void* res,
                    void* y, cudaStream_t stream) {
  const auto& a = d.attrs;
  Params p{};
  p.n = static_cast<int>(d.n);
  p.h = static_cast<int>(d.h);
  p.w = static_cast<int>(d.w);
  p.c = static_cast<int>(d.c);
  p.out_h = static_cast<int>(d.out_h);
  p.out_w = static_cast<int>(d.out_w);
  p.r = static_cast<int>(a.kernel.h);
  p.s = static_cast<int>(a.kernel.w);
  p.stride_h = static_cast<int>(a.stride.h);
  p.stride_w = static_cast<int>(a.stride.w);
  p.pad_top = static_cast<int>(a.pads.top);
  p.pad_left = static_cast<int>(a.pads.left);
  p.dil_h = static_cast<int>(a.dilation.h);
  p.dil_w = static_cast<int>(a.dilation.w);
  p.act = ActParams{a.activation, a.clip_min, a.clip_max};
  p.has_residual = a.has_residual;
  p.bias_f32 = d.bias_float32;

  constexpr int V = kernels::kVec<T>;
  constexpr size_t kAlign = sizeof(Vec<T, V>);
  const bool vector_ok = d.c % V == 0 && kernels::is_aligned(x, sizeof(Vec<TX, V>)) &&
                         kernels::is_aligned(y, kAlign) &&
                         (!a.has_residual || kernels::is_aligned(res, kAlign));
  if (!vector_ok) return launch_shape<TX, T, 1, 2, 0, 0, 0>(d, p, x, w, b, res, y, stream);
  // 5x5 at stride 1 with 8-element vectors: 4 pixels would need more than the 128 registers of
  // two resident blocks (ptxas spills).
  constexpr int kPw5x5 = V >= 8 ? 2 : 4;
  const bool square =
      a.kernel.h == a.kernel.w && a.stride.h == a.stride.w && a.dilation.h == 1 && a.dilation.w == 1;
  if (square && a.kernel.h == 3 && a.stride.h == 1)
    return launch_shape<TX, T, V, 4, 3, 3, 1>(d, p, x, w, b, res, y, stream);
  if (square && a.kernel.h == 3 && a.stride.h == 2)
    return launch_shape<TX, T, V, 2, 3, 3, 2>(d, p, x, w, b, res, y, stream);
  if (square && a.kernel.h == 5 && a.stride.h == 1)
    return launch_shape<TX, T, V, kPw5x5, 5, 5, 1>(d, p, x, w, b, res, y, stream);
  if (square && a.kernel.h == 5 && a.stride.h == 2)
    return launch_shape<TX, T, V, 2, 5, 5, 2>(d, p, x, w, b, res, y, stream);
  return launch_shape<TX, T, V, 2, 0, 0, 0>(d, p, x, w, b, res, y, stream);
}

}  // namespace

Status validate_depthwise_conv(const DirectConvDesc& d) {
  const auto& a = d.attrs;
  if (!kernels::is_kernel_float_type(d.dtype))
    return Status::unsupported("depthwise_conv: dtype " + std::string(dtype_name(d.dtype)) +
                               " is not supported (float32, float16, bfloat16 only). Use cuDNN or the direct "
                               "convolution.");
  const DataType x_dtype = input_dtype(d);
  if (x_dtype != d.dtype &&
      (d.dtype != DataType::kFloat32 || (x_dtype != DataType::kFloat16 && x_dtype != DataType::kBFloat16)))
    return Status::unsupported("depthwise_conv: x in " + std::string(dtype_name(x_dtype)) + " with y in " +
                               std::string(dtype_name(d.dtype)) +
                               " is not supported (only float16/bfloat16 x with float32 y). Cast x first.");
  const int64_t sizes[] = {d.n,        d.c,          d.h,          d.w,        d.k,
                           d.out_h,    d.out_w,      a.kernel.h,   a.kernel.w, a.stride.h,
                           a.stride.w, a.dilation.h, a.dilation.w, a.groups};
  for (int64_t v : sizes)
    if (v < 1 || v > INT_MAX)
      return Status::invalid_argument("depthwise_conv: every size, stride and dilation must be in 1.." +
                                      std::to_string(INT_MAX) + " " + describe(d) + ".");
  const int64_t pads[] = {a.pads.top, a.pads.left, a.pads.bottom, a.pads.right};
  for (int64_t v : pads)
    if (v < 0 || v > INT_MAX / 2)
      return Status::invalid_argument("depthwise_conv: pads must be >= 0 (top " + std::to_string(a.pads.top) +
                                      ", left " + std::to_string(a.pads.left) + ", bottom " +
                                      std::to_string(a.pads.bottom) + ", right " +
                                      std::to_string(a.pads.right) + ").");
  if (a.groups != d.c || d.k != d.c)
    return Status::invalid_argument("depthwise_conv: not a depthwise convolution " + describe(d) +
                                    ": needs groups == c == k. Use cuDNN or the direct convolution.");
  if (a.kernel.h * a.kernel.w > kDepthwiseMaxTaps)
    return Status::invalid_argument("depthwise_conv: kernel " + std::to_string(a.kernel.h) + "x" +
                                    std::to_string(a.kernel.w) + " has more than " +
                                    std::to_string(kDepthwiseMaxTaps) + " taps. Use the direct convolution.");
  // A convolution's output size is a floor-mode pooling window's.
  const int64_t want_h =
      kernels::pool_output_size(d.h, a.kernel.h, a.stride.h, a.dilation.h, a.pads.top, a.pads.bottom, false);
  const int64_t want_w =
      kernels::pool_output_size(d.w, a.kernel.w, a.stride.w, a.dilation.w, a.pads.left, a.pads.right, false);
  if (d.out_h != want_h || d.out_w != want_w)
    return Status::invalid_argument("depthwise_conv: output " + std::to_string(d.out_h) + "x" +
                                    std::to_string(d.out_w) + " differs from the convolution's " +
                                    std::to_string(want_h) + "x" + std::to_string(want_w) + " " +
                                    describe(d) + ".");
  // In double: the int64 products of sizes up to INT_MAX could overflow.
  const double elements = std::max(static_cast<double>(d.n) * d.h * d.w * d.c,
                                   static_cast<double>(d.n) * d.out_h * d.out_w * d.c);
  if (elements > 1e18)
    return Status::invalid_argument("depthwise_conv: tensor too large " + describe(d) + ".");
  return Status::ok();
}

bool depthwise_conv_supports(const DirectConvDesc& desc) {
  return validate_depthwise_conv(desc).is_ok();
}

Status launch_depthwise_conv(const DirectConvDesc& d, const void* x, const void* weight, const void* bias,
                             const void* residual, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate_depthwise_conv(d));
  if (!x || !weight || !y)
    return Status::invalid_argument("depthwise_conv: x, weight and y must not be null.");
  if (d.attrs.has_residual && !residual)
    return Status::invalid_argument("depthwise_conv: has_residual set but no residual pointer.");
  switch (d.dtype) {
    case DataType::kFloat32:
      if (input_dtype(d) == DataType::kBFloat16)
        return launch_typed<__nv_bfloat16, float>(d, x, weight, bias, residual, y, stream);
      if (input_dtype(d) == DataType::kFloat16)
        return launch_typed<__half, float>(d, x, weight, bias, residual, y, stream);
      return launch_typed<float, float>(d, x, weight, bias, residual, y, stream);
    case DataType::kFloat16: return launch_typed<__half, __half>(d, x, weight, bias, residual, y, stream);
    default: return launch_typed<__nv_bfloat16, __nv_bfloat16>(d, x, weight, bias, residual, y, stream);
  }
}

}  // namespace gpulab::cuda
