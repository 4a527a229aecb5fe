// Host<->device and device<->device copy bandwidth, the way `gpulab bandwidth` reports it.
//
// Copies run through the CUDA driver API loaded at run time (telemetry/cuda_driver.h), so this
// builds and links without the CUDA toolkit and returns kUnavailable with the reason on a
// machine without a driver. Each point is the median of `repeats` copies timed with CUDA events
// after `warmup` untimed ones. GB/s are 1e9 bytes/s. H2D/D2H count the bytes copied;
// bidirectional counts both directions' bytes over the span of both copies; D2D counts bytes
// read plus bytes written (2x size), as NVIDIA's bandwidthTest does.
// Not thread-safe per call (it makes the device's primary context current on the caller's
// thread); allocates host and device memory up to 2x the largest size.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"

namespace gpulab::measure {

enum class CopyKind { kHostToDevice, kDeviceToHost, kBidirectional, kDeviceToDevice };
enum class HostMemory { kPinned, kPageable, kWriteCombined, kDevice };

std::string_view copy_kind_name(CopyKind kind);     // "h2d", "d2h", "bidir", "d2d"
std::string_view host_memory_name(HostMemory mem);  // "pinned", "pageable", "write-combined", "device"

struct BandwidthOptions {
  int cuda_device = 0;                     // CUDA device ordinal (as CUDA_VISIBLE_DEVICES orders them)
  std::vector<std::uint64_t> sizes_bytes;  // empty: default_sizes()
  int repeats = 20;                        // timed copies per point (median reported)
  int warmup = 3;                          // untimed copies per point
  std::vector<CopyKind> kinds = {CopyKind::kHostToDevice, CopyKind::kDeviceToHost, CopyKind::kBidirectional,
                                 CopyKind::kDeviceToDevice};
  std::vector<HostMemory> host_memory = {HostMemory::kPinned, HostMemory::kPageable,
                                         HostMemory::kWriteCombined};
};

struct BandwidthPoint {
  CopyKind kind = CopyKind::kHostToDevice;
  HostMemory memory = HostMemory::kPinned;
  std::uint64_t size_bytes = 0;
  int repeats = 0;
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  double gb_s = 0;                   // from the median
  std::optional<double> peak_share;  // gb_s / theoretical (PCIe link, or memory for D2D)
};

struct BandwidthReport {
  std::string device_name;
  std::string uuid;
  int cuda_device = 0;
  std::optional<int> pcie_gen;        // highest generation seen during the large H2D copies (NVML)
  std::optional<int> pcie_width;      // lanes
  std::optional<double> pcie_gb_s;    // theoretical per direction for that link
  std::optional<double> memory_gb_s;  // datasheet device memory bandwidth
  std::vector<BandwidthPoint> points;
};

// 4 KiB, 16 KiB, ..., 1 GiB (x4 steps).
std::vector<std::uint64_t> default_sizes();
// "4K,64K,1M,256M,1G" (K/M/G are binary) or plain byte counts. kInvalidArgument on bad input.
Result<std::vector<std::uint64_t>> parse_sizes(std::string_view list);
// "h2d,d2h,bidir,d2d" / "pinned,pageable,write-combined" (also "wc").
Result<std::vector<CopyKind>> parse_copy_kinds(std::string_view list);
Result<std::vector<HostMemory>> parse_host_memory(std::string_view list);

// Runs every (kind, memory, size) point; `on_point` (optional) sees each as it completes.
Result<BandwidthReport> run_bandwidth_test(const BandwidthOptions& options,
                                           const std::function<void(const BandwidthPoint&)>& on_point = {});

// Keeps the PCIe link busy with pinned host-to-device copies for about `duration_ms`, calling
// `poll` every few ms while copies are in flight (doctor samples the link generation there).
Status run_transfer_load(int cuda_device, int duration_ms, const std::function<void()>& poll);

std::string format_table(const BandwidthReport& report);
std::string to_csv(const BandwidthReport& report);
nlohmann::json to_json(const BandwidthReport& report);
// Reads `gpulab bandwidth --json` back (gpulab report): kInvalidFile naming the field that is
// missing or of the wrong type, or a copy / host memory name it does not know. Never throws.
Result<BandwidthReport> bandwidth_from_json(const nlohmann::json& doc);

}  // namespace gpulab::measure
