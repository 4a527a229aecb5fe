// A 3x3 convolution for 64-channel layers on Hopper's warpgroup MMA (wgmma): stride 1, pads 1,
// 64 input and 64 output channels, float16 or bfloat16 NHWC, with bias, residual and activation
// fused:
//   y = act(conv3x3(x, w) + bias + residual)
// This is ResNet's layer1 (56x56x64 at 224x224 input), where cuDNN's best engines on the H200 run
// at 330-450 TFLOP/s, half the tensor cores' rate (docs/performance.md).
//
// The idea: an output tile's input patch (all 64 channels, zero-filled outside the image) is
// loaded into shared memory once, and the nine taps are nine shifted views of it. wgmma's
// no-swizzle K-major operand layout describes a matrix by 16-byte rows in groups of eight, so with
// the patch stored channel-chunk major ([chunk of 8 channels][y][x], 16 bytes per pixel and chunk)
// the operand of tap (dy, dx) is the descriptor of pixel (dy, dx), with the patch's row pitch as
// its stride between 8-pixel groups. Every input pixel crosses L2 about 1.5 times instead of 9,
// and nothing is copied into an im2col buffer.
//
// Measured on the H200 (docs/performance.md): at batch 256 the warp-specialised variant (ws14)
// runs layer1's conv1 7-12% and its conv2 (with the residual) 29-32% faster than cuDNN's best
// candidate; tactic timing picks per layer (rs14 at batch 8).
//
// BFloat16 runs the same kernels with the BF16 instructions, at the same tensor-core rate (before
// 2026-12-06 this kernel was float16-only, and BF16 plans ran layer1 on cuDNN).
//
// Compiled for sm_90a only (wgmma); other GPUs have no code for it, and wgmma_conv_supports()
// says so, so tactic timing does not offer it there.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <string_view>

#include "backends/cuda/direct_conv.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

// Tactic strings, one per kernel variant: "wgmma-conv3x3:rs14" (the weights in registers, two
// warpgroups each looping over units of 14 output rows x 8 columns), ":ws14" (warp-specialised: a
// producer warpgroup loading patches into a ring, two consumer warpgroups taking turns).
inline constexpr std::string_view kWgmmaConvTacticPrefix = "wgmma-conv3x3:";
std::span<const std::string_view> wgmma_conv_tactics();

// OK when the shape is one this kernel covers: float16 or bfloat16 storage (bias of that type or
// float32, or none); c == k == 64; kernel 3x3, stride 1, dilation 1, pads 1 on every side, groups 1; output
// the input's size; activation none, ReLU or Clip; residual allowed. Otherwise unsupported or
// invalid_argument naming the reason. Host only; does not look at the GPU.
Status validate_wgmma_conv(const DirectConvDesc& desc);

// validate_wgmma_conv(desc) is OK and the current device is compute capability 9.0 (sm_90a
// code runs there alone).
bool wgmma_conv_supports(const DirectConvDesc& desc);

// x [n,h,w,64]; weight [64,3,3,64] (KRSC); bias [64] or null; residual [n,h,w,64] (when
// attrs.has_residual, else ignored); y [n,h,w,64]. x, weight, residual and y 16-byte aligned.
// FP32 accumulation, one rounding to the storage type (two with a residual, see wgmma_conv.cu). Never
// allocates or synchronizes (CUDA-graph safe once the first call on a device has set the kernel's
// shared-memory limit). `tactic` is one of wgmma_conv_tactics(). kUnsupported on a GPU other than sm_90.
Status launch_wgmma_conv(std::string_view tactic, const DirectConvDesc& desc, const void* x,
                         const void* weight, const void* bias, const void* residual, void* y,
                         cudaStream_t stream);

}  // namespace gpulab::cuda
