// The GPU half of `gpulab bench` and `gpulab sweep`: builds or loads the engine and drives it
// through the engine-independent bench loop (measure/bench.h), and measures the device's ceilings.
// Part of the measure library only when the build has the CUDA runtime (GPULAB_WITH_CUDA); the CLI
// calls it under GPULAB_HAVE_RUNTIME, after validating every flag.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "measure/bench.h"
#include "measure/multi_bench.h"

namespace gpulab::measure {

class EngineStreams;

// `streams` execution contexts of `engine` for batches up to `batch`, each on its own CUDA stream
// with its device input (filled with fill_bench_input's sequence), logits and events, and with
// `transfers` pinned host copies of both for the iterations to copy: what run_bench_loop drives.
// Allocation failures are kOutOfMemory. Frees everything it holds.
class EngineStreams {
 public:
  static Result<std::unique_ptr<EngineStreams>> create(Engine& engine, int streams, int64_t batch,
                                                       bool transfers);
  ~EngineStreams();
  EngineStreams(const EngineStreams&) = delete;
  EngineStreams& operator=(const EngineStreams&) = delete;

  // The hooks of the bench loop for `options` (batch up to the one given to create, transfers, CUDA
  // graph); valid while this lives.
  BenchHooks hooks(const BenchOptions& options);
  // The first stream's logits after the loop (every iteration computes the same).
  Result<BenchOutput> first_output(int64_t batch);
  // Per-step profile on the first stream's context.
  Result<std::vector<LayerTime>> profile(int64_t batch, int iterations);

 private:
  struct Stream;
  EngineStreams() = default;
  std::vector<std::unique_ptr<Stream>> streams_;
  int64_t per_image_elems_ = 0, classes_ = 0, batch_ = 0;
  bool transfers_ = false;
};

// CUDA runtime, driver, cuDNN and cuBLAS versions and the engine's GPU, into `env`.
void fill_cuda_environment(const EngineInfo& info, BenchEnvironment& env);

// kUnavailable when no GPU is usable, kInvalidArgument for a device ordinal it does not have;
// else makes `device` current.
Status use_cuda_device(int device, std::string_view command);

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
  std::function<std::optional<GpuState>(int device)> read_gpu_state;
};

// Builds or loads the engine on options.device, measures with run_bench_loop (one
// ExecutionContext and stream per options.streams), and fills the CUDA/cuDNN/cuBLAS versions,
// the GPU name, the start/end GPU state, the profile (options.profile) and the ceilings
// (request.measure_ceilings). kUnavailable when no GPU is usable.
Result<BenchResult> run_engine_bench(const BenchOptions& options, const EngineBenchRequest& request);

// One GPU of `gpulab bench --gpus`: its CUDA ordinal and where its feeding thread runs.
struct GpuPlacement {
  int device = 0;
  std::vector<int> cpus;  // from NVML's CPU affinity; empty: not pinned
  std::optional<int> numa_node;
};

// `gpulab bench --gpus`: builds (or loads) the engine on every GPU, one thread per GPU, then
// run_multi_bench: the first GPU alone (options.single_baseline), then all at once.
Result<MultiBenchResult> run_engine_bench_multi(const MultiBenchOptions& options,
                                                const EngineBenchRequest& request,
                                                const std::vector<GpuPlacement>& gpus);

// `gpulab bench --ceilings` without a model: measures only the ceilings of the device.
Result<Ceilings> measure_ceilings(int device, const std::string& precision);

}  // namespace gpulab::measure
