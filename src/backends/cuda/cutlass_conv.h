// Small-channel convolutions through CUTLASS's implicit GEMM (tensor cores, FP16 in and out,
// FP32 accumulation) with the "few channels" activation iterator: the GEMM's K dimension is the
// flattened (r, s, c) filter window, so an input of 8 or 16 channels fills whole K tiles instead
// of padding each filter tap to a tile. This is the shape of a network's stem (RGB padded to 8
// channels, or a space-to-depth input of 16), where cuDNN's engines run far from the memory
// roofline. Bias and ReLU are fused into CUTLASS's epilogue (the bias is read as a C operand of
// row stride 0, that is broadcast over output pixels).
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

#include "backends/cuda/direct_conv.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

// Tactic strings, one per threadblock tile ("cutlass:<M>x<N>x<K>_s<stages>"), fastest first on
// the H200's stem at batch 256.
std::span<const std::string_view> cutlass_conv_tactics();

// OK when the CUTLASS convolution can run `desc`: float16 storage with a float16 bias (or none);
// groups == 1, dilation 1; c and k multiples of 8 with c <= kCutlassMaxChannels; no residual;
// activation none or ReLU; pads at the end no larger than at the start (CUTLASS pads
// symmetrically and masks the rest); out_h/out_w equal to the convolution's output size; every
// tensor under 2 GiB. Otherwise Status::unsupported or invalid_argument naming the reason. Host
// only.
Status validate_cutlass_conv(const DirectConvDesc& desc);
inline constexpr int64_t kCutlassMaxChannels = 32;

// validate_cutlass_conv(desc).is_ok().
bool cutlass_conv_supports(const DirectConvDesc& desc);

// x [n,h,w,c]; weight [k, r, s, c] (KRSC); bias [k] or null; y [n,out_h,out_w,k]; all float16,
// 16-byte aligned. `tactic` is one of cutlass_conv_tactics(). Never allocates or synchronizes
// (CUDA-graph safe). Tolerance against the reference: FP32 accumulation, one rounding to FP16.
Status launch_cutlass_conv(std::string_view tactic, const DirectConvDesc& desc, const void* x,
                           const void* weight, const void* bias, void* y, cudaStream_t stream);

}  // namespace gpulab::cuda
