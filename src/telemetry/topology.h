// How the GPUs of one host connect, and which CPUs feed each: what `nvidia-smi topo -m` shows, read
// through NVML (common PCIe ancestor, NVLink peers, CPU affinity), for doctor and for pinning each
// GPU's feeding thread to its NUMA node in multi-GPU bench and sweep.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"

namespace gpulab::telemetry {

class Telemetry;

// The path between two GPUs, named as nvidia-smi names it.
enum class GpuPath {
  kSelf,     // "X"
  kNvLink,   // "NV<n>": n NVLinks between them
  kBoard,    // "PIX" on one board (a multi-GPU card)
  kPix,      // "PIX": at most one PCIe switch
  kPxb,      // "PXB": several PCIe switches, no host bridge
  kPhb,      // "PHB": one PCIe host bridge (a CPU)
  kNode,     // "NODE": host bridges within one NUMA node
  kSys,      // "SYS": across NUMA nodes
  kUnknown,  // NVML did not say
};

struct GpuLink {
  GpuPath path = GpuPath::kUnknown;
  int nvlinks = 0;  // active NVLinks to the other GPU (path kNvLink when > 0)
};
// "X", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "?".
std::string link_name(const GpuLink& link);

struct GpuPlace {
  std::uint32_t index = 0;
  std::string name;
  std::string pci_bus_id;        // "00000000:3B:00.0"; "" when NVML does not say
  std::vector<int> cpus;         // the CPUs NVML names as ideal for this GPU (its NUMA node's)
  std::optional<int> numa_node;  // NVML's, else the node whose CPU list holds `cpus`
  std::optional<std::uint32_t> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  std::optional<std::uint32_t> sm_clock_max_mhz;
  std::optional<double> power_limit_w;
};

struct Topology {
  std::vector<GpuPlace> gpus;
  std::vector<std::vector<GpuLink>> links;  // links[i][j], i and j indices into gpus
};

// Reads every GPU's place and every pair's link. kUnavailable/kDeviceError as Telemetry's calls.
// `sys_root` is where /sys is (tests use a fake tree).
Result<Topology> read_topology(const Telemetry& telemetry, const std::string& sys_root = "/sys");

// The matrix as `nvidia-smi topo -m` prints it, with each GPU's CPU affinity and NUMA node.
std::string format_topology(const Topology& topology);
// {"gpus": [{"index", "name", "pci_bus_id", "cpus": "0-31", "numa_node", "pcie_gen", ...}],
//  "links": [["X", "NV18"], ["NV18", "X"]]}
nlohmann::json to_json(const Topology& topology);

}  // namespace gpulab::telemetry
