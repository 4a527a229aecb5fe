// Several GPUs of one host measured at once: each GPU's bench loop (measure/bench.h) on its own
// host thread, pinned to the CPUs NVML names for that GPU (its NUMA node), all timed windows
// started together. Engine-independent like run_bench_loop: the CUDA side provides each GPU's
// hooks (measure/engine_bench.h), the tests provide fake ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"
#include "measure/bench.h"

namespace gpulab::measure {

struct GpuBenchInput {
  uint32_t device = 0;                      // CUDA ordinal (= NVML index)
  std::string name;                         // the GPU's name, for reports
  BenchHooks hooks;                         // its engine's hooks; usable for several loops in turn
  std::vector<int> cpus;                    // the CPUs to pin its thread to; empty: not pinned
  std::optional<int> numa_node;             // for reports
  std::function<Status()> on_thread_start;  // e.g. cudaSetDevice on the new thread; may be empty
};

struct MultiBenchOptions {
  BenchOptions bench;                // streams, batch, durations: the same on every GPU
  bool single_baseline = true;       // first measure the first GPU alone, for the scaling efficiency
  double balance_warning = 0.90;     // warn below this slowest / fastest throughput
  double efficiency_warning = 0.95;  // warn below this aggregate / (N x single)
};

struct GpuBenchResult {
  uint32_t device = 0;
  std::string name;
  std::string pinning;  // "CPUs 0-31 (NUMA node 0)", or why the thread was not pinned
  BenchResult bench;
};

struct MultiBenchResult {
  std::vector<GpuBenchResult> gpus;
  std::optional<BenchResult> single;         // the first GPU alone, before the others
  double aggregate_throughput_ips = 0;       // every GPU's images / the longest timed window
  std::optional<double> scaling_efficiency;  // aggregate / (N x single.throughput_ips)
  double balance = 1;                        // slowest / fastest GPU's throughput
  std::vector<std::string> warnings;
};

// Runs every GPU's loop on its own thread (pinned, on_thread_start called first), a barrier between
// every warm-up and every timed window. kInvalidArgument for no GPUs or invalid options; a GPU's
// error is returned naming the GPU.
Result<MultiBenchResult> run_multi_bench(const MultiBenchOptions& options, std::vector<GpuBenchInput>& gpus);

// "all" -> every index below `count`; "0,2" -> {0, 2} (each below count, no repeats).
// kInvalidArgument naming the bad item.
Result<std::vector<uint32_t>> parse_gpu_list(std::string_view text, uint32_t count);

// JSON schema "gpulab.bench_multi" (docs/metrics.md); environment and model are the caller's.
inline constexpr int kMultiBenchSchemaVersion = 1;
nlohmann::json to_json(const MultiBenchResult& result, const nlohmann::json& header);
std::string format_multi_summary(const MultiBenchResult& result);

}  // namespace gpulab::measure
