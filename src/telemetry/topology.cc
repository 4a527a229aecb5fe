#include "telemetry/topology.h"

#include <fmt/format.h>

#include "core/affinity.h"
#include "telemetry/nvml_api.h"
#include "telemetry/telemetry.h"

namespace gpulab::telemetry {
namespace {

using nvml::Device;

Device handle(const Telemetry& t, std::uint32_t index) {
  return static_cast<Device>(t.device_handle(index));
}

std::string bus_id(const nvml::Api& api, Device d) {
  if (api.device_get_pci_info_v3 == nullptr) return "";
  nvml::PciInfo pci{};
  if (api.device_get_pci_info_v3(d, &pci) != nvml::kSuccess) return "";
  pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
  return pci.bus_id;
}

std::vector<int> cpu_affinity(const nvml::Api& api, Device d) {
  std::vector<int> cpus;
  if (api.device_get_cpu_affinity == nullptr) return cpus;
  constexpr unsigned int kWords = 16;  // 1,024 CPUs
  unsigned long words[kWords] = {};
  if (api.device_get_cpu_affinity(d, kWords, words) != nvml::kSuccess) return cpus;
  constexpr int kBits = static_cast<int>(sizeof(unsigned long) * 8);
  for (unsigned int w = 0; w < kWords; ++w) {
    for (int b = 0; b < kBits; ++b) {
      if (words[w] & (1UL << b)) cpus.push_back(static_cast<int>(w) * kBits + b);
    }
  }
  return cpus;
}

// Active NVLinks of `d`, by the PCI bus id of the device at the other end.
std::vector<std::string> nvlink_peers(const nvml::Api& api, Device d) {
  std::vector<std::string> peers;
  if (api.device_get_nvlink_state == nullptr || api.device_get_nvlink_remote_pci_info_v2 == nullptr)
    return peers;
  for (unsigned int link = 0; link < nvml::kNvLinkMaxLinks; ++link) {
    int active = 0;
    if (api.device_get_nvlink_state(d, link, &active) != nvml::kSuccess || active != nvml::kFeatureEnabled)
      continue;
    nvml::PciInfo pci{};
    if (api.device_get_nvlink_remote_pci_info_v2(d, link, &pci) != nvml::kSuccess) continue;
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    peers.emplace_back(pci.bus_id);
  }
  return peers;
}

GpuPath path_of_level(int level) {
  switch (level) {
    case nvml::kTopologyInternal: return GpuPath::kBoard;
    case nvml::kTopologySingle: return GpuPath::kPix;
    case nvml::kTopologyMultiple: return GpuPath::kPxb;
    case nvml::kTopologyHostbridge: return GpuPath::kPhb;
    case nvml::kTopologyNode: return GpuPath::kNode;
    case nvml::kTopologySystem: return GpuPath::kSys;
    default: return GpuPath::kUnknown;
  }
}

}  // namespace

std::string link_name(const GpuLink& link) {
  switch (link.path) {
    case GpuPath::kSelf: return "X";
    case GpuPath::kNvLink: return fmt::format("NV{}", link.nvlinks);
    case GpuPath::kBoard:
    case GpuPath::kPix: return "PIX";
    case GpuPath::kPxb: return "PXB";
    case GpuPath::kPhb: return "PHB";
    case GpuPath::kNode: return "NODE";
    case GpuPath::kSys: return "SYS";
    case GpuPath::kUnknown: return "?";
  }
  return "?";
}

Result<Topology> read_topology(const Telemetry& t, const std::string& sys_root) {
  const nvml::Api& api = t.library().api();
  Topology topo;
  std::vector<std::vector<std::string>> peers;
  for (std::uint32_t i = 0; i < t.device_count(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(const DeviceInfo info, t.device_info(i));
    GPULAB_ASSIGN_OR_RETURN(const GpuSample sample, t.sample(i, {.processes = false}));
    const Device d = handle(t, i);
    GpuPlace place{.index = i, .name = info.name, .pci_bus_id = bus_id(api, d), .cpus = cpu_affinity(api, d)};
    unsigned int node = 0;
    if (api.device_get_numa_node_id != nullptr && api.device_get_numa_node_id(d, &node) == nvml::kSuccess) {
      place.numa_node = static_cast<int>(node);
    } else {
      place.numa_node = numa_node_of(place.cpus, sys_root);
    }
    place.pcie_gen = sample.pcie_gen;
    place.pcie_gen_max = info.pcie_gen_max;
    place.pcie_width = sample.pcie_width;
    place.pcie_width_max = info.pcie_width_max;
    place.sm_clock_max_mhz = sample.sm_clock_max_mhz;
    place.power_limit_w = sample.power_limit_w;
    topo.gpus.push_back(std::move(place));
    peers.push_back(nvlink_peers(api, d));
  }
  const size_t n = topo.gpus.size();
  topo.links.assign(n, std::vector<GpuLink>(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      GpuLink& link = topo.links[i][j];
      if (i == j) {
        link.path = GpuPath::kSelf;
        continue;
      }
      for (const std::string& peer : peers[i])
        link.nvlinks += !peer.empty() && peer == topo.gpus[j].pci_bus_id;
      if (link.nvlinks > 0) {
        link.path = GpuPath::kNvLink;
        continue;
      }
      int level = -1;
      if (api.device_get_topology_common_ancestor != nullptr &&
          api.device_get_topology_common_ancestor(handle(t, static_cast<std::uint32_t>(i)),
                                                  handle(t, static_cast<std::uint32_t>(j)),
                                                  &level) == nvml::kSuccess) {
        link.path = path_of_level(level);
      }
    }
  }
  return topo;
}

std::string format_topology(const Topology& topo) {
  std::string out = "      ";
  for (const GpuPlace& g : topo.gpus) out += fmt::format(" {:>5}", fmt::format("GPU{}", g.index));
  out += "  CPU affinity      NUMA\n";
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const GpuPlace& g = topo.gpus[i];
    out += fmt::format("{:<6}", fmt::format("GPU{}", g.index));
    for (const GpuLink& l : topo.links[i]) out += fmt::format(" {:>5}", link_name(l));
    out += fmt::format("  {:<17} {}\n", g.cpus.empty() ? "?" : format_cpu_list(g.cpus),
                       g.numa_node ? std::to_string(*g.numa_node) : "?");
  }
  out +=
      "X self; NV<n> n NVLinks; PIX one PCIe switch; PXB several; PHB a host bridge; NODE host bridges of "
      "one "
      "NUMA node; SYS across NUMA nodes\n";
  return out;
}

nlohmann::json to_json(const Topology& topo) {
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuPlace& g : topo.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"pci_bus_id", g.pci_bus_id},
                    {"cpus", format_cpu_list(g.cpus)},
                    {"numa_node", opt(g.numa_node)},
                    {"pcie_gen", opt(g.pcie_gen)},
                    {"pcie_gen_max", opt(g.pcie_gen_max)},
                    {"pcie_width", opt(g.pcie_width)},
                    {"pcie_width_max", opt(g.pcie_width_max)},
                    {"sm_clock_max_mhz", opt(g.sm_clock_max_mhz)},
                    {"power_limit_w", opt(g.power_limit_w)}});
  }
  nlohmann::json links = nlohmann::json::array();
  for (const auto& row : topo.links) {
    nlohmann::json r = nlohmann::json::array();
    for (const GpuLink& l : row) r.push_back(link_name(l));
    links.push_back(std::move(r));
  }
  return {{"gpus", std::move(gpus)}, {"links", std::move(links)}};
}

}  // namespace gpulab::telemetry
