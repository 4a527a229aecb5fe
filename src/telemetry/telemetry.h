// NVML telemetry: device discovery, one-shot samples and static device information.
//
// NVML is loaded at run time (nvml_api.h); on a machine without the driver Telemetry::open()
// returns kUnavailable with the reason ("no NVIDIA driver: libnvidia-ml.so.1 not found ...").
// A Telemetry object is thread-safe (NVML is); share it with std::shared_ptr.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpulab/status.h"
#include "telemetry/device_facts.h"
#include "telemetry/sample.h"

namespace gpulab::telemetry {

namespace nvml {
class Library;
}

// What does not change while a process runs.
struct DeviceInfo {
  std::uint32_t index = 0;
  std::string name;
  std::string uuid;
  std::optional<ComputeCapability> cc;
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<int> memory_bus_width_bits;
  std::optional<std::uint32_t> pcie_gen_max;
  std::optional<std::uint32_t> pcie_width_max;
  std::optional<bool> persistence_mode;
  std::optional<bool> ecc_enabled;
  std::optional<double> power_default_limit_w;
  DeviceFacts facts;
};

// The range the power management limit may be set to (nvmlDeviceGetPowerManagementLimitConstraints).
struct PowerLimitRange {
  double min_w = 0;
  double max_w = 0;
};

struct SampleOptions {
  bool processes = true;  // per-process memory (two extra NVML calls)
};

class Telemetry {
 public:
  static Result<std::shared_ptr<Telemetry>> open();

  std::string driver_version() const;              // "550.54.14"; "" when unknown
  std::string nvml_version() const;                // "12.550.54.14"
  std::optional<int> cuda_driver_version() const;  // 12040 for CUDA 12.4
  std::uint32_t device_count() const { return static_cast<std::uint32_t>(devices_.size()); }

  Result<DeviceInfo> device_info(std::uint32_t index) const;
  // One reading. kInvalidArgument for a bad index, kDeviceError when the GPU is lost.
  Result<GpuSample> sample(std::uint32_t index, const SampleOptions& options = {}) const;

  // The enforced power limit now, in watts; kUnsupported when NVML cannot tell.
  Result<double> power_limit_w(std::uint32_t index) const;
  // kUnsupported when the driver does not say.
  Result<PowerLimitRange> power_limit_range(std::uint32_t index) const;
  // Sets the power management limit (nvmlDeviceSetPowerManagementLimit). It lasts until changed
  // or the driver reloads, also after this process ends: callers restore what they change.
  // kInvalidArgument outside power_limit_range; kUnavailable without root (NVML's
  // NO_PERMISSION) or where the GPU does not allow it, naming the reason.
  Status set_power_limit_w(std::uint32_t index, double watts) const;

  // The NVML library and device handles, for readers in this folder (topology.cc).
  const nvml::Library& library() const { return *lib_; }
  void* device_handle(std::uint32_t index) const { return devices_[index]; }

 private:
  // kInvalidArgument naming the index and the GPU count when `index` is out of range.
  Status check_index(std::uint32_t index) const;
  Telemetry() = default;
  std::shared_ptr<nvml::Library> lib_;
  std::vector<void*> devices_;  // nvml::Device handles
};

}  // namespace gpulab::telemetry
