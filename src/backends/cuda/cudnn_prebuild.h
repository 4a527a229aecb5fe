// Builds cuDNN execution plans ahead of a tactic search, several at once on worker threads, each
// worker with its own cuDNN handle (cuDNN lets one thread at a time use a handle). A runtime-compiled
// engine configuration takes about half a second to build the first time on a machine (ResNet-18's
// INT8 layers on an H100, bench/results/2026-12-07-deaa762) and a few hundredths after that, in this
// process or a later one: cuDNN keeps what it compiled. The search then builds the same
// configurations one by one, as before, and finds them compiled; what it times is unchanged.
#pragma once

#include <cudnn.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/worker_pool.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

class CudnnPrebuild {
 public:
  // Workers for `device` (the CUDA device the caller uses): GPULAB_CUDNN_BUILD_THREADS when set (0
  // turns prebuilding off), else one per CPU the process may use, at most 8.
  explicit CudnnPrebuild(int device);
  ~CudnnPrebuild();  // waits for the builds, then destroys the workers' handles
  CudnnPrebuild(const CudnnPrebuild&) = delete;
  CudnnPrebuild& operator=(const CudnnPrebuild&) = delete;

  bool enabled() const { return pool_.threads() > 0; }
  int threads() const { return pool_.threads(); }
  // Runs `build(handle)` on a worker, with that worker's handle (made on first use). What it built
  // is dropped when it returns: only cuDNN's compiled kernels are kept. Nothing when !enabled().
  void submit(std::function<Status(cudnnHandle_t)> build);
  // Waits for every build submitted; the failures' messages since the last wait() (a configuration
  // cuDNN rejects fails here as it will in the search).
  std::vector<std::string> wait();

  // The thread count GPULAB_CUDNN_BUILD_THREADS asks for (`allowed_cpus`: the CPUs the process may
  // use): its value, clamped to [0, 64]; unset or not a number: min(allowed_cpus, 8).
  static int threads_for(const char* env_value, int allowed_cpus);

 private:
  int device_;
  std::vector<cudnnHandle_t> handles_;  // per worker; each touched by its worker only
  std::mutex failures_mutex_;
  std::vector<std::string> failures_;
  WorkerPool pool_;  // last: destroyed (joined) before the handles
};

}  // namespace gpulab::cuda
