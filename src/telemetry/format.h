// Text forms of telemetry readings: CSV (nvidia-smi --query-gpu style names), JSON, Prometheus
// text exposition format (dcgm-exporter style names), and the live terminal line.
//
// Every field is defined once in fields() with its unit; docs/telemetry.md lists the same
// table. A value NVML could not provide prints as "N/A" in CSV and the live view, null in
// JSON, and is left out of the Prometheus output, never as 0. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"
#include "telemetry/sample.h"

namespace gpulab::telemetry {

using FieldValue = std::variant<std::int64_t, double, std::string>;

struct Field {
  std::string_view key;         // nvidia-smi style: "memory.used"
  std::string_view unit;        // "MiB", "W", "%", "" for none
  std::string_view prometheus;  // "DCGM_FI_DEV_FB_USED"; empty: not exported (strings)
  std::string_view help;        // one line, for docs and Prometheus HELP
  std::optional<FieldValue> (*get)(const GpuSample&);
  enum class Style { kPlain, kHex, kPstate } style = Style::kPlain;  // CSV/live rendering of ints
  bool counter = false;  // Prometheus TYPE counter (monotonic) instead of gauge
};

// Every field, in the default CSV column order.
const std::vector<Field>& fields();
const Field* find_field(std::string_view key);
// Parses "--fields a,b,c" (keys from fields(); "all" for every field). kInvalidArgument names
// the unknown key and lists the valid ones.
Result<std::vector<const Field*>> parse_field_list(std::string_view list);
// The default selection for monitor --csv: every field.
std::vector<const Field*> default_fields();

// "timestamp, index, memory.used [MiB], ..." (nvidia-smi's header style).
std::string csv_header(const std::vector<const Field*>& selection);
// One row; "N/A" for unavailable values; string values with ',' or '"' are quoted.
std::string csv_row(const GpuSample& sample, const std::vector<const Field*>& selection);
// "2026/12/02 15:04:05.123" in local time, as nvidia-smi prints timestamps.
std::string format_timestamp(std::int64_t unix_ms);

// {"timestamp": ..., "memory.used": 123, "power.draw": null, ..., "processes": [...]}.
nlohmann::json to_json(const GpuSample& sample, const std::vector<const Field*>& selection);

// Prometheus text format 0.0.4 for the samples (one per GPU): "# HELP", "# TYPE" (gauge or
// counter) once per metric, then `NAME{gpu="0",uuid="GPU-...",name="NVIDIA H200"} VALUE`.
// Per-process memory as gpulab_process_memory_used_bytes{...,pid="123"}.
std::string to_prometheus(const std::vector<GpuSample>& samples);

// Live view: one line per GPU, e.g.
// "0 NVIDIA H200  util  87%  mem 12345/143771 MiB  power 512/700 W  sm 1980 MHz  62 C  P0  PCIe 5x16
// sw_power_cap"
std::string live_line(const GpuSample& sample);
// Lines below the GPU line: "    pid 1234  5678 MiB  /usr/bin/python3".
std::vector<std::string> process_lines(const GpuSample& sample);

}  // namespace gpulab::telemetry
