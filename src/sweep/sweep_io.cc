// The sweep's JSON (written after every point, read back by --resume), CSV and printed table.
// The schema is documented field by field in docs/metrics.md ("gpulab sweep --json").
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/file_io.h"
#include "core/json_reader.h"
#include "sweep/sweep.h"

namespace gpulab::sweep {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json str_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

Result<StatusCode> status_code_of(const std::string& name, const std::string& where) {
  for (int c = static_cast<int>(StatusCode::kOk); c <= static_cast<int>(StatusCode::kInternal); ++c) {
    if (status_code_name(static_cast<StatusCode>(c)) == name) return static_cast<StatusCode>(c);
  }
  return Status::invalid_file(fmt::format("{}.error_code: '{}' is not a status code", where, name));
}

Result<Precision> precision_of(const json& value, const std::string& where) {
  if (!value.is_string()) return Status::invalid_file(fmt::format("{}: a precision must be a string", where));
  auto p = parse_precision(value.get<std::string>());
  if (!p.is_ok()) return Status::invalid_file(fmt::format("{}: {}", where, p.status().message()));
  return *p;
}

// ---- Points -------------------------------------------------------------------------------------

json telemetry_json(const PointTelemetry& t) {
  return {{"samples", t.samples},
          {"power_mean_w", opt(t.power_mean_w)},
          {"power_max_w", opt(t.power_max_w)},
          {"power_limit_w", opt(t.power_limit_w)},
          {"power_mean_share", opt(t.power_mean_share)},
          {"power_max_share", opt(t.power_max_share)},
          {"energy_per_image_j", opt(t.energy_per_image_j)},
          {"energy_source", str_or_null(t.energy_source)},
          {"sm_clock_mean_mhz", opt(t.sm_clock_mean_mhz)},
          {"sm_clock_min_mhz", opt(t.sm_clock_min_mhz)},
          {"sm_clock_max_mhz", opt(t.sm_clock_max_mhz)},
          {"gpu_util_mean_pct", opt(t.gpu_util_mean_pct)},
          {"temperature_mean_c", opt(t.temperature_mean_c)},
          {"temperature_max_c", opt(t.temperature_max_c)},
          {"memory_used_total_max_bytes", opt(t.memory_used_total_max_bytes)},
          {"memory_used_process_max_bytes", opt(t.memory_used_process_max_bytes)},
          {"pcie_tx_bytes_per_image", opt(t.pcie_tx_bytes_per_image)},
          {"pcie_rx_bytes_per_image", opt(t.pcie_rx_bytes_per_image)},
          {"clock_event_reason_shares", t.clock_event_reason_shares},
          {"pcie_gen", opt(t.pcie_gen)},
          {"pcie_gen_max", opt(t.pcie_gen_max)},
          {"pcie_width", opt(t.pcie_width)},
          {"pcie_width_max", opt(t.pcie_width_max)}};
}

Result<PointTelemetry> telemetry_from_json(const json& j, const std::string& where) {
  const JsonReader r{j, where};
  PointTelemetry t;
  GPULAB_ASSIGN_OR_RETURN(t.samples, r.integer("samples"));
  for (const auto& [key, field] : {std::pair{"power_mean_w", &t.power_mean_w},
                                   {"power_max_w", &t.power_max_w},
                                   {"power_limit_w", &t.power_limit_w},
                                   {"power_mean_share", &t.power_mean_share},
                                   {"power_max_share", &t.power_max_share},
                                   {"energy_per_image_j", &t.energy_per_image_j},
                                   {"sm_clock_mean_mhz", &t.sm_clock_mean_mhz},
                                   {"sm_clock_min_mhz", &t.sm_clock_min_mhz},
                                   {"sm_clock_max_mhz", &t.sm_clock_max_mhz},
                                   {"gpu_util_mean_pct", &t.gpu_util_mean_pct},
                                   {"temperature_mean_c", &t.temperature_mean_c},
                                   {"temperature_max_c", &t.temperature_max_c},
                                   {"pcie_tx_bytes_per_image", &t.pcie_tx_bytes_per_image},
                                   {"pcie_rx_bytes_per_image", &t.pcie_rx_bytes_per_image}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(key));
  }
  GPULAB_ASSIGN_OR_RETURN(t.memory_used_total_max_bytes, r.optional<int64_t>("memory_used_total_max_bytes"));
  GPULAB_ASSIGN_OR_RETURN(t.memory_used_process_max_bytes,
                          r.optional<int64_t>("memory_used_process_max_bytes"));
  GPULAB_ASSIGN_OR_RETURN(auto source, r.optional<std::string>("energy_source"));
  t.energy_source = source.value_or("");
  for (const auto& [key, field] : {std::pair{"pcie_gen", &t.pcie_gen},
                                   {"pcie_gen_max", &t.pcie_gen_max},
                                   {"pcie_width", &t.pcie_width},
                                   {"pcie_width_max", &t.pcie_width_max}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<int>(key));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* shares, r.object("clock_event_reason_shares"));
  for (const auto& [name, value] : shares->items()) {
    if (!value.is_number()) return r.bad("clock_event_reason_shares", "a share is not a number");
    t.clock_event_reason_shares[name] = value.get<double>();
  }
  return t;
}

json rates_json(const PointRates& r) {
  return {{"achieved_tflops", opt(r.achieved_tflops)},
          {"compute_share", opt(r.compute_share)},
          {"achieved_gb_s", opt(r.achieved_gb_s)},
          {"memory_share", opt(r.memory_share)},
          {"host_idle_share", opt(r.host_idle_share)},
          {"enqueue_ratio", opt(r.enqueue_ratio)},
          {"h2d_ratio", opt(r.h2d_ratio)},
          {"pcie_rx_gb_s", opt(r.pcie_rx_gb_s)},
          {"pcie_link_share", opt(r.pcie_link_share)}};
}

Result<PointRates> rates_from_json(const json& j, const std::string& where) {
  const JsonReader r{j, where};
  PointRates out;
  for (const auto& [key, field] : {std::pair{"achieved_tflops", &out.achieved_tflops},
                                   {"compute_share", &out.compute_share},
                                   {"achieved_gb_s", &out.achieved_gb_s},
                                   {"memory_share", &out.memory_share},
                                   {"host_idle_share", &out.host_idle_share},
                                   {"enqueue_ratio", &out.enqueue_ratio},
                                   {"h2d_ratio", &out.h2d_ratio},
                                   {"pcie_rx_gb_s", &out.pcie_rx_gb_s},
                                   {"pcie_link_share", &out.pcie_link_share}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(key));
  }
  return out;
}

json plan_json(const PlanFacts& p) {
  return {{"flops_per_image", p.flops_per_image},
          {"bytes_per_image", p.bytes_per_image},
          {"param_bytes", p.param_bytes},
          {"input_bytes_per_image", p.input_bytes_per_image},
          {"max_batch", p.max_batch},
          {"source", p.source},
          {"tactics", p.tactics},
          {"seconds", p.seconds},
          {"tactic_build_s", p.tactic_build_s},
          {"tactic_timing_s", p.tactic_timing_s}};
}

Result<PlanFacts> plan_from_json(const json& j, const std::string& where) {
  const JsonReader r{j, where};
  PlanFacts p;
  GPULAB_ASSIGN_OR_RETURN(p.flops_per_image, r.number("flops_per_image"));
  GPULAB_ASSIGN_OR_RETURN(p.bytes_per_image, r.number("bytes_per_image"));
  GPULAB_ASSIGN_OR_RETURN(p.param_bytes, r.integer("param_bytes"));
  GPULAB_ASSIGN_OR_RETURN(p.input_bytes_per_image, r.integer("input_bytes_per_image"));
  GPULAB_ASSIGN_OR_RETURN(p.max_batch, r.integer("max_batch"));
  GPULAB_ASSIGN_OR_RETURN(p.source, r.text("source"));
  GPULAB_ASSIGN_OR_RETURN(p.tactics, r.text("tactics"));
  GPULAB_ASSIGN_OR_RETURN(p.seconds, r.number("seconds"));
  // Sweep files written before 2026-12-06 have no split.
  GPULAB_ASSIGN_OR_RETURN(const std::optional<double> build_s, r.optional<double>("tactic_build_s"));
  GPULAB_ASSIGN_OR_RETURN(const std::optional<double> timing_s, r.optional<double>("tactic_timing_s"));
  p.tactic_build_s = build_s.value_or(0);
  p.tactic_timing_s = timing_s.value_or(0);
  return p;
}

json verdicts_json(const std::vector<Verdict>& list) {
  json verdicts = json::array();
  for (const Verdict& v : list) {
    verdicts.push_back({{"kind", verdict_name(v.kind)}, {"evidence", v.evidence}, {"values", v.values}});
  }
  return verdicts;
}

Result<std::vector<Verdict>> verdicts_from_json(const json& list, const std::string& where) {
  std::vector<Verdict> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& v = list[i];
    const JsonReader vr{v, fmt::format("{}.verdicts[{}]", where, i)};
    if (!v.is_object()) return vr.bad("", "not an object");
    GPULAB_ASSIGN_OR_RETURN(const std::string kind, vr.text("kind"));
    auto parsed = parse_verdict_name(kind);
    if (!parsed.is_ok()) return vr.bad("kind", parsed.status().message());
    Verdict verdict{.kind = *parsed};
    GPULAB_ASSIGN_OR_RETURN(verdict.evidence, vr.text("evidence"));
    GPULAB_ASSIGN_OR_RETURN(const json* values, vr.object("values"));
    for (const auto& [name, value] : values->items()) {
      if (!value.is_number()) return vr.bad("values", "a value is not a number");
      verdict.values[name] = value.get<double>();
    }
    out.push_back(std::move(verdict));
  }
  return out;
}

json per_gpu_json(const std::vector<GpuShare>& shares) {
  json out = json::array();
  for (const GpuShare& g : shares) {
    out.push_back({{"device", g.device},
                   {"throughput_ips", g.throughput_ips},
                   {"gpu_compute_median_ms", g.gpu_compute_median_ms},
                   {"latency_p99_ms", opt(g.latency_p99_ms)},
                   {"telemetry", telemetry_json(g.telemetry)},
                   {"rates", rates_json(g.rates)},
                   {"verdicts", verdicts_json(g.verdicts)}});
  }
  return out;
}

Result<std::vector<GpuShare>> per_gpu_from_json(const json& list, const std::string& where) {
  std::vector<GpuShare> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{}.per_gpu[{}]", where, i);
    const JsonReader r{list[i], at};
    if (!list[i].is_object()) return r.bad("", "not an object");
    GpuShare g;
    GPULAB_ASSIGN_OR_RETURN(const int64_t device, r.integer("device"));
    g.device = static_cast<uint32_t>(device);
    GPULAB_ASSIGN_OR_RETURN(g.throughput_ips, r.number("throughput_ips"));
    GPULAB_ASSIGN_OR_RETURN(g.gpu_compute_median_ms, r.number("gpu_compute_median_ms"));
    GPULAB_ASSIGN_OR_RETURN(g.latency_p99_ms, r.optional<double>("latency_p99_ms"));
    GPULAB_ASSIGN_OR_RETURN(const json* telemetry, r.object("telemetry"));
    GPULAB_ASSIGN_OR_RETURN(g.telemetry, telemetry_from_json(*telemetry, at + ".telemetry"));
    GPULAB_ASSIGN_OR_RETURN(const json* rates, r.object("rates"));
    GPULAB_ASSIGN_OR_RETURN(g.rates, rates_from_json(*rates, at + ".rates"));
    GPULAB_ASSIGN_OR_RETURN(const json* verdicts, r.array("verdicts"));
    GPULAB_ASSIGN_OR_RETURN(g.verdicts, verdicts_from_json(*verdicts, at));
    out.push_back(std::move(g));
  }
  return out;
}

json point_json(const SweepPoint& p) {
  json verdicts = verdicts_json(p.verdicts);
  json out = {{"precision", precision_name(p.precision)},
              {"batch", p.batch},
              {"power_limit_w", opt(p.power_limit_w)},
              {"phase", p.phase},
              {"status", point_status_name(p.status)},
              {"oom_stage", p.oom_stage ? json(oom_stage_name(*p.oom_stage)) : json(nullptr)},
              {"error", str_or_null(p.error)},
              {"error_code", p.error.empty() ? json(nullptr) : json(status_code_name(p.error_code))},
              {"memory_before_bytes", opt(p.memory_before_bytes)},
              {"memory_after_bytes", opt(p.memory_after_bytes)},
              {"seconds", p.seconds}};
  if (p.status != PointStatus::kOk || !p.bench) return out;
  const measure::BenchResult& b = *p.bench;
  out["plan"] = plan_json(p.plan);
  out["iterations"] = b.iterations;
  out["wall_s"] = b.wall_s;
  out["throughput_ips"] = b.throughput_ips;
  out["compute_throughput_ips"] = measure::compute_throughput_ips(b);
  out["metrics"] = {{"gpu_compute_ms", measure::summary_json(b.gpu_compute_ms)},
                    {"latency_ms", measure::summary_json(b.latency_ms)},
                    {"enqueue_ms", measure::summary_json(b.enqueue_ms)},
                    {"h2d_ms", b.h2d_ms ? measure::summary_json(*b.h2d_ms) : json(nullptr)},
                    {"d2h_ms", b.d2h_ms ? measure::summary_json(*b.d2h_ms) : json(nullptr)}};
  out["warnings"] = b.warnings;
  out["telemetry"] = telemetry_json(p.telemetry);
  out["rates"] = rates_json(p.rates);
  out["verdicts"] = std::move(verdicts);
  if (!p.per_gpu.empty()) {
    out["per_gpu"] = per_gpu_json(p.per_gpu);
    out["balance"] = opt(p.balance);
  }
  return out;
}

Result<SweepPoint> point_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::invalid_file(fmt::format("{}: not an object", where));
  const JsonReader r{j, where};
  SweepPoint p;
  if (!j.contains("precision")) return r.bad("precision", "missing");
  GPULAB_ASSIGN_OR_RETURN(p.precision, precision_of(j["precision"], where + ".precision"));
  GPULAB_ASSIGN_OR_RETURN(p.batch, r.integer("batch"));
  if (p.batch < 1) return r.bad("batch", "below 1");
  GPULAB_ASSIGN_OR_RETURN(p.power_limit_w, r.optional<double>("power_limit_w"));
  GPULAB_ASSIGN_OR_RETURN(p.phase, r.text("phase"));
  GPULAB_ASSIGN_OR_RETURN(const std::string status, r.text("status"));
  if (status == "ok") {
    p.status = PointStatus::kOk;
  } else if (status == "oom") {
    p.status = PointStatus::kOom;
  } else if (status == "failed") {
    p.status = PointStatus::kFailed;
  } else {
    return r.bad("status", fmt::format("'{}' is not ok, oom or failed", status));
  }
  GPULAB_ASSIGN_OR_RETURN(auto stage, r.optional<std::string>("oom_stage"));
  if (stage) {
    for (OomStage s : {OomStage::kBuild, OomStage::kContext, OomStage::kRun}) {
      if (oom_stage_name(s) == *stage) p.oom_stage = s;
    }
    if (!p.oom_stage) return r.bad("oom_stage", fmt::format("'{}' is not build, context or run", *stage));
  }
  if (p.status == PointStatus::kOom && !p.oom_stage) return r.bad("oom_stage", "missing for an oom point");
  GPULAB_ASSIGN_OR_RETURN(auto error, r.optional<std::string>("error"));
  p.error = error.value_or("");
  GPULAB_ASSIGN_OR_RETURN(auto code, r.optional<std::string>("error_code"));
  if (code) {
    GPULAB_ASSIGN_OR_RETURN(p.error_code, status_code_of(*code, where));
  }
  GPULAB_ASSIGN_OR_RETURN(p.memory_before_bytes, r.optional<int64_t>("memory_before_bytes"));
  GPULAB_ASSIGN_OR_RETURN(p.memory_after_bytes, r.optional<int64_t>("memory_after_bytes"));
  GPULAB_ASSIGN_OR_RETURN(p.seconds, r.number("seconds"));
  if (p.status != PointStatus::kOk) return p;

  GPULAB_ASSIGN_OR_RETURN(const json* plan, r.object("plan"));
  GPULAB_ASSIGN_OR_RETURN(p.plan, plan_from_json(*plan, where + ".plan"));
  measure::BenchResult b;
  b.options.batch = p.batch;
  GPULAB_ASSIGN_OR_RETURN(b.iterations, r.integer("iterations"));
  GPULAB_ASSIGN_OR_RETURN(b.wall_s, r.number("wall_s"));
  GPULAB_ASSIGN_OR_RETURN(b.throughput_ips, r.number("throughput_ips"));
  GPULAB_ASSIGN_OR_RETURN(const json* metrics, r.object("metrics"));
  const JsonReader m{*metrics, where + ".metrics"};
  for (const auto& [key, field] : {std::pair{"gpu_compute_ms", &b.gpu_compute_ms},
                                   {"latency_ms", &b.latency_ms},
                                   {"enqueue_ms", &b.enqueue_ms}}) {
    GPULAB_ASSIGN_OR_RETURN(const json* summary, m.object(key));
    auto s = measure::summary_from_json(*summary);
    if (!s.is_ok()) return m.bad(key, s.status().message());
    *field = std::move(*s);
  }
  for (const auto& [key, field] : {std::pair{"h2d_ms", &b.h2d_ms}, {"d2h_ms", &b.d2h_ms}}) {
    if (!metrics->contains(key) || (*metrics)[key].is_null()) continue;
    auto s = measure::summary_from_json((*metrics)[key]);
    if (!s.is_ok()) return m.bad(key, s.status().message());
    *field = std::move(*s);
  }
  b.options.include_transfers = b.h2d_ms.has_value();
  GPULAB_ASSIGN_OR_RETURN(const json* warnings, r.array("warnings"));
  for (const json& w : *warnings) {
    if (!w.is_string()) return r.bad("warnings", "a warning is not a string");
    b.warnings.push_back(w.get<std::string>());
  }
  p.bench = std::move(b);
  GPULAB_ASSIGN_OR_RETURN(const json* telemetry, r.object("telemetry"));
  GPULAB_ASSIGN_OR_RETURN(p.telemetry, telemetry_from_json(*telemetry, where + ".telemetry"));
  GPULAB_ASSIGN_OR_RETURN(const json* rates, r.object("rates"));
  GPULAB_ASSIGN_OR_RETURN(p.rates, rates_from_json(*rates, where + ".rates"));
  GPULAB_ASSIGN_OR_RETURN(const json* verdicts, r.array("verdicts"));
  GPULAB_ASSIGN_OR_RETURN(p.verdicts, verdicts_from_json(*verdicts, where));
  if (j.contains("per_gpu")) {
    GPULAB_ASSIGN_OR_RETURN(const json* per_gpu, r.array("per_gpu"));
    GPULAB_ASSIGN_OR_RETURN(p.per_gpu, per_gpu_from_json(*per_gpu, where));
    GPULAB_ASSIGN_OR_RETURN(p.balance, r.optional<double>("balance"));
  }
  return p;
}

json accuracy_json(const AgreementResult& a) {
  return {{"images", a.images},
          {"agreement", a.agreement},
          {"top1_accuracy", opt(a.top1_accuracy)},
          {"seconds", a.seconds}};
}

Result<AgreementResult> accuracy_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::invalid_file(fmt::format("{}: not an object", where));
  const JsonReader r{j, where};
  AgreementResult a;
  GPULAB_ASSIGN_OR_RETURN(a.images, r.integer("images"));
  GPULAB_ASSIGN_OR_RETURN(a.agreement, r.number("agreement"));
  GPULAB_ASSIGN_OR_RETURN(a.top1_accuracy, r.optional<double>("top1_accuracy"));
  GPULAB_ASSIGN_OR_RETURN(a.seconds, r.number("seconds"));
  return a;
}

json calibration_json(const SweepCalibration& c) {
  return {{"source", c.source},
          {"from_cache", c.from_cache},
          {"calibrator", c.calibrator},
          {"percentile", c.percentile},
          {"images", c.images},
          {"tensors", c.tensors},
          {"seconds", c.seconds},
          {"bias_corrected_layers", c.bias_corrected_layers},
          {"gate_images_excluded", c.gate_images_excluded}};
}

Result<SweepCalibration> calibration_from_json(const json& j) {
  const JsonReader r{j, "calibration"};
  SweepCalibration c;
  GPULAB_ASSIGN_OR_RETURN(c.source, r.text("source"));
  GPULAB_ASSIGN_OR_RETURN(c.from_cache, r.boolean("from_cache"));
  GPULAB_ASSIGN_OR_RETURN(c.calibrator, r.text("calibrator"));
  GPULAB_ASSIGN_OR_RETURN(c.percentile, r.number("percentile"));
  GPULAB_ASSIGN_OR_RETURN(c.images, r.integer("images"));
  GPULAB_ASSIGN_OR_RETURN(c.tensors, r.integer("tensors"));
  GPULAB_ASSIGN_OR_RETURN(c.seconds, r.number("seconds"));
  GPULAB_ASSIGN_OR_RETURN(const json* layers, r.object("bias_corrected_layers"));
  for (const auto& [name, count] : layers->items()) {
    if (!count.is_number_integer())
      return r.bad("bias_corrected_layers", "holds a count that is not an integer");
    c.bias_corrected_layers[name] = count.get<int64_t>();
  }
  GPULAB_ASSIGN_OR_RETURN(c.gate_images_excluded, r.integer("gate_images_excluded"));
  return c;
}

json options_json(const SweepOptions& o) {
  json precisions = json::array();
  for (Precision p : o.precisions) precisions.push_back(precision_name(p));
  json thresholds = json::object();
  for (const auto& [name, value] : threshold_values(o.thresholds)) thresholds[name] = value;
  return {{"precisions", precisions},
          {"batches", o.batches.empty() ? json("auto") : json(o.batches)},
          {"max_batch", o.max_batch},
          {"bisect_tolerance", o.bisect_tolerance},
          {"latency_budget_ms", opt(o.latency_budget_ms)},
          {"accuracy_gate", o.accuracy_gate},
          {"dataset", str_or_null(o.dataset_dir)},
          {"accuracy_images", o.accuracy_images},
          {"knee_fraction", o.knee_fraction},
          {"power_limits_w", o.power_limits_w},
          {"include_transfers", o.include_transfers},
          {"warmup_ms", o.bench.warmup_ms},
          {"min_duration_s", o.bench.min_duration_s},
          {"min_iterations", o.bench.min_iterations},
          {"cuda_graph", o.bench.cuda_graph},
          {"percentiles", o.bench.percentiles},
          {"thresholds", thresholds},
          {"device", o.device},
          {"gpus", o.gpus.empty() ? json(nullptr) : json(o.gpus)}};
}

Result<SweepOptions> options_from_json(const json& j) {
  const JsonReader r{j, "options"};
  SweepOptions o;
  GPULAB_ASSIGN_OR_RETURN(const json* precisions, r.array("precisions"));
  o.precisions.clear();
  for (const json& p : *precisions) {
    GPULAB_ASSIGN_OR_RETURN(Precision parsed, precision_of(p, "options.precisions"));
    o.precisions.push_back(parsed);
  }
  if (j.contains("batches") && j["batches"].is_array()) {
    for (const json& b : j["batches"]) {
      if (!b.is_number_integer()) return r.bad("batches", "a batch is not an integer");
      o.batches.push_back(b.get<int64_t>());
    }
  } else if (!(j.contains("batches") && j["batches"] == "auto")) {
    return r.bad("batches", "neither \"auto\" nor a list of integers");
  }
  GPULAB_ASSIGN_OR_RETURN(o.max_batch, r.integer("max_batch"));
  GPULAB_ASSIGN_OR_RETURN(o.bisect_tolerance, r.number("bisect_tolerance"));
  GPULAB_ASSIGN_OR_RETURN(o.latency_budget_ms, r.optional<double>("latency_budget_ms"));
  GPULAB_ASSIGN_OR_RETURN(o.accuracy_gate, r.number("accuracy_gate"));
  GPULAB_ASSIGN_OR_RETURN(auto dataset, r.optional<std::string>("dataset"));
  o.dataset_dir = dataset.value_or("");
  GPULAB_ASSIGN_OR_RETURN(o.accuracy_images, r.integer("accuracy_images"));
  GPULAB_ASSIGN_OR_RETURN(o.knee_fraction, r.number("knee_fraction"));
  GPULAB_ASSIGN_OR_RETURN(const json* limits, r.array("power_limits_w"));
  for (const json& w : *limits) {
    if (!w.is_number()) return r.bad("power_limits_w", "a limit is not a number");
    o.power_limits_w.push_back(w.get<double>());
  }
  if (!j.contains("include_transfers") || !j["include_transfers"].is_boolean()) {
    return r.bad("include_transfers", "missing or not a boolean");
  }
  o.include_transfers = j["include_transfers"].get<bool>();
  GPULAB_ASSIGN_OR_RETURN(o.bench.warmup_ms, r.number("warmup_ms"));
  GPULAB_ASSIGN_OR_RETURN(o.bench.min_duration_s, r.number("min_duration_s"));
  GPULAB_ASSIGN_OR_RETURN(o.bench.min_iterations, r.integer("min_iterations"));
  GPULAB_ASSIGN_OR_RETURN(o.device, r.integer("device"));
  if (j.contains("gpus") && j["gpus"].is_array()) {
    for (const json& g : j["gpus"]) {
      if (!g.is_number_unsigned()) return r.bad("gpus", "a GPU index is not a non-negative integer");
      o.gpus.push_back(g.get<uint32_t>());
    }
  }
  return o;
}

json environment_json(const SweepEnvironment& e) {
  return {{"gpu_name", str_or_null(e.gpu_name)},
          {"compute_capability", opt(e.compute_capability)},
          {"driver_version", str_or_null(e.driver_version)},
          {"cuda_driver_version", opt(e.cuda_driver_version)},
          {"cuda_runtime_version", opt(e.cuda_runtime_version)},
          {"cudnn_version", opt(e.cudnn_version)},
          {"cublas_version", opt(e.cublas_version)},
          {"power_limit_w", opt(e.power_limit_w)},
          {"power_default_limit_w", opt(e.power_default_limit_w)},
          {"sm_clock_mhz", opt(e.sm_clock_mhz)},
          {"sm_clock_max_mhz", opt(e.sm_clock_max_mhz)},
          {"memory_clock_mhz", opt(e.memory_clock_mhz)},
          {"pcie_gen", opt(e.pcie_gen)},
          {"pcie_gen_max", opt(e.pcie_gen_max)},
          {"pcie_width", opt(e.pcie_width)},
          {"pcie_width_max", opt(e.pcie_width_max)},
          {"gpulab_version", e.gpulab_version},
          {"gpulab_commit", str_or_null(e.gpulab_commit)},
          {"command_line", e.command_line},
          {"started_at", e.started_at}};
}

json recommendation_json(const PrecisionRecommendation& r) {
  return {{"precision", precision_name(r.precision)},
          {"power_limit_w", opt(r.power_limit_w)},
          {"largest_fitting_batch", opt(r.largest_fitting_batch)},
          {"first_oom_batch", opt(r.first_oom_batch)},
          {"accuracy", r.accuracy ? accuracy_json(*r.accuracy) : json(nullptr)},
          {"accuracy_passed", opt(r.accuracy_passed)},
          {"best_batch", opt(r.best_batch)},
          {"best_throughput_ips", opt(r.best_throughput_ips)},
          {"best_p99_ms", opt(r.best_p99_ms)},
          {"knee_batch", opt(r.knee_batch)},
          {"knee_throughput_ips", opt(r.knee_throughput_ips)},
          {"excluded", str_or_null(r.excluded)}};
}

// Every field is optional: the report shows what a result recorded, "unknown" for the rest.
Result<SweepEnvironment> environment_from_json(const json& j) {
  const JsonReader r{j, "environment"};
  SweepEnvironment e;
  for (const auto& [key, field] : {std::pair{"gpu_name", &e.gpu_name},
                                   {"driver_version", &e.driver_version},
                                   {"gpulab_version", &e.gpulab_version},
                                   {"gpulab_commit", &e.gpulab_commit},
                                   {"command_line", &e.command_line},
                                   {"started_at", &e.started_at}}) {
    GPULAB_ASSIGN_OR_RETURN(auto value, r.optional<std::string>(key));
    *field = value.value_or("");
  }
  for (const auto& [key, field] : {std::pair{"compute_capability", &e.compute_capability},
                                   {"cuda_driver_version", &e.cuda_driver_version},
                                   {"cuda_runtime_version", &e.cuda_runtime_version},
                                   {"cudnn_version", &e.cudnn_version},
                                   {"cublas_version", &e.cublas_version},
                                   {"pcie_gen", &e.pcie_gen},
                                   {"pcie_gen_max", &e.pcie_gen_max},
                                   {"pcie_width", &e.pcie_width},
                                   {"pcie_width_max", &e.pcie_width_max}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<int>(key));
  }
  for (const auto& [key, field] : {std::pair{"power_limit_w", &e.power_limit_w},
                                   {"power_default_limit_w", &e.power_default_limit_w},
                                   {"sm_clock_mhz", &e.sm_clock_mhz},
                                   {"sm_clock_max_mhz", &e.sm_clock_max_mhz},
                                   {"memory_clock_mhz", &e.memory_clock_mhz}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(key));
  }
  return e;
}

Result<PrecisionRecommendation> recommendation_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::invalid_file(fmt::format("{}: not an object", where));
  const JsonReader r{j, where};
  PrecisionRecommendation out;
  if (!j.contains("precision")) return r.bad("precision", "missing");
  GPULAB_ASSIGN_OR_RETURN(out.precision, precision_of(j["precision"], where + ".precision"));
  GPULAB_ASSIGN_OR_RETURN(out.power_limit_w, r.optional<double>("power_limit_w"));
  for (const auto& [key, field] : {std::pair{"largest_fitting_batch", &out.largest_fitting_batch},
                                   {"first_oom_batch", &out.first_oom_batch},
                                   {"best_batch", &out.best_batch},
                                   {"knee_batch", &out.knee_batch}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<int64_t>(key));
  }
  for (const auto& [key, field] : {std::pair{"best_throughput_ips", &out.best_throughput_ips},
                                   {"knee_throughput_ips", &out.knee_throughput_ips},
                                   {"best_p99_ms", &out.best_p99_ms}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(key));
  }
  GPULAB_ASSIGN_OR_RETURN(out.accuracy_passed, r.optional<bool>("accuracy_passed"));
  GPULAB_ASSIGN_OR_RETURN(const json* accuracy, r.optional_object("accuracy"));
  if (accuracy) {
    GPULAB_ASSIGN_OR_RETURN(out.accuracy, accuracy_from_json(*accuracy, where + ".accuracy"));
  }
  GPULAB_ASSIGN_OR_RETURN(auto excluded, r.optional<std::string>("excluded"));
  out.excluded = excluded.value_or("");
  if (out.excluded.empty() && (!out.best_batch || !out.best_throughput_ips || !out.best_p99_ms ||
                               !out.knee_batch || !out.knee_throughput_ips)) {
    return r.bad("best_batch", "a recommendation without \"excluded\" needs its best and knee batch");
  }
  return out;
}

}  // namespace

json to_json(const SweepResult& s) {
  json ceilings = json::object();
  for (const auto& [name, c] : s.ceilings) {
    ceilings[name] = {{"tflops", c.tflops}, {"memory_gb_s", c.memory_gb_s}, {"source", c.source}};
  }
  json accuracy = json::object();
  for (const auto& [name, a] : s.accuracy) accuracy[name] = accuracy_json(a);
  json points = json::array();
  for (const SweepPoint& p : s.points) points.push_back(point_json(p));
  json recommendations = json::array();
  for (const auto& r : s.recommendations) recommendations.push_back(recommendation_json(r));
  return {{"schema", "gpulab.sweep"},
          {"schema_version", kSweepSchemaVersion},
          {"state", s.state},
          {"error", str_or_null(s.error)},
          {"seconds", s.seconds},
          {"model", s.model},
          {"model_hash", s.model_hash},
          {"target",
           {{"kind", s.target.kind}, {"description", s.target.description}, {"device", s.target.device}}},
          {"options", options_json(s.options)},
          {"environment", environment_json(s.environment)},
          {"ceilings", ceilings},
          {"h2d_gb_s", opt(s.h2d_gb_s)},
          {"accuracy", accuracy},
          {"calibration", s.calibration ? calibration_json(*s.calibration) : json(nullptr)},
          {"points", points},
          {"recommendations", recommendations}};
}

Result<SweepResult> sweep_from_json(const json& doc) {
  if (!doc.is_object()) return Status::invalid_file("not a JSON object");
  if (json_string_or(doc, "schema", "") != "gpulab.sweep") {
    return Status::invalid_file("not a gpulab sweep result (its \"schema\" is not \"gpulab.sweep\")");
  }
  const JsonReader r{doc, "sweep"};
  GPULAB_ASSIGN_OR_RETURN(const auto version, r.optional<int64_t>("schema_version"));
  if (version.value_or(0) != kSweepSchemaVersion) {
    return Status::invalid_file(fmt::format("schema_version {} is not the {} this gpulab reads",
                                            version.value_or(0), kSweepSchemaVersion));
  }
  SweepResult s;
  GPULAB_ASSIGN_OR_RETURN(s.state, r.text("state"));
  GPULAB_ASSIGN_OR_RETURN(auto error, r.optional<std::string>("error"));
  s.error = error.value_or("");
  GPULAB_ASSIGN_OR_RETURN(s.model, r.text("model"));
  GPULAB_ASSIGN_OR_RETURN(s.model_hash, r.text("model_hash"));
  GPULAB_ASSIGN_OR_RETURN(s.seconds, r.number("seconds"));
  GPULAB_ASSIGN_OR_RETURN(const json* target, r.object("target"));
  s.target.kind = json_string_or(*target, "kind", "");
  s.target.description = json_string_or(*target, "description", "");
  GPULAB_ASSIGN_OR_RETURN(const json* environment, r.optional_object("environment"));
  if (environment) {
    GPULAB_ASSIGN_OR_RETURN(s.environment, environment_from_json(*environment));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* options, r.object("options"));
  GPULAB_ASSIGN_OR_RETURN(s.options, options_from_json(*options));
  GPULAB_ASSIGN_OR_RETURN(const json* ceilings, r.object("ceilings"));
  for (const auto& [name, c] : ceilings->items()) {
    const JsonReader cr{c, "ceilings." + name};
    if (!c.is_object()) return cr.bad("", "not an object");
    measure::Ceilings out;
    GPULAB_ASSIGN_OR_RETURN(out.tflops, cr.number("tflops"));
    GPULAB_ASSIGN_OR_RETURN(out.memory_gb_s, cr.number("memory_gb_s"));
    GPULAB_ASSIGN_OR_RETURN(out.source, cr.text("source"));
    s.ceilings[name] = out;
  }
  GPULAB_ASSIGN_OR_RETURN(s.h2d_gb_s, r.optional<double>("h2d_gb_s"));
  GPULAB_ASSIGN_OR_RETURN(const json* accuracy, r.object("accuracy"));
  for (const auto& [name, a] : accuracy->items()) {
    GPULAB_ASSIGN_OR_RETURN(s.accuracy[name], accuracy_from_json(a, "accuracy." + name));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* calibration, r.optional_object("calibration"));
  if (calibration) {
    GPULAB_ASSIGN_OR_RETURN(s.calibration, calibration_from_json(*calibration));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* points, r.array("points"));
  for (size_t i = 0; i < points->size(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(SweepPoint p, point_from_json((*points)[i], fmt::format("points[{}]", i)));
    s.points.push_back(std::move(p));
  }
  if (doc.contains("recommendations") && !doc["recommendations"].is_null()) {
    GPULAB_ASSIGN_OR_RETURN(const json* recommendations, r.array("recommendations"));
    for (size_t i = 0; i < recommendations->size(); ++i) {
      GPULAB_ASSIGN_OR_RETURN(
          PrecisionRecommendation rec,
          recommendation_from_json((*recommendations)[i], fmt::format("recommendations[{}]", i)));
      s.recommendations.push_back(std::move(rec));
    }
  }
  return s;
}

Result<SweepResult> read_sweep_json(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(const std::string text, read_file_text(path));
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return Status::invalid_file(
        fmt::format("'{}': not valid JSON (truncated or not a sweep result)", path.string()));
  }
  auto result = sweep_from_json(doc);
  if (!result.is_ok()) return result.status().with_context(fmt::format("'{}'", path.string()));
  return result;
}

Status write_sweep_json(const std::filesystem::path& path, const SweepResult& result) {
  return write_file_atomic(path, to_json(result).dump(2) + "\n").with_context("--json");
}

// ---- CSV -------------------------------------------------------------------------------------------

namespace {

std::string csv_number(const std::optional<double>& v, int decimals) {
  if (!v || !std::isfinite(*v)) return "";
  return fmt::format("{:.{}f}", *v, decimals);
}

std::string limiting_verdict(const SweepPoint& p) {
  return p.verdicts.empty() ? std::string() : std::string(verdict_name(p.verdicts.front().kind));
}

std::string all_verdicts(const SweepPoint& p) {
  std::string out;
  for (const Verdict& v : p.verdicts)
    out += fmt::format("{}{}", out.empty() ? "" : "|", verdict_name(v.kind));
  return out;
}

}  // namespace

std::string to_csv(const SweepResult& s) {
  std::string out =
      "precision,batch,power_limit_w,phase,status,oom_stage,gpu_compute_median_ms,gpu_compute_p99_ms,"
      "latency_median_ms,latency_p99_ms,throughput_ips,compute_throughput_ips,cov,power_mean_w,power_max_w,"
      "power_limit_share,energy_per_image_j,sm_clock_mean_mhz,sm_clock_min_mhz,sm_clock_max_mhz,gpu_util_"
      "mean_pct,"
      "temperature_max_c,memory_used_process_max_bytes,memory_used_total_max_bytes,pcie_tx_bytes_per_image,"
      "pcie_rx_bytes_per_image,input_bytes_per_image,achieved_tflops,compute_share,achieved_gb_s,memory_"
      "share,"
      "memory_before_bytes,memory_after_bytes,limiting,verdicts,gpus,balance\n";
  for (const SweepPoint& p : s.points) {
    const auto* b = p.bench ? &*p.bench : nullptr;
    auto pct = [&](const measure::Summary& m) -> std::optional<double> {
      const double* v = m.find_percentile(99);
      return v ? std::optional(*v) : std::nullopt;
    };
    auto i64 = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : std::string(); };
    const PointTelemetry& t = p.telemetry;
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{"
        "},{},"
        "{},{}\n",
        precision_name(p.precision), p.batch, csv_number(p.power_limit_w, 0), p.phase,
        point_status_name(p.status), p.oom_stage ? oom_stage_name(*p.oom_stage) : "",
        csv_number(b ? std::optional(b->gpu_compute_ms.median) : std::nullopt, 4),
        csv_number(b ? pct(b->gpu_compute_ms) : std::nullopt, 4),
        csv_number(b ? std::optional(b->latency_ms.median) : std::nullopt, 4),
        csv_number(b ? pct(b->latency_ms) : std::nullopt, 4),
        csv_number(b ? std::optional(b->throughput_ips) : std::nullopt, 1),
        csv_number(b ? std::optional(measure::compute_throughput_ips(*b)) : std::nullopt, 1),
        csv_number(b ? std::optional(b->gpu_compute_ms.cov) : std::nullopt, 4), csv_number(t.power_mean_w, 1),
        csv_number(t.power_max_w, 1), csv_number(t.power_mean_share, 3), csv_number(t.energy_per_image_j, 6),
        csv_number(t.sm_clock_mean_mhz, 0), csv_number(t.sm_clock_min_mhz, 0),
        csv_number(t.sm_clock_max_mhz, 0), csv_number(t.gpu_util_mean_pct, 1),
        csv_number(t.temperature_max_c, 0), i64(t.memory_used_process_max_bytes),
        i64(t.memory_used_total_max_bytes), csv_number(t.pcie_tx_bytes_per_image, 0),
        csv_number(t.pcie_rx_bytes_per_image, 0),
        b ? std::to_string(p.plan.input_bytes_per_image) : std::string(),
        csv_number(p.rates.achieved_tflops, 3), csv_number(p.rates.compute_share, 4),
        csv_number(p.rates.achieved_gb_s, 1), csv_number(p.rates.memory_share, 4), i64(p.memory_before_bytes),
        i64(p.memory_after_bytes), limiting_verdict(p), all_verdicts(p),
        p.per_gpu.empty() ? 1 : p.per_gpu.size(), csv_number(p.balance, 4));
  }
  return out;
}

Status write_sweep_csv(const std::filesystem::path& path, const SweepResult& result) {
  return write_file_atomic(path, to_csv(result)).with_context("--csv");
}

// ---- The printed table --------------------------------------------------------------------------------

namespace {

std::string or_dash(const std::optional<double>& v, const char* fmt_spec) {
  if (!v || !std::isfinite(*v)) return "-";
  return fmt::format(fmt::runtime(fmt_spec), *v);
}

std::string mib(const std::optional<int64_t>& bytes) {
  if (!bytes) return "-";
  return fmt::format("{:.0f}", static_cast<double>(*bytes) / (1 << 20));
}

// " at 300 W" for a point or recommendation under a power limit of the sweep, else "".
std::string at_limit(const std::optional<double>& power_limit_w) {
  return power_limit_w ? fmt::format(" at {:.0f} W", *power_limit_w) : "";
}

}  // namespace

std::string calibration_note(const SweepCalibration& c) {
  std::string out = fmt::format("8-bit ranges: {}", c.calibrator);
  if (c.calibrator == "percentile") out += fmt::format(" {:g}", c.percentile);
  out += fmt::format(" of {} activations, {} images", c.tensors, c.images);
  out += c.from_cache ? fmt::format(", from the calibration cache {}", c.source)
                      : fmt::format(" of {} calibrated on the CPU", c.source);
  for (const auto& [precision, layers] : c.bias_corrected_layers)
    out += fmt::format("; {} bias correction on {} layer{}", precision, layers, layers == 1 ? "" : "s");
  if (c.seconds > 0) out += fmt::format(" ({:.1f} s, before the sweep's time)", c.seconds);
  if (c.gate_images_excluded > 0)
    out += fmt::format("; every precision's accuracy gate leaves out the {} images calibrated on",
                       c.gate_images_excluded);
  return out;
}

std::string format_sweep(const SweepResult& s) {
  std::string out;
  const SweepEnvironment& e = s.environment;
  out += fmt::format("gpulab sweep: {} on {}", s.model, s.target.description);
  if (!e.driver_version.empty()) out += fmt::format(", driver {}", e.driver_version);
  if (e.power_limit_w) out += fmt::format(", power limit {:.0f} W", *e.power_limit_w);
  out += fmt::format(
      "\n{} point{}, {:.1f} s, {}; transfers {}included; GPU compute and latency in ms, "
      "throughput in img/s (host wall time)\n",
      s.points.size(), s.points.size() == 1 ? "" : "s", s.seconds, s.state,
      s.options.include_transfers ? "" : "not ");
  const SweepTime t = sweep_time(s);
  out += fmt::format(
      "Time: {:.1f} s = plan builds {:.1f} s ({} plan{}{}) + accuracy gates {:.1f} s + "
      "timed windows {:.1f} s + the rest {:.1f} s (warm-ups, contexts, out-of-memory attempts, ceilings)\n\n",
      s.seconds, t.builds, t.plans, t.plans == 1 ? "" : "s", timed_builds_note(t), t.gates, t.windows,
      t.rest);
  if (s.calibration) out.insert(out.size() - 1, calibration_note(*s.calibration) + "\n");
  const bool limits = !s.options.power_limits_w.empty();
  out += fmt::format("{:<5} {:>6} {}{:<7} {:>9} {:>9} {:>11} {:>6} {:>12} {:>11} {:>8} {:>7}  {}\n", "prec",
                     "batch", limits ? fmt::format("{:>6} ", "limit") : "", "status", "p50", "p99", "img/s",
                     "cov", "power W", "SM MHz", "mem MiB", "J/img", "verdicts (limiting first)");
  for (const SweepPoint& p : s.points) {
    std::string limit = limits ? fmt::format("{:>6} ", or_dash(p.power_limit_w, "{:.0f}")) : "";
    if (p.status != PointStatus::kOk || !p.bench) {
      out += fmt::format(
          "{:<5} {:>6} {}{:<7} {}\n", precision_name(p.precision), p.batch, limit,
          point_status_name(p.status),
          p.oom_stage ? fmt::format("out of memory at {}", oom_stage_name(*p.oom_stage)) : p.error);
      continue;
    }
    const measure::BenchResult& b = *p.bench;
    const double* p99 = b.latency_ms.find_percentile(99);
    const PointTelemetry& t = p.telemetry;
    std::string power = "-";
    if (t.power_mean_w) {
      power = t.power_mean_share ? fmt::format("{:.0f} ({:.0f}%)", *t.power_mean_w, *t.power_mean_share * 100)
                                 : fmt::format("{:.0f}", *t.power_mean_w);
    }
    std::string clock = "-";
    if (t.sm_clock_mean_mhz) {
      clock = fmt::format("{:.0f} ({:.0f})", *t.sm_clock_mean_mhz,
                          t.sm_clock_min_mhz.value_or(*t.sm_clock_mean_mhz));
    }
    out += fmt::format(
        "{:<5} {:>6} {}{:<7} {:>9.3f} {:>9} {:>11.0f} {:>5.1f}% {:>12} {:>11} {:>8} {:>7}  {}\n",
        precision_name(p.precision), p.batch, limit, "ok", b.latency_ms.median,
        p99 ? fmt::format("{:.3f}", *p99) : "-", b.throughput_ips, b.gpu_compute_ms.cov * 100, power, clock,
        mib(t.memory_used_process_max_bytes ? t.memory_used_process_max_bytes
                                            : t.memory_used_total_max_bytes),
        or_dash(t.energy_per_image_j, "{:.4f}"), all_verdicts(p).empty() ? "-" : all_verdicts(p));
  }
  out += "\nWhy (the limiting verdict of each point, with its evidence):\n";
  for (const SweepPoint& p : s.points) {
    if (p.verdicts.empty()) continue;
    out += fmt::format("  {} batch {}{}: {}: {}\n", precision_name(p.precision), p.batch,
                       at_limit(p.power_limit_w), verdict_name(p.verdicts.front().kind),
                       p.verdicts.front().evidence);
    for (size_t i = 1; i < p.verdicts.size(); ++i) {
      out += fmt::format("      also {}: {}\n", verdict_name(p.verdicts[i].kind), p.verdicts[i].evidence);
    }
  }
  if (const PointWarnings w = point_warnings(s); !w.listed.empty() || w.unstable > 0) {
    out += "\nWarnings:\n";
    for (const auto& [p, text] : w.listed)
      out += fmt::format("  {} batch {}{}: {}\n", precision_name(p->precision), p->batch,
                         at_limit(p->power_limit_w), text);
    if (w.unstable > 0)
      out += fmt::format(
          "  {} of {} measured points unstable (GPU compute's coefficient of variation above the threshold; "
          "each point's warning is in the JSON): their medians may not repeat\n",
          w.unstable, w.measured);
  }
  if (std::any_of(s.points.begin(), s.points.end(), [](const SweepPoint& p) { return !p.per_gpu.empty(); })) {
    out +=
        "\nPer GPU (img/s of each GPU while all ran at once; balance = slowest / fastest; the limiting "
        "verdict):\n";
    for (const SweepPoint& p : s.points) {
      if (p.per_gpu.empty()) continue;
      out += fmt::format("  {} batch {}: balance {:.1f}%;", precision_name(p.precision), p.batch,
                         p.balance.value_or(1) * 100);
      for (const GpuShare& g : p.per_gpu) {
        out += fmt::format(" GPU {} {:.0f} ({})", g.device, g.throughput_ips,
                           g.verdicts.empty() ? "-" : std::string(verdict_name(g.verdicts.front().kind)));
      }
      out += "\n";
    }
  }
  out += "\nRecommendation: the batch with the highest throughput";
  if (s.options.latency_budget_ms)
    out += fmt::format(" within a p99 latency of {:.3f} ms", *s.options.latency_budget_ms);
  if (!s.options.dataset_dir.empty()) {
    out += fmt::format(", for precisions with a top-1 agreement with FP32 of at least {:.1f}%",
                       s.options.accuracy_gate * 100);
  }
  out += fmt::format("; the knee is the smallest batch within {:.0f}% of it\n",
                     (1 - s.options.knee_fraction) * 100);
  for (const PrecisionRecommendation& r : s.recommendations) {
    const std::string who = fmt::format("{}{}", precision_name(r.precision), at_limit(r.power_limit_w));
    std::string fit;
    if (r.largest_fitting_batch) {
      fit = r.first_oom_batch ? fmt::format("; largest batch that fits {} ({} does not)",
                                            *r.largest_fitting_batch, *r.first_oom_batch)
                              : fmt::format("; largest batch tried {}", *r.largest_fitting_batch);
    }
    std::string accuracy;
    if (r.accuracy) {
      accuracy = fmt::format("; agreement with FP32 {:.2f}% on {} images", r.accuracy->agreement * 100,
                             r.accuracy->images);
    }
    if (!r.excluded.empty()) {
      out += fmt::format("  {:<12} none: {}{}\n", who, r.excluded, fit);
      continue;
    }
    out += fmt::format("  {:<12} batch {} ({:.0f} img/s, p99 {:.3f} ms); knee batch {} ({:.0f} img/s){}{}\n",
                       who, *r.best_batch, *r.best_throughput_ips, *r.best_p99_ms, *r.knee_batch,
                       *r.knee_throughput_ips, fit, accuracy);
  }
  if (s.state == "interrupted") out += "\nInterrupted: resume with --resume <the --json file>.\n";
  if (!s.error.empty()) out += fmt::format("\nStopped: {}\n", s.error);
  return out;
}

}  // namespace gpulab::sweep
