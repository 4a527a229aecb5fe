// One reading of one GPU, and the clock-event (throttle) reasons.
//
// Every field NVML cannot provide on a GPU (not supported, no permission, older driver) is
// nullopt, never zero. Units are in the names. Plain values; copy freely.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpulab::telemetry {

// Bits of nvmlClocksEventReasons (formerly nvmlClocksThrottleReasons), NVML API reference.
namespace clock_event {
inline constexpr std::uint64_t kGpuIdle = 0x1;
inline constexpr std::uint64_t kApplicationsClocksSetting = 0x2;
inline constexpr std::uint64_t kSwPowerCap = 0x4;
inline constexpr std::uint64_t kHwSlowdown = 0x8;
inline constexpr std::uint64_t kSyncBoost = 0x10;
inline constexpr std::uint64_t kSwThermalSlowdown = 0x20;
inline constexpr std::uint64_t kHwThermalSlowdown = 0x40;
inline constexpr std::uint64_t kHwPowerBrakeSlowdown = 0x80;
inline constexpr std::uint64_t kDisplayClockSetting = 0x100;
// Reasons that mean the GPU runs slower than it could under load (idle, application clocks and
// display settings are not performance problems).
inline constexpr std::uint64_t kPerformanceLimiting =
    kSwPowerCap | kHwSlowdown | kSyncBoost | kSwThermalSlowdown | kHwThermalSlowdown | kHwPowerBrakeSlowdown;
}  // namespace clock_event

// Names of the set bits, in bit order: {"gpu_idle", "sw_power_cap"}. Unknown bits are named
// "unknown_0x...". Empty when no bit is set.
std::vector<std::string> decode_clock_event_reasons(std::uint64_t mask);
// Names joined with '|', or "none" when the mask is 0.
std::string clock_event_reasons_string(std::uint64_t mask);

struct ProcessMemory {
  std::uint32_t pid = 0;
  std::string name;                         // executable path; empty when NVML cannot tell
  std::optional<std::uint64_t> used_bytes;  // nullopt when NVML cannot tell
};

struct GpuSample {
  std::int64_t timestamp_ms = 0;  // Unix time, milliseconds
  std::uint32_t index = 0;        // NVML device index
  std::string name;
  std::string uuid;
  std::optional<std::uint32_t> gpu_util_pct;     // % of the last period a kernel ran
  std::optional<std::uint32_t> memory_util_pct;  // % of the last period device memory was read/written
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<double> power_w;                // board power draw
  std::optional<double> power_limit_w;          // enforced limit
  std::optional<double> power_default_limit_w;  // default management limit
  std::optional<std::uint64_t> energy_mj;       // total since driver load, millijoules
  std::optional<std::uint32_t> sm_clock_mhz;
  std::optional<std::uint32_t> memory_clock_mhz;
  std::optional<std::uint32_t> graphics_clock_mhz;
  std::optional<std::uint32_t> sm_clock_max_mhz;
  std::optional<std::uint32_t> memory_clock_max_mhz;
  std::optional<std::uint32_t> graphics_clock_max_mhz;
  std::optional<std::uint64_t> clock_event_reasons;  // clock_event:: bits
  std::optional<std::uint32_t> temperature_c;
  std::optional<std::uint32_t> pcie_tx_kb_s;  // device to host, KB/s (1024 bytes), NVML's ~20 ms window
  std::optional<std::uint32_t> pcie_rx_kb_s;  // host to device, KB/s
  std::optional<std::uint32_t> pcie_gen;
  std::optional<std::uint32_t> pcie_gen_max;
  std::optional<std::uint32_t> pcie_width;
  std::optional<std::uint32_t> pcie_width_max;
  std::optional<bool> ecc_enabled;
  std::optional<std::uint64_t> ecc_corrected_volatile;  // errors since driver load
  std::optional<std::uint64_t> ecc_uncorrected_volatile;
  std::optional<std::uint32_t> retired_pages_sbe;  // pages retired for multiple single-bit errors
  std::optional<std::uint32_t> retired_pages_dbe;  // pages retired for double-bit errors
  std::optional<std::uint32_t> remapped_rows_correctable;
  std::optional<std::uint32_t> remapped_rows_uncorrectable;
  std::optional<bool> remap_pending;                    // a row remap waits for a GPU reset
  std::optional<std::uint32_t> pstate;                  // 0 (max performance) .. 15
  std::optional<std::vector<ProcessMemory>> processes;  // nullopt: not queried or unsupported
};

}  // namespace gpulab::telemetry
