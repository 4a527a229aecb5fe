#include "telemetry/nvml_api.h"

#include <dlfcn.h>

#include <cstdlib>

#include <fmt/format.h>

namespace gpulab::telemetry::nvml {
namespace {

template <typename Fn>
bool bind(void* handle, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
  return out != nullptr;
}

}  // namespace

Result<std::shared_ptr<Library>> Library::load() {
  const char* override_path = std::getenv("GPULAB_NVML_LIBRARY");
  const bool overridden = override_path != nullptr && *override_path != '\0';
  void* handle = dlopen(overridden ? override_path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && overridden) {
    const char* err = dlerror();
    return Status::unavailable(fmt::format(
        "NVML: GPULAB_NVML_LIBRARY names '{}', which cannot be loaded ({}). Unset it to use the driver's "
        "libnvidia-ml.so.1",
        override_path, err ? err : "dlopen failed"));
  }
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::unavailable(
        fmt::format("no NVIDIA driver: libnvidia-ml.so.1 not found ({}). Install the NVIDIA driver; in a "
                    "container, start it with the NVIDIA container runtime (docker run --gpus all)",
                    err ? err : "dlopen failed"));
  }
  Api api{};
  const char* missing = nullptr;
  auto need = [&](const char* name, auto*& fn) {
    if (!bind(handle, name, fn) && missing == nullptr) missing = name;
  };
  need("nvmlInit_v2", api.init_v2);
  need("nvmlShutdown", api.shutdown);
  need("nvmlErrorString", api.error_string);
  need("nvmlSystemGetDriverVersion", api.system_get_driver_version);
  need("nvmlSystemGetNVMLVersion", api.system_get_nvml_version);
  need("nvmlDeviceGetCount_v2", api.device_get_count_v2);
  need("nvmlDeviceGetHandleByIndex_v2", api.device_get_handle_by_index_v2);
  need("nvmlDeviceGetName", api.device_get_name);
  need("nvmlDeviceGetUUID", api.device_get_uuid);
  need("nvmlDeviceGetUtilizationRates", api.device_get_utilization_rates);
  need("nvmlDeviceGetMemoryInfo", api.device_get_memory_info);
  need("nvmlDeviceGetPowerUsage", api.device_get_power_usage);
  need("nvmlDeviceGetEnforcedPowerLimit", api.device_get_enforced_power_limit);
  need("nvmlDeviceGetPowerManagementDefaultLimit", api.device_get_power_management_default_limit);
  need("nvmlDeviceGetClockInfo", api.device_get_clock_info);
  need("nvmlDeviceGetMaxClockInfo", api.device_get_max_clock_info);
  need("nvmlDeviceGetTemperature", api.device_get_temperature);
  need("nvmlDeviceGetCurrPcieLinkGeneration", api.device_get_curr_pcie_link_generation);
  need("nvmlDeviceGetMaxPcieLinkGeneration", api.device_get_max_pcie_link_generation);
  need("nvmlDeviceGetCurrPcieLinkWidth", api.device_get_curr_pcie_link_width);
  need("nvmlDeviceGetMaxPcieLinkWidth", api.device_get_max_pcie_link_width);
  need("nvmlDeviceGetEccMode", api.device_get_ecc_mode);
  need("nvmlDeviceGetTotalEccErrors", api.device_get_total_ecc_errors);
  need("nvmlDeviceGetPerformanceState", api.device_get_performance_state);
  need("nvmlDeviceGetPersistenceMode", api.device_get_persistence_mode);
  if (!bind(handle, "nvmlDeviceGetCurrentClocksEventReasons", api.device_get_current_clocks_event_reasons)) {
    need("nvmlDeviceGetCurrentClocksThrottleReasons", api.device_get_current_clocks_event_reasons);
  }
  // Optional: absent from older drivers; the fields they feed are then reported unsupported.
  bind(handle, "nvmlSystemGetCudaDriverVersion_v2", api.system_get_cuda_driver_version_v2);
  bind(handle, "nvmlSystemGetProcessName", api.system_get_process_name);
  bind(handle, "nvmlDeviceGetCudaComputeCapability", api.device_get_cuda_compute_capability);
  bind(handle, "nvmlDeviceGetComputeRunningProcesses_v3", api.device_get_compute_running_processes_v3);
  bind(handle, "nvmlDeviceGetGraphicsRunningProcesses_v3", api.device_get_graphics_running_processes_v3);
  bind(handle, "nvmlDeviceGetTotalEnergyConsumption", api.device_get_total_energy_consumption);
  bind(handle, "nvmlDeviceGetPcieThroughput", api.device_get_pcie_throughput);
  bind(handle, "nvmlDeviceGetRetiredPages", api.device_get_retired_pages);
  bind(handle, "nvmlDeviceGetRemappedRows", api.device_get_remapped_rows);
  bind(handle, "nvmlDeviceGetMemoryBusWidth", api.device_get_memory_bus_width);
  bind(handle, "nvmlDeviceGetNumGpuCores", api.device_get_num_gpu_cores);
  bind(handle, "nvmlDeviceGetPowerManagementLimitConstraints",
       api.device_get_power_management_limit_constraints);
  bind(handle, "nvmlDeviceSetPowerManagementLimit", api.device_set_power_management_limit);
  bind(handle, "nvmlDeviceGetPciInfo_v3", api.device_get_pci_info_v3);
  bind(handle, "nvmlDeviceGetTopologyCommonAncestor", api.device_get_topology_common_ancestor);
  bind(handle, "nvmlDeviceGetCpuAffinity", api.device_get_cpu_affinity);
  bind(handle, "nvmlDeviceGetNvLinkState", api.device_get_nvlink_state);
  bind(handle, "nvmlDeviceGetNvLinkRemotePciInfo_v2", api.device_get_nvlink_remote_pci_info_v2);
  bind(handle, "nvmlDeviceGetNumaNodeId", api.device_get_numa_node_id);
  if (missing != nullptr) {
    dlclose(handle);
    return Status::unavailable(fmt::format(
        "NVML: libnvidia-ml.so.1 lacks {} (driver too old). Install an NVIDIA driver >= 470", missing));
  }
  const Return r = api.init_v2();
  if (r != kSuccess) {
    const std::string text = api.error_string ? api.error_string(r) : "unknown error";
    dlclose(handle);
    if (r == kErrorLibRmVersionMismatch) {
      return Status::unavailable(
          fmt::format("NVML: driver/library version mismatch (nvmlInit: {}): the loaded kernel module is "
                      "older than libnvidia-ml. Reboot (or reload the nvidia modules) after a driver upgrade",
                      text));
    }
    if (r == kErrorDriverNotLoaded) {
      return Status::unavailable(
          fmt::format("no NVIDIA driver: the nvidia kernel module is not loaded (nvmlInit: {}). Load it "
                      "(sudo modprobe nvidia) or reinstall the driver; see `gpulab doctor`",
                      text));
    }
    return Status::unavailable(
        fmt::format("NVML: nvmlInit failed ({}, code {}). Run `gpulab doctor`", text, r));
  }
  return std::shared_ptr<Library>(new Library(handle, api));
}

Library::~Library() {
  api_.shutdown();
  dlclose(handle_);
}

std::string Library::error_string(Return r) const {
  const char* s = api_.error_string(r);
  return s ? s : fmt::format("NVML error {}", r);
}

}  // namespace gpulab::telemetry::nvml
