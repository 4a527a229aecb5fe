#include "core/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "core/file_io.h"

namespace gpulab {
namespace {

constexpr int kMaxCpus = CPU_SETSIZE;

Result<int> parse_cpu(std::string_view text, std::string_view item) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value >= kMaxCpus) {
    return Status::invalid_argument(
        fmt::format("CPU list: '{}' is not a CPU number or range (0-{})", item, kMaxCpus - 1));
  }
  return value;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::set<int> cpus;
  text = trim(text);
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    const size_t dash = item.find('-');
    GPULAB_ASSIGN_OR_RETURN(const int first, parse_cpu(item.substr(0, dash), item));
    int last = first;
    if (dash != std::string_view::npos) {
      GPULAB_ASSIGN_OR_RETURN(last, parse_cpu(item.substr(dash + 1), item));
    }
    if (last < first)
      return Status::invalid_argument(fmt::format("CPU list: '{}' is a range backwards", item));
    for (int c = first; c <= last; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(std::span<const int> cpus) {
  std::vector<int> sorted(cpus.begin(), cpus.end());
  std::sort(sorted.begin(), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    out += out.empty() ? "" : ",";
    out += j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    i = j + 1;
  }
  return out;
}

std::optional<int> numa_node_of(std::span<const int> cpus, const std::filesystem::path& sys_root) {
  if (cpus.empty()) return std::nullopt;
  const std::filesystem::path nodes = sys_root / "devices/system/node";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(nodes, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    int node = -1;
    const auto [end, err] = std::from_chars(name.data() + 4, name.data() + name.size(), node);
    if (err != std::errc() || end != name.data() + name.size()) continue;
    auto text = read_file_text(entry.path() / "cpulist");
    if (!text.is_ok()) continue;
    auto list = parse_cpu_list(*text);
    if (!list.is_ok()) continue;
    const bool all = std::all_of(cpus.begin(), cpus.end(),
                                 [&](int c) { return std::binary_search(list->begin(), list->end(), c); });
    if (all) return node;
  }
  return std::nullopt;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < kMaxCpus; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

Status pin_current_thread(std::span<const int> cpus) {
  const std::vector<int> allowed = allowed_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  int usable = 0;
  for (int c : cpus) {
    if (c >= 0 && c < kMaxCpus && std::binary_search(allowed.begin(), allowed.end(), c)) {
      CPU_SET(c, &set);
      ++usable;
    }
  }
  if (usable == 0) {
    return Status::unavailable(
        fmt::format("CPU affinity: none of CPUs {} is allowed to this process (it may use {})",
                    format_cpu_list(cpus), format_cpu_list(allowed)));
  }
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); rc != 0) {
    return Status::unavailable(fmt::format("CPU affinity: pthread_setaffinity_np failed (error {})", rc));
  }
  return Status::ok();
}

}  // namespace gpulab
