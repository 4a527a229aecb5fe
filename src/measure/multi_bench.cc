#include "measure/multi_bench.h"

#include <algorithm>
#include <barrier>
#include <charconv>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/affinity.h"

namespace gpulab::measure {
namespace {

std::string pin(const GpuBenchInput& gpu) {
  if (gpu.cpus.empty()) return "not pinned (NVML gives no CPU affinity)";
  if (Status s = pin_current_thread(gpu.cpus); !s.is_ok()) return "not pinned: " + s.message();
  return fmt::format("CPUs {}{}", format_cpu_list(gpu.cpus),
                     gpu.numa_node ? fmt::format(" (NUMA node {})", *gpu.numa_node) : "");
}

// One GPU's loop on a thread of its own.
struct Worker {
  GpuBenchInput* gpu = nullptr;
  std::string pinning;
  std::optional<Result<BenchResult>> result;
};

}  // namespace

Result<MultiBenchResult> run_multi_bench(const MultiBenchOptions& options, std::vector<GpuBenchInput>& gpus) {
  if (gpus.empty()) return Status::invalid_argument("--gpus: no GPU to measure.");
  GPULAB_TRY(validate(options.bench));
  MultiBenchResult out;

  if (options.single_baseline && gpus.size() > 1) {
    // The first GPU alone, from a thread placed as it will be in the concurrent run.
    std::optional<Result<BenchResult>> single;
    std::thread t([&] {
      pin(gpus.front());
      if (gpus.front().on_thread_start) {
        if (Status s = gpus.front().on_thread_start(); !s.is_ok()) {
          single = s;
          return;
        }
      }
      single = run_bench_loop(options.bench, gpus.front().hooks);
    });
    t.join();
    if (!single->is_ok())
      return single->status().with_context(fmt::format("GPU {} alone", gpus.front().device));
    out.single = std::move(single->value());
  }

  std::vector<Worker> workers(gpus.size());
  // Every loop reaches the barrier after its warm-up; a loop that fails before it drops out, so
  // the others are not left waiting.
  std::barrier start_together(static_cast<std::ptrdiff_t>(gpus.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < gpus.size(); ++i) {
    workers[i].gpu = &gpus[i];
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      w.pinning = pin(*w.gpu);
      bool arrived = false;
      BenchHooks hooks = w.gpu->hooks;
      hooks.before_measure = [&] {
        arrived = true;
        start_together.arrive_and_wait();
      };
      if (w.gpu->on_thread_start) {
        if (Status s = w.gpu->on_thread_start(); !s.is_ok()) {
          w.result = s;
          start_together.arrive_and_drop();
          return;
        }
      }
      w.result = run_bench_loop(options.bench, hooks);
      if (!arrived) start_together.arrive_and_drop();
    });
  }
  for (auto& t : threads) t.join();

  for (Worker& w : workers) {
    if (!w.result->is_ok()) return w.result->status().with_context(fmt::format("GPU {}", w.gpu->device));
    out.gpus.push_back({.device = w.gpu->device,
                        .name = w.gpu->name,
                        .pinning = w.pinning,
                        .bench = std::move(w.result->value())});
  }
  double slowest = out.gpus.front().bench.throughput_ips, fastest = slowest;
  const GpuBenchResult* slow = &out.gpus.front();
  const GpuBenchResult* fast = slow;
  // Every image of every GPU over the longest window (the windows start together; one that ends
  // first leaves its GPU idle until the last ends).
  double images = 0, window_s = 0;
  for (const GpuBenchResult& g : out.gpus) {
    images += static_cast<double>(g.bench.iterations * options.bench.batch);
    window_s = std::max(window_s, g.bench.wall_s);
    if (g.bench.throughput_ips < slowest) slowest = g.bench.throughput_ips, slow = &g;
    if (g.bench.throughput_ips > fastest) fastest = g.bench.throughput_ips, fast = &g;
  }
  out.aggregate_throughput_ips = window_s > 0 ? images / window_s : 0;
  out.balance = fastest > 0 ? slowest / fastest : 1;
  if (out.single && out.single->throughput_ips > 0) {
    out.scaling_efficiency =
        out.aggregate_throughput_ips / (static_cast<double>(out.gpus.size()) * out.single->throughput_ips);
  }
  if (out.balance < options.balance_warning) {
    out.warnings.push_back(
        fmt::format("imbalanced: GPU {} delivers {:.0f}% of GPU {}'s throughput. Check it with `gpulab "
                    "doctor` (link, clocks, "
                    "power limit, temperature) and `gpulab monitor` while this runs.",
                    slow->device, out.balance * 100, fast->device));
  }
  if (out.scaling_efficiency && *out.scaling_efficiency < options.efficiency_warning) {
    out.warnings.push_back(
        fmt::format("scaling efficiency {:.1f}%: the GPUs slow each other down when they run together (a "
                    "shared PCIe switch, "
                    "host threads on the wrong NUMA node, a shared power or cooling budget).",
                    *out.scaling_efficiency * 100));
  }
  return out;
}

Result<std::vector<uint32_t>> parse_gpu_list(std::string_view text, uint32_t count) {
  std::vector<uint32_t> out;
  if (text == "all") {
    for (uint32_t i = 0; i < count; ++i) out.push_back(i);
    if (out.empty()) return Status::unavailable("--gpus all: this machine has no GPU.");
    return out;
  }
  std::set<uint32_t> seen;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    uint32_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      return Status::invalid_argument(
          fmt::format("--gpus: '{}' is not a GPU index. Give all, or indices like 0,2.", item));
    }
    if (v >= count) {
      return Status::invalid_argument(fmt::format("--gpus: GPU {} but this machine has {} GPU{} (0..{}).", v,
                                                  count, count == 1 ? "" : "s", count == 0 ? 0 : count - 1));
    }
    if (!seen.insert(v).second)
      return Status::invalid_argument(fmt::format("--gpus: GPU {} is listed twice.", v));
    out.push_back(v);
  }
  if (out.empty()) return Status::invalid_argument("--gpus: empty. Give all, or indices like 0,2.");
  return out;
}

nlohmann::json to_json(const MultiBenchResult& r, const nlohmann::json& header) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuBenchResult& g : r.gpus) {
    nlohmann::json b = to_json(g.bench);
    gpus.push_back({{"device", g.device}, {"name", g.name}, {"pinning", g.pinning}, {"bench", std::move(b)}});
  }
  nlohmann::json out = header;
  out["schema"] = "gpulab.bench_multi";
  out["schema_version"] = kMultiBenchSchemaVersion;
  out["gpus"] = std::move(gpus);
  out["single"] = r.single ? to_json(*r.single) : nlohmann::json(nullptr);
  out["aggregate_throughput_ips"] = r.aggregate_throughput_ips;
  out["scaling_efficiency"] =
      r.scaling_efficiency ? nlohmann::json(*r.scaling_efficiency) : nlohmann::json(nullptr);
  out["balance"] = r.balance;
  out["warnings"] = r.warnings;
  return out;
}

std::string format_multi_summary(const MultiBenchResult& r) {
  std::string out = fmt::format("{:<4} {:<22} {:>12} {:>14} {:>10} {:>7}  {}\n", "GPU", "name", "img/s",
                                "GPU compute ms", "p99 ms", "CoV", "host thread");
  for (const GpuBenchResult& g : r.gpus) {
    const double* p99 = g.bench.latency_ms.find_percentile(99);
    out += fmt::format("{:<4} {:<22} {:>12.0f} {:>14.3f} {:>10} {:>6.1f}%  {}\n", g.device,
                       g.name.substr(0, 22), g.bench.throughput_ips, g.bench.gpu_compute_ms.median,
                       p99 ? fmt::format("{:.3f}", *p99) : "-", g.bench.gpu_compute_ms.cov * 100, g.pinning);
  }
  out +=
      fmt::format("\nAggregate: {:.0f} img/s on {} GPUs at once", r.aggregate_throughput_ips, r.gpus.size());
  if (r.single && r.scaling_efficiency) {
    out += fmt::format("; GPU {} alone {:.0f} img/s; scaling efficiency {:.1f}% (aggregate / ({} x alone))",
                       r.gpus.front().device, r.single->throughput_ips, *r.scaling_efficiency * 100,
                       r.gpus.size());
  }
  out += fmt::format("; balance {:.1f}% (slowest / fastest GPU)\n", r.balance * 100);
  for (const std::string& w : r.warnings) out += "warning: " + w + "\n";
  return out;
}

}  // namespace gpulab::measure
