// Host-callable launchers of the view-step kernels (view_kernel_desc.h), with the contract of
// kernels.h: each validates its descriptor, never allocates or synchronizes (capturable in a CUDA
// graph), queues on `stream` and checks the launch. Pointers are device pointers to the start of
// the tensors the views index (a view's offset and image stride are applied by the kernel).
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/view_kernel_desc.h"

namespace gpulab::kernels {

// y may not overlap x (a layout change writes elsewhere).
Status launch_copy(const CopyDesc& desc, const void* x, void* y, cudaStream_t stream);
// a, b, y of desc.dtype; y may alias a when the views are equal.
Status launch_eltwise(const EltwiseDesc& desc, const void* a, const void* b, void* y, cudaStream_t stream);
// x, y of desc.dtype; gamma and beta float32 [c] (beta may be null).
Status launch_layer_norm(const LayerNormDesc& desc, const void* x, const float* gamma, const float* beta,
                         void* y, cudaStream_t stream);
// q, k, v, y (and bias when desc.has_bias) of desc.dtype.
Status launch_attention(const AttentionDesc& desc, const void* q, const void* k, const void* v,
                        const void* bias, void* y, cudaStream_t stream);

}  // namespace gpulab::kernels
