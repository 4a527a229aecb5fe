#include "backends/cuda/device.h"

#include <fmt/format.h>

#include <cstring>

#include "backends/cuda/cuda_check.h"

namespace gpulab::cuda {

Status cuda_status(cudaError_t error, const char* call, const char* file, int line) {
  // A failed call also leaves its error as the thread's last error; unless cleared, the next
  // kernel launch check (cudaGetLastError) reports it as that kernel's failure. A sweep point
  // that ran out of memory in cudaMalloc made the next point's first launch fail that way. Sticky
  // errors are not cleared by this; they are reported again by every later call anyway.
  (void)cudaGetLastError();
  const std::string message = fmt::format("{}:{}: {} failed: {} ({})", file, line, call,
                                          cudaGetErrorName(error), cudaGetErrorString(error));
  if (error == cudaErrorMemoryAllocation)
    return Status::out_of_memory(message + ". Use a smaller --max-batch or free GPU memory.");
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver)
    return Status::unavailable(message + ". Check the driver with `gpulab doctor`.");
  return Status::device_error(message + ".");
}

Status cudnn_status(cudnnStatus_t error, const char* call, const char* file, int line) {
  if (error == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      error == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return Status::out_of_memory(
        fmt::format("{}:{}: {} failed: {} (cuDNN status {}). Free memory or use a smaller "
                    "batch.",
                    file, line, call, cudnnGetErrorString(error), static_cast<int>(error)));
  }
  return Status::device_error(fmt::format("{}:{}: {} failed: {} (cuDNN status {}).", file, line, call,
                                          cudnnGetErrorString(error), static_cast<int>(error)));
}

Status cublas_status(cublasStatus_t error, const char* call, const char* file, int line) {
  const std::string message =
      fmt::format("{}:{}: {} failed: cuBLAS status {}", file, line, call, static_cast<int>(error));
  if (error == CUBLAS_STATUS_ALLOC_FAILED) return Status::out_of_memory(message + ". Free GPU memory.");
  return Status::device_error(message + ".");
}

Result<PlanTarget> current_target(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return Status::unavailable(
        fmt::format("CUDA: no usable GPU ({}). Check the driver with `gpulab doctor`, or use "
                    "--device cpu.",
                    err == cudaSuccess ? "0 devices" : cudaGetErrorString(err)));
  if (device < 0 || device >= count)
    return Status::invalid_argument(
        fmt::format("CUDA: device {} does not exist ({} present). Use 0..{}.", device, count, count - 1));
  GPULAB_CUDA_TRY(cudaSetDevice(device));
  cudaDeviceProp prop{};
  GPULAB_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  PlanTarget t;
  t.gpu_name = prop.name;
  t.compute_capability = prop.major * 10 + prop.minor;
  GPULAB_CUDA_TRY(cudaRuntimeGetVersion(&t.cuda_runtime_version));
  t.cudnn_version = static_cast<int>(cudnnGetVersion());
  t.cublaslt_version = static_cast<int>(cublasLtGetVersion());
  return t;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, const std::string& what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t err = cudaMalloc(&b.ptr_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    b.ptr_ = nullptr;
    return Status::out_of_memory(
        fmt::format("CUDA: cannot allocate {:.1f} MiB for {} ({}). Use a smaller batch or "
                    "free GPU memory.",
                    bytes / 1048576.0, what, cudaGetErrorString(err)));
  }
  b.bytes_ = bytes;
  return b;
}

void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

LibraryHandles::~LibraryHandles() {
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
}

Status LibraryHandles::init() {
  if (!cudnn_) GPULAB_CUDNN_TRY(cudnnCreate(&cudnn_));
  if (!cublaslt_) GPULAB_CUBLAS_TRY(cublasLtCreate(&cublaslt_));
  return Status::ok();
}

Status LibraryHandles::set_stream(cudaStream_t stream) {
  if (stream_ == stream && stream != nullptr) return Status::ok();
  GPULAB_CUDNN_TRY(cudnnSetStream(cudnn_, stream));
  stream_ = stream;
  return Status::ok();
}

}  // namespace gpulab::cuda
