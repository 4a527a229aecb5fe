// The sections of one bench run (timing statistics, per-layer profile, roofline) and of one
// bandwidth test (GB/s against transfer size, per direction and host memory kind).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "report/html.h"
#include "report/sections.h"

namespace gpulab::report {
namespace {

using measure::BenchResult;
using measure::LayerProfileRow;

constexpr size_t kMaxBars = 30;        // per-layer bars: the slowest layers
constexpr size_t kWorstLayers = 10;    // the table of layers furthest from their roofline
constexpr size_t kLabelledLayers = 5;  // named on the roofline chart

std::string statistics_table(const BenchResult& b) {
  const std::vector<double>& percentiles = b.options.percentiles;
  html::Table t{.header = {"metric [ms]", "min", "mean", "median"}, .css_class = "data"};
  for (double p : percentiles) t.header.push_back(measure::percentile_name(p));
  t.header.push_back("max");
  t.header.push_back("CoV");
  t.numeric.assign(t.header.size(), true);
  t.numeric[0] = false;
  auto row = [&](const char* name, const measure::Summary& s) {
    std::vector<std::string> r = {name, html::ms(s.min), html::ms(s.mean), html::ms(s.median)};
    for (double p : percentiles) {
      const double* v = s.find_percentile(p);
      r.push_back(v ? html::ms(*v) : "—");
    }
    r.push_back(html::ms(s.max));
    r.push_back(html::percent(s.cov, 2));
    t.rows.push_back(std::move(r));
  };
  row("latency", b.latency_ms);
  row("GPU compute", b.gpu_compute_ms);
  if (b.h2d_ms) row("H2D", *b.h2d_ms);
  if (b.d2h_ms) row("D2H", *b.d2h_ms);
  row("enqueue", b.enqueue_ms);
  return html::table(t);
}

std::string profile_table(const std::vector<const LayerProfileRow*>& rows) {
  html::Table t{.header = {"layer", "kind", "tactic", "precision", "GPU time [ms]", "share", "TFLOP/s",
                           "GB/s", "roofline [ms]", "x roofline", "bound"},
                .css_class = "data",
                .numeric = {false, false, false, false, true, true, true, true, true, true, false}};
  for (const LayerProfileRow* r : rows) {
    t.rows.push_back({html::escape(r->layer.name), html::escape(r->layer.kind), html::escape(r->layer.tactic),
                      html::escape(r->layer.precision), html::ms(r->layer.gpu_ms), html::percent(r->share),
                      html::number(r->achieved_tflops, 2), html::number(r->achieved_gb_s, 0),
                      html::ms(r->roofline_ms),
                      r->roofline_factor ? fmt::format("{:.1f}", *r->roofline_factor) : "—",
                      html::escape(r->bound.empty() ? "—" : r->bound)});
  }
  return html::table(t);
}

int bound_group(const LayerProfileRow& r) {
  return r.bound == "compute" ? 0 : r.bound == "memory" ? 1 : 2;
}

Plot layer_bars(const BenchResult& b, const std::string& id, const std::string& where) {
  std::vector<const LayerProfileRow*> rows;
  for (const auto& r : b.profile) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto* x, const auto* y) { return x->layer.gpu_ms > y->layer.gpu_ms; });
  const size_t shown = std::min(rows.size(), kMaxBars);
  Plot plot{.id = id + "-layers",
            .title = fmt::format("GPU time per layer: {}", where),
            .x_label = "median GPU time [ms]",
            .bar_groups = {"compute-bound roofline", "memory-bound roofline", "no roofline (no ceilings)"}};
  double shown_ms = 0, total_ms = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    total_ms += rows[i]->layer.gpu_ms;
    if (i >= shown) continue;
    shown_ms += rows[i]->layer.gpu_ms;
    plot.bars.push_back(
        {.label = rows[i]->layer.name, .value = rows[i]->layer.gpu_ms, .group = bound_group(*rows[i])});
  }
  plot.caption = fmt::format(
      "The {} slowest of {} layers ({} of the profiled time), slowest first; each the median over the "
      "profile's "
      "eager runs. Color: which term of the layer's roofline is larger.",
      shown, rows.size(), html::percent(total_ms > 0 ? shown_ms / total_ms : 0.0, 0));
  return plot;
}

Plot roofline_plot(const BenchResult& b, const std::string& id, const std::string& where) {
  const measure::Ceilings& c = *b.ceilings;
  Plot plot{.id = id + "-roofline",
            .title = fmt::format("Roofline: {}", where),
            .x_label = "arithmetic intensity [FLOP/byte]",
            .y_label = "achieved [TFLOP/s]",
            .log_x = true,
            .log_y = true};
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  Series compute{.title = "layers, compute-bound roofline",
                 .style = Series::Style::kPoints,
                 .color = 0,
                 .point_type = 7,
                 .point_size = 1.1};
  Series memory{.title = "layers, memory-bound roofline",
                .style = Series::Style::kPoints,
                .color = 1,
                .point_type = 9,
                .point_size = 1.1};
  std::vector<const LayerProfileRow*> far;
  for (const auto& r : b.profile) {
    if (r.layer.flops <= 0 || r.layer.bytes <= 0 || r.achieved_tflops <= 0) continue;
    const double ai = r.layer.flops / r.layer.bytes;
    lo = std::min(lo, ai);
    hi = std::max(hi, ai);
    Series& s = r.bound == "memory" ? memory : compute;
    s.x.push_back(ai);
    s.y.push_back(r.achieved_tflops);
    if (r.roofline_factor) far.push_back(&r);
  }
  plot.series = {compute, memory};
  if (!std::isfinite(lo)) return plot;
  // The roofline: min(compute ceiling, bandwidth x intensity), over the layers' range and its ridge.
  const double ridge = c.tflops * 1000 / c.memory_gb_s;  // FLOP/byte where the two ceilings meet
  Series roof{
      .title = fmt::format("roofline: {:.0f} TFLOP/s, {:.0f} GB/s (measured)", c.tflops, c.memory_gb_s),
      .style = Series::Style::kLines,
      .color = kBlack,
      .line_width = 2};
  const double x0 = std::min(lo, ridge) / 2, x1 = std::max(hi, ridge) * 2;
  for (double x : {x0, ridge, x1}) {
    roof.x.push_back(x);
    roof.y.push_back(std::min(c.tflops, c.memory_gb_s * x / 1000));
  }
  plot.series.push_back(std::move(roof));
  std::stable_sort(far.begin(), far.end(),
                   [](const auto* x, const auto* y) { return *x->roofline_factor > *y->roofline_factor; });
  Series names{.style = Series::Style::kLabels, .color = kBlack};
  for (size_t i = 0; i < std::min(far.size(), kLabelledLayers); ++i) {
    names.x.push_back(far[i]->layer.flops / far[i]->layer.bytes);
    names.y.push_back(far[i]->achieved_tflops);
    names.labels.push_back(fmt::format("{} ({:.1f}x)", far[i]->layer.name, *far[i]->roofline_factor));
  }
  plot.series.push_back(std::move(names));
  plot.caption = fmt::format(
      "Each layer at its arithmetic intensity (FLOPs / bytes moved) and achieved rate; the black line is the "
      "roofline from the measured ceilings ({}). Named: the {} layers furthest below it.",
      html::escape(c.source.empty() ? "source not recorded" : c.source),
      std::min(far.size(), kLabelledLayers));
  return plot;
}

}  // namespace

Section bench_section(const Input& input, const BenchResult& b, const std::string& id) {
  const std::string where =
      fmt::format("{} {} batch {} on {}", model_label(input), b.precision, b.options.batch, gpu_label(input));
  Section sec{.id = id, .title = fmt::format("Bench: {}", where)};
  const double* p99 = b.latency_ms.find_percentile(99);
  sec.blocks.push_back(html_block(fmt::format(
      "<p>From <code>{}</code>: <b>{} images/s</b> (host wall time; {} images/s from the median GPU compute "
      "time), "
      "{} iterations in {:.2f} s on {} stream{}; transfers {}, CUDA graphs {}.</p>\n",
      html::escape(input.source), html::number(b.throughput_ips),
      html::number(measure::compute_throughput_ips(b)), b.iterations, b.wall_s, b.options.streams,
      b.options.streams == 1 ? "" : "s", b.options.include_transfers ? "included" : "not included",
      b.options.cuda_graph ? "on" : "off")));
  if (!b.warnings.empty()) {
    std::string list;
    for (const auto& w : b.warnings) list += "<li>" + html::escape(w) + "</li>";
    sec.blocks.push_back(
        html_block("<div class=\"banner warn\"><b>Warnings</b><ul>" + list + "</ul></div>\n"));
  }
  sec.blocks.push_back(html_block("<h3>Timing</h3>\n" + statistics_table(b)));
  std::string glance =
      fmt::format("<a href=\"#{}\">Bench</a> of {}: {} images/s, p99 latency {} ms", id, html::escape(where),
                  html::number(b.throughput_ips), html::ms(p99 ? std::optional(*p99) : std::nullopt));
  if (!b.profile.empty()) {
    sec.blocks.push_back(html_block("<h3>Per-layer profile</h3>\n"));
    sec.blocks.push_back(plot_block(layer_bars(b, id, where)));
    std::vector<const LayerProfileRow*> rows;
    for (const auto& r : b.profile) rows.push_back(&r);
    if (b.ceilings && b.ceilings->tflops > 0 && b.ceilings->memory_gb_s > 0) {
      Plot roof = roofline_plot(b, id, where);
      if (roof.has_data()) sec.blocks.push_back(plot_block(std::move(roof)));
      std::vector<const LayerProfileRow*> far;
      for (const auto* r : rows) {
        if (r->roofline_factor) far.push_back(r);
      }
      std::stable_sort(far.begin(), far.end(), [](const auto* x, const auto* y) {
        return *x->roofline_factor > *y->roofline_factor;
      });
      if (far.size() > kWorstLayers) far.resize(kWorstLayers);
      sec.blocks.push_back(
          html_block("<h3>Layers furthest from their roofline</h3>\n<p>GPU time / roofline time: 1 = on the "
                     "roofline; the "
                     "higher, the more there is to gain in that layer's kernel.</p>\n" +
                     profile_table(far)));
      if (!far.empty()) {
        glance += fmt::format("; furthest from its roofline: {} ({:.1f}x)",
                              html::escape(far.front()->layer.name), *far.front()->roofline_factor);
      }
    } else {
      sec.blocks.push_back(
          html_block(note("No ceilings in this result: no roofline. Run gpulab bench --profile --ceilings to "
                          "measure them.")));
    }
    sec.blocks.push_back(html_block(
        html::details(fmt::format("Every layer, in plan order ({})", rows.size()), profile_table(rows))));
  }
  sec.glance.push_back(glance + ".");
  return sec;
}

// ---- Bandwidth -------------------------------------------------------------------------------------

namespace {

std::string size_label(double bytes) {
  if (bytes >= 1 << 30) return fmt::format("{:g} GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:g} MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return fmt::format("{:g} KiB", bytes / (1 << 10));
  return fmt::format("{:g} B", bytes);
}

std::string copy_title(measure::CopyKind kind) {
  switch (kind) {
    case measure::CopyKind::kHostToDevice: return "host to device";
    case measure::CopyKind::kDeviceToHost: return "device to host";
    case measure::CopyKind::kBidirectional: return "both directions";
    case measure::CopyKind::kDeviceToDevice: return "device to device";
  }
  return "?";
}

Plot bandwidth_plot(const measure::BandwidthReport& r, const std::string& id, const std::string& where,
                    bool device_copies) {
  Plot plot{
      .id = id + (device_copies ? "-device" : "-pcie"),
      .title = fmt::format(
          "{}: {}", device_copies ? "Device-to-device copy bandwidth" : "Host-device copy bandwidth", where),
      .x_label = "transfer size [bytes]",
      .y_label = "bandwidth [GB/s]",
      .log_x = true,
      .log_x_base = 2};
  std::vector<double> sizes;
  int kind_index = 0;
  for (measure::CopyKind kind : {measure::CopyKind::kHostToDevice, measure::CopyKind::kDeviceToHost,
                                 measure::CopyKind::kBidirectional, measure::CopyKind::kDeviceToDevice}) {
    if ((kind == measure::CopyKind::kDeviceToDevice) != device_copies) continue;
    int memory_index = 0;
    for (measure::HostMemory memory : {measure::HostMemory::kPinned, measure::HostMemory::kPageable,
                                       measure::HostMemory::kWriteCombined, measure::HostMemory::kDevice}) {
      Series s{.title = device_copies
                            ? copy_title(kind)
                            : fmt::format("{}, {}", copy_title(kind), measure::host_memory_name(memory)),
               .color = kind_index,
               .point_type = device_copies ? 7 : std::array{7, 6, 9, 5}[static_cast<size_t>(memory_index)],
               .dash_type = device_copies ? 1 : 1 + memory_index};
      for (const auto& p : r.points) {
        if (p.kind != kind || p.memory != memory) continue;
        s.x.push_back(static_cast<double>(p.size_bytes));
        s.y.push_back(p.gb_s);
        if (std::find(sizes.begin(), sizes.end(), s.x.back()) == sizes.end()) sizes.push_back(s.x.back());
      }
      if (!s.x.empty()) plot.series.push_back(std::move(s));
      ++memory_index;
    }
    ++kind_index;
  }
  std::sort(sizes.begin(), sizes.end());
  // Every other size when there are many, so the labels do not overlap.
  const size_t step = sizes.size() > 10 ? 2 : 1;
  for (size_t i = 0; i < sizes.size(); i += step) plot.x_tics.emplace_back(sizes[i], size_label(sizes[i]));
  if (device_copies) {
    if (r.memory_gb_s) {
      plot.lines.push_back({.value = *r.memory_gb_s,
                            .title = fmt::format("device memory (datasheet) {:.0f} GB/s", *r.memory_gb_s)});
    }
    plot.caption =
        "Copies within device memory count the bytes read plus the bytes written (as NVIDIA's "
        "bandwidthTest does); median of the timed copies.";
  } else {
    if (r.pcie_gb_s) {
      const std::string link =
          fmt::format("PCIe gen{} x{}", r.pcie_gen.value_or(0), r.pcie_width.value_or(0));
      plot.lines.push_back(
          {.value = *r.pcie_gb_s,
           .title = fmt::format("{} theoretical, per direction: {:.1f} GB/s", link, *r.pcie_gb_s)});
      plot.lines.push_back({.value = 2 * *r.pcie_gb_s,
                            .title = fmt::format("{} both directions: {:.1f} GB/s", link, 2 * *r.pcie_gb_s),
                            .dash_type = 4});
    }
    plot.caption =
        "GB/s = 10^9 bytes/s, median of the timed copies; pinned, pageable and write-combined host "
        "memory; both directions counts the bytes of the two copies that run at once.";
  }
  return plot;
}

}  // namespace

Section bandwidth_section(const Input& input, const measure::BandwidthReport& r, const std::string& id) {
  const std::string where = gpu_label(input);
  Section sec{.id = id, .title = fmt::format("Bandwidth: {}", where)};
  sec.blocks.push_back(html_block(fmt::format(
      "<p>From <code>{}</code>: {} points; PCIe link under load {}; device memory (datasheet) {}.</p>\n",
      html::escape(input.source), r.points.size(),
      r.pcie_gen ? fmt::format("gen{} x{}, {:.1f} GB/s per direction", *r.pcie_gen, r.pcie_width.value_or(0),
                               r.pcie_gb_s.value_or(0))
                 : std::string("unknown"),
      r.memory_gb_s ? fmt::format("{:.0f} GB/s", *r.memory_gb_s) : std::string("unknown"))));
  for (bool device : {false, true}) {
    Plot p = bandwidth_plot(r, id, where, device);
    if (p.has_data()) sec.blocks.push_back(plot_block(std::move(p)));
  }
  html::Table t{
      .header = {"copy", "memory", "size", "median [ms]", "min [ms]", "max [ms]", "GB/s", "of peak"},
      .css_class = "data",
      .numeric = {false, false, true, true, true, true, true, true}};
  const measure::BandwidthPoint* best_h2d = nullptr;
  for (const auto& p : r.points) {
    t.rows.push_back({std::string(measure::copy_kind_name(p.kind)),
                      std::string(measure::host_memory_name(p.memory)),
                      size_label(static_cast<double>(p.size_bytes)), fmt::format("{:.4f}", p.median_ms),
                      fmt::format("{:.4f}", p.min_ms), fmt::format("{:.4f}", p.max_ms),
                      fmt::format("{:.2f}", p.gb_s), html::percent(p.peak_share, 0)});
    if (p.kind == measure::CopyKind::kHostToDevice && (!best_h2d || p.gb_s > best_h2d->gb_s)) best_h2d = &p;
  }
  sec.blocks.push_back(
      html_block(html::details(fmt::format("Every point ({})", r.points.size()), html::table(t))));
  std::string glance = fmt::format("<a href=\"#{}\">Bandwidth</a> of {}", id, html::escape(where));
  if (best_h2d) {
    glance += fmt::format(
        ": host to device up to {:.1f} GB/s ({}, {}){}", best_h2d->gb_s,
        measure::host_memory_name(best_h2d->memory), size_label(static_cast<double>(best_h2d->size_bytes)),
        best_h2d->peak_share ? fmt::format(", {} of the PCIe link", html::percent(best_h2d->peak_share, 0))
                             : std::string());
  }
  sec.glance.push_back(glance + ".");
  return sec;
}

}  // namespace gpulab::report
