// The fallback convolution: a direct NHWC convolution with the fused epilogue of ConvAttrs,
// used when cuDNN offers no engine for a layer (and in tests as a second opinion). Slow but
// general: any kernel size, stride, padding, dilation and group count.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab::cuda {

struct DirectConvDesc {
  int64_t n = 0, c = 0, h = 0, w = 0;   // input NHWC, c = channels per pixel (all groups)
  int64_t k = 0, out_h = 0, out_w = 0;  // output NHWC [n, out_h, out_w, k]
  ConvAttrs attrs;                      // kernel, stride, pads, dilation, groups, epilogue
  DataType dtype = DataType::kFloat32;  // x, w, residual and y, and the bias unless:
  bool bias_float32 = false;            // the bias is float32 (BF16 plans keep biases in float32)
  // x's storage type when it differs from dtype: a float16/bfloat16 value read by a float32 layer
  // without a cast step (fold_input_casts). Only the depthwise kernel accepts it; the others
  // refuse a descriptor that sets it.
  std::optional<DataType> x_dtype;
};

// x's storage type: desc.x_dtype, else desc.dtype.
inline DataType input_dtype(const DirectConvDesc& desc) {
  return desc.x_dtype.value_or(desc.dtype);
}

// "(n 2, h 56, w 56, c 64, k 64, groups 1, kernel 3x3, stride 1x1, dilation 1x1, out 56x56)", for
// the messages of the convolution kernels' validators.
std::string describe(const DirectConvDesc& desc);

// x [n,h,w,c]; weight [k, r, s, c/groups]; bias [k] or null; residual [n,out_h,out_w,k] or null
// (used when attrs.has_residual); y [n,out_h,out_w,k]. FP32 accumulation. Never allocates.
Status launch_direct_conv(const DirectConvDesc& desc, const void* x, const void* weight, const void* bias,
                          const void* residual, void* y, cudaStream_t stream);

}  // namespace gpulab::cuda
