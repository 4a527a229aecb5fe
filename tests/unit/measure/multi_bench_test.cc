// Several GPUs measured at once, with fake hooks: the timed windows start together after every
// warm-up, the aggregate, the scaling efficiency and the balance, and errors naming the GPU.
#include "measure/multi_bench.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/affinity.h"

namespace gpulab::measure {
namespace {

using Clock = std::chrono::steady_clock;

// A fake GPU: each inference takes `compute_ms` of device time, reported at once; the host spends
// `host_ms` per enqueue (a slower GPU is one whose host side sleeps longer); the warm-up's first
// enqueue sleeps `first_ms` (a slow start).
struct FakeGpu {
  double compute_ms = 1;
  double host_ms = 0;
  double first_ms = 0;
  std::atomic<int> calls{0};
  std::atomic<int> in_flight{0};
  std::mutex mutex;
  std::vector<Clock::time_point> enqueued;  // when each enqueue returned

  BenchHooks hooks() {
    BenchHooks h;
    h.enqueue = [this](int) -> Status {
      const int n = calls++;
      const double sleep_ms = (n == 0 ? first_ms : 0) + host_ms;
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
      ++in_flight;
      std::lock_guard lock(mutex);
      enqueued.push_back(Clock::now());
      return Status::ok();
    };
    h.wait = [this](int) -> Result<DeviceTimes> {
      if (in_flight-- <= 0) return Status::internal("wait without enqueue");
      return DeviceTimes{.compute_ms = compute_ms};
    };
    return h;
  }
};

MultiBenchOptions options() {
  MultiBenchOptions o;
  o.bench.batch = 8;
  o.bench.warmup_ms = 0;
  o.bench.min_duration_s = 0.05;
  o.bench.include_transfers = false;
  return o;
}

TEST(MultiBench, TimedWindowsStartTogetherAfterEveryWarmUp) {
  FakeGpu a, b{.first_ms = 80};  // b's warm-up (one inference: warmup_ms is 0) takes 80 ms longer
  std::vector<GpuBenchInput> gpus(2);
  gpus[0].hooks = a.hooks();
  gpus[1].hooks = b.hooks();
  gpus[1].device = 1;
  MultiBenchOptions o = options();
  o.single_baseline = false;
  auto r = run_multi_bench(o, gpus);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->gpus.size(), 2u);
  // a's first timed enqueue (its second call) waited for the end of b's warm-up (b's first call).
  ASSERT_GE(a.enqueued.size(), 2u);
  ASSERT_GE(b.enqueued.size(), 2u);
  EXPECT_GE(a.enqueued[1], b.enqueued[0]);
  EXPECT_GE(r->gpus[0].bench.iterations, 10);
  EXPECT_EQ(r->gpus[1].device, 1u);
  const double images = static_cast<double>((r->gpus[0].bench.iterations + r->gpus[1].bench.iterations) * 8);
  EXPECT_DOUBLE_EQ(r->aggregate_throughput_ips,
                   images / std::max(r->gpus[0].bench.wall_s, r->gpus[1].bench.wall_s));
}

TEST(MultiBench, EfficiencyAndBalanceWithWarnings) {
  FakeGpu fast{.host_ms = 0.5}, slow{.host_ms = 1.0};
  std::vector<GpuBenchInput> gpus(2);
  gpus[0].hooks = fast.hooks();
  gpus[1].hooks = slow.hooks();
  gpus[1].device = 1;
  auto r = run_multi_bench(options(), gpus);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r->single.has_value());  // GPU 0 alone first
  ASSERT_TRUE(r->scaling_efficiency.has_value());
  EXPECT_NEAR(*r->scaling_efficiency, r->aggregate_throughput_ips / (2 * r->single->throughput_ips), 1e-9);
  // The slow GPU runs at about half the rate: below the 90% balance threshold, named.
  EXPECT_LT(r->balance, 0.8);
  ASSERT_FALSE(r->warnings.empty());
  EXPECT_NE(r->warnings[0].find("imbalanced: GPU 1 delivers"), std::string::npos) << r->warnings[0];
  const std::string table = format_multi_summary(*r);
  EXPECT_NE(table.find("Aggregate:"), std::string::npos);
  EXPECT_NE(table.find("scaling efficiency"), std::string::npos);
  const nlohmann::json doc = to_json(*r, {{"model", "m.onnx"}});
  EXPECT_EQ(doc["schema"], "gpulab.bench_multi");
  EXPECT_EQ(doc["gpus"].size(), 2u);
  EXPECT_EQ(doc["model"], "m.onnx");
  EXPECT_FALSE(doc["scaling_efficiency"].is_null());
}

TEST(MultiBench, AFailingGpuIsNamedAndTheOthersAreNotLeftWaiting) {
  FakeGpu ok;
  std::vector<GpuBenchInput> gpus(3);
  for (uint32_t i = 0; i < 3; ++i) {
    gpus[i].device = i;
    gpus[i].hooks = ok.hooks();
  }
  // GPU 1 fails in its warm-up, GPU 2 before it starts: the barrier must not hang.
  gpus[1].hooks.enqueue = [](int) { return Status::device_error("illegal address"); };
  gpus[2].on_thread_start = [] { return Status::unavailable("no such device"); };
  MultiBenchOptions o = options();
  o.single_baseline = false;
  auto r = run_multi_bench(o, gpus);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("GPU 1"), std::string::npos) << r.status().message();
}

TEST(MultiBench, PinsEachThreadToItsCpus) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  FakeGpu g;
  std::vector<GpuBenchInput> gpus(2);
  gpus[0].hooks = g.hooks();
  gpus[0].cpus = {allowed.front()};
  gpus[0].numa_node = 0;
  FakeGpu h;
  gpus[1].hooks = h.hooks();
  gpus[1].cpus = {1023};  // a CPU this 2-core machine does not have
  MultiBenchOptions o = options();
  o.single_baseline = false;
  auto r = run_multi_bench(o, gpus);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->gpus[0].pinning, fmt::format("CPUs {} (NUMA node 0)", allowed.front()));
  EXPECT_NE(r->gpus[1].pinning.find("not pinned: CPU affinity: none of CPUs 1023"), std::string::npos)
      << r->gpus[1].pinning;
}

TEST(MultiBench, ParsesGpuLists) {
  EXPECT_EQ(*parse_gpu_list("all", 3), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(*parse_gpu_list("2,0", 3), (std::vector<uint32_t>{2, 0}));
  EXPECT_NE(parse_gpu_list("0,3", 3).status().message().find("GPU 3 but this machine has 3 GPUs"),
            std::string::npos);
  EXPECT_NE(parse_gpu_list("1,1", 3).status().message().find("listed twice"), std::string::npos);
  EXPECT_NE(parse_gpu_list("x", 3).status().message().find("'x' is not a GPU index"), std::string::npos);
  EXPECT_EQ(parse_gpu_list("all", 0).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpulab::measure
