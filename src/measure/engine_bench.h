// The GPU half of `gpulab bench`: builds or loads the engine and drives it through the
// engine-independent bench loop (measure/bench.h). Compiled only when the build has the CUDA
// runtime (GPULAB_HAVE_RUNTIME); bench.cc calls it after validating every flag.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "measure/bench.h"

namespace gpulab::cli {

struct EngineBenchRequest {
  std::string model_path;          // ONNX model to build (exclusive with plan_path)
  std::string plan_path;           // saved plan to load
  std::string precision = "fp16";  // for model_path: fp32, tf32, fp16, bf16
  // For model_path: the build flags' options; precision, max_batch and device come from above
  // and from the BenchOptions.
  BuildOptions build;
  bool measure_ceilings = false;  // --ceilings: device copy bandwidth and GEMM rate
  // Reads clocks, power and clock-event reasons of a CUDA device through NVML (the CLI
  // provides it when telemetry is built); empty or nullopt: not recorded.
  std::function<std::optional<measure::GpuState>(int device)> read_gpu_state;
};

// Builds or loads the engine on options.device, measures with run_bench_loop (one
// ExecutionContext and stream per options.streams), and fills the CUDA/cuDNN/cuBLAS versions,
// the GPU name, the start/end GPU state, the profile (options.profile) and the ceilings
// (request.measure_ceilings). kUnavailable when no GPU is usable.
Result<measure::BenchResult> run_engine_bench(const measure::BenchOptions& options,
                                              const EngineBenchRequest& request);

// `gpulab bench --ceilings` without a model: measures only the ceilings of the device.
Result<measure::Ceilings> measure_ceilings(int device, const std::string& precision);

}  // namespace gpulab::cli
