// Sampler aggregation and the NVML entry point on a machine without a driver.
#include "telemetry/sampler.h"

#include <gtest/gtest.h>

namespace gpulab::telemetry {
namespace {

GpuSample reading(std::uint32_t device, std::int64_t t_ms, double power_w, std::uint64_t energy_mj,
                  std::uint64_t reasons) {
  GpuSample s;
  s.index = device;
  s.timestamp_ms = t_ms;
  s.power_w = power_w;
  s.power_limit_w = 700;
  s.energy_mj = energy_mj;
  s.sm_clock_mhz = 1980;
  s.memory_used_bytes = static_cast<std::uint64_t>(power_w) << 20;
  s.clock_event_reasons = reasons;
  s.temperature_c = static_cast<std::uint32_t>(40 + t_ms / 100);
  return s;
}

TEST(TelemetrySummarize, AggregatesPerDevice) {
  std::vector<GpuSample> samples = {
      reading(0, 1000, 100, 5000, clock_event::kGpuIdle),
      reading(1, 1000, 50, 1000, 0),
      reading(0, 1050, 300, 15000, clock_event::kSwPowerCap),
      reading(0, 1100, 200, 25000, 0),
  };
  const auto sums = summarize(samples);
  ASSERT_EQ(sums.size(), 2u);
  const SampleSummary& g0 = sums[0];
  EXPECT_EQ(g0.device, 0u);
  EXPECT_EQ(g0.count, 3u);
  EXPECT_DOUBLE_EQ(g0.duration_s, 0.1);
  EXPECT_DOUBLE_EQ(*g0.power_mean_w, 200);
  EXPECT_DOUBLE_EQ(*g0.power_max_w, 300);
  EXPECT_DOUBLE_EQ(*g0.power_limit_w, 700);
  EXPECT_DOUBLE_EQ(*g0.energy_j, 20.0);
  EXPECT_EQ(g0.memory_used_max_bytes, 300ULL << 20);
  EXPECT_EQ(g0.clock_event_reasons_seen, clock_event::kGpuIdle | clock_event::kSwPowerCap);
  EXPECT_DOUBLE_EQ(*g0.temperature_max_c, 51);
  // Device 1 has one reading: no energy difference, and absent fields stay unknown.
  const SampleSummary& g1 = sums[1];
  EXPECT_EQ(g1.count, 1u);
  EXPECT_FALSE(g1.energy_j.has_value());
  EXPECT_FALSE(g1.gpu_util_mean_pct.has_value());
  EXPECT_FALSE(g1.pcie_rx_mean_kb_s.has_value());
}

TEST(TelemetrySummarize, EmptyInputGivesNoSummaries) {
  EXPECT_TRUE(summarize({}).empty());
}

TEST(TelemetrySampler, RejectsMissingTelemetry) {
  auto s = Sampler::create(nullptr, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

TEST(Telemetry, OpenWithoutDriverSaysWhy) {
  auto t = Telemetry::open();
  if (t.is_ok()) GTEST_SKIP() << "an NVIDIA driver is present; this test covers the machine without one";
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("libnvidia-ml.so.1"), std::string::npos) << t.status().message();
}

TEST(Telemetry, PeriodMustBePositive) {
  auto t = Telemetry::open();
  if (!t.is_ok()) GTEST_SKIP() << "no NVIDIA driver: " << t.status().message();
  auto s = Sampler::create(t.value(), {.period_ms = 0});
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulab::telemetry
