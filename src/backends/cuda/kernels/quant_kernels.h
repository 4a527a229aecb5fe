// Host-callable launchers of the 8-bit kernels of INT8/FP8 plans (quant.cu); descriptors and
// their rules in quant_desc.h. The contract of kernels.h holds: each validates its descriptor,
// never allocates or synchronizes (CUDA-graph safe), checks the launch, keeps no state (but for the
// tensor-core kernel's per-device shared-memory limit, set on its first launch on a device). 8-bit
// tensors are bytes (int8 or E4M3 bits).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "backends/cuda/kernels/quant_desc.h"

namespace gpulab::kernels {

// x: float32 NCHW; y: NHWC bytes [n, out_h, out_w, c_out].
Status launch_quantize_input(const QuantizeInputDesc& desc, const float* x, void* y, cudaStream_t stream);

// x, y: `count` elements of desc.from / desc.to.
Status launch_quant_cast(const QuantCastDesc& desc, const void* x, void* y, cudaStream_t stream);

// One thread per output element; int8 sums four channels at a time with __dp4a where c / groups,
// c and the pointers allow it (sm_61 and newer), E4M3 converts each operand to float. Depthwise
// layers run 4 channels per thread (c a multiple of 4), and INT8 3x3 ones into INT8 outputs at
// stride 1 or 2 (c a multiple of 16, 16-byte aligned tensors, scales and bias) 16 channels of 2-4
// output pixels per thread on __dp4a. The result equals the plan interpreter's bit for bit (quant.h).
Status launch_q8_conv(const Q8ConvDesc& desc, const void* x, const void* w, const float* w_scale,
                      const float* bias, const void* residual, void* y, cudaStream_t stream);

// The same convolution on the tensor cores (quant_mma.cu): an implicit GEMM on mma.sync with 8-bit
// operands, for the layers validate_q8_mma accepts; x and w 16-byte aligned. `tactic` is one of
// q8_mma_tactics(), a thread-block tile: "mma-q8" (128 pixels x 64 channels, any output type),
// "mma-q8:128x128", "mma-q8:256x128" and "mma-q8:256x64" (8-bit outputs), "mma-q8:3x3c64" (8-bit
// outputs of 3x3 convolutions of 64 channels into 64, stride 1, pads 1: input patches shared by the
// nine taps), or "dp4a-q8:1x1" (not the tensor cores: INT8 1x1 convolutions of 8-32 channels into a
// multiple of 16, stride 1, no padding, INT8 outputs, on __dp4a), or "wgmma-q8:64x128",
// "wgmma-q8:128x128", "wgmma-q8:128x256" (the implicit GEMM on Hopper's wgmma, quant_wgmma_sm90.cu:
// INT8, c a multiple of 16), or "cutlass-q8:64x128", "cutlass-q8:128x128", "cutlass-q8:64x256"
// (CUTLASS's Hopper implicit GEMM with the same epilogue, quant_cutlass_sm90.cu: INT8 in and out, c
// and k multiples of 16, 16-byte aligned tensors, scales and bias; never splits K); both unsupported
// at launch on any GPU but compute capability 9.0.
// q8_mma_tactic_supports says whether a tactic runs a layer (unsupported with the reason,
// otherwise); the launcher checks it. INT8 equals launch_q8_conv bit for bit with every tactic; FP8
// (sm_89 and newer, unsupported elsewhere) sums in the tensor cores' order, within one E4M3 step of
// the interpreter like the direct kernel.
std::span<const std::string_view> q8_mma_tactics();
Status q8_mma_tactic_supports(std::string_view tactic, const Q8ConvDesc& desc);
// With a workspace, an INT8 launch whose thread blocks would fill less than half the GPU (a small
// batch) splits K over more blocks, their int32 sums in `workspace` (at most workspace_bytes), and
// a second kernel adds them up and runs the epilogue: the same bytes (integer sums are exact in any
// order). The 3x3c64 tactic and FP8 never split.
Status launch_q8_mma_conv(std::string_view tactic, const Q8ConvDesc& desc, const void* x, const void* w,
                          const float* w_scale, const float* bias, const void* residual, void* y,
                          cudaStream_t stream, void* workspace = nullptr, int64_t workspace_bytes = 0);

// x: NHWC bytes [n, h, w, c]; y: NHWC bytes [n, out_h, out_w, c].
Status launch_q8_max_pool(const PoolDesc& desc, const void* x, void* y, cudaStream_t stream);

// x: NHWC bytes [n, h, w, c]; y: [n, c] of desc.y_dtype.
Status launch_q8_global_avg_pool(const Q8GlobalPoolDesc& desc, const void* x, void* y, cudaStream_t stream);

// The tactic search's device side (q8_check.cu). `count` seeded pseudo-random 8-bit codes into y:
// byte i a function of (seed, i) alone, any int8 or, with fp8, any finite E4M3 value.
Status launch_random_q8(void* y, int64_t count, bool fp8, uint32_t seed, cudaStream_t stream);
// Where two 8-bit outputs disagree: how many values, and the widest gap between two of them (INT8:
// |a - b| as signed values; FP8: E4M3 steps, zero's two codes being one value).
struct Q8Differences {
  unsigned long long far = 0;     // INT8: bytes that differ; FP8: values more than one step apart
  unsigned long long widest = 0;  // over every value, counted or not
};
// Adds to *differ (device memory, which the caller zeroes) the differences of the `count` bytes of
// a and b: far counts them, widest keeps the largest gap.
Status launch_count_q8_differences(const void* a, const void* b, int64_t count, bool fp8,
                                   Q8Differences* differ, cudaStream_t stream);

}  // namespace gpulab::kernels
