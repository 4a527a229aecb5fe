// The topology of four fake GPUs (tests/support/fake_nvml.cc, loaded through GPULAB_NVML_LIBRARY in
// this process): NVLink pairs, PCIe paths, CPU affinity and NUMA nodes, as doctor and bench read them.
#include "telemetry/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "telemetry/telemetry.h"

namespace gpulab::telemetry {
namespace {

namespace fs = std::filesystem;

TEST(Topology, FourFakeGpus) {
  const fs::path scenario =
      fs::temp_directory_path() / ("gpulab-topology-" + std::to_string(::getpid()) + ".json");
  std::ofstream(scenario) << R"({"devices": [
    {"cpu_affinity": [0, 1], "numa_node": 0, "nvlinks": {"1": 4}, "topology": {"1": 30, "2": 50, "3": 50}},
    {"cpu_affinity": [0, 1], "numa_node": 0, "nvlinks": {"0": 4}, "topology": {"0": 30, "2": 50, "3": 50}},
    {"cpu_affinity": [2, 3], "numa_node": 1, "topology": {"0": 50, "1": 50, "3": 20}},
    {"cpu_affinity": [2, 3], "topology": {"0": 50, "1": 50, "2": 20}, "pci_bus_id": "00000000:C1:00.0"}]})";
  ::setenv("GPULAB_NVML_LIBRARY", GPULAB_FAKE_NVML, 1);
  ::setenv("GPULAB_FAKE_NVML_SCENARIO", scenario.c_str(), 1);
  auto nvml = Telemetry::open();
  ASSERT_TRUE(nvml.is_ok()) << nvml.status().to_string();
  // A fake /sys: node 1 holds CPUs 2-3, so GPU 3 (no NVML NUMA node) is placed there too.
  const fs::path sys = fs::temp_directory_path() / ("gpulab-topology-sys-" + std::to_string(::getpid()));
  fs::create_directories(sys / "devices/system/node/node1");
  std::ofstream(sys / "devices/system/node/node1/cpulist") << "2-3\n";
  auto topo = read_topology(**nvml, sys.string());
  ASSERT_TRUE(topo.is_ok()) << topo.status().to_string();
  ASSERT_EQ(topo->gpus.size(), 4u);
  EXPECT_EQ(link_name(topo->links[0][1]), "NV4");
  EXPECT_EQ(link_name(topo->links[1][0]), "NV4");
  EXPECT_EQ(link_name(topo->links[0][2]), "SYS");
  EXPECT_EQ(link_name(topo->links[2][3]), "PXB");
  EXPECT_EQ(link_name(topo->links[3][3]), "X");
  EXPECT_EQ(topo->gpus[2].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(topo->gpus[0].numa_node, 0);
  EXPECT_EQ(topo->gpus[3].numa_node, 1);  // from the CPU lists, NVML did not say
  EXPECT_EQ(topo->gpus[3].pci_bus_id, "00000000:C1:00.0");
  const std::string matrix = format_topology(*topo);
  EXPECT_NE(matrix.find("GPU0       X   NV4   SYS   SYS  0-1               0"), std::string::npos) << matrix;
  const nlohmann::json doc = to_json(*topo);
  EXPECT_EQ(doc["links"][2][3], "PXB");
  EXPECT_EQ(doc["gpus"][2]["cpus"], "2-3");
  fs::remove_all(sys);
  fs::remove(scenario);
}

}  // namespace
}  // namespace gpulab::telemetry
