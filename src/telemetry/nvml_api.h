// The part of NVML (NVIDIA Management Library) that gpulab uses, declared here and loaded at run
// time with dlopen("libnvidia-ml.so.1"), so that gpulab builds without nvml.h and runs, and says
// why GPU sections are empty, on a machine without the NVIDIA driver.
//
// Types, enum values and signatures follow the public NVML API reference
// (docs.nvidia.com/deploy/nvml-api). Only what gpulab calls is declared. Internal to
// src/telemetry and src/doctor; other code uses telemetry.h.
#pragma once

#include <memory>
#include <string>

#include "gpulab/status.h"

namespace gpulab::telemetry::nvml {

// nvmlReturn_t values used by gpulab.
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorNoData = 21;

struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

// nvmlClockType_t
inline constexpr int kClockGraphics = 0;
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;
// nvmlTemperatureSensors_t
inline constexpr int kTemperatureGpu = 0;
// nvmlPcieUtilCounter_t
inline constexpr int kPcieUtilTxBytes = 0;
inline constexpr int kPcieUtilRxBytes = 1;
// nvmlMemoryErrorType_t
inline constexpr int kMemoryErrorCorrected = 0;
inline constexpr int kMemoryErrorUncorrected = 1;
// nvmlEccCounterType_t
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;
// nvmlPageRetirementCause_t
inline constexpr int kRetiredMultipleSingleBitEcc = 0;
inline constexpr int kRetiredDoubleBitEcc = 1;
// nvmlEnableState_t
inline constexpr int kFeatureDisabled = 0;
inline constexpr int kFeatureEnabled = 1;
// nvmlPstates_t: 0..15, 32 = unknown.
inline constexpr int kPstateUnknown = 32;
// Value NVML puts in nvmlProcessInfo_t::usedGpuMemory when it cannot tell (e.g. Windows WDDM,
// or no permission).
inline constexpr unsigned long long kValueNotAvailable = ~0ULL;

// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs on the PCIe tree.
inline constexpr int kTopologyInternal = 0;     // the same board (multi-GPU card)
inline constexpr int kTopologySingle = 10;      // one PCIe switch
inline constexpr int kTopologyMultiple = 20;    // several PCIe switches, no host bridge
inline constexpr int kTopologyHostbridge = 30;  // one host bridge
inline constexpr int kTopologyNode = 40;        // host bridges of one NUMA node
inline constexpr int kTopologySystem = 50;      // across NUMA nodes (the CPUs' interconnect)
// NVML_NVLINK_MAX_LINKS
inline constexpr unsigned int kNvLinkMaxLinks = 18;

struct PciInfo {  // nvmlPciInfo_t (v3 layout)
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];  // "00000000:3B:00.0"
};

struct Utilization {  // nvmlUtilization_t, percent over the last sample period
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct ProcessInfo {  // nvmlProcessInfo_t as filled by the _v3 process queries
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// Function table. Entries marked optional may be null (older drivers); the rest are required
// for Library::load to succeed.
struct Api {
  Return (*init_v2)();
  Return (*shutdown)();
  const char* (*error_string)(Return);
  Return (*system_get_driver_version)(char*, unsigned int);
  Return (*system_get_nvml_version)(char*, unsigned int);
  Return (*system_get_cuda_driver_version_v2)(int*);                     // optional
  Return (*system_get_process_name)(unsigned int, char*, unsigned int);  // optional
  Return (*device_get_count_v2)(unsigned int*);
  Return (*device_get_handle_by_index_v2)(unsigned int, Device*);
  Return (*device_get_name)(Device, char*, unsigned int);
  Return (*device_get_uuid)(Device, char*, unsigned int);
  Return (*device_get_cuda_compute_capability)(Device, int*, int*);  // optional
  Return (*device_get_utilization_rates)(Device, Utilization*);
  Return (*device_get_memory_info)(Device, Memory*);
  Return (*device_get_compute_running_processes_v3)(Device, unsigned int*, ProcessInfo*);   // optional
  Return (*device_get_graphics_running_processes_v3)(Device, unsigned int*, ProcessInfo*);  // optional
  Return (*device_get_power_usage)(Device, unsigned int*);                                  // milliwatts
  Return (*device_get_enforced_power_limit)(Device, unsigned int*);                         // milliwatts
  Return (*device_get_power_management_default_limit)(Device, unsigned int*);               // milliwatts
  Return (*device_get_power_management_limit_constraints)(Device, unsigned int*,
                                                          unsigned int*);  // mW, optional
  Return (*device_set_power_management_limit)(Device, unsigned int);       // milliwatts, root only, optional
  Return (*device_get_total_energy_consumption)(Device, unsigned long long*);  // millijoules, optional
  Return (*device_get_clock_info)(Device, int, unsigned int*);                 // MHz
  Return (*device_get_max_clock_info)(Device, int, unsigned int*);             // MHz
  // nvmlDeviceGetCurrentClocksEventReasons (driver >= 535), else the older
  // nvmlDeviceGetCurrentClocksThrottleReasons: same signature and bits.
  Return (*device_get_current_clocks_event_reasons)(Device, unsigned long long*);
  Return (*device_get_temperature)(Device, int, unsigned int*);      // degrees C
  Return (*device_get_pcie_throughput)(Device, int, unsigned int*);  // KB/s, optional
  Return (*device_get_curr_pcie_link_generation)(Device, unsigned int*);
  Return (*device_get_max_pcie_link_generation)(Device, unsigned int*);
  Return (*device_get_curr_pcie_link_width)(Device, unsigned int*);
  Return (*device_get_max_pcie_link_width)(Device, unsigned int*);
  Return (*device_get_ecc_mode)(Device, int*, int*);
  Return (*device_get_total_ecc_errors)(Device, int, int, unsigned long long*);
  Return (*device_get_retired_pages)(Device, int, unsigned int*, unsigned long long*);  // optional
  Return (*device_get_remapped_rows)(Device, unsigned int*, unsigned int*, unsigned int*,
                                     unsigned int*);  // optional
  Return (*device_get_performance_state)(Device, int*);
  Return (*device_get_persistence_mode)(Device, int*);
  Return (*device_get_memory_bus_width)(Device, unsigned int*);  // bits, optional
  Return (*device_get_num_gpu_cores)(Device, unsigned int*);     // optional
  // Topology (several GPUs in one host); all optional.
  Return (*device_get_pci_info_v3)(Device, PciInfo*);
  Return (*device_get_topology_common_ancestor)(Device, Device, int*);
  Return (*device_get_cpu_affinity)(Device, unsigned int, unsigned long*);  // cpuSetSize in unsigned longs
  Return (*device_get_nvlink_state)(Device, unsigned int, int*);            // link, nvmlEnableState_t
  Return (*device_get_nvlink_remote_pci_info_v2)(Device, unsigned int, PciInfo*);
  Return (*device_get_numa_node_id)(Device, unsigned int*);
};

// The loaded library, initialized (nvmlInit_v2) for the object's lifetime.
class Library {
 public:
  // dlopen + dlsym + nvmlInit_v2. kUnavailable with the reason (library not found, driver not
  // loaded, driver/library version mismatch) when NVML cannot be used. The library is
  // libnvidia-ml.so.1, or the file $GPULAB_NVML_LIBRARY names (the tests' fake NVML).
  static Result<std::shared_ptr<Library>> load();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const Api& api() const { return api_; }
  // "NVML_ERROR_NOT_SUPPORTED"-style text for a return code.
  std::string error_string(Return r) const;

 private:
  Library(void* handle, const Api& api) : handle_(handle), api_(api) {}
  void* handle_;
  Api api_;
};

}  // namespace gpulab::telemetry::nvml
