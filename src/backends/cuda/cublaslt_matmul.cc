#include "backends/cuda/cublaslt_matmul.h"

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

// A column-major layout of `rows` x `cols` with leading dimension `ld`, `batch` matrices `stride`
// elements apart.
Status make_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows, int64_t cols,
                   int64_t ld, int64_t batch, int64_t stride) {
  GPULAB_CUBLAS_TRY(
      cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    GPULAB_CUBLAS_TRY(
        cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &stride, sizeof(stride)));
  }
  return Status::ok();
}

}  // namespace

Status validate(const MatmulProblem& p) {
  auto bad = [](const std::string& what) { return Status::invalid_argument("MatmulProblem: " + what + "."); };
  if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 1)
    return bad(fmt::format("batch {} m {} n {} k {} must be >= 1", p.batch, p.m, p.n, p.k));
  if (p.batch > (int64_t{1} << 31) - 1) return bad("more than 2^31 matrices");
  if (p.lda < p.k || p.ldd < p.n || (p.has_c && p.ldc < p.n) || p.ldb < (p.b_rows_are_columns ? p.k : p.n))
    return bad(fmt::format("leading dims lda {} ldb {} ldc {} ldd {} are shorter than a row", p.lda, p.ldb,
                           p.ldc, p.ldd));
  if (p.stride_a < 0 || p.stride_b < 0 || p.stride_c < 0 || p.stride_d < p.m * p.ldd * (p.batch > 1 ? 1 : 0))
    return bad("batch strides must be >= 0, D's must not overlap");
  if (p.gelu_tanh && p.has_c) return bad("a residual after the GELU is not an epilogue cuBLASLt has");
  // Measured on an H100 with cuBLASLt 13.1 (2026-12-05): GELU_BIAS under FP32 compute finds no
  // algorithm for a float16 or bfloat16 bias (status 7), nor, in a later run (eb666af), for a
  // float32 one; the runtime then runs the GELU as its own kernel (prepare_matmul_plan).
  if (p.gelu_tanh && p.has_bias && p.dtype != DataType::kFloat32 && !p.bias_float32)
    return bad(
        "a GELU epilogue in a 16-bit problem takes a float32 bias (cuBLASLt has no algorithm for a "
        "16-bit one)");
  if (p.bias_float32 && p.dtype == DataType::kFloat32) return bad("a float32 bias flag in a float32 problem");
  if (p.dtype != DataType::kFloat32 && p.dtype != DataType::kFloat16 && p.dtype != DataType::kBFloat16)
    return bad("dtype must be float32, float16 or bfloat16");
  return Status::ok();
}

CublasLtMatmul::~CublasLtMatmul() {
  for (auto* l : {a_, b_, c_, d_})
    if (l) cublasLtMatrixLayoutDestroy(l);
  if (op_) cublasLtMatmulDescDestroy(op_);
}

Result<std::unique_ptr<CublasLtMatmul>> CublasLtMatmul::create(cublasLtHandle_t handle,
                                                               const MatmulProblem& p,
                                                               int64_t max_workspace_bytes) {
  GPULAB_TRY(validate(p));
  std::unique_ptr<CublasLtMatmul> g(new CublasLtMatmul());
  g->problem_ = p;
  // Row-major D = A B is column-major D^T = B^T A^T: cuBLASLt's "A" is our B (n x k, transposed when
  // it is stored [k, n] row-major... i.e. column-major n x k untransposed), its "B" our A (k x m).
  const cublasComputeType_t compute =
      p.precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = cuda_type(p.dtype);
  GPULAB_CUBLAS_TRY(cublasLtMatmulDescCreate(&g->op_, compute, CUDA_R_32F));
  const cublasOperation_t op_b = p.b_rows_are_columns ? CUBLAS_OP_T : CUBLAS_OP_N, no_trans = CUBLAS_OP_N;
  GPULAB_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
  GPULAB_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  if (p.gelu_tanh && !p.has_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU;
    GPULAB_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  }
  if (p.has_bias) {
    const cublasLtEpilogue_t epilogue = p.gelu_tanh ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    GPULAB_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const cudaDataType_t bias_type = p.bias_float32 ? CUDA_R_32F : type;
    GPULAB_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
    if (p.batch > 1) {  // the same bias for every matrix
      const int64_t zero = 0;
      GPULAB_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(g->op_, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &zero,
                                                       sizeof(zero)));
    }
  }
  // cuBLASLt's A: our B as column-major n x k (rows of [n, k] storage: ld ldb, transposed) or the
  // column-major view of [k, n] storage (n x k, ld ldb).
  if (p.b_rows_are_columns) {
    GPULAB_TRY(make_layout(&g->a_, type, p.k, p.n, p.ldb, p.batch, p.stride_b));
  } else {
    GPULAB_TRY(make_layout(&g->a_, type, p.n, p.k, p.ldb, p.batch, p.stride_b));
  }
  GPULAB_TRY(make_layout(&g->b_, type, p.k, p.m, p.lda, p.batch, p.stride_a));
  GPULAB_TRY(make_layout(&g->d_, type, p.n, p.m, p.ldd, p.batch, p.stride_d));
  if (p.has_c) {
    GPULAB_TRY(make_layout(&g->c_, type, p.n, p.m, p.ldc, p.batch, p.stride_c));
  }
  cublasLtMatrixLayout_t c_layout = p.has_c ? g->c_ : g->d_;

  cublasLtMatmulPreference_t pref = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = static_cast<uint64_t>(max_workspace_bytes);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, g->op_, g->a_, g->b_, c_layout, g->d_, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::unsupported(fmt::format(
        "cuBLASLt: no algorithm for {} {}x{}x{} {} products{} (status {}).", p.batch, p.m, p.n, p.k,
        dtype_name(p.dtype), p.gelu_tanh ? " with a GELU epilogue" : "", static_cast<int>(st)));
  g->algo_ = result.algo;
  g->workspace_bytes_ = static_cast<int64_t>(result.workspaceSize);
  return g;
}

Status CublasLtMatmul::launch(cublasLtHandle_t handle, const void* a, const void* b, const void* bias,
                              const void* c, void* d, void* workspace, int64_t workspace_bytes,
                              cudaStream_t stream) const {
  if (problem_.has_bias)
    GPULAB_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = problem_.alpha, beta = problem_.has_c ? 1.0f : 0.0f;
  const void* c_ptr = problem_.has_c ? c : d;
  GPULAB_CUBLAS_TRY(cublasLtMatmul(handle, op_, &alpha, b, a_, a, b_, &beta, c_ptr, problem_.has_c ? c_ : d_,
                                   d, d_, &algo_, workspace, static_cast<size_t>(workspace_bytes), stream));
  return Status::ok();
}

}  // namespace gpulab::cuda
