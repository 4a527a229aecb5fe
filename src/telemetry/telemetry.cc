#include "telemetry/telemetry.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "telemetry/nvml_api.h"

namespace gpulab::telemetry {
namespace {

using nvml::Device;
using nvml::Return;

Device handle(void* p) {
  return static_cast<Device>(p);
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Calls an NVML getter; the value only when it succeeded. Every failure (not supported, no
// permission, missing entry point) means "unknown", never zero.
template <typename T, typename Fn, typename... Args>
std::optional<T> get(Fn* fn, Device d, Args... args) {
  if (fn == nullptr) return std::nullopt;
  T value{};
  if (fn(d, args..., &value) != nvml::kSuccess) return std::nullopt;
  return value;
}

std::optional<double> milliwatts_to_w(std::optional<unsigned int> mw) {
  if (!mw) return std::nullopt;
  return *mw / 1000.0;
}

std::optional<bool> enabled(std::optional<int> state) {
  if (!state) return std::nullopt;
  return *state == nvml::kFeatureEnabled;
}

void collect_processes(const nvml::Api& api, Device d,
                       decltype(nvml::Api::device_get_compute_running_processes_v3) fn,
                       std::map<std::uint32_t, ProcessMemory>& out, bool& any_ok) {
  if (fn == nullptr) return;
  std::vector<nvml::ProcessInfo> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const Return r = fn(d, &count, infos.data());
    if (r == nvml::kErrorInsufficientSize) {
      infos.resize(count + 16);
      continue;
    }
    if (r != nvml::kSuccess) return;
    any_ok = true;
    for (unsigned int i = 0; i < count; ++i) {
      ProcessMemory& p = out[infos[i].pid];
      p.pid = infos[i].pid;
      if (infos[i].used_gpu_memory != nvml::kValueNotAvailable)
        p.used_bytes = std::max<std::uint64_t>(p.used_bytes.value_or(0), infos[i].used_gpu_memory);
      if (p.name.empty() && api.system_get_process_name != nullptr) {
        char name[256] = {};
        if (api.system_get_process_name(infos[i].pid, name, sizeof(name)) == nvml::kSuccess) p.name = name;
      }
    }
    return;
  }
}

}  // namespace

Result<std::shared_ptr<Telemetry>> Telemetry::open() {
  GPULAB_ASSIGN_OR_RETURN(auto lib, nvml::Library::load());
  std::shared_ptr<Telemetry> t(new Telemetry());
  t->lib_ = lib;
  unsigned int count = 0;
  if (const Return r = lib->api().device_get_count_v2(&count); r != nvml::kSuccess)
    return Status::device_error(
        fmt::format("NVML: nvmlDeviceGetCount failed ({}). Run `gpulab doctor`", lib->error_string(r)));
  for (unsigned int i = 0; i < count; ++i) {
    Device d = nullptr;
    const Return r = lib->api().device_get_handle_by_index_v2(i, &d);
    if (r != nvml::kSuccess)
      return Status::device_error(
          fmt::format("NVML: GPU {} cannot be opened ({}). Check `dmesg` for Xid errors; a GPU that fell "
                      "off the bus needs a reset or reboot",
                      i, lib->error_string(r)));
    t->devices_.push_back(d);
  }
  return t;
}

std::string Telemetry::driver_version() const {
  char buf[96] = {};
  if (lib_->api().system_get_driver_version(buf, sizeof(buf)) != nvml::kSuccess) return "";
  return buf;
}

std::string Telemetry::nvml_version() const {
  char buf[96] = {};
  if (lib_->api().system_get_nvml_version(buf, sizeof(buf)) != nvml::kSuccess) return "";
  return buf;
}

std::optional<int> Telemetry::cuda_driver_version() const {
  if (lib_->api().system_get_cuda_driver_version_v2 == nullptr) return std::nullopt;
  int v = 0;
  if (lib_->api().system_get_cuda_driver_version_v2(&v) != nvml::kSuccess) return std::nullopt;
  return v;
}

Status Telemetry::check_index(std::uint32_t index) const {
  if (index < devices_.size()) return Status::ok();
  return Status::invalid_argument(
      fmt::format("telemetry: GPU index {} out of range ({} GPUs). Pick an index from `gpulab monitor`",
                  index, devices_.size()));
}

Result<DeviceInfo> Telemetry::device_info(std::uint32_t index) const {
  GPULAB_TRY(check_index(index));
  const nvml::Api& api = lib_->api();
  const Device d = handle(devices_[index]);
  DeviceInfo info;
  info.index = index;
  char buf[128] = {};
  if (api.device_get_name(d, buf, sizeof(buf)) == nvml::kSuccess) info.name = buf;
  char uuid[96] = {};
  if (api.device_get_uuid(d, uuid, sizeof(uuid)) == nvml::kSuccess) info.uuid = uuid;
  if (api.device_get_cuda_compute_capability != nullptr) {
    int major = 0, minor = 0;
    if (api.device_get_cuda_compute_capability(d, &major, &minor) == nvml::kSuccess)
      info.cc = ComputeCapability{major, minor};
  }
  if (auto m = get<nvml::Memory>(api.device_get_memory_info, d)) info.memory_total_bytes = m->total;
  if (auto w = get<unsigned int>(api.device_get_memory_bus_width, d))
    info.memory_bus_width_bits = static_cast<int>(*w);
  info.pcie_gen_max = get<unsigned int>(api.device_get_max_pcie_link_generation, d);
  info.pcie_width_max = get<unsigned int>(api.device_get_max_pcie_link_width, d);
  info.persistence_mode = enabled(get<int>(api.device_get_persistence_mode, d));
  if (api.device_get_ecc_mode != nullptr) {
    int current = 0, pending = 0;
    if (api.device_get_ecc_mode(d, &current, &pending) == nvml::kSuccess)
      info.ecc_enabled = current == nvml::kFeatureEnabled;
  }
  info.power_default_limit_w =
      milliwatts_to_w(get<unsigned int>(api.device_get_power_management_default_limit, d));
  std::optional<int> sm_count;
  if (auto cores = get<unsigned int>(api.device_get_num_gpu_cores, d); cores && info.cc) {
    const int per_sm = cuda_cores_per_sm(*info.cc);
    if (per_sm > 0 && *cores % per_sm == 0) sm_count = static_cast<int>(*cores) / per_sm;
  }
  info.facts = make_device_facts({.name = info.name,
                                  .cc = info.cc,
                                  .sm_count = sm_count,
                                  .memory_bytes = info.memory_total_bytes,
                                  .memory_bus_width_bits = info.memory_bus_width_bits});
  return info;
}

Result<GpuSample> Telemetry::sample(std::uint32_t index, const SampleOptions& options) const {
  GPULAB_TRY(check_index(index));
  const nvml::Api& api = lib_->api();
  const Device d = handle(devices_[index]);
  GpuSample s;
  s.timestamp_ms = now_unix_ms();
  s.index = index;
  char buf[128] = {};
  if (const Return r = api.device_get_name(d, buf, sizeof(buf)); r == nvml::kSuccess) {
    s.name = buf;
  } else if (r == nvml::kErrorGpuIsLost) {
    return Status::device_error(
        fmt::format("telemetry: GPU {} is lost (NVML_ERROR_GPU_IS_LOST). Check `dmesg` for Xid errors; the "
                    "GPU needs a reset or a reboot",
                    index));
  }
  char uuid[96] = {};
  if (api.device_get_uuid(d, uuid, sizeof(uuid)) == nvml::kSuccess) s.uuid = uuid;
  if (auto u = get<nvml::Utilization>(api.device_get_utilization_rates, d)) {
    s.gpu_util_pct = u->gpu;
    s.memory_util_pct = u->memory;
  }
  if (auto m = get<nvml::Memory>(api.device_get_memory_info, d)) {
    s.memory_used_bytes = m->used;
    s.memory_total_bytes = m->total;
  }
  s.power_w = milliwatts_to_w(get<unsigned int>(api.device_get_power_usage, d));
  s.power_limit_w = milliwatts_to_w(get<unsigned int>(api.device_get_enforced_power_limit, d));
  s.power_default_limit_w =
      milliwatts_to_w(get<unsigned int>(api.device_get_power_management_default_limit, d));
  s.energy_mj = get<unsigned long long>(api.device_get_total_energy_consumption, d);
  s.sm_clock_mhz = get<unsigned int>(api.device_get_clock_info, d, nvml::kClockSm);
  s.memory_clock_mhz = get<unsigned int>(api.device_get_clock_info, d, nvml::kClockMem);
  s.graphics_clock_mhz = get<unsigned int>(api.device_get_clock_info, d, nvml::kClockGraphics);
  s.sm_clock_max_mhz = get<unsigned int>(api.device_get_max_clock_info, d, nvml::kClockSm);
  s.memory_clock_max_mhz = get<unsigned int>(api.device_get_max_clock_info, d, nvml::kClockMem);
  s.graphics_clock_max_mhz = get<unsigned int>(api.device_get_max_clock_info, d, nvml::kClockGraphics);
  s.clock_event_reasons = get<unsigned long long>(api.device_get_current_clocks_event_reasons, d);
  s.temperature_c = get<unsigned int>(api.device_get_temperature, d, nvml::kTemperatureGpu);
  s.pcie_tx_kb_s = get<unsigned int>(api.device_get_pcie_throughput, d, nvml::kPcieUtilTxBytes);
  s.pcie_rx_kb_s = get<unsigned int>(api.device_get_pcie_throughput, d, nvml::kPcieUtilRxBytes);
  s.pcie_gen = get<unsigned int>(api.device_get_curr_pcie_link_generation, d);
  s.pcie_gen_max = get<unsigned int>(api.device_get_max_pcie_link_generation, d);
  s.pcie_width = get<unsigned int>(api.device_get_curr_pcie_link_width, d);
  s.pcie_width_max = get<unsigned int>(api.device_get_max_pcie_link_width, d);
  if (api.device_get_ecc_mode != nullptr) {
    int current = 0, pending = 0;
    if (api.device_get_ecc_mode(d, &current, &pending) == nvml::kSuccess)
      s.ecc_enabled = current == nvml::kFeatureEnabled;
  }
  if (s.ecc_enabled.value_or(false)) {
    s.ecc_corrected_volatile = get<unsigned long long>(api.device_get_total_ecc_errors, d,
                                                       nvml::kMemoryErrorCorrected, nvml::kVolatileEcc);
    s.ecc_uncorrected_volatile = get<unsigned long long>(api.device_get_total_ecc_errors, d,
                                                         nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc);
  }
  if (api.device_get_retired_pages != nullptr) {
    // With a zero-sized buffer NVML returns the count (SUCCESS when 0, INSUFFICIENT_SIZE when >0).
    for (int cause : {nvml::kRetiredMultipleSingleBitEcc, nvml::kRetiredDoubleBitEcc}) {
      unsigned int count = 0;
      const Return r = api.device_get_retired_pages(d, cause, &count, nullptr);
      if (r == nvml::kSuccess || r == nvml::kErrorInsufficientSize) {
        (cause == nvml::kRetiredDoubleBitEcc ? s.retired_pages_dbe : s.retired_pages_sbe) = count;
      }
    }
  }
  if (api.device_get_remapped_rows != nullptr) {
    unsigned int corr = 0, unc = 0, pending = 0, failed = 0;
    if (api.device_get_remapped_rows(d, &corr, &unc, &pending, &failed) == nvml::kSuccess) {
      s.remapped_rows_correctable = corr;
      s.remapped_rows_uncorrectable = unc;
      s.remap_pending = pending != 0;
    }
  }
  if (auto p = get<int>(api.device_get_performance_state, d); p && *p != nvml::kPstateUnknown)
    s.pstate = static_cast<std::uint32_t>(*p);
  if (options.processes) {
    std::map<std::uint32_t, ProcessMemory> procs;
    bool any_ok = false;
    collect_processes(api, d, api.device_get_compute_running_processes_v3, procs, any_ok);
    collect_processes(api, d, api.device_get_graphics_running_processes_v3, procs, any_ok);
    if (any_ok) {
      s.processes.emplace();
      for (auto& [pid, p] : procs) s.processes->push_back(std::move(p));
    }
  }
  return s;
}

Result<double> Telemetry::power_limit_w(std::uint32_t index) const {
  GPULAB_TRY(check_index(index));
  const auto limit = milliwatts_to_w(
      get<unsigned int>(lib_->api().device_get_enforced_power_limit, handle(devices_[index])));
  if (!limit) return Status::unsupported(fmt::format("NVML: GPU {} does not report its power limit", index));
  return *limit;
}

Result<PowerLimitRange> Telemetry::power_limit_range(std::uint32_t index) const {
  GPULAB_TRY(check_index(index));
  const nvml::Api& api = lib_->api();
  unsigned int min_mw = 0, max_mw = 0;
  if (api.device_get_power_management_limit_constraints == nullptr ||
      api.device_get_power_management_limit_constraints(handle(devices_[index]), &min_mw, &max_mw) !=
          nvml::kSuccess) {
    return Status::unsupported(
        fmt::format("NVML: GPU {} does not report the range its power limit may be set to", index));
  }
  return PowerLimitRange{.min_w = min_mw / 1000.0, .max_w = max_mw / 1000.0};
}

Status Telemetry::set_power_limit_w(std::uint32_t index, double watts) const {
  GPULAB_TRY(check_index(index));
  const nvml::Api& api = lib_->api();
  if (api.device_set_power_management_limit == nullptr) {
    return Status::unavailable(
        "NVML: this driver cannot set power limits (no nvmlDeviceSetPowerManagementLimit)");
  }
  if (auto range = power_limit_range(index);
      range.is_ok() && (watts < range->min_w || watts > range->max_w)) {
    return Status::invalid_argument(
        fmt::format("power limit: {:.0f} W is outside GPU {}'s range {:.0f}-{:.0f} W", watts, index,
                    range->min_w, range->max_w));
  }
  const auto mw = static_cast<unsigned int>(watts * 1000.0 + 0.5);
  const Return r = api.device_set_power_management_limit(handle(devices_[index]), mw);
  if (r == nvml::kSuccess) return Status::ok();
  if (r == nvml::kErrorNoPermission) {
    return Status::unavailable(fmt::format(
        "NVML: setting GPU {}'s power limit needs root ({}). Run as root, or leave the power limit alone",
        index, lib_->error_string(r)));
  }
  if (r == nvml::kErrorInvalidArgument) {
    return Status::invalid_argument(fmt::format("power limit: NVML refused {:.0f} W for GPU {} ({})", watts,
                                                index, lib_->error_string(r)));
  }
  return Status::unavailable(
      fmt::format("NVML: GPU {} cannot have its power limit set ({})", index, lib_->error_string(r)));
}

std::vector<std::string> decode_clock_event_reasons(std::uint64_t mask) {
  static constexpr std::pair<std::uint64_t, const char*> kNames[] = {
      {clock_event::kGpuIdle, "gpu_idle"},
      {clock_event::kApplicationsClocksSetting, "applications_clocks_setting"},
      {clock_event::kSwPowerCap, "sw_power_cap"},
      {clock_event::kHwSlowdown, "hw_slowdown"},
      {clock_event::kSyncBoost, "sync_boost"},
      {clock_event::kSwThermalSlowdown, "sw_thermal_slowdown"},
      {clock_event::kHwThermalSlowdown, "hw_thermal_slowdown"},
      {clock_event::kHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {clock_event::kDisplayClockSetting, "display_clock_setting"},
  };
  std::vector<std::string> names;
  std::uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (mask & bit) names.emplace_back(name);
  }
  for (int b = 0; b < 64; ++b) {
    const std::uint64_t bit = 1ULL << b;
    if ((mask & bit) && !(known & bit)) names.push_back(fmt::format("unknown_{:#x}", bit));
  }
  return names;
}

std::string clock_event_reasons_string(std::uint64_t mask) {
  const auto names = decode_clock_event_reasons(mask);
  if (names.empty()) return "none";
  return fmt::format("{}", fmt::join(names, "|"));
}

}  // namespace gpulab::telemetry
