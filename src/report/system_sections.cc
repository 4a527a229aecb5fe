// The sections about the machine: the environment each result recorded, doctor's findings, and
// monitor's time series. Also the helpers every section builder shares.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "report/html.h"
#include "report/sections.h"

namespace gpulab::report {

Block html_block(std::string html) {
  return Block{.html = std::move(html)};
}

Block plot_block(Plot plot) {
  return Block{.plot = std::move(plot)};
}

std::string note(std::string_view text) {
  return fmt::format("<p class=\"note\">{}</p>\n", html::escape(text));
}

int precision_color(std::string_view precision) {
  if (precision == "fp32") return 0;
  if (precision == "tf32") return 5;
  if (precision == "fp16") return 1;
  if (precision == "bf16") return 2;
  if (precision == "int8") return 3;
  if (precision == "fp8") return 4;
  return kBlack;
}

int precision_point(std::string_view precision) {
  if (precision == "fp32") return 7;   // circle
  if (precision == "tf32") return 5;   // square
  if (precision == "fp16") return 9;   // triangle
  if (precision == "bf16") return 13;  // diamond
  if (precision == "int8") return 11;  // down triangle
  return 3;
}

namespace {

std::string monitor_gpus(const MonitorLog& log) {
  std::vector<std::string> names;
  for (const MonitorReading& r : log.readings) {
    const std::string name = r.name.empty() ? "unknown GPU" : r.name;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " + ") + n;
  return out;
}

std::string file_name(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  return name.empty() ? path : name;
}

}  // namespace

std::string gpu_label(const Input& input) {
  switch (input.kind) {
    case InputKind::kSweep: {
      const auto& s = std::get<sweep::SweepResult>(input.data);
      // The simulation names itself "simulated (<scenario path>)": the file name is enough.
      std::string name = s.environment.gpu_name.empty() ? s.target.description : s.environment.gpu_name;
      if (name.starts_with("simulated (") && name.ends_with(")")) {
        name = "simulated GPU (" + file_name(name.substr(11, name.size() - 12)) + ")";
      }
      return name.empty() ? "unknown GPU" : name;
    }
    case InputKind::kBench: {
      const auto& b = std::get<measure::BenchResult>(input.data);
      return b.environment.gpu_name.empty() ? "unknown GPU" : b.environment.gpu_name;
    }
    case InputKind::kBandwidth: {
      const auto& b = std::get<measure::BandwidthReport>(input.data);
      return b.device_name.empty() ? "unknown GPU" : b.device_name;
    }
    case InputKind::kMonitor: return monitor_gpus(std::get<MonitorLog>(input.data));
    case InputKind::kPipeline: {
      const auto& p = std::get<PipelineReport>(input.data);
      return p.backend.empty() ? "unknown backend" : p.backend;
    }
    case InputKind::kAccuracy: {
      const auto& a = std::get<AccuracyReport>(input.data);
      return a.emulated.empty() ? "the GPU engine"
                                : fmt::format("the {} (emulated)", a.emulated == "cpu" ? "CPU" : a.emulated);
    }
    case InputKind::kDoctor: return "this machine";
  }
  return "unknown GPU";
}

std::string model_label(const Input& input) {
  switch (input.kind) {
    case InputKind::kSweep: return file_name(std::get<sweep::SweepResult>(input.data).model);
    case InputKind::kBench: return file_name(std::get<measure::BenchResult>(input.data).model);
    case InputKind::kPipeline: return file_name(std::get<PipelineReport>(input.data).model);
    case InputKind::kAccuracy: return file_name(std::get<AccuracyReport>(input.data).model);
    default: return "";
  }
}

// ---- Environment ------------------------------------------------------------------------------------

namespace {

struct EnvRow {
  std::string source, kind, gpu, driver, cuda_driver, cuda_runtime, cudnn, cublas, power_limit, sm_clock,
      memory_clock, pcie, gpulab, commit, when;
};

std::string watts(std::optional<double> w, std::optional<double> default_w = std::nullopt) {
  if (!w) return "—";
  if (default_w && *default_w != *w) return fmt::format("{:.0f} W (default {:.0f} W)", *w, *default_w);
  return fmt::format("{:.0f} W", *w);
}

std::string mhz(std::optional<double> now, std::optional<double> max = std::nullopt) {
  if (!now && !max) return "—";
  if (now && max) return fmt::format("{:.0f} (max {:.0f}) MHz", *now, *max);
  return now ? fmt::format("{:.0f} MHz", *now) : fmt::format("max {:.0f} MHz", *max);
}

std::string pcie(std::optional<int> gen, std::optional<int> width, std::optional<int> gen_max = std::nullopt,
                 std::optional<int> width_max = std::nullopt) {
  if (!gen && !width) return "—";
  std::string out =
      fmt::format("gen{} x{}", gen ? std::to_string(*gen) : "?", width ? std::to_string(*width) : "?");
  if ((gen_max && gen_max != gen) || (width_max && width_max != width))
    out += fmt::format(" (max gen{} x{})", gen_max ? std::to_string(*gen_max) : "?",
                       width_max ? std::to_string(*width_max) : "?");
  return out;
}

std::string version_or_dash(const std::string& v) {
  return v.empty() ? "—" : v;
}

std::string lib_version(const std::string& text) {
  return text == "?" ? "—" : text;
}

// The driver and library versions, which sweep and bench environments record alike.
template <typename Environment>
void set_versions(EnvRow& r, const Environment& e) {
  r.driver = version_or_dash(e.driver_version);
  r.cuda_driver = lib_version(measure::cuda_version_string(e.cuda_driver_version));
  r.cuda_runtime = lib_version(measure::cuda_version_string(e.cuda_runtime_version));
  r.cudnn = lib_version(measure::cudnn_version_string(e.cudnn_version));
  r.cublas = lib_version(measure::cublas_version_string(e.cublas_version));
}

std::optional<EnvRow> env_row(const Input& in) {
  EnvRow r{.source = in.source, .kind = std::string(input_kind_name(in.kind)), .gpu = gpu_label(in)};
  switch (in.kind) {
    case InputKind::kSweep: {
      const auto& e = std::get<sweep::SweepResult>(in.data).environment;
      set_versions(r, e);
      r.power_limit = watts(e.power_limit_w, e.power_default_limit_w);
      r.sm_clock = mhz(e.sm_clock_mhz, e.sm_clock_max_mhz);
      r.memory_clock = mhz(e.memory_clock_mhz);
      r.pcie = pcie(e.pcie_gen, e.pcie_width, e.pcie_gen_max, e.pcie_width_max);
      r.gpulab = version_or_dash(e.gpulab_version);
      r.commit = version_or_dash(e.gpulab_commit);
      r.when = version_or_dash(e.started_at);
      return r;
    }
    case InputKind::kBench: {
      const auto& e = std::get<measure::BenchResult>(in.data).environment;
      set_versions(r, e);
      if (e.start) {
        r.power_limit = watts(e.start->power_limit_w);
        r.sm_clock = mhz(e.start->sm_clock_mhz);
        r.memory_clock = mhz(e.start->memory_clock_mhz);
      }
      r.gpulab = version_or_dash(e.gpulab_version);
      r.commit = version_or_dash(e.gpulab_commit);
      return r;
    }
    case InputKind::kBandwidth: {
      const auto& b = std::get<measure::BandwidthReport>(in.data);
      r.pcie = pcie(b.pcie_gen, b.pcie_width);
      return r;
    }
    case InputKind::kMonitor: {
      const auto& log = std::get<MonitorLog>(in.data);
      const MonitorReading& first = log.readings.front();
      auto v = [&](const char* key) -> std::optional<double> {
        const auto it = first.values.find(key);
        return it == first.values.end() ? std::nullopt : std::optional(it->second);
      };
      auto i = [&](const char* key) -> std::optional<int> {
        const auto d = v(key);
        // A link generation or width; a value beyond int (a corrupt log) is not one.
        return d && std::fabs(*d) < 1e9 ? std::optional(static_cast<int>(*d)) : std::nullopt;
      };
      r.power_limit = watts(v("power.limit"), v("power.default_limit"));
      r.sm_clock = mhz(v("clocks.sm"), v("clocks.max.sm"));
      r.memory_clock = mhz(v("clocks.mem"), v("clocks.max.mem"));
      r.pcie = pcie(i("pcie.link.gen.current"), i("pcie.link.width.current"), i("pcie.link.gen.max"),
                    i("pcie.link.width.max"));
      r.when = version_or_dash(first.timestamp);
      return r;
    }
    case InputKind::kPipeline: {
      const auto& p = std::get<PipelineReport>(in.data);
      r.gpulab = version_or_dash(p.gpulab_version);
      r.commit = version_or_dash(p.gpulab_commit);
      return r;
    }
    case InputKind::kAccuracy: {
      const auto& a = std::get<AccuracyReport>(in.data);
      r.gpulab = version_or_dash(a.gpulab_version);
      r.commit = version_or_dash(a.gpulab_commit);
      return r;
    }
    case InputKind::kDoctor: return std::nullopt;
  }
  return std::nullopt;
}

std::string cell(const std::string& text) {
  return text.empty() ? "—" : html::escape(text);
}

std::string severity_badge(doctor::Severity s) {
  switch (s) {
    case doctor::Severity::kFail: return "<span class=\"badge fail\">&#10006; FAIL</span>";
    case doctor::Severity::kWarn: return "<span class=\"badge warn\">&#9888; WARN</span>";
    case doctor::Severity::kSkip: return "<span class=\"badge skip\">&#8211; skip</span>";
    case doctor::Severity::kPass: return "<span class=\"badge pass\">&#10004; pass</span>";
  }
  return "";
}

std::string findings_table(const std::vector<const doctor::Finding*>& findings) {
  html::Table t{.header = {"status", "check", "what was found", "fix"}, .css_class = "data findings"};
  for (const doctor::Finding* f : findings) {
    t.rows.push_back(
        {severity_badge(f->status), html::escape(f->check), html::escape(f->detail),
         f->fix.empty() ? "—" : fmt::format("<span class=\"fix\">{}</span>", html::escape(f->fix))});
    t.row_classes.push_back(f->status == doctor::Severity::kFail   ? "fail"
                            : f->status == doctor::Severity::kWarn ? "warn"
                                                                   : "");
  }
  return html::table(t);
}

}  // namespace

Section environment_section(std::span<const Input> inputs) {
  Section sec{.id = "environment", .title = "Environment"};
  // Which GPUs the results come from: several are allowed, and every plot title names its own.
  std::map<std::string, std::vector<std::string>> gpus;
  for (const Input& in : inputs) {
    if (in.kind == InputKind::kSweep || in.kind == InputKind::kBench || in.kind == InputKind::kBandwidth ||
        in.kind == InputKind::kMonitor)
      gpus[gpu_label(in)].push_back(in.source);
  }
  if (gpus.size() > 1) {
    std::string list;
    for (const auto& [gpu, files] : gpus) {
      std::string names;
      for (const auto& f : files) names += (names.empty() ? "" : ", ") + html::escape(f);
      list += fmt::format("<li><b>{}</b>: {}</li>", html::escape(gpu), names);
    }
    sec.blocks.push_back(html_block(fmt::format(
        "<div class=\"banner info\"><b>Results from {} GPUs.</b> Every plot title names the GPU its data was "
        "measured on; compare numbers across GPUs with care.<ul>{}</ul></div>\n",
        gpus.size(), list)));
    sec.glance.push_back(
        fmt::format("Results from <b>{} different GPUs</b>: every plot title says which.", gpus.size()));
  }
  // One column per result, one row per property: results are few and properties many, so the
  // table keeps to the page's width (fifteen columns did not fit a 1280-pixel window).
  std::vector<EnvRow> rows;
  for (const Input& in : inputs) {
    if (auto row = env_row(in)) rows.push_back(std::move(*row));
  }
  if (!rows.empty()) {
    html::Table t{.header = {""}, .css_class = "data env"};
    for (const EnvRow& r : rows) t.header.push_back("<code>" + cell(r.source) + "</code>");
    const std::pair<const char*, std::string EnvRow::*> properties[] = {
        {"kind", &EnvRow::kind},
        {"GPU / backend", &EnvRow::gpu},
        {"driver", &EnvRow::driver},
        {"CUDA driver", &EnvRow::cuda_driver},
        {"CUDA runtime", &EnvRow::cuda_runtime},
        {"cuDNN", &EnvRow::cudnn},
        {"cuBLAS", &EnvRow::cublas},
        {"power limit", &EnvRow::power_limit},
        {"SM clock", &EnvRow::sm_clock},
        {"memory clock", &EnvRow::memory_clock},
        {"PCIe link", &EnvRow::pcie},
        {"gpulab", &EnvRow::gpulab},
        {"commit", &EnvRow::commit},
        {"measured at", &EnvRow::when}};
    for (const auto& [name, field] : properties) {
      std::vector<std::string> line = {fmt::format("<b>{}</b>", name)};
      for (const EnvRow& r : rows) line.push_back(cell(r.*field));
      t.rows.push_back(std::move(line));
    }
    sec.blocks.push_back(
        html_block("<p>What each result recorded about where it ran (— : not recorded).</p>\n"
                   "<div class=\"scroll\">" +
                   html::table(t) + "</div>\n"));
  }
  for (const Input& in : inputs) {
    if (in.kind != InputKind::kDoctor) continue;
    const auto& findings = std::get<std::vector<doctor::Finding>>(in.data);
    std::vector<const doctor::Finding*> problems, rest;
    for (const auto& f : findings) {
      (f.status == doctor::Severity::kFail || f.status == doctor::Severity::kWarn ? problems : rest)
          .push_back(&f);
    }
    std::stable_sort(problems.begin(), problems.end(),
                     [](const auto* a, const auto* b) { return a->status > b->status; });
    const auto fails = std::count_if(findings.begin(), findings.end(),
                                     [](const auto& f) { return f.status == doctor::Severity::kFail; });
    const auto warns = static_cast<long>(problems.size()) - fails;
    std::string block = fmt::format(
        "<h3>gpulab doctor (<code>{}</code>): {} failed, {} warnings, {} passed or "
        "skipped</h3>\n",
        html::escape(in.source), fails, warns, rest.size());
    if (!problems.empty()) {
      block += findings_table(problems);
    } else {
      block += "<p>No check failed or warned.</p>\n";
    }
    block += html::details(fmt::format("Checks that passed or did not apply ({})", rest.size()),
                           findings_table(rest));
    sec.blocks.push_back(html_block(std::move(block)));
    if (!problems.empty()) {
      sec.glance.push_back(fmt::format(
          "<a href=\"#environment\">Doctor</a>: <b>{} failed, {} warnings</b>; first: {} — <span "
          "class=\"fix\">{}</span>",
          fails, warns, html::escape(problems.front()->check), html::escape(problems.front()->fix)));
    } else {
      sec.glance.push_back("<a href=\"#environment\">Doctor</a>: no check failed or warned.");
    }
  }
  return sec;
}

// ---- Monitor ---------------------------------------------------------------------------------------

namespace {

constexpr size_t kMaxRawRows = 2000;

struct MonitorPlotSpec {
  std::string suffix, what, y_label;
  std::vector<std::pair<std::string, std::string>> fields;  // key, legend suffix
  std::string limit_key, limit_title;                       // a horizontal line from the first reading
  std::string caption;
};

}  // namespace

Section monitor_section(const Input& input, const MonitorLog& log, const std::string& id) {
  const std::string where = gpu_label(input);
  Section sec{.id = id, .title = fmt::format("Monitor: {}", where)};
  const bool timed =
      std::any_of(log.readings.begin(), log.readings.end(), [](const auto& r) { return r.time_s; });
  std::set<int64_t> devices;
  for (const auto& r : log.readings) devices.insert(r.index.value_or(0));
  const double span_s = timed ? log.readings.back().time_s.value_or(0) : 0;
  sec.blocks.push_back(html_block(fmt::format(
      "<p>From <code>{}</code> (<code>gpulab monitor --{}</code>): {} readings of {} GPU{}{}.</p>\n",
      html::escape(input.source), log.format, log.readings.size(), devices.size(),
      devices.size() == 1 ? "" : "s",
      timed ? fmt::format(" over {:.1f} s", span_s) : std::string(" (no timestamps logged)"))));
  for (const std::string& n : log.notes) sec.blocks.push_back(html_block(note(n)));

  const std::vector<MonitorPlotSpec> specs = {
      {"utilization",
       "GPU utilization over time",
       "utilization [%]",
       {{"utilization.gpu", " kernel"}, {"utilization.memory", " memory"}},
       "",
       "",
       "Share of each sample period a kernel ran (solid) and device memory was read or written (dashed)."},
      {"memory",
       "Device memory in use over time",
       "memory used [MiB]",
       {{"memory.used", ""}},
       "memory.total",
       "memory total",
       "Device memory in use by all processes and the driver."},
      {"power",
       "Board power over time",
       "power [W]",
       {{"power.draw", ""}},
       "power.limit",
       "power limit",
       "Board power draw against the enforced power limit."},
      {"clocks",
       "Clocks over time",
       "clock [MHz]",
       {{"clocks.sm", " SM"}, {"clocks.mem", " memory"}},
       "clocks.max.sm",
       "maximum SM clock",
       "SM clock (solid) and memory clock (dashed) against the maximum SM clock."},
  };
  for (const MonitorPlotSpec& spec : specs) {
    Plot plot{.id = fmt::format("{}-{}", id, spec.suffix),
              .title = fmt::format("{}: {}", spec.what, where),
              .x_label = timed ? "time since the first reading [s]" : "reading [#]",
              .y_label = spec.y_label,
              .caption = spec.caption};
    int color = 0;
    for (int64_t device : devices) {
      int dash = 1;
      for (const auto& [key, suffix] : spec.fields) {
        Series s{.title = fmt::format("GPU {}{}", device, suffix),
                 .style = Series::Style::kLines,
                 .color = color,
                 .dash_type = dash++};
        for (size_t i = 0; i < log.readings.size(); ++i) {
          const MonitorReading& r = log.readings[i];
          const auto it = r.values.find(key);
          if (r.index.value_or(0) != device || it == r.values.end()) continue;
          s.x.push_back(timed ? r.time_s.value_or(0) : static_cast<double>(i));
          s.y.push_back(it->second);
        }
        plot.series.push_back(std::move(s));
      }
      if (!spec.limit_key.empty()) {
        // The limit in the y axis's unit: "memory used [MiB]" -> "MiB".
        const std::string_view y_label = spec.y_label;
        const size_t open = y_label.rfind('['), close = y_label.rfind(']');
        const std::string_view unit =
            open != std::string_view::npos && close > open ? y_label.substr(open + 1, close - open - 1) : "";
        for (const MonitorReading& r : log.readings) {
          const auto it = r.values.find(spec.limit_key);
          if (r.index.value_or(0) != device || it == r.values.end()) continue;
          plot.lines.push_back(
              {.axis = ReferenceLine::Axis::kHorizontal,
               .value = it->second,
               .title = fmt::format("GPU {} {} ({:.0f} {})", device, spec.limit_title, it->second, unit),
               .color = color,
               .dash_type = 4});
          break;
        }
      }
      ++color;
    }
    if (plot.has_data()) {
      sec.blocks.push_back(plot_block(std::move(plot)));
    } else {
      sec.blocks.push_back(html_block(note(fmt::format("{}: not logged (or N/A on this GPU).", spec.what))));
    }
  }

  html::Table t{.css_class = "data raw"};
  for (const std::string& f : log.fields) t.header.push_back(html::escape(f));
  for (size_t i = 0; i < std::min(log.readings.size(), kMaxRawRows); ++i) {
    const MonitorReading& r = log.readings[i];
    std::vector<std::string> row;
    for (const std::string& f : log.fields) {
      if (f == "timestamp")
        row.push_back(html::escape(r.timestamp));
      else if (f == "name")
        row.push_back(html::escape(r.name));
      else if (f == "uuid")
        row.push_back(html::escape(r.uuid));
      else if (f == "clocks_event_reasons.names")
        row.push_back(html::escape(r.clock_event_reasons));
      else if (const auto it = r.values.find(f); it != r.values.end())
        row.push_back(fmt::format("{:g}", it->second));
      else
        row.push_back("N/A");
    }
    t.rows.push_back(std::move(row));
  }
  sec.blocks.push_back(html_block(html::details(
      log.readings.size() > kMaxRawRows ? fmt::format("Readings (the first {} of {}; the file has them all)",
                                                      kMaxRawRows, log.readings.size())
                                        : fmt::format("Readings ({})", log.readings.size()),
      "<div class=\"scroll\">" + html::table(t) + "</div>")));

  // At a glance: peak power against the limit, and the clock-event reasons seen.
  std::optional<double> peak, limit;
  std::set<std::string> reasons;
  for (const MonitorReading& r : log.readings) {
    if (auto it = r.values.find("power.draw"); it != r.values.end())
      peak = std::max(peak.value_or(0), it->second);
    if (auto it = r.values.find("power.limit"); it != r.values.end()) limit = it->second;
    if (!r.clock_event_reasons.empty() && r.clock_event_reasons != "none")
      reasons.insert(r.clock_event_reasons);
  }
  std::string line = fmt::format("<a href=\"#{}\">Monitor</a> of {}: {} readings", id, html::escape(where),
                                 log.readings.size());
  if (peak)
    line += fmt::format(", peak power {:.0f} W{}", *peak, limit ? fmt::format(" of {:.0f} W", *limit) : "");
  std::string seen;
  for (const auto& r : reasons) seen += (seen.empty() ? "" : ", ") + html::escape(r);
  if (!seen.empty()) line += fmt::format("; clock-event reasons seen: {}", seen);
  sec.glance.push_back(line + ".");
  return sec;
}

}  // namespace gpulab::report
