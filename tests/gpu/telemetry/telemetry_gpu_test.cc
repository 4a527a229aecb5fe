// On a GPU host: NVML readings are plausible, memory rises while another process allocates,
// pinned H2D bandwidth is near the link's rate and pageable is slower, doctor's GPU checks pass.
// Every test skips with the reason when there is no driver or GPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "doctor/doctor.h"
#include "measure/bandwidth.h"
#include "telemetry/cuda_driver.h"
#include "telemetry/format.h"
#include "telemetry/sampler.h"
#include "telemetry/telemetry.h"

namespace gpulab {
namespace {

using telemetry::GpuSample;
using telemetry::Telemetry;

std::shared_ptr<Telemetry> open_or_null(std::string* why) {
  auto t = Telemetry::open();
  if (!t.is_ok()) {
    *why = t.status().message();
    return nullptr;
  }
  if (t.value()->device_count() == 0) {
    *why = "NVML sees no GPU";
    return nullptr;
  }
  return t.value();
}

#define REQUIRE_NVML(var)         \
  std::string why_;               \
  auto var = open_or_null(&why_); \
  if (!var) GTEST_SKIP() << "no GPU: " << why_

TEST(TelemetryGpu, SampleValuesArePlausibleAndUnsupportedFieldsAreListed) {
  REQUIRE_NVML(t);
  for (std::uint32_t i = 0; i < t->device_count(); ++i) {
    auto r = t->sample(i);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const GpuSample& s = r.value();
    EXPECT_FALSE(s.name.empty());
    EXPECT_EQ(s.uuid.rfind("GPU-", 0), 0u) << s.uuid;
    ASSERT_TRUE(s.memory_total_bytes && s.memory_used_bytes);
    EXPECT_GT(*s.memory_total_bytes, 1ULL << 30);
    EXPECT_LE(*s.memory_used_bytes, *s.memory_total_bytes);
    if (s.gpu_util_pct) {
      EXPECT_LE(*s.gpu_util_pct, 100u);
    }
    if (s.temperature_c) {
      EXPECT_GT(*s.temperature_c, 5u);
      EXPECT_LT(*s.temperature_c, 110u);
    }
    if (s.power_w && s.power_limit_w) {
      EXPECT_GT(*s.power_w, 1.0);
      EXPECT_LT(*s.power_w, *s.power_limit_w * 1.5);
    }
    if (s.sm_clock_mhz && s.sm_clock_max_mhz) {
      EXPECT_LE(*s.sm_clock_mhz, *s.sm_clock_max_mhz * 105 / 100);
    }
    if (s.pcie_width) {
      const std::uint32_t w = *s.pcie_width;
      EXPECT_TRUE(w == 1 || w == 2 || w == 4 || w == 8 || w == 16) << w;
    }
    if (s.pcie_gen) {
      EXPECT_GE(*s.pcie_gen, 1u);
      EXPECT_LE(*s.pcie_gen, 6u);
    }
    if (s.pstate) {
      EXPECT_LE(*s.pstate, 15u);
    }
    // The CSV sample and the unsupported fields go into the report.
    std::string unsupported;
    for (const telemetry::Field& f : telemetry::fields())
      if (!f.get(s)) unsupported += std::string(unsupported.empty() ? "" : ", ") + std::string(f.key);
    std::printf("GPU %u %s: unsupported fields: %s\n", i, s.name.c_str(),
                unsupported.empty() ? "none" : unsupported.c_str());
    std::printf("%s\n%s\n", telemetry::csv_header(telemetry::default_fields()).c_str(),
                telemetry::csv_row(s, telemetry::default_fields()).c_str());
    auto info = t->device_info(i);
    ASSERT_TRUE(info.is_ok());
    std::printf("facts: %s\n", telemetry::describe(info->facts).c_str());
    EXPECT_TRUE(info->cc.has_value());
    if (s.name.find("H200") != std::string::npos || s.name.find("H100") != std::string::npos) {
      EXPECT_EQ(info->facts.architecture, "Hopper");
      EXPECT_TRUE(info->facts.from_table);
    }
  }
}

TEST(TelemetryGpu, SamplerCollectsReadingsOnItsThread) {
  REQUIRE_NVML(t);
  auto sampler = telemetry::Sampler::create(t, {.period_ms = 20});
  ASSERT_TRUE(sampler.is_ok()) << sampler.status().to_string();
  sampler.value()->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sampler.value()->stop();
  const auto samples = sampler.value()->take_samples();
  EXPECT_GE(samples.size(), 2u * t->device_count());
  EXPECT_TRUE(sampler.value()->errors().empty());
  const auto sums = telemetry::summarize(samples);
  ASSERT_EQ(sums.size(), t->device_count());
  EXPECT_GE(sums[0].count, 2u);
}

// A child process allocates device memory and holds it; the parent's NVML view must see the
// used memory rise by about that much, and (where NVML lists processes) the child's PID.
TEST(TelemetryGpu, MemoryRisesWhileAnotherProcessAllocates) {
  REQUIRE_NVML(t);
  auto info = t->device_info(0);
  ASSERT_TRUE(info.is_ok());
  const std::uint64_t kAlloc = 2ULL << 30;
  auto before = t->sample(0);
  ASSERT_TRUE(before.is_ok());
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const std::string uuid = info->uuid;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    close(release[1]);
    char ok = 'n';
    auto driver = telemetry::cuda::Driver::load();
    if (driver.is_ok()) {
      auto ordinal = driver.value()->device_by_uuid(uuid);
      telemetry::cuda::CUdevice dev = 0;
      if (ordinal.is_ok() &&
          driver.value()->api().device_get(&dev, ordinal.value()) == telemetry::cuda::kSuccess) {
        auto ctx = telemetry::cuda::ScopedContext::create(driver.value(), dev);
        telemetry::cuda::CUdeviceptr ptr = 0;
        if (ctx.is_ok() && driver.value()->api().mem_alloc(&ptr, kAlloc) == telemetry::cuda::kSuccess) {
          ok = 'y';
          (void)!write(ready[1], &ok, 1);
          char c;
          (void)!read(release[0], &c, 1);  // hold the memory until the parent has looked
          driver.value()->api().mem_free(ptr);
          _exit(0);
        }
      }
    }
    (void)!write(ready[1], &ok, 1);
    _exit(1);
  }
  close(ready[1]);
  close(release[0]);
  char ok = 'n';
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  std::optional<GpuSample> during;
  if (ok == 'y') {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto s = t->sample(0);
    if (s.is_ok()) during = s.value();
  }
  close(release[1]);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  ASSERT_EQ(ok, 'y') << "the child could not allocate 2 GiB on GPU 0";
  ASSERT_TRUE(during.has_value());
  const auto rise = static_cast<std::int64_t>(*during->memory_used_bytes) -
                    static_cast<std::int64_t>(*before->memory_used_bytes);
  std::printf("memory used before %llu MiB, while the child holds 2 GiB %llu MiB\n",
              static_cast<unsigned long long>(*before->memory_used_bytes >> 20),
              static_cast<unsigned long long>(*during->memory_used_bytes >> 20));
  EXPECT_GE(rise, static_cast<std::int64_t>(kAlloc * 9 / 10));
  if (during->processes) {
    bool seen = false;
    for (const auto& p : *during->processes) seen = seen || p.pid == static_cast<std::uint32_t>(child);
    // In a PID namespace NVML reports host PIDs; only log.
    std::printf("child pid %d %s in NVML's process list (%zu entries)\n", child, seen ? "found" : "not found",
                during->processes->size());
  }
}

TEST(TelemetryGpu, PinnedHostToDeviceNearLinkRateAndPageableSlower) {
  auto driver = telemetry::cuda::Driver::load();
  if (!driver.is_ok() || driver.value()->device_count() == 0)
    GTEST_SKIP() << "no GPU: " << (driver.is_ok() ? std::string("no device") : driver.status().message());
  measure::BandwidthOptions o;
  o.sizes_bytes = {256ULL << 20};
  o.kinds = {measure::CopyKind::kHostToDevice};
  o.host_memory = {measure::HostMemory::kPinned, measure::HostMemory::kPageable};
  o.repeats = 10;
  auto r = measure::run_bandwidth_test(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::printf("%s", measure::format_table(r.value()).c_str());
  ASSERT_EQ(r->points.size(), 2u);
  const double pinned = r->points[0].gb_s, pageable = r->points[1].gb_s;
  // The H200 host's gen5 x16 link: 63 GB/s theoretical, ~55 GB/s achievable.
  if (r->device_name.find("H200") != std::string::npos) {
    EXPECT_NEAR(pinned, 55.0, 5.5);
  }
  EXPECT_LT(pageable, pinned);
}

TEST(TelemetryGpu, DoctorGpuChecksPass) {
  REQUIRE_NVML(t);
  doctor::DoctorOptions o;
  const auto findings = doctor::run_doctor(o);
  std::printf("%s", doctor::format_table(findings).c_str());
  for (const auto& f : findings) {
    if (f.check == "NVML" || f.check.find("architecture") != std::string::npos ||
        f.check.find("PCIe link") != std::string::npos || f.check.find("ECC") != std::string::npos) {
      EXPECT_NE(f.status, doctor::Severity::kFail) << f.check << ": " << f.detail;
    }
  }
}

}  // namespace
}  // namespace gpulab
