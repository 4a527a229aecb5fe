// The sections of one pipeline run (stage capacities, the limiting stage) and of one accuracy
// run (agreement with FP32 per precision, the layers whose reduced precision costs the most).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "report/html.h"
#include "report/sections.h"

namespace gpulab::report {

Section pipeline_section(const Input& input, const PipelineReport& p, const std::string& id) {
  const std::string where = fmt::format("{} on {}", model_label(input), gpu_label(input));
  Section sec{.id = id, .title = fmt::format("Pipeline: {}", where)};
  sec.blocks.push_back(html_block(fmt::format(
      "<p>From <code>{}</code>: {} images ({} files x {} passes, {} failed) in {:.1f} s: <b>{} images/s end "
      "to "
      "end</b>{}; batch {}, {} decode thread{}, {} staging slots, preprocessing on the {}, decoder {}.</p>\n",
      html::escape(input.source), p.images, p.files, p.passes, p.failed_images, p.wall_s,
      html::number(p.throughput_ips),
      p.warm_throughput_ips
          ? fmt::format(" ({} images/s from pass 2 on)", html::number(p.warm_throughput_ips))
          : std::string(),
      p.batch, p.decode_threads, p.decode_threads == 1 ? "" : "s", p.queue_depth,
      html::escape(p.preprocess == "gpu" ? "GPU" : "CPU"), html::escape(p.decoder))));

  Plot plot{.id = id + "-stages",
            .title = fmt::format("Stage capacity: {}", where),
            .x_label = "capacity [images/s]",
            .log_x = true,
            .bar_groups = {"stage", "limiting stage"},
            .caption = fmt::format("The rate each stage would sustain alone with its threads kept busy "
                                   "(images x threads / busy time); "
                                   "the slowest limits the pipeline. End to end: {} images/s{}.",
                                   html::number(p.throughput_ips),
                                   p.compute_only_ips
                                       ? fmt::format("; the model alone ({}): {} images/s",
                                                     p.compute_only_source, html::number(p.compute_only_ips))
                                       : std::string())};
  for (const PipelineStage& s : p.stages) {
    plot.bars.push_back(
        {.label = fmt::format("{} ({} thread{})", s.name, s.threads, s.threads == 1 ? "" : "s"),
         .value = s.capacity_ips,
         .group = s.name == p.limiting_stage ? 1 : 0});
  }
  if (plot.has_data()) sec.blocks.push_back(plot_block(std::move(plot)));

  html::Table t{.header = {"stage", "threads", "images", "busy [s]", "busy share", "CPU [s]",
                           "capacity [images/s]", "waiting for input [s]", "waiting for room [s]"},
                .css_class = "data",
                .numeric = {false, true, true, true, true, true, true, true, true}};
  for (const PipelineStage& s : p.stages) {
    t.rows.push_back({html::escape(s.name), std::to_string(s.threads), std::to_string(s.images),
                      fmt::format("{:.2f}", s.busy_s), html::percent(s.busy_share),
                      fmt::format("{:.2f}", s.cpu_s), html::number(s.capacity_ips),
                      fmt::format("{:.2f}", s.wait_input_s), fmt::format("{:.2f}", s.wait_output_s)});
    t.row_classes.push_back(s.name == p.limiting_stage ? "best" : "");
  }
  std::string more = fmt::format(
      "<p>Limiting stage: <b>{}</b> at {} images/s{}. End to end vs the model alone: {}. Peak resident "
      "memory {}, "
      "growth after pass 1 {}.</p>\n",
      html::escape(p.limiting_stage), html::number(p.limiting_capacity_ips),
      p.margin && !p.next_stage.empty()
          ? fmt::format("; {} would limit next, at {:.2f}x", html::escape(p.next_stage), *p.margin)
          : std::string(),
      html::percent(p.end_to_end_vs_compute),
      html::bytes(p.rss_peak_bytes ? std::optional<double>(*p.rss_peak_bytes) : std::nullopt),
      html::percent(p.rss_growth_fraction, 2));
  if (p.gpu_busy_share) {
    more += fmt::format(
        "<p>GPU busy {} of the wall time{}{}.", html::percent(p.gpu_busy_share),
        p.gpu_split ? fmt::format(" ({:.3f} s preprocessing, {:.3f} s the model, {:.3f} s top-k "
                                  "and results)",
                                  p.gpu_split->preprocess_s, p.gpu_split->model_s, p.gpu_split->output_s)
                    : std::string(),
        p.h2d_gb_s ? fmt::format("; uploads at {:.1f} GB/s", *p.h2d_gb_s) : std::string());
    if (p.gpu_split && p.gpu_split->host_enqueue_s) {
      const auto& g = *p.gpu_split;
      more += g.host_submit_s ? fmt::format(
                                    " The infer thread spent {:.3f} s queueing batches, {:.3f} s of it in "
                                    "the engine's enqueue",
                                    *g.host_submit_s, *g.host_enqueue_s)
                              : fmt::format(" The infer thread spent {:.3f} s in the engine's enqueue",
                                            *g.host_enqueue_s);
      more += g.host_wait_s ? fmt::format(", and {:.3f} s waiting for batches to finish.", *g.host_wait_s)
                            : std::string(".");
    }
    more += "</p>\n";
  }
  sec.blocks.push_back(html_block("<h3>Stages</h3>\n" + html::table(t) + more));
  sec.glance.push_back(
      fmt::format("<a href=\"#{}\">Pipeline</a> of {}: {} images/s end to end, limited by the <b>{}</b> "
                  "stage ({} images/s).",
                  id, html::escape(where), html::number(p.throughput_ips), html::escape(p.limiting_stage),
                  html::number(p.limiting_capacity_ips)));
  return sec;
}

namespace {

constexpr size_t kWorstAccuracyLayers = 12;

std::string db(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : std::string("exact");
}

}  // namespace

Section accuracy_section(const Input& input, const AccuracyReport& a, const std::string& id) {
  const std::string where = fmt::format("{} on {}", model_label(input), gpu_label(input));
  Section sec{.id = id, .title = fmt::format("Accuracy: {}", where)};
  sec.blocks.push_back(html_block(
      fmt::format("<p>From <code>{}</code>: {} images of <code>{}</code> ({} labelled); FP32 top-1 {}, top-5 "
                  "{}; the gate: "
                  "top-1 agreement with FP32 of at least {}.</p>\n",
                  html::escape(input.source), a.images, html::escape(a.dataset), a.labelled,
                  html::percent(a.fp32_top1, 2), html::percent(a.fp32_top5, 2), html::percent(a.gate, 1))));

  Plot plot{.id = id + "-agreement",
            .title = fmt::format("Top-1 agreement with FP32: {}", where),
            .x_label = "agreement with FP32 [%]",
            .bar_groups = {"meets the gate", "below the gate", "the gate"}};
  double lowest = a.gate * 100;
  for (const AccuracyPrecision& p : a.results) {
    plot.bars.push_back(
        {.label = p.precision, .value = p.agreement * 100, .group = p.agreement >= a.gate ? 0 : 1});
    lowest = std::min(lowest, p.agreement * 100);
    if (p.fallback_agreement) {
      plot.bars.push_back(
          {.label = fmt::format("{} + FP16 fallback ({} layers)", p.precision, p.fallback_layers.size()),
           .value = *p.fallback_agreement * 100,
           .group = *p.fallback_agreement >= a.gate ? 0 : 1});
      lowest = std::min(lowest, *p.fallback_agreement * 100);
    }
  }
  plot.bars.push_back({.label = "gate", .value = a.gate * 100, .group = 2});
  // Agreements sit near 100%: start the bars a little below the lowest so the differences show.
  plot.bar_base = std::max(0.0, std::floor(lowest - std::max(1.0, (100 - lowest) * 0.5)));
  plot.caption = fmt::format(
      "Share of the images whose top-1 class equals FP32's, per precision (and after moving "
      "the worst layers to FP16, where a fallback ran); bars start at {:.0f}%.",
      *plot.bar_base);
  if (plot.has_data()) sec.blocks.push_back(plot_block(std::move(plot)));

  html::Table t{.header = {"precision", "agreement", "top-1", "top-5", "logits rel. L2", "8-bit FLOP share",
                           "gate", "after fallback", "layers moved to FP16"},
                .css_class = "data",
                .numeric = {false, true, true, true, true, true, false, true, false}};
  std::string glance;
  for (const AccuracyPrecision& p : a.results) {
    std::string moved;
    for (const auto& l : p.fallback_layers) moved += (moved.empty() ? "" : ", ") + html::escape(l);
    t.rows.push_back({html::escape(p.precision), html::percent(p.agreement, 2), html::percent(p.top1, 2),
                      html::percent(p.top5, 2), fmt::format("{:.2e}", p.logits_rel_l2),
                      html::percent(p.quantized_flops_share, 0), p.gate_met ? "met" : "<b>not met</b>",
                      html::percent(p.fallback_agreement, 2), moved.empty() ? "—" : moved});
    t.row_classes.push_back(p.gate_met ? "" : "warn");
    glance += fmt::format(
        "{}{} {}{}", glance.empty() ? "" : "; ", html::escape(p.precision), html::percent(p.agreement, 2),
        p.fallback_agreement ? fmt::format(" ({} after fallback)", html::percent(p.fallback_agreement, 2))
                             : std::string());
  }
  sec.blocks.push_back(html_block(html::table(t)));

  for (const AccuracyPrecision& p : a.results) {
    if (p.layers.empty()) continue;
    const size_t shown = std::min(p.layers.size(), kWorstAccuracyLayers);
    Plot worst{
        .id = fmt::format("{}-{}-layers", id, p.precision),
        .title = fmt::format("Worst layers in {}: {}", p.precision, where),
        .x_label = "SQNR of the logits with only this layer reduced [dB]",
        .bar_groups = {"layer"},
        .caption = fmt::format("The {} layers whose reduced precision alone costs the logits the most (lower "
                               "SQNR = larger error), on {} images; worst first.",
                               shown, p.per_layer_images)};
    for (size_t i = 0; i < shown; ++i) {
      if (p.layers[i].alone_logits_sqnr_db)
        worst.bars.push_back({.label = p.layers[i].name, .value = *p.layers[i].alone_logits_sqnr_db});
    }
    if (worst.has_data()) sec.blocks.push_back(plot_block(std::move(worst)));
    html::Table lt{.header = {"layer", "FLOP share", "SQNR of its output [dB]", "agreement, only this layer",
                              "SQNR of the logits, only this layer [dB]"},
                   .css_class = "data",
                   .numeric = {false, true, true, true, true}};
    for (size_t i = 0; i < p.layers.size(); ++i) {
      const AccuracyLayer& l = p.layers[i];
      lt.rows.push_back({html::escape(l.name), html::percent(l.flops_share, 1), db(l.sqnr_db),
                         html::percent(l.alone_agreement, 2), db(l.alone_logits_sqnr_db)});
    }
    const std::string table = html::table(lt);
    sec.blocks.push_back(html_block(
        html::details(fmt::format("{}: every layer, worst first ({})", p.precision, p.layers.size()), table,
                      /*open=*/false)));
  }
  sec.glance.push_back(fmt::format("<a href=\"#{}\">Accuracy</a> of {}: agreement with FP32 {} (gate {}).",
                                   id, html::escape(where), glance.empty() ? "—" : glance,
                                   html::percent(a.gate, 1)));
  return sec;
}

}  // namespace gpulab::report
