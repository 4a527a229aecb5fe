// Row-major matrix products through cuBLASLt, for the plan's kLinear and kMatMul steps:
//   D[i] = epilogue(alpha * A[i] B[i] + bias) + C[i]       for i in [0, batch)
// A [m, k] and D [m, n] row-major with leading dimensions lda/ldd (elements between rows); B [k, n]
// row-major (ldb), or given as [n, k] rows (b_rows_are_columns: a layer's weight [out, in], as cuBLASLt
// reads it transposed); matrices stride_* elements apart (0: the same for every i). bias [n] per
// column of D (cuBLASLt's BIAS epilogue; GELU_BIAS, or GELU without a bias, with gelu_tanh:
// cuBLASLt's GELU, the tanh form);
// C (a residual) added with beta = 1, laid out like D with its own ldc/stride_c. Compute in FP32
// (TF32 tensor cores for Precision::kTf32), storage in `dtype`. create() asks the heuristic for its
// first algorithm at this shape (may allocate); launch() never allocates or synchronizes.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "gpulab/engine.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

struct MatmulProblem {
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  bool b_rows_are_columns = false;
  bool has_bias = false;
  bool bias_float32 = false;  // bias stored as float32 (else `dtype`)
  bool gelu_tanh = false;     // epilogue GELU (tanh form) after the bias
  bool has_c = false;
  float alpha = 1.0f;
  DataType dtype = DataType::kFloat32;
  Precision precision = Precision::kFp32;
};
// Ok, or kInvalidArgument naming the first field that does not fit (sizes < 1, leading dims
// smaller than a row, a float32 bias in a float32 problem, a GELU epilogue with a 16-bit bias ...).
Status validate(const MatmulProblem& p);

class CublasLtMatmul {
 public:
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  static Result<std::unique_ptr<CublasLtMatmul>> create(cublasLtHandle_t handle, const MatmulProblem& problem,
                                                        int64_t max_workspace_bytes);
  // Pointers to the first element of A, B, bias (or null), C (or null) and D.
  Status launch(cublasLtHandle_t handle, const void* a, const void* b, const void* bias, const void* c,
                void* d, void* workspace, int64_t workspace_bytes, cudaStream_t stream) const;
  int64_t workspace_bytes() const { return workspace_bytes_; }
  const MatmulProblem& problem() const { return problem_; }

 private:
  CublasLtMatmul() = default;
  MatmulProblem problem_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  int64_t workspace_bytes_ = 0;
};

}  // namespace gpulab::cuda
