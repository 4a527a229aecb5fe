// Each verdict rule on hand-made measurements, their order, the thresholds' overrides, and the
// aggregation of telemetry readings over a point's window.
#include "sweep/verdict.h"

#include <gtest/gtest.h>

#include "sweep/sweep.h"

namespace gpulab::sweep {
namespace {

// A point that is busy on the GPU, at 60% of the compute ceiling and 20% of the bandwidth.
VerdictInputs busy() {
  VerdictInputs in;
  in.batch = 256;
  in.rates.compute_share = 0.6;
  in.rates.achieved_tflops = 396;
  in.rates.memory_share = 0.2;
  in.rates.achieved_gb_s = 850;
  in.rates.host_idle_share = 0.01;
  in.rates.enqueue_ratio = 0.01;
  in.compute_ceiling_tflops = 660;
  in.memory_ceiling_gb_s = 4270;
  in.median_compute_ms = 1.9;
  in.median_latency_ms = 1.9;
  in.median_enqueue_ms = 0.02;
  in.throughput_ips = 133000;
  in.compute_throughput_ips = 134700;
  in.sm_clock_mean_mhz = 1980;
  in.sm_clock_max_mhz = 1980;
  return in;
}

std::vector<VerdictKind> kinds(const std::vector<Verdict>& verdicts) {
  std::vector<VerdictKind> out;
  for (const auto& v : verdicts) out.push_back(v.kind);
  return out;
}

TEST(Verdict, ComputeBoundWithItsShare) {
  const auto v = judge_point(busy(), {});
  ASSERT_EQ(kinds(v), (std::vector{VerdictKind::kComputeBound}));
  EXPECT_EQ(v[0].evidence, "60% of the 660 TFLOP/s compute ceiling (396.0 TFLOP/s achieved)");
  EXPECT_DOUBLE_EQ(v[0].values.at("compute_share"), 0.6);
}

TEST(Verdict, MemoryLaunchAndKernelBound) {
  VerdictInputs mem = busy();
  mem.rates.compute_share = 0.3;
  mem.rates.memory_share = 0.7;
  mem.rates.achieved_gb_s = 2989;
  EXPECT_EQ(kinds(judge_point(mem, {})), (std::vector{VerdictKind::kMemoryBound}));

  VerdictInputs tiny = busy();
  tiny.rates.compute_share = 0.03;
  tiny.rates.memory_share = 0.05;
  const auto launch = judge_point(tiny, {});
  ASSERT_EQ(kinds(launch), (std::vector{VerdictKind::kLaunchBound}));
  EXPECT_NE(launch[0].evidence.find("3% of the compute ceiling and 5% of the memory bandwidth"),
            std::string::npos);

  // As far from both ceilings but 2 s per batch (FP32 ResNet-18 at batch 1024 on cuDNN's heuristic
  // choice, an H100 sweep): slow kernels, not launches.
  VerdictInputs slow = tiny;
  slow.batch = 1024;
  slow.median_compute_ms = 2039;
  slow.median_latency_ms = 2039;
  EXPECT_EQ(kinds(judge_point(slow, {})), (std::vector{VerdictKind::kKernelBound}));
  VerdictThresholds patient;
  patient.launch_ms = 5000;
  EXPECT_EQ(kinds(judge_point(slow, patient)), (std::vector{VerdictKind::kLaunchBound}));

  VerdictInputs middle = busy();
  middle.rates.compute_share = 0.4;
  middle.rates.memory_share = 0.1;
  EXPECT_EQ(kinds(judge_point(middle, {})), (std::vector{VerdictKind::kKernelBound}));

  // Without ceilings, nothing about compute or memory is claimed.
  VerdictInputs unknown = busy();
  unknown.rates.compute_share.reset();
  unknown.rates.memory_share.reset();
  EXPECT_TRUE(judge_point(unknown, {}).empty());
}

TEST(Verdict, PowerCapNeedsTheReasonAndALowerClock) {
  VerdictInputs in = busy();
  in.reason_shares = {{"sw_power_cap", 0.85}};
  in.power_mean_w = 699;
  in.power_limit_w = 700;
  // The reason alone, at the full clock, is not a cap that limits.
  EXPECT_EQ(kinds(judge_point(in, {})), (std::vector{VerdictKind::kComputeBound}));
  in.sm_clock_mean_mhz = 1650;
  const auto v = judge_point(in, {});
  ASSERT_EQ(kinds(v), (std::vector{VerdictKind::kPowerCapped, VerdictKind::kComputeBound}));
  EXPECT_EQ(
      v[0].evidence,
      "sw_power_cap in 85% of samples; SM clock 1650 of 1980 MHz (83%); power 699 W of the 700 W limit");
  // Below the share threshold: not capped.
  in.reason_shares = {{"sw_power_cap", 0.1}};
  EXPECT_EQ(kinds(judge_point(in, {})), (std::vector{VerdictKind::kComputeBound}));
}

TEST(Verdict, HostThermalAndPcieComeFirst) {
  VerdictInputs in = busy();
  in.rates.host_idle_share = 0.35;
  in.reason_shares = {{"hw_thermal_slowdown", 0.5}};
  in.temperature_max_c = 91;
  in.rates.h2d_ratio = 1.4;
  in.median_h2d_ms = 2.66;
  in.rates.pcie_rx_gb_s = 52;
  in.rates.pcie_link_share = 0.94;
  in.h2d_ceiling_gb_s = 55.5;
  in.pcie_gen = 4;
  in.pcie_gen_max = 5;
  in.pcie_width = 16;
  in.pcie_width_max = 16;
  const auto v = judge_point(in, {});
  EXPECT_EQ(kinds(v), (std::vector{VerdictKind::kHostBound, VerdictKind::kPcieBound, VerdictKind::kThermal,
                                   VerdictKind::kComputeBound}));
  EXPECT_EQ(v[1].evidence,
            "H2D 2.660 ms vs GPU compute 1.900 ms; PCIe RX 52.0 GB/s = 94% of the measured 55.5 GB/s; link "
            "Gen4 x16 "
            "below its maximum Gen5 x16");
  EXPECT_NE(v[2].evidence.find("hw_thermal_slowdown in 50% of samples; 91 C at most"), std::string::npos);
}

TEST(Verdict, ThresholdsAreOverridable) {
  VerdictThresholds t;
  ASSERT_TRUE(apply_threshold_overrides("compute_share=0.7,power_cap_share=0.5", t).is_ok());
  EXPECT_DOUBLE_EQ(t.compute_share, 0.7);
  EXPECT_DOUBLE_EQ(t.power_cap_share, 0.5);
  // 60% of the ceiling is no longer compute-bound: between the thresholds, kernel-bound.
  EXPECT_EQ(kinds(judge_point(busy(), t)), (std::vector{VerdictKind::kKernelBound}));
  const Status unknown = apply_threshold_overrides("speed=1", t);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("unknown name 'speed'. Names: host_idle_share"), std::string::npos);
  EXPECT_FALSE(apply_threshold_overrides("compute_share=abc", t).is_ok());
  EXPECT_FALSE(apply_threshold_overrides("compute_share=-1", t).is_ok());
  EXPECT_FALSE(apply_threshold_overrides("compute_share", t).is_ok());
  ASSERT_TRUE(apply_threshold_overrides("launch_ms=0.5", t).is_ok());
  EXPECT_DOUBLE_EQ(t.launch_ms, 0.5);
  EXPECT_EQ(threshold_values(VerdictThresholds{}).size(), 11u);
}

TEST(Verdict, NamesRoundTrip) {
  for (VerdictKind k : {VerdictKind::kHostBound, VerdictKind::kPcieBound, VerdictKind::kPowerCapped,
                        VerdictKind::kThermal, VerdictKind::kComputeBound, VerdictKind::kMemoryBound,
                        VerdictKind::kLaunchBound, VerdictKind::kKernelBound, VerdictKind::kCapacityBound}) {
    auto parsed = parse_verdict_name(verdict_name(k));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, k);
  }
}

telemetry::GpuSample reading(int64_t t_ms, double power_w, std::optional<uint64_t> energy_mj,
                             uint64_t reasons) {
  telemetry::GpuSample s;
  s.index = 0;
  s.timestamp_ms = t_ms;
  s.power_w = power_w;
  s.power_limit_w = 400;
  s.energy_mj = energy_mj;
  s.sm_clock_mhz = static_cast<uint32_t>(2000 - t_ms / 10);
  s.sm_clock_max_mhz = 2000;
  s.clock_event_reasons = reasons;
  s.pcie_rx_kb_s = 1000;
  s.memory_used_bytes = uint64_t{5} << 30;
  s.processes = std::vector<telemetry::ProcessMemory>{{.pid = 42, .used_bytes = uint64_t{2} << 30},
                                                      {.pid = 7, .used_bytes = uint64_t{1} << 30}};
  return s;
}

TEST(PointTelemetry, AggregatesTheWindow) {
  using namespace telemetry::clock_event;
  const std::vector<telemetry::GpuSample> samples = {
      reading(0, 300, 0, kSwPowerCap),
      reading(100, 400, 35000, kSwPowerCap | kHwThermalSlowdown),
      reading(200, 350, 70000, 0),
      reading(300, 350, 105000, kSwPowerCap),
  };
  // 1,000 images in a 0.3 s window.
  const PointTelemetry t = aggregate_telemetry(samples, 0, 1000, 0.3, 42);
  EXPECT_EQ(t.samples, 4);
  EXPECT_DOUBLE_EQ(*t.power_mean_w, 350);
  EXPECT_DOUBLE_EQ(*t.power_max_w, 400);
  EXPECT_DOUBLE_EQ(*t.power_mean_share, 350.0 / 400);
  // The counter: 105 J over 0.3 s = 350 W; x 0.3 s / 1,000 images.
  EXPECT_EQ(t.energy_source, "counter");
  EXPECT_NEAR(*t.energy_per_image_j, 0.105, 1e-12);
  EXPECT_DOUBLE_EQ(*t.sm_clock_min_mhz, 1970);
  EXPECT_DOUBLE_EQ(*t.sm_clock_max_mhz, 2000);
  EXPECT_DOUBLE_EQ(t.clock_event_reason_shares.at("sw_power_cap"), 0.75);
  EXPECT_DOUBLE_EQ(t.clock_event_reason_shares.at("hw_thermal_slowdown"), 0.25);
  EXPECT_EQ(*t.memory_used_process_max_bytes, int64_t{2} << 30);  // our pid only
  EXPECT_EQ(*t.memory_used_total_max_bytes, int64_t{5} << 30);
  EXPECT_DOUBLE_EQ(*t.pcie_rx_bytes_per_image, 1000 * 1024 * 0.3 / 1000);
  EXPECT_FALSE(t.pcie_tx_bytes_per_image.has_value());  // never read: unknown, not zero

  // Without the counter, energy is mean power x window.
  std::vector<telemetry::GpuSample> no_counter = samples;
  for (auto& s : no_counter) s.energy_mj.reset();
  const PointTelemetry i = aggregate_telemetry(no_counter, 0, 1000, 0.3, 42);
  EXPECT_EQ(i.energy_source, "integrated");
  EXPECT_NEAR(*i.energy_per_image_j, 350 * 0.3 / 1000, 1e-12);
  // Another device's readings are not this one's.
  EXPECT_EQ(aggregate_telemetry(samples, 1, 1000, 0.3, 42).samples, 0);
}

}  // namespace
}  // namespace gpulab::sweep
