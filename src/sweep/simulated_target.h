// A simulated GPU for the sweep: times, out-of-memory and telemetry computed from a scenario file,
// behind the same SweepTarget and TelemetrySource interfaces as the CUDA engine and NVML. It lets
// the search, the verdicts, the recommendation and the output run for real on machines without a
// GPU (the tests, and `gpulab sweep --simulate FILE` as a demonstration). Nothing it reports is a
// measurement of any hardware.
//
// The model, per precision p at batch b (see docs/metrics.md, "Simulated sweeps"):
//   GPU time at full clock  t = launch_ms + b x per_image_ms
//   power demand            idle_power_w + watts_per_tflops x (flops_per_image x b / t)
//   above the power limit   the clock falls to (limit - idle) / (demand - idle) of its maximum,
//                           only the per-image part of t slows, power = limit, and every sample
//                           carries sw_power_cap
//   from thermal_from_batch the clock falls by another 10%, hw_thermal_slowdown in half of the
//                           samples, 88 C
//   device memory           baseline + weights (plan) + b x mib_per_image (context); beyond
//                           memory_mib the step named by oom_stage fails with out-of-memory
//   with transfers          H2D = b x input bytes / h2d_gb_s, D2H = b x classes x 4 bytes / h2d_gb_s
//   iterations              enough for min_duration_s, each GPU time x (1 + jitter x u), u from a
//                           fixed LCG in [-1, 1), so every run gives the same numbers
// Scenario JSON (every key optional, defaults in SimulatedScenario):
//   {"gpu_name": "...", "memory_mib": 4096, "baseline_used_mib": 500, "h2d_gb_s": 25,
//    "power_limit_w": 700, "idle_power_w": 80, "watts_per_tflops": 1.5, "sm_clock_max_mhz": 1980,
//    "thermal_from_batch": 512, "pcie": {"gen": 5, "gen_max": 5, "width": 16, "width_max": 16},
//    "model": {"flops_per_image": 3.6e9, "bytes_per_image": 2e7, "param_bytes": 2.3e7,
//              "input_bytes_per_image": 602112, "classes": 1000},
//    "precisions": {"fp16": {"launch_ms": 0.15, "per_image_ms": 0.007, "enqueue_ms": 0.01,
//                            "host_gap_ms": 0, "tflops_ceiling": 660, "memory_gb_s": 4000,
//                            "weights_mib": 23, "mib_per_image": 3, "oom_stage": "context",
//                            "agreement": 0.998, "jitter": 0.01}, ...},
//    "leak_mib_per_oom": 0, "point_delay_ms": 0}
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "sweep/sweep.h"

namespace gpulab::sweep {

struct SimulatedPrecision {
  double launch_ms = 0.05;      // GPU time of any inference, whatever its batch
  double per_image_ms = 0.01;   // GPU time per image at the maximum clock
  double enqueue_ms = 0.01;     // host time to submit one inference
  double host_gap_ms = 0;       // host time between inferences (the GPU idles)
  double tflops_ceiling = 100;  // what ceilings() reports
  double memory_gb_s = 3000;
  double weights_mib = 50;   // held from prepare_plan to release
  double mib_per_image = 2;  // held from prepare_context to release
  OomStage oom_stage = OomStage::kContext;
  double agreement = 1.0;  // top-1 agreement with FP32 that agreement() reports
  double jitter = 0.01;
};

struct SimulatedScenario {
  std::string gpu_name = "Simulated GPU";
  double memory_mib = 4096;
  double baseline_used_mib = 500;  // device memory in use before the sweep
  double h2d_gb_s = 25;
  double power_limit_w = 700;
  double idle_power_w = 80;
  double watts_per_tflops = 1.5;
  double sm_clock_max_mhz = 1980;
  std::optional<int64_t> thermal_from_batch;
  int pcie_gen = 4, pcie_gen_max = 4, pcie_width = 16, pcie_width_max = 16;
  double flops_per_image = 3.6e9;
  double bytes_per_image = 2e7;
  int64_t param_bytes = 23'000'000;
  int64_t input_bytes_per_image = 3 * 224 * 224 * 4;
  int64_t classes = 1000;
  double leak_mib_per_oom = 0;  // device memory an OOM leaves behind (to show the before/after record)
  double sample_period_ms = 50;
  double point_delay_ms = 0;  // real time each measure() takes (to test interrupting a sweep)
  std::map<Precision, SimulatedPrecision> precisions;
};

// kInvalidFile naming the file and the key for a malformed scenario; kNotFound for a missing file.
Result<SimulatedScenario> load_scenario(const std::filesystem::path& path);
// `count` simulated GPUs (`--gpus`): the scenario, with its "gpus" list's i-th object (when there is
// one) merged into it for GPU i (JSON merge patch), e.g. "gpus": [{}, {"power_limit_w": 500}].
Result<std::vector<SimulatedScenario>> load_scenarios(const std::filesystem::path& path, size_t count);
Result<SimulatedScenario> parse_scenario(const nlohmann::json& doc);

class SimulatedTarget : public SweepTarget, public TelemetrySource {
 public:
  SimulatedTarget(SimulatedScenario scenario, std::string description);

  // The power limit in force, read when each point runs (the CLI passes NVML's enforced limit, so
  // that the power-limit axis and the fake NVML drive the simulation). Unset: the scenario's.
  void set_power_limit_source(std::function<std::optional<double>()> source) {
    power_limit_ = std::move(source);
  }
  // The NVML index its telemetry readings carry (a simulated GPU among several).
  void set_device_index(uint32_t index) { device_index_ = index; }
  void set_before_measure(std::function<void()> fn) override { before_measure_ = std::move(fn); }

  TargetInfo info() const override;
  Result<PlanFacts> prepare_plan(Precision precision, int64_t batch) override;
  Status prepare_context(int64_t batch) override;
  Result<measure::BenchResult> measure(const measure::BenchOptions& options) override;
  void release() override;
  std::optional<int64_t> device_memory_used_bytes() override;
  Result<measure::Ceilings> ceilings(Precision precision) override;
  Result<double> h2d_gb_s() override;
  Result<AgreementResult> agreement(Precision precision, const std::filesystem::path& dataset_dir,
                                    int64_t max_images) override;

  void start() override;
  std::vector<telemetry::GpuSample> stop() override;

 private:
  struct Point {  // what the last measure() computed, for the telemetry
    int64_t batch = 0;
    double wall_s = 0;
    int64_t end_unix_ms = 0;
    double power_w = 0;
    double clock_ratio = 1;
    double busy_share = 1;
    bool capped = false;
    bool thermal = false;
    double rx_kb_s = 0;
    double tx_kb_s = 0;
  };
  const SimulatedPrecision& current() const;
  double used_mib() const;
  double power_limit_w() const;

  SimulatedScenario scenario_;
  std::string description_;
  std::function<std::optional<double>()> power_limit_;
  std::function<void()> before_measure_;
  uint32_t device_index_ = 0;
  std::optional<Precision> precision_;
  double plan_mib_ = 0, context_mib_ = 0, leaked_mib_ = 0;
  int64_t context_batch_ = 0;
  uint32_t lcg_ = 12345;
  double energy_mj_ = 0;
  std::optional<Point> last_;
  bool window_open_ = false;
};

}  // namespace gpulab::sweep
