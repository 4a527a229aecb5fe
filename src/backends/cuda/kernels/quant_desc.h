// Descriptors of the 8-bit kernels of INT8/FP8 plans (quant.cu), their validation, and the
// host-side constants of their arithmetic. Plain C++ (no CUDA headers): the planner fills them and
// the CPU unit tests check the rules on a machine without a GPU. The arithmetic is
// src/core/quant.h's, step for step (kernels/quant.cuh is its device half).
//
// 8-bit storage types: kInt8 (real = scale * q, q in [-128, 127]) and kFp8E4M3 (real = scale *
// e4m3). Float storage types: kFloat32, kFloat16, kBFloat16 (kernel_desc.h's). Activations NHWC.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/kernel_desc.h"
#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab::kernels {

// int8 or fp8e4m3.
bool is_kernel_8bit_type(DataType dtype);

// The network's input conversion into 8 bits: float32 NCHW -> NHWC of `dtype` at `scale`, through
// SpaceToDepthDesc's rearrangement (block 1 without padding: a plain NCHW -> NHWC copy), zero in
// the padding channels. q = quantize(x, 1 / scale).
struct QuantizeInputDesc {
  SpaceToDepthDesc layout;  // layout.dtype is ignored
  DataType dtype = DataType::kInt8;
  float scale = 1.0f;  // positive, finite
};
Status validate(const QuantizeInputDesc& desc);

// An elementwise cast of `count` elements between an 8-bit type and a float type (a kCast step):
// dequantize y = to_float(q) * scale, rounded to the float type; quantize q = quantize(to_float(x),
// 1 / scale).
struct QuantCastDesc {
  int64_t count = 0;
  DataType from = DataType::kInt8, to = DataType::kFloat16;  // one 8-bit, one float type
  float scale = 1.0f;                                        // of the 8-bit side
};
Status validate(const QuantCastDesc& desc);

// An INT8/FP8 convolution (or a Gemm as a 1x1 convolution over [n, 1, 1, features]) with
// core/quant.h's epilogue: acc = sum x * w (int32 for int8, float32 for E4M3), v = float(acc) *
// (x_scale * w_scale[k]), + bias[k], + to_float(residual) * residual_scale, activation, then
// quantized at y_scale (8-bit y) or rounded to y's float type.
// x: NHWC [n, h, w, c] of x_dtype; w: [k, r, s, c / groups] of x_dtype; w_scale, bias: float32 [k]
// (bias may be null); residual: NHWC [n, out_h, out_w, k] of x_dtype; y: NHWC of y_dtype.
struct Q8ConvDesc {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t k = 0, r = 1, s = 1;
  int64_t out_h = 0, out_w = 0;
  Hw stride{1, 1}, dilation{1, 1};
  Pads pads;
  int64_t groups = 1;
  DataType x_dtype = DataType::kInt8;  // and the weights' and the residual's
  float x_scale = 1.0f;
  bool has_residual = false;
  float residual_scale = 1.0f;
  Activation activation = Activation::kNone;
  float clip_min = 0.0f, clip_max = 6.0f;
  DataType y_dtype = DataType::kInt8;
  float y_scale = 1.0f;  // 8-bit y only
};
Status validate(const Q8ConvDesc& desc);

// What the tensor-core kernel (launch_q8_mma_conv) runs, beyond validate(): groups 1 (depthwise and
// grouped layers stay on the direct kernel), c a multiple of 8 (a 16-byte chunk of the reduction
// never spans two taps: a tap's last chunk of c % 16 == 8 channels is zero-padded), and every index
// within int32. Unsupported, with the reason, otherwise.
Status validate_q8_mma(const Q8ConvDesc& desc);

// Max pooling of 8-bit values (exact: the output keeps the input's scale). PoolDesc's fields, kind
// kMax, dtype int8 or fp8e4m3. A window without any input element (dilation only) gives -128 /
// -448, the smallest value of the type.
Status validate_q8_max_pool(const PoolDesc& desc);

// Global average pooling of 8-bit values: sum (int32 for int8, float32 for E4M3, in pixel order),
// times x_scale / (h * w) (float32, computed on the host), quantized at y_scale or rounded to y's
// float type.
struct Q8GlobalPoolDesc {
  int64_t n = 0, h = 0, w = 0, c = 0;
  DataType x_dtype = DataType::kInt8;
  float x_scale = 1.0f;
  DataType y_dtype = DataType::kFloat16;
  float y_scale = 1.0f;  // 8-bit y only
};
Status validate(const Q8GlobalPoolDesc& desc);

}  // namespace gpulab::kernels
