// GPULAB_CUDA_TRY / GPULAB_CUDNN_TRY / GPULAB_CUBLAS_TRY: turn a CUDA runtime, cuDNN or cuBLAS
// error into a Status (kDeviceError; kOutOfMemory for allocation failures) that names the call,
// file:line and the library's error name, and return it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "gpulab/status.h"

namespace gpulab::cuda {

Status cuda_status(cudaError_t error, const char* call, const char* file, int line);
Status cudnn_status(cudnnStatus_t error, const char* call, const char* file, int line);
Status cublas_status(cublasStatus_t error, const char* call, const char* file, int line);

}  // namespace gpulab::cuda

#define GPULAB_CUDA_TRY(call)                                                          \
  do {                                                                                 \
    const cudaError_t gpulab_cuda_err_ = (call);                                       \
    if (gpulab_cuda_err_ != cudaSuccess)                                               \
      return ::gpulab::cuda::cuda_status(gpulab_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define GPULAB_CUDNN_TRY(call)                                                           \
  do {                                                                                   \
    const cudnnStatus_t gpulab_cudnn_err_ = (call);                                      \
    if (gpulab_cudnn_err_ != CUDNN_STATUS_SUCCESS)                                       \
      return ::gpulab::cuda::cudnn_status(gpulab_cudnn_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define GPULAB_CUBLAS_TRY(call)                                                            \
  do {                                                                                     \
    const cublasStatus_t gpulab_cublas_err_ = (call);                                      \
    if (gpulab_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                       \
      return ::gpulab::cuda::cublas_status(gpulab_cublas_err_, #call, __FILE__, __LINE__); \
  } while (0)
