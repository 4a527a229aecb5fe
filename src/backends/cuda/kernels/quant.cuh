// The device half of src/core/quant.h: the same 8-bit rounding rules with CUDA's intrinsics, so
// that a kernel using these functions computes, step for step, what the plan interpreter does on
// the CPU. Every float operation is an explicitly rounded intrinsic (__fmul_rn, __fmaf_rn), which
// nvcc neither contracts nor splits: the epilogue's two fused multiply-adds are quant.h's rule.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant_desc.h"

namespace gpulab::kernels {

// q = saturate(round_half_to_even(x * inv_scale)) to [-128, 127]; NaN gives 0 (quant.h).
__device__ __forceinline__ int8_t quantize_int8(float x, float inv_scale) {
  const float v = __fmul_rn(x, inv_scale);
  if (isnan(v)) return 0;
  return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(v, -128.0f), 127.0f)));
}

// E4M3 bits of x * inv_scale: round to nearest even, saturate finite values to +-448, NaN to NaN
// (quant.h's float_to_e4m3).
__device__ __forceinline__ uint8_t quantize_e4m3(float x, float inv_scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x, inv_scale), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float e4m3_to_float(uint8_t bits) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), __NV_E4M3)));
}

// The quantized number a stored byte holds: the int8 integer or the E4M3 value.
template <bool kFp8>
__device__ __forceinline__ float q8_to_float(uint8_t bits) {
  if constexpr (kFp8) {
    return e4m3_to_float(bits);
  } else {
    return static_cast<float>(static_cast<int8_t>(bits));
  }
}

template <bool kFp8>
__device__ __forceinline__ uint8_t quantize_q8(float x, float inv_scale) {
  if constexpr (kFp8) {
    return quantize_e4m3(x, inv_scale);
  } else {
    return static_cast<uint8_t>(quantize_int8(x, inv_scale));
  }
}

// quant.h's epilogue of one output of an 8-bit convolution or Gemm, each step rounded as written:
// `conv` (the int32 sum converted to float, or E4M3's float32 sum) times x_scale * w_scale, plus
// `bias` (0 for a layer without one), plus the residual byte at `residual` (when not null) times
// residual_scale, the activation, then stored at `y`: quantized at 1 / inv_y for an 8-bit y,
// rounded to a float y. The direct kernel (quant.cu) and the tensor-core one (quant_mma.cu) both
// end with it, which is why their INT8 outputs are the same bytes.
// q8_epilogue is that value before the store, from the residual's byte itself (`has_residual`
// false: none), for kernels that hold their outputs in registers: a pointer to a local byte would
// keep it in local memory (the tensor-core kernel's epilogue ran 2-4x slower so on the H100,
// 2026-12-06).
template <bool kFp8>
__device__ __forceinline__ float q8_epilogue(float conv, float x_scale, float w_scale, float bias,
                                             bool has_residual, uint8_t residual, float residual_scale,
                                             ActParams act) {
  float v = __fmaf_rn(conv, __fmul_rn(x_scale, w_scale), bias);
  if (has_residual) v = __fmaf_rn(q8_to_float<kFp8>(residual), residual_scale, v);
  return apply_act(v, act);
}
// q8_epilogue of 16 consecutive output channels quantized to 8 bits and packed as the 16 bytes to
// store: conv(e), w_scale(e) and bias(e) give channel e's sum (as float), weight scale and bias,
// `residual` the residual's 16 bytes (ignored without has_residual). The kernels that store 16
// channels of a pixel at once (the tensor-core tiles, split-K, the small-K 1x1 kernel, the
// depthwise 3x3 kernel) share it; e is a constant after unrolling, so nothing lands in local memory.
template <bool kFp8, typename Conv, typename Scale, typename Bias>
__device__ __forceinline__ uint4 q8_epilogue16(Conv conv, Scale w_scale, Bias bias, float x_scale,
                                               bool has_residual, uint4 residual, float residual_scale,
                                               ActParams act, float inv_y) {
  const uint32_t res_words[4] = {residual.x, residual.y, residual.z, residual.w};
  uint32_t out_words[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const auto r = static_cast<uint8_t>(res_words[e / 4] >> (8 * (e % 4)));
    const float v =
        q8_epilogue<kFp8>(conv(e), x_scale, w_scale(e), bias(e), has_residual, r, residual_scale, act);
    out_words[e / 4] |= static_cast<uint32_t>(quantize_q8<kFp8>(v, inv_y)) << (8 * (e % 4));
  }
  return make_uint4(out_words[0], out_words[1], out_words[2], out_words[3]);
}

template <bool kFp8, typename Y>
__device__ __forceinline__ void store_q8_output(float conv, float x_scale, float w_scale, float bias,
                                                const uint8_t* residual, float residual_scale, ActParams act,
                                                float inv_y, Y* y) {
  const float v = q8_epilogue<kFp8>(conv, x_scale, w_scale, bias, residual != nullptr,
                                    residual ? *residual : 0, residual_scale, act);
  if constexpr (sizeof(Y) == 1) {
    *y = quantize_q8<kFp8>(v, inv_y);
  } else {
    *y = from_float<Y>(v);
  }
}

// The pointer checks of launch_q8_conv and launch_q8_mma_conv.
inline Status check_q8_conv_pointers(const Q8ConvDesc& desc, const float* w_scale, const void* residual) {
  if (!w_scale) return Status::invalid_argument("launch_q8_conv: the weight scales are null.");
  if (desc.has_residual != (residual != nullptr))
    return Status::invalid_argument(
        "launch_q8_conv: a residual pointer without has_residual, or the other way.");
  return Status::ok();
}

// Calls fn(std::bool_constant<fp8>{}) for an 8-bit dtype.
template <typename Fn>
Status dispatch_8bit(DataType dtype, Fn&& fn) {
  if (dtype == DataType::kFp8E4M3) return fn(std::true_type{});
  return fn(std::false_type{});
}

// Calls fn(Y{}) with Y the storage type of y: uint8_t for an 8-bit y, else the float type.
template <typename Fn>
Status dispatch_output(DataType dtype, Fn&& fn) {
  if (is_kernel_8bit_type(dtype)) return fn(uint8_t{});
  return dispatch_float_type(dtype, fn);
}

}  // namespace gpulab::kernels
