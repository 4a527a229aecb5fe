// Device-side helpers shared by the kernel files: storage-type conversion to and from float,
// 16-byte vectors, launch-shape arithmetic, the post-launch error check and dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/kernel_desc.h"

namespace gpulab::kernels {

// ---- storage type <-> float ----------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round to nearest even, as the reference's float32 -> storage conversion does.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Bias element i of a layer of T whose bias is stored as float32 (bias_f32: BF16 plans keep
// biases in float32) or as T.
template <typename T>
__device__ __forceinline__ float load_bias(const void* bias, bool bias_f32, int64_t i) {
  return bias_f32 ? static_cast<const float*>(bias)[i] : to_float(static_cast<const T*>(bias)[i]);
}

// ---- vectors ---------------------------------------------------------------------------------

// kVec<T> elements make one 16-byte access (float4 for float32, 8 halves for the 16-bit types).
template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

// V elements of T, aligned to their size so that one load/store instruction moves them.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- launch shape ----------------------------------------------------------------------------

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `work` items: enough to fill the GPU several times over, no
// more (the loop covers the rest). 65535 * 256 threads keep an H200 busy with room to spare.
inline unsigned grid_for(int64_t work, int threads = kThreads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

// After a launch: Status::device_error naming launcher and kernel when the launch failed.
inline Status check_launch(const char* launcher, const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status::device_error(
      std::string(launcher) + ": kernel '" + kernel + "' failed: " + cudaGetErrorName(err) + " (" +
      cudaGetErrorString(err) +
      "). Check the pointers and the stream; an earlier asynchronous error on the device "
      "is reported here too.");
}

// Calls fn(T{}) with T the storage type of `dtype` (one of is_kernel_float_type()).
template <typename Fn>
Status dispatch_float_type(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32: return fn(float{});
    case DataType::kFloat16: return fn(__half{});
    case DataType::kBFloat16: return fn(__nv_bfloat16{});
    default:
      return Status::internal(std::string("dispatch_float_type: dtype ") + std::string(dtype_name(dtype)) +
                              " reached a kernel after validation");
  }
}

// ---- activations -----------------------------------------------------------------------------

// The fused activation of Conv/Add epilogues (graph.h Activation).
struct ActParams {
  Activation kind;
  float lo, hi;
};

__device__ __forceinline__ float apply_act(float v, ActParams act) {
  switch (act.kind) {
    case Activation::kRelu: return fmaxf(v, 0.0f);
    case Activation::kClip: return fminf(fmaxf(v, act.lo), act.hi);
    default: return v;
  }
}

}  // namespace gpulab::kernels
