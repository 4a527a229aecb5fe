// The sweep's section: throughput, latency, power, clock, energy and PCIe traffic against the
// batch per precision, the recommendation and what limits each point.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "report/html.h"
#include "report/sections.h"

namespace gpulab::report {
namespace {

using sweep::PointStatus;
using sweep::SweepPoint;
using sweep::SweepResult;

// One curve of the sweep: a precision, under one power limit when the sweep had that axis.
struct Curve {
  Precision precision = Precision::kFp32;
  std::optional<double> power_limit_w;
  std::string name;                       // "fp16", "fp16 @ 300 W"
  std::vector<const SweepPoint*> points;  // measured (status ok), in batch order
};

std::string curve_name(Precision precision, const std::optional<double>& limit) {
  if (!limit) return std::string(precision_name(precision));
  return fmt::format("{} @ {:.0f} W", precision_name(precision), *limit);
}

std::vector<Curve> curves_of(const SweepResult& s) {
  std::vector<Curve> out;
  for (const SweepPoint& p : s.points) {
    if (p.status != PointStatus::kOk || !p.bench) continue;
    const std::string name = curve_name(p.precision, p.power_limit_w);
    auto it = std::find_if(out.begin(), out.end(), [&](const Curve& c) { return c.name == name; });
    if (it == out.end()) {
      out.push_back(Curve{.precision = p.precision, .power_limit_w = p.power_limit_w, .name = name});
      it = out.end() - 1;
    }
    it->points.push_back(&p);
  }
  for (Curve& c : out) {
    std::sort(c.points.begin(), c.points.end(),
              [](const SweepPoint* a, const SweepPoint* b) { return a->batch < b->batch; });
  }
  return out;
}

std::optional<double> percentile(const measure::Summary& s, double p) {
  const double* v = s.find_percentile(p);
  if (v) return *v;
  return p == 50 ? std::optional(s.median) : std::nullopt;
}

// A series per curve of `value(point)`, in the curve's color and point type.
template <typename F>
std::vector<Series> curve_series(const std::vector<Curve>& curves, F value, int dash_type = 1,
                                 std::string_view suffix = "") {
  std::vector<Series> out;
  for (size_t i = 0; i < curves.size(); ++i) {
    const Curve& c = curves[i];
    const std::string_view p = precision_name(c.precision);
    Series s{.title = c.name + std::string(suffix),
             .color = precision_color(p),
             .point_type = precision_point(p),
             .dash_type = dash_type};
    // Curves of one precision under several power limits: a dash pattern per limit.
    if (c.power_limit_w) {
      int limit_index = 0;
      for (size_t j = 0; j < i; ++j) limit_index += curves[j].precision == c.precision ? 1 : 0;
      s.dash_type = dash_type + limit_index;
    }
    for (const SweepPoint* point : c.points) {
      const std::optional<double> v = value(*point);
      if (!v) continue;
      s.x.push_back(static_cast<double>(point->batch));
      s.y.push_back(*v);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::pair<double, std::string>> batch_tics(const SweepResult& s) {
  int64_t lo = 0, hi = 0;
  for (const SweepPoint& p : s.points) {
    lo = lo ? std::min(lo, p.batch) : p.batch;
    hi = std::max(hi, p.batch);
  }
  std::vector<std::pair<double, std::string>> out;
  for (int64_t b = 1; b <= std::max<int64_t>(hi, 1) * 2; b *= 2) {
    if (b * 2 >= lo) out.emplace_back(static_cast<double>(b), std::to_string(b));
  }
  return out;
}

Plot batch_plot(const SweepResult& s, const std::string& id, std::string what, const std::string& where) {
  return Plot{.id = id,
              .title = fmt::format("{}: {}", what, where),
              .x_label = "batch [images]",
              .log_x = true,
              .log_x_base = 2,
              .x_tics = batch_tics(s)};
}

// The out-of-memory wall: one vertical line per distinct first-OOM batch, naming the precisions.
std::vector<ReferenceLine> oom_lines(const SweepResult& s) {
  std::map<int64_t, std::vector<const sweep::PrecisionRecommendation*>> walls;
  for (const auto& r : s.recommendations) {
    if (r.first_oom_batch) walls[*r.first_oom_batch].push_back(&r);
  }
  std::vector<ReferenceLine> out;
  for (const auto& [batch, recs] : walls) {
    std::string who;
    for (const auto* r : recs) who += (who.empty() ? "" : ", ") + curve_name(r->precision, r->power_limit_w);
    // One precision's wall in its color; a wall several precisions share in black.
    out.push_back(
        {.axis = ReferenceLine::Axis::kVertical,
         .value = static_cast<double>(batch),
         .title = fmt::format("out of memory at {} ({})", batch, who),
         .color = recs.size() == 1 ? precision_color(precision_name(recs.front()->precision)) : kBlack,
         .dash_type = 2});
  }
  return out;
}

Plot throughput_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
                     const std::string& where) {
  Plot plot = batch_plot(s, id + "-throughput", "Throughput vs batch", where);
  plot.y_label = "throughput [images/s]";
  plot.series =
      curve_series(curves, [](const SweepPoint& p) { return std::optional(p.bench->throughput_ips); });
  Series best{.title = "best batch",
              .style = Series::Style::kPoints,
              .color = kBlack,
              .point_type = 6,
              .point_size = 2.4,
              .line_width = 2};
  Series knee{.title = "knee",
              .style = Series::Style::kPoints,
              .color = kBlack,
              .point_type = 12,
              .point_size = 2.4,
              .line_width = 2};
  for (const auto& r : s.recommendations) {
    if (r.best_batch && r.best_throughput_ips) {
      best.x.push_back(static_cast<double>(*r.best_batch));
      best.y.push_back(*r.best_throughput_ips);
    }
    if (r.knee_batch && r.knee_throughput_ips) {
      knee.x.push_back(static_cast<double>(*r.knee_batch));
      knee.y.push_back(*r.knee_throughput_ips);
    }
  }
  plot.series.push_back(std::move(best));
  plot.series.push_back(std::move(knee));
  plot.lines = oom_lines(s);
  plot.caption = fmt::format(
      "Images per second of host wall time at each batch that fit. Open circles: the recommended batch of "
      "each "
      "precision (highest throughput{}); open diamonds: the knee (smallest batch within {:.0f}% of it); "
      "dashed "
      "vertical lines: the first batch that ran out of device memory.",
      s.options.latency_budget_ms
          ? fmt::format(" with p99 latency within {} ms", html::ms(s.options.latency_budget_ms))
          : std::string(),
      (1 - s.options.knee_fraction) * 100);
  return plot;
}

Plot latency_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
                  const std::string& where) {
  Plot plot = batch_plot(s, id + "-latency", "p50 and p99 latency vs batch", where);
  plot.y_label = "latency per batch [ms]";
  plot.log_y = true;
  plot.series = curve_series(
      curves, [](const SweepPoint& p) { return percentile(p.bench->latency_ms, 99); }, 1, " p99");
  for (Series& p50 : curve_series(
           curves, [](const SweepPoint& p) { return percentile(p.bench->latency_ms, 50); }, 2, " p50")) {
    p50.point_type = 6;  // open circles: the median, beside the filled p99 markers
    plot.series.push_back(std::move(p50));
  }
  if (s.options.latency_budget_ms) {
    plot.lines.push_back({.axis = ReferenceLine::Axis::kHorizontal,
                          .value = *s.options.latency_budget_ms,
                          .title = fmt::format("p99 budget {} ms", html::ms(s.options.latency_budget_ms)),
                          .color = kBlack,
                          .dash_type = 4});
  }
  plot.caption = fmt::format(
      "Latency of one batch (H2D + GPU compute + D2H, {}), from device events; solid: "
      "p99, dashed: p50 (nearest-rank percentiles).",
      s.options.include_transfers ? "transfers included" : "transfers not included");
  return plot;
}

std::optional<double> max_of(const SweepResult& s, std::optional<double> sweep::PointTelemetry::*field) {
  std::optional<double> out;
  for (const SweepPoint& p : s.points) {
    const auto& v = p.telemetry.*field;
    if (v && (!out || *v > *out)) out = v;
  }
  return out;
}

Plot power_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
                const std::string& where) {
  Plot plot = batch_plot(s, id + "-power", "Board power vs batch", where);
  plot.y_label = "mean power [W]";
  plot.series = curve_series(curves, [](const SweepPoint& p) { return p.telemetry.power_mean_w; });
  std::vector<double> limits = s.options.power_limits_w;
  if (limits.empty()) {
    if (auto limit = max_of(s, &sweep::PointTelemetry::power_limit_w))
      limits.push_back(*limit);
    else if (s.environment.power_limit_w)
      limits.push_back(*s.environment.power_limit_w);
  }
  for (double limit : limits) {
    plot.lines.push_back({.axis = ReferenceLine::Axis::kHorizontal,
                          .value = limit,
                          .title = fmt::format("power limit {:.0f} W", limit),
                          .color = kBlack,
                          .dash_type = 2});
  }
  plot.caption = "Mean board power over each point's timed window (NVML), against the enforced power limit.";
  return plot;
}

Plot clock_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
                const std::string& where) {
  Plot plot = batch_plot(s, id + "-clock", "SM clock vs batch", where);
  plot.y_label = "mean SM clock [MHz]";
  plot.series = curve_series(curves, [](const SweepPoint& p) { return p.telemetry.sm_clock_mean_mhz; });
  std::optional<double> max_clock = s.environment.sm_clock_max_mhz;
  if (!max_clock) max_clock = max_of(s, &sweep::PointTelemetry::sm_clock_max_mhz);
  if (max_clock) {
    plot.lines.push_back({.axis = ReferenceLine::Axis::kHorizontal,
                          .value = *max_clock,
                          .title = fmt::format("maximum SM clock {:.0f} MHz", *max_clock),
                          .color = kBlack,
                          .dash_type = 2});
  }
  plot.caption =
      "Mean SM clock over each point's timed window; below the maximum, the power limit or "
      "temperature holds it down (see the verdicts).";
  return plot;
}

Plot energy_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
                 const std::string& where) {
  Plot plot = batch_plot(s, id + "-energy", "Energy per image vs batch", where);
  plot.y_label = "energy per image [mJ]";
  plot.series = curve_series(curves, [](const SweepPoint& p) -> std::optional<double> {
    if (!p.telemetry.energy_per_image_j) return std::nullopt;
    return *p.telemetry.energy_per_image_j * 1000;
  });
  plot.caption =
      "Board energy per image (NVML's energy counter over the window, else mean power x time), "
      "in millijoules: lower is better.";
  return plot;
}

Plot pcie_plot(const SweepResult& s, const std::vector<Curve>& curves, const std::string& id,
               const std::string& where) {
  Plot plot = batch_plot(s, id + "-pcie", "PCIe traffic per image vs batch", where);
  plot.y_label = "PCIe bytes per image [KiB]";
  plot.series = curve_series(
      curves,
      [](const SweepPoint& p) -> std::optional<double> {
        if (!p.telemetry.pcie_rx_bytes_per_image) return std::nullopt;
        return *p.telemetry.pcie_rx_bytes_per_image / 1024;
      },
      1, " host to device");
  for (Series& tx : curve_series(
           curves,
           [](const SweepPoint& p) -> std::optional<double> {
             if (!p.telemetry.pcie_tx_bytes_per_image) return std::nullopt;
             return *p.telemetry.pcie_tx_bytes_per_image / 1024;
           },
           2, " device to host")) {
    tx.point_type = 6;
    plot.series.push_back(std::move(tx));
  }
  for (const SweepPoint& p : s.points) {
    if (p.status == PointStatus::kOk && p.plan.input_bytes_per_image > 0) {
      const double kib = static_cast<double>(p.plan.input_bytes_per_image) / 1024;
      plot.lines.push_back({.axis = ReferenceLine::Axis::kHorizontal,
                            .value = kib,
                            .title = fmt::format("float32 input: {:.0f} KiB per image", kib),
                            .color = kBlack,
                            .dash_type = 2});
      break;
    }
  }
  plot.caption = fmt::format(
      "PCIe traffic NVML counted during each point, per image, beside the bytes the "
      "input copy moves; transfers were {}included in the timed loop.",
      s.options.include_transfers ? "" : "not ");
  return plot;
}

std::string limiting(const SweepPoint& p) {
  return p.verdicts.empty() ? std::string("—") : std::string(sweep::verdict_name(p.verdicts.front().kind));
}

std::string recommendation_table(const SweepResult& s) {
  html::Table t{
      .header = {"precision", "best batch", "images/s", "p99 [ms]", "knee batch", "knee images/s",
                 "largest batch that fits", "first batch out of memory", "agreement with FP32", "why none"},
      .css_class = "data",
      .numeric = {false, true, true, true, true, true, true, true, true, false}};
  double best = 0;
  for (const auto& r : s.recommendations) best = std::max(best, r.best_throughput_ips.value_or(0));
  for (const auto& r : s.recommendations) {
    std::string agreement = "—";
    if (r.accuracy) {
      agreement = fmt::format("{} ({})", html::percent(r.accuracy->agreement, 2),
                              r.accuracy_passed.value_or(true) ? "passes" : "fails the gate");
    }
    auto batch = [](const std::optional<int64_t>& b) { return b ? std::to_string(*b) : std::string("—"); };
    t.rows.push_back({html::escape(curve_name(r.precision, r.power_limit_w)), batch(r.best_batch),
                      html::number(r.best_throughput_ips), html::ms(r.best_p99_ms), batch(r.knee_batch),
                      html::number(r.knee_throughput_ips), batch(r.largest_fitting_batch),
                      batch(r.first_oom_batch), agreement, html::escape(r.excluded)});
    t.row_classes.push_back(r.best_throughput_ips && *r.best_throughput_ips == best && best > 0 ? "best"
                                                                                                : "");
  }
  return html::table(t);
}

// Consecutive batches of one curve with the same limiting verdict, as one row: what limits where.
std::string verdict_table(const std::vector<Curve>& curves) {
  html::Table t{.header = {"precision", "batches", "limited by",
                           "evidence (at the largest batch of the range)", "also"},
                .css_class = "data verdicts"};
  for (const Curve& c : curves) {
    size_t i = 0;
    while (i < c.points.size()) {
      size_t j = i;
      while (j + 1 < c.points.size() && limiting(*c.points[j + 1]) == limiting(*c.points[i])) ++j;
      const SweepPoint& last = *c.points[j];
      std::string also;
      for (size_t v = 1; v < last.verdicts.size(); ++v) {
        also +=
            fmt::format("{}<span class=\"verdict\">{}</span> {}", also.empty() ? "" : "<br>",
                        sweep::verdict_name(last.verdicts[v].kind), html::escape(last.verdicts[v].evidence));
      }
      const std::string batches =
          i == j ? std::to_string(c.points[i]->batch) : fmt::format("{}–{}", c.points[i]->batch, last.batch);
      t.rows.push_back({html::escape(c.name), batches,
                        fmt::format("<span class=\"verdict\">{}</span>", html::escape(limiting(last))),
                        last.verdicts.empty() ? "—" : html::escape(last.verdicts.front().evidence),
                        also.empty() ? "—" : also});
      i = j + 1;
    }
  }
  return html::table(t);
}

// The sweep's own CSV (sweep::to_csv, one row per point) as a table.
std::string points_table(const SweepResult& s) {
  const std::string csv = sweep::to_csv(s);
  html::Table t{.css_class = "data raw"};
  size_t start = 0;
  bool header = true;
  while (start < csv.size()) {
    size_t end = csv.find('\n', start);
    if (end == std::string::npos) end = csv.size();
    std::vector<std::string> cells;
    std::string_view line(csv.data() + start, end - start);
    size_t from = 0;
    while (true) {
      const size_t comma = line.find(',', from);
      cells.push_back(
          html::escape(line.substr(from, comma == std::string_view::npos ? line.npos : comma - from)));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    if (header) {
      t.header = std::move(cells);
      header = false;
    } else {
      t.rows.push_back(std::move(cells));
    }
    start = end + 1;
  }
  return html::table(t);
}

}  // namespace

Section sweep_section(const Input& input, const SweepResult& s, const std::string& id) {
  const std::string where = fmt::format("{} on {}", model_label(input), gpu_label(input));
  Section sec{.id = id, .title = fmt::format("Sweep: {}", where)};
  const std::vector<Curve> curves = curves_of(s);
  int ok = 0, oom = 0, failed = 0;
  for (const SweepPoint& p : s.points) {
    ok += p.status == PointStatus::kOk;
    oom += p.status == PointStatus::kOom;
    failed += p.status == PointStatus::kFailed;
  }
  std::string intro;
  if (s.target.kind == "simulated") {
    intro +=
        "<p class=\"banner warn\"><b>Simulated sweep.</b> These numbers come from gpulab's simulated GPU "
        "(<code>gpulab sweep --simulate</code>): nothing here is a measurement of any hardware.</p>\n";
  }
  if (s.state != "complete") {
    intro += fmt::format(
        "<p class=\"banner warn\">The sweep is <b>{}</b>{}: the page shows the points it finished.</p>\n",
        html::escape(s.state), s.error.empty() ? "" : " (" + html::escape(s.error) + ")");
  }
  intro += fmt::format(
      "<p>From <code>{}</code>: {} points ({} measured, {} out of memory, {} failed) in {:.1f} s; transfers "
      "{}; "
      "CUDA graphs {}; at least {} s per point{}.</p>\n",
      html::escape(input.source), s.points.size(), ok, oom, failed, s.seconds,
      s.options.include_transfers ? "included" : "not included", s.options.bench.cuda_graph ? "on" : "off",
      s.options.bench.min_duration_s,
      s.options.latency_budget_ms
          ? fmt::format("; p99 latency budget {} ms", html::ms(s.options.latency_budget_ms))
          : std::string());
  const sweep::SweepTime t = sweep::sweep_time(s);
  intro += fmt::format(
      "<p>Where the time went: plan builds {:.1f} s ({} plans{}), accuracy gates {:.1f} s, timed windows "
      "{:.1f} s, the rest {:.1f} s (warm-ups, contexts, out-of-memory attempts, ceilings).</p>\n",
      t.builds, t.plans, html::escape(sweep::timed_builds_note(t)), t.gates, t.windows, t.rest);
  sec.blocks.push_back(html_block(intro));
  sec.blocks.push_back(html_block("<h3>Recommendation</h3>\n" + recommendation_table(s)));
  if (curves.empty()) {
    sec.blocks.push_back(html_block(note("No point of this sweep was measured: nothing to plot.")));
  } else {
    sec.blocks.push_back(plot_block(throughput_plot(s, curves, id, where)));
    sec.blocks.push_back(plot_block(latency_plot(s, curves, id, where)));
    for (Plot p : {power_plot(s, curves, id, where), clock_plot(s, curves, id, where),
                   energy_plot(s, curves, id, where), pcie_plot(s, curves, id, where)}) {
      if (p.has_data()) {
        sec.blocks.push_back(plot_block(std::move(p)));
      } else {
        sec.blocks.push_back(
            html_block(note(fmt::format("{}: no telemetry reading in this sweep.", p.title))));
      }
    }
    sec.blocks.push_back(html_block("<h3>What limits each batch</h3>\n" + verdict_table(curves)));
  }
  if (const sweep::PointWarnings w = sweep::point_warnings(s); !w.listed.empty() || w.unstable > 0) {
    std::string block = "<h3>Warnings</h3>\n";
    if (!w.listed.empty()) {
      block += "<ul>\n";
      for (const auto& [p, text] : w.listed)
        block += fmt::format("<li>{} batch {}: {}</li>\n",
                             html::escape(curve_name(p->precision, p->power_limit_w)), p->batch,
                             html::escape(text));
      block += "</ul>\n";
    }
    if (w.unstable > 0)
      block += note(fmt::format(
          "{} of {} measured points were unstable (GPU compute's coefficient of variation above the "
          "threshold): their medians may not repeat.",
          w.unstable, w.measured));
    sec.blocks.push_back(html_block(block));
  }
  sec.blocks.push_back(html_block(html::details(
      fmt::format("Every point ({} rows, the sweep's CSV)", s.points.size()), points_table(s))));

  // At a glance: the highest recommended throughput, and what limits it.
  const sweep::PrecisionRecommendation* top = nullptr;
  for (const auto& r : s.recommendations) {
    // Both fields: a file may hold one without the other (sweep_from_json asks for both only when
    // nothing was excluded).
    if (r.best_throughput_ips && r.best_batch && (!top || *r.best_throughput_ips > *top->best_throughput_ips))
      top = &r;
  }
  if (top) {
    std::string why;
    for (const SweepPoint& p : s.points) {
      if (p.precision == top->precision && p.power_limit_w == top->power_limit_w &&
          p.batch == *top->best_batch && !p.verdicts.empty())
        why = fmt::format(", limited there by <span class=\"verdict\">{}</span>",
                          sweep::verdict_name(p.verdicts[0].kind));
    }
    sec.glance.push_back(
        fmt::format("<a href=\"#{}\">Sweep</a> of {}: run <b>{} at batch {}</b>: {} images/s, p99 {} ms{}{}.",
                    id, html::escape(where), html::escape(curve_name(top->precision, top->power_limit_w)),
                    *top->best_batch, html::number(top->best_throughput_ips), html::ms(top->best_p99_ms),
                    top->knee_batch ? fmt::format(" (knee: batch {})", *top->knee_batch) : "", why));
  } else {
    sec.glance.push_back(fmt::format("<a href=\"#{}\">Sweep</a> of {}: no batch recommended (see why).", id,
                                     html::escape(where)));
  }
  if (s.target.kind == "simulated") sec.glance.back() += " <span class=\"tag\">simulated</span>";
  return sec;
}

}  // namespace gpulab::report
