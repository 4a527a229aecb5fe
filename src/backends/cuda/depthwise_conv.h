// Depthwise convolution (groups == c == k: one input channel per group, channel multiplier 1)
// over NHWC with the fused epilogue of ConvAttrs (bias, residual, ReLU/Clip), as in MobileNet's
// 3x3 layers. Any kernel size, stride, padding and dilation; FP32 accumulation. Memory-bound:
// each thread computes one 16-byte channel vector for a few adjacent output pixels along W.
// Takes the same descriptor as the direct convolution (direct_conv.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/direct_conv.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

// Largest kernel window (r * s taps) the depthwise kernel accepts; the block's slice of the
// weights lives in shared memory.
inline constexpr int64_t kDepthwiseMaxTaps = 1024;

// OK when launch_depthwise_conv accepts `desc`: float32/float16/bfloat16, and x also
// float16/bfloat16 when y is float32 (desc.x_dtype; converted exactly as it loads); groups == c == k;
// every size >= 1 and within int32; out_h/out_w equal to the convolution's output size
// (floor((in + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride) + 1); at most
// kDepthwiseMaxTaps taps. Otherwise Status::invalid_argument (or unsupported for the dtype)
// naming the field. Host only; never touches the device.
Status validate_depthwise_conv(const DirectConvDesc& desc);

// validate_depthwise_conv(desc).is_ok(): whether the tactic "depthwise" can run this layer.
bool depthwise_conv_supports(const DirectConvDesc& desc);

// x [n,h,w,c]; weight [k, r, s, 1] (KRSC with one channel per group, as lowered for the direct
// convolution); bias [k] or null; residual [n,out_h,out_w,k] (required when attrs.has_residual,
// else ignored); y [n,out_h,out_w,k]; x of input_dtype(desc), the rest of desc.dtype.
// y = act(conv + bias + residual), rounded once to the storage type. The 16-byte vector path
// needs c to be a multiple of 16 / (y's element size) and x, residual and y aligned to their
// vector; otherwise a scalar path runs (same results). Never allocates or synchronizes
// (CUDA-graph safe). Tolerance against the reference: FP32 summation order only (rel L2 ~1e-7 in
// float32).
Status launch_depthwise_conv(const DirectConvDesc& desc, const void* x, const void* weight, const void* bias,
                             const void* residual, void* y, cudaStream_t stream);

}  // namespace gpulab::cuda
