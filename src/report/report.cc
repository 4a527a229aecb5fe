#include "report/report.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/file_io.h"
#include "report/html.h"
#include "report/sections.h"

namespace gpulab::report {
namespace {

namespace fs = std::filesystem;

// No network, no script, no font, no external style: the page shows exactly what it holds.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

constexpr std::string_view kStyle = R"css(
:root { --fg: #1b1b1b; --muted: #555; --line: #d9d9d9; --blue: #0072B2; --vermillion: #D55E00; --orange: #E69F00; }
body { font-family: "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; margin: 0; color: var(--fg);
       background: #fff; line-height: 1.45; font-size: 15px; }
header { background: #12324f; color: #fff; padding: 16px 28px 14px; }
header h1 { margin: 0; font-size: 1.55em; font-weight: 600; }
header p { margin: 4px 0 0; color: #d4e3f0; font-size: .9em; }
main { padding: 6px 28px 40px; }
nav.toc { font-size: .9em; margin: 12px 0; }
nav.toc a { display: inline-block; margin-right: 16px; }
a { color: var(--blue); }
section { border-top: 2px solid var(--line); margin-top: 26px; }
h2 { font-size: 1.3em; margin: 16px 0 8px; }
h3 { font-size: 1.05em; margin: 18px 0 6px; }
.glance { background: #eef5fb; border-left: 6px solid var(--blue); padding: 8px 18px; margin-top: 16px; }
.glance h2 { margin: 6px 0; font-size: 1.15em; }
.glance li { margin: 3px 0; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; margin: 12px 0; }
figure.plot { margin: 0; border: 1px solid var(--line); padding: 6px 8px; background: #fff; }
figure.plot svg { width: 100%; height: auto; display: block; }
figure.plot figcaption { font-size: .82em; color: var(--muted); margin-top: 4px; }
figure.missing .placeholder { padding: 28px 12px; background: #f6f6f6; color: var(--muted); text-align: center; }
table.data { border-collapse: collapse; font-size: .84em; margin: 6px 0; }
table.data th { text-align: left; border-bottom: 2px solid #bbb; padding: 3px 8px; background: #f7f7f7; }
table.data td { border-bottom: 1px solid #e8e8e8; padding: 3px 8px; vertical-align: top; }
table.data .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.fail td { background: #fbe1d2; }
tr.warn td { background: #fdf0d0; }
tr.best td { background: #dcecf8; font-weight: 600; }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; font-weight: 700; white-space: nowrap; }
.badge.fail { background: var(--vermillion); color: #fff; }
.badge.warn { background: var(--orange); color: #000; }
.badge.pass { color: #00704f; }
.badge.skip { color: var(--muted); }
.fix { font-weight: 700; background: #fff6c7; padding: 0 2px; }
.banner { padding: 8px 14px; border-left: 6px solid; margin: 10px 0; }
.banner.warn { background: #fdf0d0; border-color: var(--orange); }
.banner.info { background: #e6f1fa; border-color: var(--blue); }
.banner ul { margin: 4px 0; }
.verdict { font-family: "DejaVu Sans Mono", monospace; font-size: .95em; background: #eef1f6; padding: 0 3px;
           white-space: nowrap; }
.tag { font-size: .8em; background: var(--orange); color: #000; padding: 0 5px; border-radius: 3px; }
.note { color: var(--muted); font-style: italic; }
details { margin: 10px 0; }
summary { cursor: pointer; color: var(--blue); }
.scroll { overflow-x: auto; }
footer { color: var(--muted); font-size: .82em; padding: 18px 28px; border-top: 1px solid var(--line); }
code { font-family: "DejaVu Sans Mono", monospace; font-size: .92em; }
)css";

std::string default_title(std::span<const Input> inputs) {
  // Where each result ran: GPUs, and the backends of a pipeline or accuracy run (a pipeline on the
  // CPU beside a GPU's sweep is not "on" that GPU).
  std::set<std::string> models, gpus, places;
  for (const Input& in : inputs) {
    if (const std::string m = model_label(in); !m.empty()) models.insert(m);
    if (in.kind == InputKind::kDoctor) continue;
    places.insert(gpu_label(in));
    if (in.kind == InputKind::kSweep || in.kind == InputKind::kBench || in.kind == InputKind::kBandwidth ||
        in.kind == InputKind::kMonitor)
      gpus.insert(gpu_label(in));
  }
  std::string what = models.size() == 1 ? *models.begin() : fmt::format("{} results", inputs.size());
  if (places.size() == 1) return fmt::format("gpulab report: {} on {}", what, *places.begin());
  if (places.size() > 1 && places.size() == gpus.size())
    return fmt::format("gpulab report: {} on {} GPUs", what, gpus.size());
  if (places.size() > 1 && places.size() <= 3) {
    std::string where;
    size_t i = 0;
    for (const std::string& p : places) {
      where += (i == 0 ? "" : i + 1 == places.size() ? " and " : ", ") + p;
      ++i;
    }
    return fmt::format("gpulab report: {} on {}", what, where);
  }
  if (places.size() > 3)
    return fmt::format("gpulab report: {} from {} GPUs and backends", what, places.size());
  return fmt::format("gpulab report: {}", what);
}

std::string figure(const Plot& plot, const ReportOptions& options, ReportOutput& out) {
  ++out.plots;
  out.csv_files.emplace_back(plot.id + ".csv", plot_csv(plot));
  std::string reason;
  if (options.gnuplot.empty()) {
    reason = options.gnuplot_missing.empty() ? "gnuplot is not available" : options.gnuplot_missing;
  } else {
    auto svg = render_plot(plot, options.gnuplot, options.gnuplot_timeout);
    if (svg.is_ok()) {
      ++out.plots_drawn;
      return fmt::format("<figure class=\"plot\" id=\"{}\">\n{}\n<figcaption>{}</figcaption></figure>\n",
                         plot.id, *svg, html::escape(plot.caption));
    }
    reason = svg.status().message();
    out.warnings.push_back(fmt::format("plot '{}' not drawn: {}", plot.id, reason));
  }
  return fmt::format(
      "<figure class=\"plot missing\" id=\"{}\"><div class=\"placeholder\"><b>{}</b><br>Plot not drawn: "
      "{}.<br>Its "
      "data is in the tables of this section (and in {}.csv with --csv-dir).</div><figcaption>{}</figcaption>"
      "</figure>\n",
      plot.id, html::escape(plot.title), html::escape(reason), plot.id, html::escape(plot.caption));
}

// A section's blocks; consecutive plots share a grid.
std::string render_section(const Section& s, const ReportOptions& options, ReportOutput& out) {
  std::string body = fmt::format("<section id=\"{}\">\n<h2>{}</h2>\n", s.id, html::escape(s.title));
  bool in_grid = false;
  for (const Block& b : s.blocks) {
    if (b.plot && !in_grid) {
      body += "<div class=\"plots\">\n";
      in_grid = true;
    } else if (!b.plot && in_grid) {
      body += "</div>\n";
      in_grid = false;
    }
    body += b.plot ? figure(*b.plot, options, out) : b.html;
  }
  if (in_grid) body += "</div>\n";
  return body + "</section>\n";
}

}  // namespace

Result<ReportOutput> build_report(std::span<const Input> inputs, const ReportOptions& options) {
  if (inputs.empty()) {
    return Status::invalid_argument(
        "report: no result file. Give the JSON (or monitor CSV) files that gpulab sweep, bench, pipeline, "
        "accuracy, "
        "bandwidth, doctor or monitor wrote");
  }
  std::vector<Section> sections;
  if (Section env = environment_section(inputs); !env.blocks.empty()) sections.push_back(std::move(env));
  std::map<InputKind, int> count;
  for (InputKind kind : {InputKind::kSweep, InputKind::kBench, InputKind::kPipeline, InputKind::kAccuracy,
                         InputKind::kBandwidth, InputKind::kMonitor}) {
    for (const Input& in : inputs) {
      if (in.kind != kind) continue;
      const std::string id = fmt::format("{}-{}", input_kind_name(kind), ++count[kind]);
      switch (kind) {
        case InputKind::kSweep:
          sections.push_back(sweep_section(in, std::get<sweep::SweepResult>(in.data), id));
          break;
        case InputKind::kBench:
          sections.push_back(bench_section(in, std::get<measure::BenchResult>(in.data), id));
          break;
        case InputKind::kPipeline:
          sections.push_back(pipeline_section(in, std::get<PipelineReport>(in.data), id));
          break;
        case InputKind::kAccuracy:
          sections.push_back(accuracy_section(in, std::get<AccuracyReport>(in.data), id));
          break;
        case InputKind::kBandwidth:
          sections.push_back(bandwidth_section(in, std::get<measure::BandwidthReport>(in.data), id));
          break;
        case InputKind::kMonitor:
          sections.push_back(monitor_section(in, std::get<MonitorLog>(in.data), id));
          break;
        case InputKind::kDoctor: break;
      }
    }
  }

  ReportOutput out;
  const std::string title = options.title.empty() ? default_title(inputs) : options.title;
  std::string body;
  for (const Section& s : sections) body += render_section(s, options, out);
  if (options.gnuplot.empty() && out.plots > 0) {
    out.warnings.insert(
        out.warnings.begin(),
        fmt::format("{}: the page has its tables but none of its {} plots",
                    options.gnuplot_missing.empty() ? "gnuplot is not available" : options.gnuplot_missing,
                    out.plots));
  }

  std::string glance;
  for (const Section& s : sections) {
    for (const std::string& line : s.glance) glance += "<li>" + line + "</li>\n";
  }
  std::string toc;
  for (const Section& s : sections)
    toc += fmt::format("<a href=\"#{}\">{}</a>\n", s.id, html::escape(s.title));
  std::string sources;
  for (const Input& in : inputs) {
    sources += fmt::format("{}<code>{}</code> ({})", sources.empty() ? "" : ", ", html::escape(in.source),
                           input_kind_name(in.kind));
  }
  std::string banner;
  if (options.gnuplot.empty() && out.plots > 0) {
    banner = fmt::format(
        "<div class=\"banner warn\"><b>No plots:</b> {}. The tables below have every number.</div>\n",
        html::escape(options.gnuplot_missing.empty() ? "gnuplot is not available" : options.gnuplot_missing));
  }
  out.html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta name=\"generator\" content=\"{}\">\n<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n"
      "<header><h1>{}</h1><p>{} result file{}: {}</p></header>\n<main>\n{}"
      "<div class=\"glance\" id=\"glance\"><h2>At a glance</h2>\n<ul>\n{}</ul></div>\n"
      "<nav class=\"toc\">{}</nav>\n{}</main>\n"
      "<footer>Made by {}{}. Every metric is defined in gpulab's docs/metrics.md and docs/telemetry.md; the "
      "plots "
      "were drawn by gnuplot. Colors: Okabe and Ito's palette, with point shapes and dash patterns that tell "
      "series apart without color.</footer>\n</body>\n</html>\n",
      kContentSecurityPolicy, html::escape(options.generator), html::escape(title), kStyle,
      html::escape(title), inputs.size(), inputs.size() == 1 ? "" : "s", sources, banner, glance, toc, body,
      html::escape(options.generator.empty() ? "gpulab" : options.generator),
      options.generated_at.empty() ? "" : " on " + html::escape(options.generated_at));
  return out;
}

Status write_report(const ReportFiles& files, const ReportOutput& output) {
  if (!files.csv_dir.empty()) {
    std::error_code ec;
    if (fs::exists(files.csv_dir, ec) && !fs::is_directory(files.csv_dir, ec)) {
      return Status::invalid_argument(
          fmt::format("--csv-dir: '{}' is a file, not a folder. Give a folder (it is created when missing)",
                      files.csv_dir.string()));
    }
    fs::create_directories(files.csv_dir, ec);
    if (ec) {
      return Status::io_error(
          fmt::format("--csv-dir: cannot create '{}' ({})", files.csv_dir.string(), ec.message()));
    }
    for (const auto& [name, text] : output.csv_files) {
      GPULAB_TRY(write_file_atomic(files.csv_dir / name, text).with_context("--csv-dir"));
    }
  }
  return write_file_atomic(files.html_path, output.html).with_context("-o");
}

}  // namespace gpulab::report
