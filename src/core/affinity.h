// CPU sets: parsing the kernel's CPU lists and pinning a thread to a set (a GPU's feeding thread to
// the CPUs of the GPU's NUMA node).
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

// "0-3,8,10-11" (as /sys/devices/system/node/node0/cpulist writes it) -> {0, 1, 2, 3, 8, 10, 11}.
// kInvalidArgument naming the bad part. Whitespace around items and a trailing newline are allowed.
Result<std::vector<int>> parse_cpu_list(std::string_view text);
// {0, 1, 2, 3, 8} -> "0-3,8".
std::string format_cpu_list(std::span<const int> cpus);

// The NUMA node whose CPU list holds every CPU of `cpus` (read from
// <sys_root>/devices/system/node/node*/cpulist), or nullopt (no such node, no NUMA information).
std::optional<int> numa_node_of(std::span<const int> cpus, const std::filesystem::path& sys_root = "/sys");

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

// Pins the calling thread to the CPUs of `cpus` it is allowed to use. kUnavailable when none of
// them is (the process runs elsewhere: a container's cpuset), naming both sets.
Status pin_current_thread(std::span<const int> cpus);

}  // namespace gpulab
