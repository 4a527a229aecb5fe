#include "telemetry/format.h"

#include <ctime>

#include <fmt/format.h>

namespace gpulab::telemetry {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

template <typename T>
std::optional<FieldValue> as_int(const std::optional<T>& v) {
  if (!v) return std::nullopt;
  return FieldValue{static_cast<std::int64_t>(*v)};
}
std::optional<FieldValue> as_real(const std::optional<double>& v) {
  if (!v) return std::nullopt;
  return FieldValue{*v};
}
std::optional<FieldValue> as_mib(const std::optional<std::uint64_t>& bytes) {
  if (!bytes) return std::nullopt;
  // Whole MiB, as nvidia-smi and DCGM report framebuffer memory.
  return FieldValue{static_cast<std::int64_t>(static_cast<double>(*bytes) / kMiB)};
}
std::optional<FieldValue> as_bool(const std::optional<bool>& v) {
  if (!v) return std::nullopt;
  return FieldValue{static_cast<std::int64_t>(*v ? 1 : 0)};
}

using S = GpuSample;
using Style = Field::Style;

const std::vector<Field> kFields = {
    {"timestamp", "", "", "time of the reading (local time)",
     [](const S& s) -> std::optional<FieldValue> { return FieldValue{format_timestamp(s.timestamp_ms)}; }},
    {"index", "", "", "NVML device index",
     [](const S& s) -> std::optional<FieldValue> { return FieldValue{static_cast<std::int64_t>(s.index)}; }},
    {"name", "", "", "product name",
     [](const S& s) -> std::optional<FieldValue> { return FieldValue{s.name}; }},
    {"uuid", "", "", "GPU UUID", [](const S& s) -> std::optional<FieldValue> { return FieldValue{s.uuid}; }},
    {"utilization.gpu", "%", "DCGM_FI_DEV_GPU_UTIL", "share of the last sample period a kernel was running",
     [](const S& s) { return as_int(s.gpu_util_pct); }},
    {"utilization.memory", "%", "DCGM_FI_DEV_MEM_COPY_UTIL",
     "share of the last sample period device memory was read or written",
     [](const S& s) { return as_int(s.memory_util_pct); }},
    {"memory.used", "MiB", "DCGM_FI_DEV_FB_USED", "device memory in use, all processes and the driver",
     [](const S& s) { return as_mib(s.memory_used_bytes); }},
    {"memory.free", "MiB", "DCGM_FI_DEV_FB_FREE", "device memory free",
     [](const S& s) -> std::optional<FieldValue> {
       if (!s.memory_total_bytes || !s.memory_used_bytes) return std::nullopt;
       return as_mib(std::optional<std::uint64_t>(*s.memory_total_bytes - *s.memory_used_bytes));
     }},
    {"memory.total", "MiB", "DCGM_FI_DEV_FB_TOTAL", "device memory visible to the driver",
     [](const S& s) { return as_mib(s.memory_total_bytes); }},
    {"power.draw", "W", "DCGM_FI_DEV_POWER_USAGE", "board power draw",
     [](const S& s) { return as_real(s.power_w); }},
    {"power.limit", "W", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "enforced power limit",
     [](const S& s) { return as_real(s.power_limit_w); }},
    {"power.default_limit", "W", "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", "default power management limit",
     [](const S& s) { return as_real(s.power_default_limit_w); }},
    {"energy.total", "mJ", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
     "energy consumed since the driver was loaded", [](const S& s) { return as_int(s.energy_mj); },
     Style::kPlain, true},
    {"clocks.sm", "MHz", "DCGM_FI_DEV_SM_CLOCK", "SM clock",
     [](const S& s) { return as_int(s.sm_clock_mhz); }},
    {"clocks.mem", "MHz", "DCGM_FI_DEV_MEM_CLOCK", "memory clock",
     [](const S& s) { return as_int(s.memory_clock_mhz); }},
    {"clocks.gr", "MHz", "GPULAB_FI_DEV_GRAPHICS_CLOCK", "graphics clock",
     [](const S& s) { return as_int(s.graphics_clock_mhz); }},
    {"clocks.max.sm", "MHz", "DCGM_FI_DEV_MAX_SM_CLOCK", "maximum SM clock",
     [](const S& s) { return as_int(s.sm_clock_max_mhz); }},
    {"clocks.max.mem", "MHz", "DCGM_FI_DEV_MAX_MEM_CLOCK", "maximum memory clock",
     [](const S& s) { return as_int(s.memory_clock_max_mhz); }},
    {"clocks.max.gr", "MHz", "GPULAB_FI_DEV_MAX_GRAPHICS_CLOCK", "maximum graphics clock",
     [](const S& s) { return as_int(s.graphics_clock_max_mhz); }},
    {"clocks_event_reasons.active", "", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
     "bitmask of active clock-event (throttle) reasons",
     [](const S& s) { return as_int(s.clock_event_reasons); }, Style::kHex},
    {"clocks_event_reasons.names", "", "", "names of the active clock-event reasons, '|'-separated",
     [](const S& s) -> std::optional<FieldValue> {
       if (!s.clock_event_reasons) return std::nullopt;
       return FieldValue{clock_event_reasons_string(*s.clock_event_reasons)};
     }},
    {"temperature.gpu", "C", "DCGM_FI_DEV_GPU_TEMP", "GPU core temperature",
     [](const S& s) { return as_int(s.temperature_c); }},
    {"pcie.tx", "KB/s", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe device-to-host traffic (KB = 1024 bytes)",
     [](const S& s) { return as_int(s.pcie_tx_kb_s); }},
    {"pcie.rx", "KB/s", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe host-to-device traffic (KB = 1024 bytes)",
     [](const S& s) { return as_int(s.pcie_rx_kb_s); }},
    {"pcie.link.gen.current", "", "DCGM_FI_DEV_PCIE_LINK_GEN", "current PCIe link generation",
     [](const S& s) { return as_int(s.pcie_gen); }},
    {"pcie.link.gen.max", "", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "maximum PCIe link generation of GPU and slot",
     [](const S& s) { return as_int(s.pcie_gen_max); }},
    {"pcie.link.width.current", "", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "current PCIe link width (lanes)",
     [](const S& s) { return as_int(s.pcie_width); }},
    {"pcie.link.width.max", "", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "maximum PCIe link width (lanes)",
     [](const S& s) { return as_int(s.pcie_width_max); }},
    {"ecc.mode.current", "", "DCGM_FI_DEV_ECC_CURRENT", "ECC enabled (1) or disabled (0)",
     [](const S& s) { return as_bool(s.ecc_enabled); }},
    {"ecc.errors.corrected.volatile.total", "", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
     "corrected ECC errors since driver load", [](const S& s) { return as_int(s.ecc_corrected_volatile); },
     Style::kPlain, true},
    {"ecc.errors.uncorrected.volatile.total", "", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
     "uncorrected ECC errors since driver load",
     [](const S& s) { return as_int(s.ecc_uncorrected_volatile); }, Style::kPlain, true},
    {"retired_pages.sbe", "", "DCGM_FI_DEV_RETIRED_SBE", "pages retired for multiple single-bit errors",
     [](const S& s) { return as_int(s.retired_pages_sbe); }},
    {"retired_pages.dbe", "", "DCGM_FI_DEV_RETIRED_DBE", "pages retired for double-bit errors",
     [](const S& s) { return as_int(s.retired_pages_dbe); }},
    {"remapped_rows.correctable", "", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
     "rows remapped for correctable errors", [](const S& s) { return as_int(s.remapped_rows_correctable); }},
    {"remapped_rows.uncorrectable", "", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "rows remapped for uncorrectable errors",
     [](const S& s) { return as_int(s.remapped_rows_uncorrectable); }},
    {"remapped_rows.pending", "", "DCGM_FI_DEV_ROW_REMAP_PENDING",
     "a row remap waits for a GPU reset (1) or not (0)", [](const S& s) { return as_bool(s.remap_pending); }},
    {"pstate", "", "DCGM_FI_DEV_PSTATE", "performance state, P0 (maximum) to P15 (minimum)",
     [](const S& s) { return as_int(s.pstate); }, Style::kPstate},
};

std::string render(const Field& f, const std::optional<FieldValue>& v) {
  if (!v) return "N/A";
  if (const auto* i = std::get_if<std::int64_t>(&*v)) {
    switch (f.style) {
      case Style::kHex: return fmt::format("{:#018x}", static_cast<std::uint64_t>(*i));
      case Style::kPstate: return fmt::format("P{}", *i);
      case Style::kPlain: return std::to_string(*i);
    }
  }
  if (const auto* d = std::get_if<double>(&*v)) return fmt::format("{:.2f}", *d);
  return std::get<std::string>(*v);
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Prometheus label values escape backslash, double quote and newline.
std::string label_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string labels(const GpuSample& s) {
  return fmt::format("gpu=\"{}\",uuid=\"{}\",name=\"{}\"", s.index, label_escape(s.uuid),
                     label_escape(s.name));
}

std::string opt_text(const std::optional<FieldValue>& v, const char* unit) {
  if (!v) return "N/A";
  if (const auto* i = std::get_if<std::int64_t>(&*v)) return fmt::format("{}{}", *i, unit);
  if (const auto* d = std::get_if<double>(&*v)) return fmt::format("{:.0f}{}", *d, unit);
  return std::get<std::string>(*v);
}

}  // namespace

const std::vector<Field>& fields() {
  return kFields;
}

const Field* find_field(std::string_view key) {
  for (const Field& f : kFields)
    if (f.key == key) return &f;
  return nullptr;
}

std::vector<const Field*> default_fields() {
  std::vector<const Field*> out;
  for (const Field& f : kFields) out.push_back(&f);
  return out;
}

Result<std::vector<const Field*>> parse_field_list(std::string_view list) {
  std::vector<const Field*> out;
  while (true) {
    const size_t comma = list.find(',');
    std::string_view key = list.substr(0, comma);
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
    while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
    if (key == "all") {
      for (const Field& f : kFields) out.push_back(&f);
    } else if (!key.empty()) {
      const Field* f = find_field(key);
      if (f == nullptr) {
        std::string valid;
        for (const Field& k : kFields) valid += (valid.empty() ? "" : ", ") + std::string(k.key);
        return Status::invalid_argument(
            fmt::format("--fields: unknown field '{}'. Valid fields: all, {}", key, valid));
      }
      out.push_back(f);
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (out.empty())
    return Status::invalid_argument(
        "--fields: no field given. Example: --fields timestamp,index,memory.used");
  return out;
}

std::string format_timestamp(std::int64_t unix_ms) {
  const std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y/%m/%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d}", buf, static_cast<int>(unix_ms % 1000));
}

std::string csv_header(const std::vector<const Field*>& selection) {
  std::string out;
  for (const Field* f : selection) {
    if (!out.empty()) out += ", ";
    out += f->key;
    if (!f->unit.empty()) out += fmt::format(" [{}]", f->unit);
  }
  return out;
}

std::string csv_row(const GpuSample& sample, const std::vector<const Field*>& selection) {
  std::string out;
  bool first = true;
  for (const Field* f : selection) {
    if (!first) out += ", ";
    first = false;
    out += csv_escape(render(*f, f->get(sample)));
  }
  return out;
}

nlohmann::json to_json(const GpuSample& sample, const std::vector<const Field*>& selection) {
  nlohmann::json j = nlohmann::json::object();
  for (const Field* f : selection) {
    const auto v = f->get(sample);
    if (!v) {
      j[std::string(f->key)] = nullptr;
    } else if (const auto* i = std::get_if<std::int64_t>(&*v)) {
      j[std::string(f->key)] = *i;
    } else if (const auto* d = std::get_if<double>(&*v)) {
      j[std::string(f->key)] = *d;
    } else {
      j[std::string(f->key)] = std::get<std::string>(*v);
    }
  }
  if (sample.processes) {
    nlohmann::json procs = nlohmann::json::array();
    for (const ProcessMemory& p : *sample.processes) {
      nlohmann::json pj{{"pid", p.pid}, {"name", p.name}};
      pj["used_memory_mib"] = p.used_bytes
                                  ? nlohmann::json(static_cast<std::int64_t>(*p.used_bytes / (1024 * 1024)))
                                  : nlohmann::json(nullptr);
      procs.push_back(pj);
    }
    j["processes"] = procs;
  } else {
    j["processes"] = nullptr;
  }
  return j;
}

std::string to_prometheus(const std::vector<GpuSample>& samples) {
  std::string out;
  for (const Field& f : kFields) {
    if (f.prometheus.empty()) continue;
    std::string lines;
    for (const GpuSample& s : samples) {
      const auto v = f.get(s);
      if (!v) continue;  // unsupported on this GPU: absent, never 0
      if (const auto* i = std::get_if<std::int64_t>(&*v)) {
        lines += fmt::format("{}{{{}}} {}\n", f.prometheus, labels(s), *i);
      } else if (const auto* d = std::get_if<double>(&*v)) {
        lines += fmt::format("{}{{{}}} {}\n", f.prometheus, labels(s), *d);
      }
    }
    if (lines.empty()) continue;
    const std::string unit = f.unit.empty() ? "" : fmt::format(" ({})", f.unit);
    out += fmt::format("# HELP {} {}{}.\n# TYPE {} {}\n", f.prometheus, f.help, unit, f.prometheus,
                       f.counter ? "counter" : "gauge");
    out += lines;
  }
  std::string procs;
  for (const GpuSample& s : samples) {
    if (!s.processes) continue;
    for (const ProcessMemory& p : *s.processes) {
      if (!p.used_bytes) continue;
      procs += fmt::format("gpulab_process_memory_used_bytes{{{},pid=\"{}\",process=\"{}\"}} {}\n", labels(s),
                           p.pid, label_escape(p.name), *p.used_bytes);
    }
  }
  if (!procs.empty()) {
    out +=
        "# HELP gpulab_process_memory_used_bytes device memory used by one process (bytes).\n"
        "# TYPE gpulab_process_memory_used_bytes gauge\n";
    out += procs;
  }
  return out;
}

std::string live_line(const GpuSample& s) {
  auto val = [&](std::string_view key, const char* unit) {
    const Field* f = find_field(key);
    return opt_text(f->get(s), unit);
  };
  std::string line = fmt::format(
      "{:>2} {:<22} util {:>4} mem {}/{} MiB  power {}/{} W  sm {} MHz  mem {} MHz  {}", s.index, s.name,
      val("utilization.gpu", "%"), val("memory.used", ""), val("memory.total", ""), val("power.draw", ""),
      val("power.limit", ""), val("clocks.sm", ""), val("clocks.mem", ""), val("temperature.gpu", " C"));
  line += fmt::format("  {}", s.pstate ? fmt::format("P{}", *s.pstate) : std::string("P?"));
  line += fmt::format("  PCIe gen{} x{}", s.pcie_gen ? std::to_string(*s.pcie_gen) : "?",
                      s.pcie_width ? std::to_string(*s.pcie_width) : "?");
  if (s.pcie_rx_kb_s && s.pcie_tx_kb_s)
    line += fmt::format(" rx {:.1f} tx {:.1f} MB/s", *s.pcie_rx_kb_s * 1024.0 / 1e6,
                        *s.pcie_tx_kb_s * 1024.0 / 1e6);
  line += "  " + (s.clock_event_reasons ? clock_event_reasons_string(*s.clock_event_reasons)
                                        : std::string("reasons N/A"));
  return line;
}

std::vector<std::string> process_lines(const GpuSample& s) {
  std::vector<std::string> out;
  if (!s.processes) return out;
  for (const ProcessMemory& p : *s.processes) {
    out.push_back(fmt::format("     pid {:>7}  {:>8} MiB  {}", p.pid,
                              p.used_bytes ? std::to_string(*p.used_bytes / (1024 * 1024)) : "N/A",
                              p.name.empty() ? "?" : p.name));
  }
  return out;
}

}  // namespace gpulab::telemetry
