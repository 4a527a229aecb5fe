#include "backends/cuda/cublaslt_gemm.h"

#include <fmt/format.h>

#include "backends/cuda/cuda_check.h"

namespace gpulab::cuda {

namespace {
cudaDataType_t cuda_type(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return CUDA_R_16F;
    case DataType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
}  // namespace

CublasLtGemm::~CublasLtGemm() {
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

Result<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create(cublasLtHandle_t handle, const GemmProblem& p,
                                                           int64_t max_workspace_bytes) {
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  g->problem_ = p;
  // Column-major view: D^T [out, rows] = W [out, in] (stored as in x out, transposed) . X^T [in, rows].
  const cublasComputeType_t compute =
      p.precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = cuda_type(p.dtype);
  GPULAB_CUBLAS_TRY(cublasLtMatmulDescCreate(&g->op_, compute, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  GPULAB_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  GPULAB_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  if (p.has_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    GPULAB_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const cudaDataType_t bias_type = type;
    GPULAB_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
  }
  GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->a_, type, p.in_features, p.out_features, p.in_features));
  GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->b_, type, p.in_features, p.rows, p.in_features));
  GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&g->d_, type, p.out_features, p.rows, p.out_features));

  cublasLtMatmulPreference_t pref = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = static_cast<uint64_t>(max_workspace_bytes);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, g->op_, g->a_, g->b_, g->d_, g->d_, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::unsupported(fmt::format("cuBLASLt: no algorithm for a {}x{}x{} {} GEMM (status {}).",
                                           p.rows, p.out_features, p.in_features, dtype_name(p.dtype),
                                           static_cast<int>(st)));
  g->algo_ = result.algo;
  g->workspace_bytes_ = static_cast<int64_t>(result.workspaceSize);
  return g;
}

Status CublasLtGemm::launch(cublasLtHandle_t handle, const void* x, const void* weight, const void* bias,
                            void* y, void* workspace, int64_t workspace_bytes, cudaStream_t stream) const {
  if (problem_.has_bias)
    GPULAB_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.0f, beta = 0.0f;
  GPULAB_CUBLAS_TRY(cublasLtMatmul(handle, op_, &alpha, weight, a_, x, b_, &beta, y, d_, y, d_, &algo_,
                                   workspace, static_cast<size_t>(workspace_bytes), stream));
  return Status::ok();
}

}  // namespace gpulab::cuda
