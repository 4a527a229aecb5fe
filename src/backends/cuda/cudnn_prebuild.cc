#include "backends/cuda/cudnn_prebuild.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/affinity.h"

namespace gpulab::cuda {

int CudnnPrebuild::threads_for(const char* env_value, int allowed_cpus) {
  if (env_value && *env_value) {
    int n = 0;
    const char* end = env_value + std::strlen(env_value);
    if (const auto [p, ec] = std::from_chars(env_value, end, n); ec == std::errc() && p == end)
      return std::clamp(n, 0, 64);
  }
  return std::clamp(allowed_cpus, 1, 8);
}

CudnnPrebuild::CudnnPrebuild(int device)
    : device_(device),
      handles_(static_cast<size_t>(
          threads_for(std::getenv("GPULAB_CUDNN_BUILD_THREADS"), static_cast<int>(allowed_cpus().size())))),
      pool_(static_cast<int>(handles_.size())) {}

CudnnPrebuild::~CudnnPrebuild() {
  pool_.wait();
  for (cudnnHandle_t h : handles_)
    if (h) cudnnDestroy(h);
}

void CudnnPrebuild::submit(std::function<Status(cudnnHandle_t)> build) {
  if (!enabled()) return;
  pool_.submit([this, build = std::move(build)](int worker) {
    cudnnHandle_t& handle = handles_[static_cast<size_t>(worker)];
    std::string failure;
    if (!handle) {
      if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
        failure = fmt::format("cudaSetDevice({}): {}", device_, cudaGetErrorString(e));
      else if (const cudnnStatus_t s = cudnnCreate(&handle); s != CUDNN_STATUS_SUCCESS) {
        handle = nullptr;
        failure = fmt::format("cudnnCreate: {}", cudnnGetErrorString(s));
      }
    }
    if (handle) {
      const Status built = build(handle);
      if (!built.is_ok()) failure = std::string(built.message());
    }
    if (!failure.empty()) {
      std::lock_guard lock(failures_mutex_);
      failures_.push_back(std::move(failure));
    }
  });
}

std::vector<std::string> CudnnPrebuild::wait() {
  pool_.wait();
  std::lock_guard lock(failures_mutex_);
  return std::exchange(failures_, {});
}

}  // namespace gpulab::cuda
