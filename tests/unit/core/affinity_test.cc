// CPU lists, the NUMA node of a CPU set (from a fake /sys tree) and pinning a thread.
#include "core/affinity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace gpulab {
namespace {

namespace fs = std::filesystem;

TEST(CpuList, ParsesTheKernelsFormat) {
  EXPECT_EQ(*parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*parse_cpu_list(" 5 "), (std::vector<int>{5}));
  EXPECT_TRUE(parse_cpu_list("")->empty());
  EXPECT_FALSE(parse_cpu_list("3-1").is_ok());
  EXPECT_FALSE(parse_cpu_list("a").is_ok());
  EXPECT_FALSE(parse_cpu_list("1-").is_ok());
  EXPECT_FALSE(parse_cpu_list("99999").is_ok());
  EXPECT_EQ(format_cpu_list(std::vector<int>{8, 0, 1, 2, 3, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list(std::vector<int>{}), "");
}

TEST(CpuList, FindsTheNumaNodeOfACpuSet) {
  const fs::path sys = fs::temp_directory_path() / ("gpulab-sys-" + std::to_string(::getpid()));
  for (auto [node, cpus] : {std::pair{0, "0-3"}, {1, "4-7"}}) {
    fs::create_directories(sys / "devices/system/node" / ("node" + std::to_string(node)));
    std::ofstream(sys / "devices/system/node" / ("node" + std::to_string(node)) / "cpulist") << cpus << "\n";
  }
  EXPECT_EQ(numa_node_of(std::vector<int>{4, 5, 6, 7}, sys), 1);
  EXPECT_EQ(numa_node_of(std::vector<int>{0, 1}, sys), 0);
  EXPECT_EQ(numa_node_of(std::vector<int>{3, 4}, sys), std::nullopt);  // spans two nodes
  EXPECT_EQ(numa_node_of(std::vector<int>{}, sys), std::nullopt);
  EXPECT_EQ(numa_node_of(std::vector<int>{0}, sys / "missing"), std::nullopt);
  fs::remove_all(sys);
}

TEST(CpuList, PinsAThreadToAllowedCpusOnly) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  std::thread t([&] {
    EXPECT_TRUE(pin_current_thread(std::vector<int>{allowed.back()}).is_ok());
    EXPECT_EQ(allowed_cpus(), std::vector<int>{allowed.back()});
    const Status none = pin_current_thread(std::vector<int>{1023});
    EXPECT_EQ(none.code(), StatusCode::kUnavailable);
    EXPECT_NE(none.message().find("none of CPUs 1023"), std::string::npos) << none.message();
  });
  t.join();
}

}  // namespace
}  // namespace gpulab
