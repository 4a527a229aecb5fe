// Fully connected layer through cuBLASLt with the bias fused into the epilogue:
//   y[n, out] = x[n, in] . W[out, in]^T + bias[out]       (row-major, storage dtype)
// FP32 compute (CUBLAS_COMPUTE_32F; TF32 only for Precision::kTf32). The algorithm is the
// heuristic's first choice for the batch size, found in create() (may allocate); launch() never
// allocates or synchronizes. The special case of CublasLtMatmul (cublaslt_matmul.h) that the plan's
// kGemm steps use.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backends/cuda/cublaslt_matmul.h"
#include "gpulab/engine.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

struct GemmProblem {
  int64_t rows = 0;  // batch
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool has_bias = false;
  DataType dtype = DataType::kFloat32;
  Precision precision = Precision::kFp32;
};

class CublasLtGemm {
 public:
  ~CublasLtGemm() = default;
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // `max_workspace_bytes`: the most workspace the algorithm may use.
  static Result<std::unique_ptr<CublasLtGemm>> create(cublasLtHandle_t handle, const GemmProblem& problem,
                                                      int64_t max_workspace_bytes);
  Status launch(cublasLtHandle_t handle, const void* x, const void* weight, const void* bias, void* y,
                void* workspace, int64_t workspace_bytes, cudaStream_t stream) const;
  int64_t workspace_bytes() const { return matmul_->workspace_bytes(); }

 private:
  explicit CublasLtGemm(std::unique_ptr<CublasLtMatmul> matmul) : matmul_(std::move(matmul)) {}
  std::unique_ptr<CublasLtMatmul> matmul_;
};

}  // namespace gpulab::cuda
