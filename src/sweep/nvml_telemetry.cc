#include "sweep/nvml_telemetry.h"

#include <cstdio>

#include <fmt/format.h>

namespace gpulab::sweep {

Result<std::unique_ptr<NvmlTelemetrySource>> NvmlTelemetrySource::create(
    std::shared_ptr<const telemetry::Telemetry> nvml, std::vector<uint32_t> devices, int period_ms) {
  GPULAB_ASSIGN_OR_RETURN(
      auto sampler,
      telemetry::Sampler::create(std::move(nvml),
                                 {.period_ms = period_ms, .devices = std::move(devices), .processes = true}));
  return std::unique_ptr<NvmlTelemetrySource>(new NvmlTelemetrySource(std::move(sampler)));
}

void NvmlTelemetrySource::start() {
  sampler_->take_samples();  // drop what an earlier window left
  sampler_->start();
}

std::vector<telemetry::GpuSample> NvmlTelemetrySource::stop() {
  sampler_->stop();
  return sampler_->take_samples();
}

Result<std::unique_ptr<PowerLimitRestore>> PowerLimitRestore::remember(PowerLimitControl& control) {
  GPULAB_ASSIGN_OR_RETURN(const double original, control.current_w());
  return std::unique_ptr<PowerLimitRestore>(new PowerLimitRestore(control, original));
}

PowerLimitRestore::~PowerLimitRestore() {
  if (Status s = restore(); !s.is_ok()) std::fprintf(stderr, "gpulab: %s\n", s.to_string().c_str());
}

Status PowerLimitRestore::restore() {
  std::lock_guard lock(mutex_);
  if (restored_) return Status::ok();
  restored_ = true;
  return control_.set_w(original_w_)
      .with_context(fmt::format("restoring the power limit to {:.0f} W (set it with `nvidia-smi -pl {:.0f}`)",
                                original_w_, original_w_));
}

}  // namespace gpulab::sweep
