// The plan's view steps on the GPU (plan.h: kCopy, kLinear, kMatMul, kAttention, kLayerNorm,
// kEltwise): the library problems a step poses at a batch size, and the functions that queue it.
//   kCopy, kEltwise, kLayerNorm: gpulab's strided kernels (view_kernels.h);
//   kLinear: one cuBLASLt matmul over every image's rows (bias, GELU and residual in its epilogue;
//            the exact GELU of FP32/TF32 plans as an elementwise kernel after it);
//   kMatMul: a cuBLASLt strided-batched matmul over every image's matrices;
//   kAttention: cuDNN's fused SDPA in FP16/BF16 plans where cuDNN has an engine, else gpulab's
//               plain attention kernel.
// The functions never allocate or synchronize (capturable in a CUDA graph).
#pragma once

#include <memory>

#include "backends/cuda/cublaslt_matmul.h"
#include "backends/cuda/cudnn_sdpa.h"
#include "runtime/step_launch.h"

namespace gpulab {

// How a kLinear or kMatMul step runs at a batch size: one cuBLASLt problem, launched `launches`
// times with its pointers advanced by the steps (elements) each time. The images' rows (or matrices)
// fold into one product where their memory allows it (launches 1), else one launch per image.
struct MatmulLaunch {
  cuda::MatmulProblem problem;
  int64_t launches = 1;
  int64_t a_step = 0, c_step = 0, d_step = 0;  // B is a weight (kLinear) or A's partner (b_step)
  int64_t b_step = 0;
  // Epilogue parts cuBLASLt has no algorithm for at this problem, run as kernels of their own
  // after the product (prepare_matmul_plan): the tanh GELU, and the bias before it.
  bool separate_gelu = false;
  bool separate_bias = false;
};
Result<MatmulLaunch> matmul_launch(const Plan& plan, const PlanStep& step, int64_t batch);
// cuBLASLt's plan for `launch`. Where cuBLASLt has no algorithm with the fused GELU epilogue
// (16-bit products under cuBLASLt 13.1 on an H100, even with a float32 bias), the GELU moves to a
// kernel of its own; where it then has none with the bias either, so does the bias (rows of D
// dense only). `launch` says which (separate_gelu, separate_bias).
Result<std::unique_ptr<cuda::CublasLtMatmul>> prepare_matmul_plan(cublasLtHandle_t handle,
                                                                  const PlanStep& step, MatmulLaunch& launch,
                                                                  int64_t workspace_bytes);

// How a kAttention step runs on cuDNN at a batch size: the images folded into B (launches 1), or,
// when the bias varies along B (Swin's window masks), one launch per image. kUnsupported when a
// view is not [B, H, T, D] with D contiguous or the plan is not FP16/BF16 (gpulab's kernel then).
struct SdpaLaunch {
  cuda::SdpaProblem problem;
  int64_t launches = 1;
  int64_t q_step = 0, k_step = 0, v_step = 0, o_step = 0;
};
Result<SdpaLaunch> sdpa_launch(const Plan& plan, const PlanStep& step, int64_t batch);

// What ExecutionContext::prepare built for a view step at this batch size.
struct PreparedMatmul {
  const cuda::CublasLtMatmul* matmul = nullptr;
  MatmulLaunch launch;
  cublasLtHandle_t handle = nullptr;
  int64_t workspace_bytes = 0;
};
struct PreparedSdpa {
  const cuda::CudnnSdpa* sdpa = nullptr;  // null: gpulab's kernel
  SdpaLaunch launch;
  cudnnHandle_t handle = nullptr;
};

Status enqueue_copy(const StepLaunch& l);
Status enqueue_eltwise(const StepLaunch& l);
Status enqueue_layer_norm(const StepLaunch& l);
// kLinear and kMatMul.
Status enqueue_matmul(const StepLaunch& l, const PreparedMatmul& prepared);
Status enqueue_attention(const StepLaunch& l, const PreparedSdpa& prepared);

}  // namespace gpulab
