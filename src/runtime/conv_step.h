// One convolution step at run time: a cuDNN plan (fused, or convolution-only followed by
// gpulab's bias/residual/activation kernels) or, without one, the direct-convolution fallback.
// Never allocates or synchronizes (CUDA-graph safe).
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backends/cuda/cudnn_conv.h"
#include "gpulab/status.h"

namespace gpulab {

// `conv` null: the direct convolution. `handle` must be bound to `stream`.
Status launch_conv_step(const cuda::ConvProblem& problem, const cuda::CudnnConv* conv, cudnnHandle_t handle,
                        const cuda::ConvPointers& ptrs, void* workspace, cudaStream_t stream);

}  // namespace gpulab
