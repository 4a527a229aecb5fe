// The sweep's telemetry and power-limit axis over NVML (the real library, or the tests' fake
// through GPULAB_NVML_LIBRARY).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "sweep/sweep.h"
#include "telemetry/sampler.h"
#include "telemetry/telemetry.h"

namespace gpulab::sweep {

// telemetry::Sampler on one GPU (with per-process memory), restarted for every point.
class NvmlTelemetrySource final : public TelemetrySource {
 public:
  static Result<std::unique_ptr<NvmlTelemetrySource>> create(std::shared_ptr<const telemetry::Telemetry> nvml,
                                                             std::vector<uint32_t> devices, int period_ms);
  void start() override;
  std::vector<telemetry::GpuSample> stop() override;

 private:
  explicit NvmlTelemetrySource(std::unique_ptr<telemetry::Sampler> sampler) : sampler_(std::move(sampler)) {}
  std::unique_ptr<telemetry::Sampler> sampler_;
};

class NvmlPowerLimitControl final : public PowerLimitControl {
 public:
  NvmlPowerLimitControl(std::shared_ptr<const telemetry::Telemetry> nvml, uint32_t device)
      : nvml_(std::move(nvml)), device_(device) {}
  Result<double> current_w() override { return nvml_->power_limit_w(device_); }
  Status set_w(double watts) override { return nvml_->set_power_limit_w(device_, watts); }

 private:
  std::shared_ptr<const telemetry::Telemetry> nvml_;
  uint32_t device_;
};

// Remembers the power limit in force when it is made and sets it back in restore() (idempotent,
// thread-safe: the interrupt watcher may call it while the sweep runs) and in its destructor.
class PowerLimitRestore {
 public:
  static Result<std::unique_ptr<PowerLimitRestore>> remember(PowerLimitControl& control);
  ~PowerLimitRestore();
  Status restore();
  double original_w() const { return original_w_; }

 private:
  PowerLimitRestore(PowerLimitControl& control, double original_w)
      : control_(control), original_w_(original_w) {}
  PowerLimitControl& control_;
  double original_w_;
  std::mutex mutex_;
  bool restored_ = false;
};

}  // namespace gpulab::sweep
