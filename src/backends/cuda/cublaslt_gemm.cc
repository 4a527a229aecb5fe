#include "backends/cuda/cublaslt_gemm.h"

namespace gpulab::cuda {

Result<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create(cublasLtHandle_t handle, const GemmProblem& p,
                                                           int64_t max_workspace_bytes) {
  const MatmulProblem m{.m = p.rows,
                        .n = p.out_features,
                        .k = p.in_features,
                        .lda = p.in_features,
                        .ldb = p.in_features,
                        .ldd = p.out_features,
                        .b_rows_are_columns = true,
                        .has_bias = p.has_bias,
                        .dtype = p.dtype,
                        .precision = p.precision};
  GPULAB_ASSIGN_OR_RETURN(std::unique_ptr<CublasLtMatmul> matmul,
                          CublasLtMatmul::create(handle, m, max_workspace_bytes));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(matmul)));
}

Status CublasLtGemm::launch(cublasLtHandle_t handle, const void* x, const void* weight, const void* bias,
                            void* y, void* workspace, int64_t workspace_bytes, cudaStream_t stream) const {
  return matmul_->launch(handle, x, weight, bias, nullptr, y, workspace, workspace_bytes, stream);
}

}  // namespace gpulab::cuda
