// Several GPUs of one host as one sweep target (`gpulab sweep --gpus`): every call goes to each
// GPU's own target at once, each on a host thread pinned to the CPUs NVML names for that GPU, and
// measure() starts their timed windows together (a barrier after every warm-up). A point fits
// when it fits on every GPU; its result pools every GPU's iterations (throughput = the aggregate)
// and last_per_gpu() gives each GPU's own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "sweep/sweep.h"

namespace gpulab::sweep {

struct GpuTargetSlot {
  uint32_t device = 0;
  std::unique_ptr<SweepTarget> target;
  std::vector<int> cpus;  // the feeding thread's CPUs; empty: not pinned
};

class MultiGpuTarget final : public SweepTarget {
 public:
  explicit MultiGpuTarget(std::vector<GpuTargetSlot> slots);

  TargetInfo info() const override;
  Result<PlanFacts> prepare_plan(Precision precision, int64_t batch) override;
  Status prepare_context(int64_t batch) override;
  Result<measure::BenchResult> measure(const measure::BenchOptions& options) override;
  void release() override;
  std::optional<int64_t> device_memory_used_bytes() override;  // summed over the GPUs
  Result<measure::Ceilings> ceilings(Precision precision) override;
  Result<double> h2d_gb_s() override;
  Result<AgreementResult> agreement(Precision precision, const std::filesystem::path& dataset_dir,
                                    int64_t max_images) override;
  std::vector<std::pair<uint32_t, measure::BenchResult>> last_per_gpu() const override { return last_; }

 private:
  // Runs `fn` for every slot at once, each on a pinned thread; the statuses in slot order.
  std::vector<Status> on_each(const std::function<Status(GpuTargetSlot&)>& fn);
  // The first out-of-memory among `statuses` (a GPU that ran out decides), else the first error.
  Status first_error(const std::vector<Status>& statuses) const;

  std::vector<GpuTargetSlot> slots_;
  std::vector<std::pair<uint32_t, measure::BenchResult>> last_;
};

// Several telemetry sources as one (the simulation's per-GPU readings).
class CombinedTelemetry final : public TelemetrySource {
 public:
  explicit CombinedTelemetry(std::vector<TelemetrySource*> sources) : sources_(std::move(sources)) {}
  void start() override;
  std::vector<telemetry::GpuSample> stop() override;

 private:
  std::vector<TelemetrySource*> sources_;
};

}  // namespace gpulab::sweep
