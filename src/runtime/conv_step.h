// One convolution step at run time: a cuDNN plan (fused, or convolution-only followed by
// gpulab's bias/residual/activation kernels) or one of gpulab's own convolutions (the direct
// convolution, general; the depthwise convolution, groups == c == k; CUTLASS's small-channel
// implicit GEMM, for stems; the wgmma 3x3 convolution, for 64-channel layers on sm_90). Never
// allocates or synchronizes (CUDA-graph safe).
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string_view>

#include "backends/cuda/cudnn_conv.h"
#include "gpulab/status.h"

namespace gpulab {

// Which implementation runs a convolution step.
enum class ConvKernel { kCudnn, kDirect, kDepthwise, kCutlass, kWgmma3x3 };

// Tactic strings of gpulab's own convolutions (PlanStep::tactic, timing cache).
inline constexpr std::string_view kDirectTactic = "direct";
inline constexpr std::string_view kDepthwiseTactic = "depthwise";
// CUTLASS tactics are "cutlass:<tile>" (cuda::cutlass_conv_tactics()).
inline constexpr std::string_view kCutlassTacticPrefix = "cutlass:";
// The wgmma 3x3 convolution's are "wgmma-conv3x3:<variant>" (cuda::wgmma_conv_tactics()).
// The tactic of a kStem step (kernels::launch_fused_stem, the only kernel that runs one).
inline constexpr std::string_view kFusedStemTactic = "fused-stem";

// The kernel a tactic string names: "direct", "depthwise", "cutlass:..." and "wgmma-conv3x3:..."
// are gpulab's own; anything else ("cudnn:...", "cudnn-unfused:...", "" for the default) is cuDNN.
ConvKernel conv_kernel_of_tactic(std::string_view tactic);

// OK unless `tactic` names one of gpulab's own kernels that this build does not have: a CUTLASS
// tile or wgmma variant outside cuda::cutlass_conv_tactics() / cuda::wgmma_conv_tactics(), as in
// a plan or timing cache from another gpulab version (stop 14 removed five wgmma variants).
// Then unsupported, naming the tactic. cuDNN tactics are checked when their plan is built.
Status check_conv_tactic(std::string_view tactic);

// The kernel that runs a step whose tactic is `tactic` and for which `conv` was prepared (null
// when no cuDNN plan was built): own kernels by name; a cuDNN tactic without a plan falls back
// to the direct convolution.
ConvKernel conv_kernel_for(std::string_view tactic, const cuda::CudnnConv* conv);

// `kernel` kCudnn needs `conv` (`handle` bound to `stream`, `workspace` of conv->workspace_bytes());
// the own kernels ignore conv, handle and workspace. kDepthwise returns invalid_argument for a
// problem that is not depthwise (cuda::depthwise_conv_supports); kCutlass runs the tile that
// `tactic` names and refuses problems outside cuda::cutlass_conv_supports; kWgmma3x3 runs the
// variant `tactic` names and refuses problems outside cuda::validate_wgmma_conv and GPUs other
// than sm_90.
Status launch_conv_step(const cuda::ConvProblem& problem, ConvKernel kernel, std::string_view tactic,
                        const cuda::CudnnConv* conv, cudnnHandle_t handle, const cuda::ConvPointers& ptrs,
                        void* workspace, cudaStream_t stream);

}  // namespace gpulab
