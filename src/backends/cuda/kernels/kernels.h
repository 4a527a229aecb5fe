// Host-callable launchers of gpulab's own CUDA kernels (pooling, input/output conversion,
// elementwise fallbacks, softmax, top-k). Includable from plain C++: no CUDA-only syntax here.
//
// Contract of every launch_*():
// - validates its descriptor first (kernel_desc.h) and returns Status::invalid_argument on
//   nonsense, without launching anything;
// - never allocates and never synchronizes, so it may be captured in a CUDA graph; the work is
//   queued on `stream` and the outputs are valid once the stream reaches it;
// - pointers are device pointers to dense tensors as the descriptor describes; inputs and
//   outputs must not overlap unless the descriptor says the call may run in place. 16-byte
//   aligned pointers get vectorised loads; any element alignment works;
// - after the launch it checks cudaGetLastError() and returns Status::device_error naming the
//   kernel and the CUDA error (which may also be an earlier asynchronous error on the device).
// Thread safety: launchers keep no state; concurrent calls on different streams are fine.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/kernel_desc.h"

namespace gpulab::kernels {

// x: float32 NCHW [n, c, h, w]; y: NHWC [n, h, w, c_out] of desc.dtype.
Status launch_nchw_to_nhwc(const NchwToNhwcDesc& desc, const void* x, void* y, cudaStream_t stream);

// x: float32 [n, c, h, w]; y: NHWC [n, out_h, out_w, c_out] of desc.dtype, space-to-depth.
Status launch_nchw_to_space_to_depth(const SpaceToDepthDesc& desc, const void* x, void* y,
                                     cudaStream_t stream);

// x: uint8 [n, h, w, c]; y: NHWC [n, h, w, c_out] of desc.dtype.
Status launch_normalize_u8(const NormalizeU8Desc& desc, const void* x, void* y, cudaStream_t stream);

// x: NHWC [n, h, w, c_stored] of desc.dtype; y: float32 NCHW [n, c, h, w].
Status launch_nhwc_to_nchw_f32(const NhwcToNchwF32Desc& desc, const void* x, void* y, cudaStream_t stream);

// x: count elements of desc.from; y: the same of desc.to.
Status launch_float_cast(const FloatCastDesc& desc, const void* x, void* y, cudaStream_t stream);

// x: NHWC [n, h, w, c]; y: NHWC [n, out_h, out_w, c], both of desc.dtype.
Status launch_pool(const PoolDesc& desc, const void* x, void* y, cudaStream_t stream);

// x: NHWC [n, h, w, c]; y: [n, 1, 1, c], both of desc.dtype.
Status launch_global_avg_pool(const GlobalAvgPoolDesc& desc, const void* x, void* y, cudaStream_t stream);

// a, y: [n, hw, c]; b: [n, hw, c] or [n, 1, c] (see Broadcast); all of desc.dtype. y may alias a,
// or b when b is not broadcast.
Status launch_binary(const BinaryDesc& desc, const void* a, const void* b, void* y, cudaStream_t stream);

// x, y: `count` elements of desc.dtype; bias: c elements of desc.bias_dtype. y may alias x.
Status launch_bias_act(const BiasActDesc& desc, const void* x, const void* bias, void* y,
                       cudaStream_t stream);

// x, y: `count` elements of desc.dtype. y may alias x.
Status launch_unary(const UnaryDesc& desc, const void* x, void* y, cudaStream_t stream);

// y: float32 [n]; starts: device uint32 [lanes]. Lane t writes y[t], y[t + lanes], ... from the
// 32-bit LCG state starts[t], value (state >> 8) / 2^23 - 1, then state = state * mul + add:
// measure::bench_input_lanes' interleaving of the bench input (measure/bench.h).
Status launch_lcg_lanes(float* y, int64_t n, const uint32_t* starts, int64_t lanes, uint32_t mul,
                        uint32_t add, cudaStream_t stream);

// x, y: float32 [rows, cols]. y may alias x.
Status launch_softmax(const SoftmaxDesc& desc, const void* x, void* y, cudaStream_t stream);

// x: float32 [rows, cols]; indices: [rows, k] of desc.index_dtype; values: float32 [rows, k].
// One thread block per row.
Status launch_topk(const TopKDesc& desc, const void* x, void* indices, void* values, cudaStream_t stream);

// Which kernel of the fused stem runs: kAuto takes wgmma where the GPU has it (sm_90) and
// mma.sync elsewhere, or mma.sync when the environment sets GPULAB_FUSED_STEM=mma; the others
// force one (tests, measurements).
enum class StemKernel { kAuto, kMmaSync, kWgmma };

// x: float32 NCHW [n, c, h, w]; weight: float16 [64, 4, 4, 16] (KRSC over space-to-depth pixels);
// bias: [64] float16 (float32 with desc.bias_float32) or null; y: float16 NHWC [n, out_h, out_w, 64].
// weight and y 16-byte aligned. Needs an sm_80 or newer GPU, and sm_90 for kWgmma
// (Status::unsupported otherwise). The first call per device and variant sets the kernel's
// shared-memory limit and queries its occupancy.
Status launch_fused_stem(const FusedStemDesc& desc, const void* x, const void* weight, const void* bias,
                         void* y, cudaStream_t stream, StemKernel kernel = StemKernel::kAuto);

// x: [rows, in_features] and w: [out_features, in_features] of desc.dtype; bias: float32
// [out_features] or nullptr; y: [rows, out_features] of desc.out_dtype.
Status launch_linear(const LinearDesc& desc, const void* x, const void* w, const float* bias, void* y,
                     cudaStream_t stream);

}  // namespace gpulab::kernels
