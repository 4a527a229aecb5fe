// CSV / JSON / Prometheus / live-view formatting and clock-event decoding, on hand-made samples.
#include "telemetry/format.h"

#include "test_support.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace gpulab::telemetry {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

// A GPU that supports some fields and not others (power, energy, ECC, PCIe throughput missing).
GpuSample partial_sample() {
  GpuSample s;
  s.timestamp_ms = 1764688000123;
  s.index = 1;
  s.name = "NVIDIA GeForce RTX 4090";
  s.uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  s.gpu_util_pct = 87;
  s.memory_util_pct = 40;
  s.memory_used_bytes = 2048 * kMiB;
  s.memory_total_bytes = 24564 * kMiB;
  s.sm_clock_mhz = 2520;
  s.sm_clock_max_mhz = 3105;
  s.clock_event_reasons = clock_event::kSwPowerCap | clock_event::kHwThermalSlowdown;
  s.temperature_c = 71;
  s.pcie_gen = 4;
  s.pcie_width = 16;
  s.pstate = 2;
  s.processes =
      std::vector<ProcessMemory>{{.pid = 4242, .name = "/usr/bin/python3", .used_bytes = 1500 * kMiB},
                                 {.pid = 77, .name = "", .used_bytes = std::nullopt}};
  return s;
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + sep.size();
  }
  return out;
}

TEST(ClockEventReasons, DecodesNamedBitsInOrder) {
  EXPECT_TRUE(decode_clock_event_reasons(0).empty());
  EXPECT_EQ(clock_event_reasons_string(0), "none");
  EXPECT_EQ(decode_clock_event_reasons(0x4 | 0x40),
            (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(clock_event_reasons_string(clock_event::kGpuIdle), "gpu_idle");
  EXPECT_EQ(clock_event_reasons_string(0x1 | 0x8 | 0x80 | 0x100),
            "gpu_idle|hw_slowdown|hw_power_brake_slowdown|display_clock_setting");
}

TEST(ClockEventReasons, NamesUnknownBitsInsteadOfDroppingThem) {
  EXPECT_EQ(decode_clock_event_reasons(0x2 | 0x1000),
            (std::vector<std::string>{"applications_clocks_setting", "unknown_0x1000"}));
}

TEST(ClockEventReasons, PerformanceLimitingExcludesIdleAndSettings) {
  EXPECT_EQ(clock_event::kPerformanceLimiting & clock_event::kGpuIdle, 0u);
  EXPECT_EQ(clock_event::kPerformanceLimiting & clock_event::kApplicationsClocksSetting, 0u);
  EXPECT_NE(clock_event::kPerformanceLimiting & clock_event::kHwThermalSlowdown, 0u);
}

TEST(TelemetryFields, KeysAndPrometheusNamesAreUnique) {
  std::set<std::string_view> keys, prom;
  for (const Field& f : fields()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    if (!f.prometheus.empty()) {
      EXPECT_TRUE(prom.insert(f.prometheus).second) << f.prometheus;
    }
    EXPECT_FALSE(f.help.empty()) << f.key;
  }
  EXPECT_NE(find_field("memory.used"), nullptr);
  EXPECT_EQ(find_field("memory.used")->unit, "MiB");
  EXPECT_EQ(find_field("power.draw")->unit, "W");
  EXPECT_EQ(find_field("nope"), nullptr);
}

// Every metric is defined once, with its unit, in the docs.
TEST(TelemetryFields, EveryFieldIsDocumentedWithItsUnit) {
  std::ifstream in(testing::source_dir() / "docs" / "telemetry.md");
  ASSERT_TRUE(in) << "docs/telemetry.md missing";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const Field& f : fields()) {
    const std::string row =
        "| `" + std::string(f.key) + "` | " + (f.unit.empty() ? "-" : std::string(f.unit)) + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/telemetry.md lacks the row for " << f.key;
  }
}

TEST(TelemetryFields, ParseListAcceptsKnownKeysAndAll) {
  auto r = parse_field_list(" timestamp, index ,memory.used");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[2]->key, "memory.used");
  auto all = parse_field_list("all");
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->size(), fields().size());
}

TEST(TelemetryFields, ParseListRejectsUnknownKeyNamingTheValidOnes) {
  auto r = parse_field_list("index,memory.usd");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'memory.usd'"), std::string::npos);
  EXPECT_NE(r.status().message().find("memory.used"), std::string::npos);
  EXPECT_FALSE(parse_field_list(" , ").is_ok());
}

TEST(TelemetryCsv, HeaderUsesNvidiaSmiNamesWithUnits) {
  auto sel = parse_field_list("timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm").value();
  EXPECT_EQ(csv_header(sel),
            "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W], clocks.sm [MHz]");
}

TEST(TelemetryCsv, UnsupportedFieldsAreNAndNeverZero) {
  const GpuSample s = partial_sample();
  auto sel = parse_field_list(
                 "index,name,utilization.gpu,memory.used,memory.free,memory.total,power.draw,energy.total,"
                 "clocks_event_reasons.active,clocks_event_reasons.names,pcie.tx,ecc.mode.current,pstate")
                 .value();
  const auto cells = split(csv_row(s, sel), ", ");
  ASSERT_EQ(cells.size(), sel.size());
  EXPECT_EQ(cells[0], "1");
  EXPECT_EQ(cells[1], "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(cells[2], "87");
  EXPECT_EQ(cells[3], "2048");
  EXPECT_EQ(cells[4], std::to_string(24564 - 2048));
  EXPECT_EQ(cells[5], "24564");
  EXPECT_EQ(cells[6], "N/A");  // power not supported on this sample
  EXPECT_EQ(cells[7], "N/A");
  EXPECT_EQ(cells[8], "0x0000000000000044");
  EXPECT_EQ(cells[9], "sw_power_cap|hw_thermal_slowdown");
  EXPECT_EQ(cells[10], "N/A");
  EXPECT_EQ(cells[11], "N/A");
  EXPECT_EQ(cells[12], "P2");
}

TEST(TelemetryCsv, TimestampIsNvidiaSmiStyle) {
  const std::string ts = format_timestamp(1764688000123);
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.123)"))) << ts;
}

TEST(TelemetryCsv, QuotesNamesWithCommas) {
  GpuSample s;
  s.name = "Odd, \"GPU\"";
  auto sel = parse_field_list("name").value();
  EXPECT_EQ(csv_row(s, sel), "\"Odd, \"\"GPU\"\"\"");
}

TEST(TelemetryJson, MissingValuesAreNullAndNumbersAreNumbers) {
  const GpuSample s = partial_sample();
  const auto j = to_json(s, default_fields());
  EXPECT_TRUE(j.at("power.draw").is_null());
  EXPECT_TRUE(j.at("ecc.mode.current").is_null());
  EXPECT_EQ(j.at("memory.used").get<int>(), 2048);
  EXPECT_EQ(j.at("temperature.gpu").get<int>(), 71);
  EXPECT_EQ(j.at("name").get<std::string>(), "NVIDIA GeForce RTX 4090");
  ASSERT_TRUE(j.at("processes").is_array());
  ASSERT_EQ(j.at("processes").size(), 2u);
  EXPECT_EQ(j.at("processes")[0].at("pid").get<int>(), 4242);
  EXPECT_EQ(j.at("processes")[0].at("used_memory_mib").get<int>(), 1500);
  EXPECT_TRUE(j.at("processes")[1].at("used_memory_mib").is_null());
  // Round trip through text.
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST(TelemetryJson, ProcessesNullWhenNotQueried) {
  GpuSample s = partial_sample();
  s.processes.reset();
  EXPECT_TRUE(to_json(s, default_fields()).at("processes").is_null());
}

TEST(TelemetryPrometheus, FollowsTheTextFormat) {
  GpuSample a = partial_sample();
  GpuSample b = partial_sample();
  b.index = 0;
  b.uuid = "GPU-b";
  b.name = "NVIDIA \"H200\"";
  b.power_w = 512.25;
  b.energy_mj = 123456789;
  const std::string text = to_prometheus({a, b});
  std::istringstream lines(text);
  std::string line;
  const std::regex sample_re(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-z_]+="([^"\\]|\\.)*",?)+\} -?[0-9.eE+-]+$)re");
  const std::regex help_re(R"(^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  const std::regex type_re(R"(^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (gauge|counter)$)");
  std::map<std::string, int> type_lines;
  int samples = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP", 0) == 0) {
      EXPECT_TRUE(std::regex_match(line, help_re)) << line;
    } else if (line.rfind("# TYPE", 0) == 0) {
      EXPECT_TRUE(std::regex_match(line, type_re)) << line;
      ++type_lines[line.substr(7, line.find(' ', 7) - 7)];
    } else {
      EXPECT_TRUE(std::regex_match(line, sample_re)) << line;
      ++samples;
    }
  }
  for (const auto& [name, n] : type_lines) EXPECT_EQ(n, 1) << name;
  EXPECT_GT(samples, 10);
  EXPECT_NE(text.find("DCGM_FI_DEV_FB_USED{gpu=\"1\",uuid=\"GPU-01234567-89ab-cdef-0123-456789abcdef\","
                      "name=\"NVIDIA GeForce RTX 4090\"} 2048\n"),
            std::string::npos);
  // Label values escape quotes.
  EXPECT_NE(text.find("name=\"NVIDIA \\\"H200\\\"\""), std::string::npos);
  // Power: only GPU 0 has it; GPU 1's line is absent, not 0.
  EXPECT_NE(text.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_GPU_TEMP gauge"), std::string::npos);
  EXPECT_NE(text.find("gpulab_process_memory_used_bytes{gpu=\"1\""), std::string::npos);
  EXPECT_NE(text.find("pid=\"4242\""), std::string::npos);
  // The process without a known size is not exported as 0.
  EXPECT_EQ(text.find("pid=\"77\""), std::string::npos);
}

TEST(TelemetryPrometheus, MetricUnsupportedEverywhereHasNoHelpOrType) {
  const std::string text = to_prometheus({partial_sample()});
  EXPECT_EQ(text.find("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_POWER_USAGE"), std::string::npos);
}

TEST(TelemetryLiveView, ShowsNAForUnsupportedAndListsProcesses) {
  const GpuSample s = partial_sample();
  const std::string line = live_line(s);
  EXPECT_NE(line.find("NVIDIA GeForce RTX 4090"), std::string::npos);
  EXPECT_NE(line.find("2048/24564 MiB"), std::string::npos);
  EXPECT_NE(line.find("power N/A/N/A W"), std::string::npos);
  EXPECT_NE(line.find("P2"), std::string::npos);
  EXPECT_NE(line.find("gen4 x16"), std::string::npos);
  EXPECT_NE(line.find("sw_power_cap|hw_thermal_slowdown"), std::string::npos);
  const auto procs = process_lines(s);
  ASSERT_EQ(procs.size(), 2u);
  EXPECT_NE(procs[0].find("4242"), std::string::npos);
  EXPECT_NE(procs[0].find("1500 MiB"), std::string::npos);
  EXPECT_NE(procs[1].find("N/A MiB"), std::string::npos);
}

}  // namespace
}  // namespace gpulab::telemetry
