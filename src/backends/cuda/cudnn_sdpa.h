// Scaled dot-product attention through cuDNN's fused SDPA (the frontend's graph API), for the plan's
// kAttention steps in FP16/BF16 plans:
//   O[b, h, t] = softmax(scale * Q[b, h, t] . K[b, h, :] + bias[b, h, t, :]) V[b, h, :]
// Q [B, H, T, D], K [B, H, S, D], V [B, H, S, Dv], O [B, H, T, Dv] with any strides (elements; D
// innermost, stride 1), the bias optional ([B or 1, H or 1, T, S], the plan's weight). B counts
// every image's matrices: the runtime folds the batch into it. Scores and softmax in FP32 inside the
// fused kernel (flash attention: P is rounded to the storage type before P V, which the CPU
// interpreter does not emulate). create() builds the graph and its plan (may allocate); launch()
// never allocates or synchronizes. cuDNN refuses shapes it has no engine for (head dims that are
// not a multiple of 8, over 256 ...): create() then fails with kUnsupported and the runtime takes
// gpulab's plain kernel.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab::cuda {

struct SdpaProblem {
  std::array<int64_t, 4> q_dims{}, k_dims{}, v_dims{}, o_dims{}, bias_dims{};
  std::array<int64_t, 4> q_strides{}, k_strides{}, v_strides{}, o_strides{}, bias_strides{};
  bool has_bias = false;
  float scale = 1.0f;
  DataType dtype = DataType::kFloat16;  // float16 or bfloat16
};
std::string sdpa_signature(const SdpaProblem& p);

class CudnnSdpa {
 public:
  ~CudnnSdpa();
  static Result<std::unique_ptr<CudnnSdpa>> create(cudnnHandle_t handle, const SdpaProblem& problem);
  // Pointers to the first element of each tensor (the views' offsets applied by the caller).
  Status launch(cudnnHandle_t handle, const void* q, const void* k, const void* v, const void* bias, void* o,
                void* workspace) const;
  int64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Impl;
  explicit CudnnSdpa(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int64_t workspace_bytes_ = 0;
};

}  // namespace gpulab::cuda
