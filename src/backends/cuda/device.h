// The current CUDA device and the library versions a plan depends on; small RAII owners of
// device memory, streams, events and library handles.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gpulab/status.h"
#include "plan/plan.h"

namespace gpulab::cuda {

// Selects `device` and reads its name, compute capability and the CUDA runtime, cuDNN and
// cuBLASLt versions. kUnavailable when there is no usable device.
Result<PlanTarget> current_target(int device);

// Device memory, freed on destruction. Moves only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates `bytes` (at least 256-byte aligned); kOutOfMemory naming `what` on failure.
  static Result<DeviceBuffer> allocate(size_t bytes, const std::string& what);
  void reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// cuDNN and cuBLASLt handles bound to one stream.
class LibraryHandles {
 public:
  LibraryHandles() = default;
  ~LibraryHandles();
  LibraryHandles(const LibraryHandles&) = delete;
  LibraryHandles& operator=(const LibraryHandles&) = delete;
  Status init();
  Status set_stream(cudaStream_t stream);
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }

 private:
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace gpulab::cuda
