#include "measure/bench.h"

#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <utility>

#include "core/file_io.h"
#include "core/json_reader.h"

namespace gpulab::measure {

// ---- Options -----------------------------------------------------------------------------------

Status validate(const BenchOptions& o) {
  if (o.batch < 1) {
    return Status::invalid_argument(
        fmt::format("--batch: {} is not a batch size. Give 1 or more images per inference.", o.batch));
  }
  if (!std::isfinite(o.warmup_ms) || o.warmup_ms < 0) {
    return Status::invalid_argument(fmt::format(
        "--warmup-ms: {} is not a duration. Give 0 or more milliseconds (default 200).", o.warmup_ms));
  }
  if (!std::isfinite(o.min_duration_s) || o.min_duration_s < 0) {
    return Status::invalid_argument(fmt::format(
        "--min-duration-s: {} is not a duration. Give 0 or more seconds (default 3).", o.min_duration_s));
  }
  if (o.min_iterations < 1) {
    return Status::invalid_argument(
        fmt::format("--min-iterations: {} is too small. Give 1 or more (default 10).", o.min_iterations));
  }
  if (o.streams < 1 || o.streams > kMaxStreams) {
    return Status::invalid_argument(
        fmt::format("--streams: {} is outside 1..{}. Give the number of concurrent execution "
                    "contexts, usually 1 or 2.",
                    o.streams, kMaxStreams));
  }
  if (o.percentiles.empty()) {
    return Status::invalid_argument(
        "--percentiles: the list is empty. Give comma-separated values in (0, 100], e.g. "
        "50,90,95,99.");
  }
  for (double p : o.percentiles) {
    if (!(p > 0 && p <= 100)) {
      return Status::invalid_argument(
          fmt::format("--percentiles: {} is outside (0, 100]. Give values such as 50,90,95,99.", p));
    }
  }
  if (o.device < 0) {
    return Status::invalid_argument(fmt::format(
        "--device: {} is not a device ordinal. Give 0 for the first GPU (nvidia-smi lists them).", o.device));
  }
  if (o.profile_iterations < 1) {
    return Status::invalid_argument(
        fmt::format("profile iterations: {} is too small. Give 1 or more.", o.profile_iterations));
  }
  const std::pair<const char*, const std::string*> files[] = {
      {"--json", &o.json_path}, {"--export-times", &o.export_times_path}, {"--save-output", &o.output_path}};
  for (size_t i = 0; i < std::size(files); ++i)
    for (size_t j = i + 1; j < std::size(files); ++j)
      if (!files[i].second->empty() && *files[i].second == *files[j].second)
        return Status::invalid_argument(fmt::format("{} and {}: both name '{}'. Give two different files.",
                                                    files[i].first, files[j].first, *files[i].second));
  return Status::ok();
}

// ---- The loop ----------------------------------------------------------------------------------

namespace {

double steady_now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct Pending {
  double start_ms = 0;
  double enqueue_ms = 0;
};

}  // namespace

Result<BenchResult> run_bench_loop(const BenchOptions& options, const BenchHooks& hooks) {
  GPULAB_TRY(validate(options));
  if (!hooks.enqueue || !hooks.wait) {
    return Status::internal("bench: run_bench_loop needs both an enqueue and a wait hook.");
  }
  const std::function<double()> now_s = hooks.now_s ? hooks.now_s : steady_now_s;
  const int streams = options.streams;

  // Warm-up: whole rounds, so every stream's context is prepared before measuring.
  const double warmup_start_s = now_s();
  int64_t warmup_rounds = 0;
  do {
    for (int s = 0; s < streams; ++s) {
      GPULAB_TRY(hooks.enqueue(s).with_context(fmt::format("bench warm-up, stream {}", s)));
    }
    for (int s = 0; s < streams; ++s) {
      auto times = hooks.wait(s);
      if (!times) return times.status().with_context(fmt::format("bench warm-up, stream {}", s));
    }
    ++warmup_rounds;
  } while ((now_s() - warmup_start_s) * 1000.0 < options.warmup_ms);
  if (hooks.before_measure) hooks.before_measure();

  // Measurement.
  std::vector<std::deque<Pending>> pending(static_cast<size_t>(streams));
  std::vector<IterationTimes> samples;
  samples.reserve(static_cast<size_t>(std::max<int64_t>(options.min_iterations, 1024)));
  const double start_s = now_s();

  auto issue = [&](int s) -> Status {
    const double t0 = now_s();
    GPULAB_TRY(
        hooks.enqueue(s).with_context(fmt::format("bench iteration {}, stream {}", samples.size(), s)));
    const double t1 = now_s();
    pending[static_cast<size_t>(s)].push_back({(t0 - start_s) * 1000.0, (t1 - t0) * 1000.0});
    return Status::ok();
  };
  auto collect = [&](int s) -> Status {
    auto times = hooks.wait(s);
    if (!times) {
      return times.status().with_context(fmt::format("bench iteration {}, stream {}", samples.size(), s));
    }
    const Pending p = pending[static_cast<size_t>(s)].front();
    pending[static_cast<size_t>(s)].pop_front();
    IterationTimes it;
    it.stream = s;
    it.start_ms = p.start_ms;
    it.enqueue_ms = p.enqueue_ms;
    if (options.include_transfers) {
      it.h2d_ms = times->h2d_ms;
      it.d2h_ms = times->d2h_ms;
    }
    it.compute_ms = times->compute_ms;
    it.latency_ms = it.h2d_ms + it.compute_ms + it.d2h_ms;
    samples.push_back(it);
    return Status::ok();
  };

  for (int s = 0; s < streams; ++s) GPULAB_TRY(issue(s));
  bool done = false;
  while (!done) {
    for (int s = 0; s < streams && !done; ++s) {
      GPULAB_TRY(issue(s));  // queued behind the one still running: the GPU does not idle
      GPULAB_TRY(collect(s));
      done = static_cast<int64_t>(samples.size()) >= options.min_iterations &&
             now_s() - start_s >= options.min_duration_s;
    }
  }
  for (int s = 0; s < streams; ++s) {
    while (!pending[static_cast<size_t>(s)].empty()) GPULAB_TRY(collect(s));
  }
  double wall_s = now_s() - start_s;
  // A clock too coarse to see the run (possible with fake clocks) must not divide by zero.
  if (!(wall_s > 0)) {
    return Status::internal(fmt::format(
        "bench: the host clock did not advance over {} iterations. Use a monotonic clock.", samples.size()));
  }
  return make_bench_result(options, std::move(samples), wall_s);
}

// ---- Results -----------------------------------------------------------------------------------

namespace {

template <typename Field>
Result<Summary> summarize_field(const std::vector<IterationTimes>& samples,
                                const std::vector<double>& percentiles, Field field) {
  std::vector<double> values;
  values.reserve(samples.size());
  for (const IterationTimes& it : samples) values.push_back(it.*field);
  return summarize(values, percentiles);
}

std::string fmt_ms(double ms) {
  return fmt::format("{:.4f}", ms);
}

}  // namespace

Result<BenchResult> make_bench_result(const BenchOptions& options, std::vector<IterationTimes> samples,
                                      double wall_s) {
  GPULAB_TRY(validate(options));
  if (samples.empty()) {
    return Status::invalid_argument("bench: no iterations were measured. Run at least one.");
  }
  BenchResult r;
  r.options = options;
  r.iterations = static_cast<int64_t>(samples.size());
  r.wall_s = wall_s;
  GPULAB_ASSIGN_OR_RETURN(r.throughput_ips, throughput_per_s(r.iterations * options.batch, wall_s));
  const auto& pcts = options.percentiles;
  GPULAB_ASSIGN_OR_RETURN(r.gpu_compute_ms, summarize_field(samples, pcts, &IterationTimes::compute_ms));
  GPULAB_ASSIGN_OR_RETURN(r.latency_ms, summarize_field(samples, pcts, &IterationTimes::latency_ms));
  GPULAB_ASSIGN_OR_RETURN(r.enqueue_ms, summarize_field(samples, pcts, &IterationTimes::enqueue_ms));
  if (options.include_transfers) {
    GPULAB_ASSIGN_OR_RETURN(r.h2d_ms, summarize_field(samples, pcts, &IterationTimes::h2d_ms));
    GPULAB_ASSIGN_OR_RETURN(r.d2h_ms, summarize_field(samples, pcts, &IterationTimes::d2h_ms));
  }
  r.samples = std::move(samples);

  const double compute = r.gpu_compute_ms.median;
  if (r.gpu_compute_ms.cov > kUnstableCov) {
    r.warnings.push_back(
        fmt::format("{} GPU compute time varies by {:.1f}% (coefficient of variation; above {:.1f}%), "
                    "so the medians and throughput may not repeat. gpulab locks nothing (clocks, power): "
                    "close other GPU work, let the GPU reach a steady temperature, and raise "
                    "--min-duration-s.",
                    kUnstableWarning, r.gpu_compute_ms.cov * 100, kUnstableCov * 100));
  }
  if (r.enqueue_ms.median >= compute) {
    r.warnings.push_back(
        fmt::format("enqueue-bound: submitting one iteration takes {} ms of host time, at least its {} ms of "
                    "GPU compute, so the GPU waits for the host and throughput measures the CPU. {}",
                    fmt_ms(r.enqueue_ms.median), fmt_ms(compute),
                    options.cuda_graph ? "Use a bigger --batch or more --streams."
                                       : "Use --cuda-graph (one launch per inference) or a bigger --batch."));
  }
  if (r.h2d_ms && r.d2h_ms && r.h2d_ms->median + r.d2h_ms->median > compute) {
    r.warnings.push_back(
        fmt::format("transfer-bound: H2D + D2H take {} ms per iteration, more than its {} ms of GPU compute. "
                    "Keep inputs on the device (--no-include-transfers measures compute alone), upload "
                    "uint8 images instead of float, or overlap copies and compute with --streams 2.",
                    fmt_ms(r.h2d_ms->median + r.d2h_ms->median), fmt_ms(compute)));
  }
  return r;
}

double compute_throughput_ips(const BenchResult& result) {
  const double ms = result.gpu_compute_ms.median;
  return ms > 0 ? static_cast<double>(result.options.batch) * 1000.0 / ms : 0.0;
}

void add_environment_warnings(BenchResult& result) {
  const auto& env = result.environment;
  if (env.start && env.end && env.start->sm_clock_mhz && env.end->sm_clock_mhz &&
      *env.end->sm_clock_mhz < 0.95 * *env.start->sm_clock_mhz) {
    result.warnings.push_back(fmt::format(
        "clocks dropped: the SM clock fell from {:.0f} MHz at the start to {:.0f} MHz at the end, "
        "so later iterations ran slower. Check cooling and power (gpulab monitor), and compare "
        "runs only at the same clocks.",
        *env.start->sm_clock_mhz, *env.end->sm_clock_mhz));
  }
  for (const auto* state : {&env.start, &env.end}) {
    if (*state && (*state)->performance_limited) {
      std::string reasons;
      for (const auto& name : (*state)->clock_event_reasons) {
        reasons += reasons.empty() ? name : "|" + name;
      }
      result.warnings.push_back(
          fmt::format("throttled: the GPU reported clock-event reasons {} at the {} of the run, so it ran "
                      "below its maximum clocks. Check cooling, the power limit and other GPU work.",
                      reasons, state == &env.start ? "start" : "end"));
      break;
    }
  }
}

std::vector<LayerProfileRow> make_profile(std::span<const LayerTiming> layers,
                                          const std::optional<Ceilings>& ceilings) {
  double total_ms = 0;
  for (const LayerTiming& l : layers) total_ms += l.gpu_ms;
  const bool have_roof = ceilings && ceilings->tflops > 0 && ceilings->memory_gb_s > 0;
  std::vector<LayerProfileRow> rows;
  rows.reserve(layers.size());
  for (const LayerTiming& l : layers) {
    LayerProfileRow row;
    row.layer = l;
    row.share = total_ms > 0 ? l.gpu_ms / total_ms : 0;
    if (l.gpu_ms > 0) {
      row.achieved_tflops = l.flops / (l.gpu_ms * 1e-3) / 1e12;
      row.achieved_gb_s = l.bytes / (l.gpu_ms * 1e-3) / 1e9;
    }
    if (have_roof) {
      const double compute_ms = l.flops / (ceilings->tflops * 1e12) * 1e3;
      const double memory_ms = l.bytes / (ceilings->memory_gb_s * 1e9) * 1e3;
      row.roofline_ms = std::max(compute_ms, memory_ms);
      row.bound = compute_ms >= memory_ms ? "compute" : "memory";
      if (*row.roofline_ms > 0) row.roofline_factor = l.gpu_ms / *row.roofline_ms;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- JSON --------------------------------------------------------------------------------------

nlohmann::json summary_json(const Summary& s) {
  nlohmann::json pct = nlohmann::json::object();
  for (const Percentile& p : s.percentiles) pct[percentile_name(p.percentile)] = p.value;
  return {{"count", s.count},   {"min", s.min},       {"max", s.max}, {"mean", s.mean},
          {"median", s.median}, {"stddev", s.stddev}, {"cov", s.cov}, {"percentiles", pct}};
}

Result<Summary> summary_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return Status::invalid_file("a summary is not a JSON object");
  Summary s;
  for (const auto& [key, field] : {std::pair{"min", &s.min},
                                   {"max", &s.max},
                                   {"mean", &s.mean},
                                   {"median", &s.median},
                                   {"stddev", &s.stddev},
                                   {"cov", &s.cov}}) {
    if (!j.contains(key) || !j[key].is_number()) {
      return Status::invalid_file(fmt::format("a summary lacks the number '{}'", key));
    }
    *field = j[key].get<double>();
  }
  if (!j.contains("count") || !j["count"].is_number_integer()) {
    return Status::invalid_file("a summary lacks the integer 'count'");
  }
  s.count = j["count"].get<int64_t>();
  if (j.contains("percentiles") && j["percentiles"].is_object()) {
    for (const auto& [name, value] : j["percentiles"].items()) {
      if (name.size() < 2 || name[0] != 'p' || !value.is_number()) {
        return Status::invalid_file(fmt::format("a summary has a bad percentile '{}'", name));
      }
      char* end = nullptr;
      const double p = std::strtod(name.c_str() + 1, &end);
      if (end != name.c_str() + name.size() || !(p > 0 && p <= 100)) {
        return Status::invalid_file(fmt::format("a summary has a bad percentile '{}'", name));
      }
      s.percentiles.push_back({.percentile = p, .value = value.get<double>()});
    }
  }
  return s;
}

namespace {

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json state_json(const std::optional<GpuState>& s) {
  if (!s) return nullptr;
  return {{"sm_clock_mhz", opt(s->sm_clock_mhz)},
          {"memory_clock_mhz", opt(s->memory_clock_mhz)},
          {"power_w", opt(s->power_w)},
          {"power_limit_w", opt(s->power_limit_w)},
          {"temperature_c", opt(s->temperature_c)},
          {"clock_event_reasons", s->clock_event_reasons},
          {"performance_limited", s->performance_limited}};
}

nlohmann::json empty_to_null(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

}  // namespace

nlohmann::json to_json(const BenchResult& r) {
  const BenchOptions& o = r.options;
  const BenchEnvironment& e = r.environment;
  nlohmann::json metrics = {{"gpu_compute_ms", summary_json(r.gpu_compute_ms)},
                            {"latency_ms", summary_json(r.latency_ms)},
                            {"enqueue_ms", summary_json(r.enqueue_ms)},
                            {"h2d_ms", r.h2d_ms ? summary_json(*r.h2d_ms) : nullptr},
                            {"d2h_ms", r.d2h_ms ? summary_json(*r.d2h_ms) : nullptr}};
  nlohmann::json profile = nlohmann::json::array();
  for (const LayerProfileRow& row : r.profile) {
    profile.push_back({{"name", row.layer.name},
                       {"kind", row.layer.kind},
                       {"tactic", row.layer.tactic},
                       {"precision", row.layer.precision},
                       {"flops", row.layer.flops},
                       {"bytes", row.layer.bytes},
                       {"gpu_ms", row.layer.gpu_ms},
                       {"share", row.share},
                       {"achieved_tflops", row.achieved_tflops},
                       {"achieved_gb_s", row.achieved_gb_s},
                       {"roofline_ms", opt(row.roofline_ms)},
                       {"roofline_factor", opt(row.roofline_factor)},
                       {"bound", empty_to_null(row.bound)}});
  }
  nlohmann::json ceilings = nullptr;
  if (r.ceilings) {
    ceilings = {{"memory_gb_s", r.ceilings->memory_gb_s},
                {"tflops", r.ceilings->tflops},
                {"source", r.ceilings->source}};
  }
  return {
      {"schema", "gpulab.bench"},
      {"schema_version", kBenchSchemaVersion},
      {"model", r.model},
      {"precision", r.precision},
      {"options",
       {{"batch", o.batch},
        {"warmup_ms", o.warmup_ms},
        {"min_duration_s", o.min_duration_s},
        {"min_iterations", o.min_iterations},
        {"cuda_graph", o.cuda_graph},
        {"include_transfers", o.include_transfers},
        {"streams", o.streams},
        {"percentiles", o.percentiles},
        {"device", o.device}}},
      {"iterations", r.iterations},
      {"wall_s", r.wall_s},
      {"throughput_ips", r.throughput_ips},
      {"compute_throughput_ips", compute_throughput_ips(r)},
      {"metrics", metrics},
      {"warnings", r.warnings},
      {"environment",
       {{"gpu_name", empty_to_null(e.gpu_name)},
        {"compute_capability", opt(e.compute_capability)},
        {"driver_version", empty_to_null(e.driver_version)},
        {"cuda_driver_version", opt(e.cuda_driver_version)},
        {"cuda_runtime_version", opt(e.cuda_runtime_version)},
        {"cudnn_version", opt(e.cudnn_version)},
        {"cublas_version", opt(e.cublas_version)},
        {"start", state_json(e.start)},
        {"end", state_json(e.end)},
        {"gpulab_version", empty_to_null(e.gpulab_version)},
        {"gpulab_commit", empty_to_null(e.gpulab_commit)},
        {"command_line", empty_to_null(e.command_line)}}},
      {"ceilings", ceilings},
      {"plan", r.plan_source.empty()
                   ? nlohmann::json(nullptr)
                   : nlohmann::json{{"source", r.plan_source}, {"seconds", opt(r.plan_seconds)}}},
      {"profile", profile},
  };
}

namespace {

Result<std::optional<GpuState>> state_from_json(const JsonReader& parent, const char* key) {
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* j, parent.optional_object(key));
  if (!j) return std::optional<GpuState>();
  const JsonReader r = parent.child(*j, key);
  GpuState s;
  for (const auto& [name, field] : {std::pair{"sm_clock_mhz", &s.sm_clock_mhz},
                                    {"memory_clock_mhz", &s.memory_clock_mhz},
                                    {"power_w", &s.power_w},
                                    {"power_limit_w", &s.power_limit_w},
                                    {"temperature_c", &s.temperature_c}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(name));
  }
  if (j->contains("clock_event_reasons") && !(*j)["clock_event_reasons"].is_null()) {
    GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* reasons, r.array("clock_event_reasons"));
    for (const nlohmann::json& reason : *reasons) {
      if (!reason.is_string()) return r.bad("clock_event_reasons", "a reason is not a string");
      s.clock_event_reasons.push_back(reason.get<std::string>());
    }
  }
  GPULAB_ASSIGN_OR_RETURN(const auto limited, r.optional<bool>("performance_limited"));
  s.performance_limited = limited.value_or(false);
  return std::optional<GpuState>(std::move(s));
}

Result<BenchOptions> options_from_json(const JsonReader& r) {
  BenchOptions o;
  GPULAB_ASSIGN_OR_RETURN(o.batch, r.integer("batch"));
  GPULAB_ASSIGN_OR_RETURN(o.warmup_ms, r.number("warmup_ms"));
  GPULAB_ASSIGN_OR_RETURN(o.min_duration_s, r.number("min_duration_s"));
  GPULAB_ASSIGN_OR_RETURN(o.min_iterations, r.integer("min_iterations"));
  GPULAB_ASSIGN_OR_RETURN(o.cuda_graph, r.boolean("cuda_graph"));
  GPULAB_ASSIGN_OR_RETURN(o.include_transfers, r.boolean("include_transfers"));
  GPULAB_ASSIGN_OR_RETURN(const int64_t streams, r.integer("streams"));
  o.streams = static_cast<int>(std::clamp<int64_t>(streams, 0, kMaxStreams));
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* percentiles, r.array("percentiles"));
  o.percentiles.clear();
  for (const nlohmann::json& p : *percentiles) {
    if (!p.is_number()) return r.bad("percentiles", "a percentile is not a number");
    o.percentiles.push_back(p.get<double>());
  }
  GPULAB_ASSIGN_OR_RETURN(const auto device, r.optional<int>("device"));
  o.device = device.value_or(0);
  return o;
}

Result<LayerProfileRow> profile_row_from_json(const JsonReader& r) {
  if (!r.doc.is_object()) return r.bad("", "not an object");
  LayerProfileRow row;
  for (const auto& [name, field] : {std::pair{"name", &row.layer.name},
                                    {"kind", &row.layer.kind},
                                    {"tactic", &row.layer.tactic},
                                    {"precision", &row.layer.precision}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.text(name));
  }
  for (const auto& [name, field] : {std::pair{"flops", &row.layer.flops},
                                    {"bytes", &row.layer.bytes},
                                    {"gpu_ms", &row.layer.gpu_ms},
                                    {"share", &row.share},
                                    {"achieved_tflops", &row.achieved_tflops},
                                    {"achieved_gb_s", &row.achieved_gb_s}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.number(name));
  }
  GPULAB_ASSIGN_OR_RETURN(row.roofline_ms, r.optional<double>("roofline_ms"));
  GPULAB_ASSIGN_OR_RETURN(row.roofline_factor, r.optional<double>("roofline_factor"));
  GPULAB_ASSIGN_OR_RETURN(const auto bound, r.optional<std::string>("bound"));
  row.bound = bound.value_or("");
  return row;
}

}  // namespace

Result<BenchResult> bench_from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) return Status::invalid_file("not a JSON object");
  if (json_string_or(doc, "schema", "") != "gpulab.bench") {
    return Status::invalid_file("not a gpulab bench result (its \"schema\" is not \"gpulab.bench\")");
  }
  const JsonReader r{doc, "bench"};
  GPULAB_ASSIGN_OR_RETURN(const auto version, r.optional<int64_t>("schema_version"));
  if (version.value_or(0) != kBenchSchemaVersion) {
    return Status::invalid_file(fmt::format("schema_version {} is not the {} this gpulab reads",
                                            version.value_or(0), kBenchSchemaVersion));
  }
  BenchResult b;
  GPULAB_ASSIGN_OR_RETURN(b.model, r.text("model"));
  GPULAB_ASSIGN_OR_RETURN(b.precision, r.text("precision"));
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* options, r.object("options"));
  GPULAB_ASSIGN_OR_RETURN(b.options, options_from_json(r.child(*options, "options")));
  GPULAB_ASSIGN_OR_RETURN(b.iterations, r.integer("iterations"));
  GPULAB_ASSIGN_OR_RETURN(b.wall_s, r.number("wall_s"));
  GPULAB_ASSIGN_OR_RETURN(b.throughput_ips, r.number("throughput_ips"));

  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* metrics, r.object("metrics"));
  const JsonReader m = r.child(*metrics, "metrics");
  for (const auto& [key, field] : {std::pair{"gpu_compute_ms", &b.gpu_compute_ms},
                                   {"latency_ms", &b.latency_ms},
                                   {"enqueue_ms", &b.enqueue_ms}}) {
    GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* summary, m.object(key));
    auto parsed = summary_from_json(*summary);
    if (!parsed.is_ok()) return m.bad(key, parsed.status().message());
    *field = std::move(*parsed);
  }
  for (const auto& [key, field] : {std::pair{"h2d_ms", &b.h2d_ms}, {"d2h_ms", &b.d2h_ms}}) {
    GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* summary, m.optional_object(key));
    if (!summary) continue;
    auto parsed = summary_from_json(*summary);
    if (!parsed.is_ok()) return m.bad(key, parsed.status().message());
    *field = std::move(*parsed);
  }
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* warnings, r.array("warnings"));
  for (const nlohmann::json& w : *warnings) {
    if (!w.is_string()) return r.bad("warnings", "a warning is not a string");
    b.warnings.push_back(w.get<std::string>());
  }

  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* environment, r.object("environment"));
  const JsonReader e = r.child(*environment, "environment");
  BenchEnvironment& env = b.environment;
  for (const auto& [key, field] : {std::pair{"gpu_name", &env.gpu_name},
                                   {"driver_version", &env.driver_version},
                                   {"gpulab_version", &env.gpulab_version},
                                   {"gpulab_commit", &env.gpulab_commit},
                                   {"command_line", &env.command_line}}) {
    GPULAB_ASSIGN_OR_RETURN(const auto value, e.optional<std::string>(key));
    *field = value.value_or("");
  }
  for (const auto& [key, field] : {std::pair{"compute_capability", &env.compute_capability},
                                   {"cuda_driver_version", &env.cuda_driver_version},
                                   {"cuda_runtime_version", &env.cuda_runtime_version},
                                   {"cudnn_version", &env.cudnn_version},
                                   {"cublas_version", &env.cublas_version}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, e.optional<int>(key));
  }
  GPULAB_ASSIGN_OR_RETURN(env.start, state_from_json(e, "start"));
  GPULAB_ASSIGN_OR_RETURN(env.end, state_from_json(e, "end"));

  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* ceilings, r.optional_object("ceilings"));
  if (ceilings) {
    const JsonReader c = r.child(*ceilings, "ceilings");
    Ceilings out;
    GPULAB_ASSIGN_OR_RETURN(out.memory_gb_s, c.number("memory_gb_s"));
    GPULAB_ASSIGN_OR_RETURN(out.tflops, c.number("tflops"));
    GPULAB_ASSIGN_OR_RETURN(const auto source, c.optional<std::string>("source"));
    out.source = source.value_or("");
    b.ceilings = out;
  }
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* plan, r.optional_object("plan"));
  if (plan) {
    const JsonReader p = r.child(*plan, "plan");
    GPULAB_ASSIGN_OR_RETURN(b.plan_source, p.text("source"));
    GPULAB_ASSIGN_OR_RETURN(b.plan_seconds, p.optional<double>("seconds"));
  }
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* profile, r.array("profile"));
  for (size_t i = 0; i < profile->size(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(LayerProfileRow row,
                            profile_row_from_json(JsonReader{(*profile)[i], fmt::format("profile[{}]", i)}));
    b.profile.push_back(std::move(row));
  }
  return b;
}

// ---- Printed report ----------------------------------------------------------------------------

std::string cuda_version_string(const std::optional<int>& v) {
  if (!v) return "?";
  return fmt::format("{}.{}", *v / 1000, (*v % 1000) / 10);
}
std::string cudnn_version_string(const std::optional<int>& v) {
  if (!v) return "?";
  // cuDNN 9: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", *v / 10000, (*v % 10000) / 100, *v % 100);
}
std::string cublas_version_string(const std::optional<int>& v) {
  if (!v) return "?";
  // cuBLAS(Lt) 12+: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", *v / 10000, (*v % 10000) / 100, *v % 100);
}

namespace {

std::string state_pair(const std::optional<GpuState>& a, const std::optional<GpuState>& b,
                       std::optional<double> GpuState::*field, const char* unit) {
  auto one = [&](const std::optional<GpuState>& s) {
    return s && (*s).*field ? fmt::format("{:.0f}", *((*s).*field)) : std::string("?");
  };
  return fmt::format("{} / {} {}", one(a), one(b), unit);
}

void append_row(std::string& out, const char* name, const Summary& s) {
  out += fmt::format("  {:<16}{:>10.4f}{:>10.4f}{:>10.4f}", name, s.min, s.mean, s.median);
  for (const Percentile& p : s.percentiles) out += fmt::format("{:>10.4f}", p.value);
  out += fmt::format("{:>10.4f}{:>8.2f}%\n", s.max, s.cov * 100);
}

constexpr const char* kExplanation =
    "What the numbers mean (docs/metrics.md defines each once):\n"
    "  Throughput     inferences (images) completed per second of host wall time over the whole\n"
    "                 measurement: iterations x batch / wall time. Includes every host gap.\n"
    "  Latency        H2D + GPU compute + D2H of one iteration (device events); equals GPU compute\n"
    "                 when transfers are not included. Not the host round trip.\n"
    "  GPU compute    device time between CUDA events around the inference itself (ms).\n"
    "  H2D / D2H      device time of the input copy from pinned host memory / the output copy back.\n"
    "  Enqueue        host time the call that queues one iteration took (ms); when it reaches GPU\n"
    "                 compute, the GPU waits for the host.\n"
    "  min/mean/median/max, pNN: over the measured iterations; pNN is the nearest-rank\n"
    "                 percentile (the smallest sample with at least NN% of samples at or below it).\n"
    "  CoV            coefficient of variation = standard deviation / mean; above 2.5% the run\n"
    "                 is flagged unstable.\n";

}  // namespace

std::string format_profile(std::span<const LayerProfileRow> rows, const std::optional<Ceilings>& ceilings) {
  if (rows.empty()) return {};
  std::string out;
  if (ceilings && ceilings->tflops > 0 && ceilings->memory_gb_s > 0) {
    out += fmt::format(
        "Per-layer profile (eager, events between steps; roofline at {:.0f} TFLOP/s "
        "and {:.0f} GB/s, {}):\n",
        ceilings->tflops, ceilings->memory_gb_s, ceilings->source);
  } else {
    out +=
        "Per-layer profile (eager, events between steps; no ceilings: run with --ceilings "
        "for roofline columns):\n";
  }
  // The tactic column holds a batch-chunked one's engine too ("chunk256:cudnn-unfused:70;...").
  out += fmt::format("  {:<28} {:<10} {:<30} {:>9} {:>7} {:>9} {:>9} {:>10} {:>8} {:>8}\n", "layer", "kind",
                     "tactic", "ms", "share", "GFLOP", "TFLOP/s", "GB/s", "roof ms", "x roof");
  for (const LayerProfileRow& row : rows) {
    out += fmt::format(
        "  {:<28} {:<10} {:<30} {:>9.4f} {:>6.1f}% {:>9.3f} {:>9.1f} {:>10.1f} {:>8} {:>8}\n",
        row.layer.name.substr(0, 28), row.layer.kind.substr(0, 10), row.layer.tactic.substr(0, 30),
        row.layer.gpu_ms, row.share * 100, row.layer.flops / 1e9, row.achieved_tflops, row.achieved_gb_s,
        row.roofline_ms ? fmt::format("{:.4f}", *row.roofline_ms) : "-",
        row.roofline_factor ? fmt::format("{:.2f}{}", *row.roofline_factor, row.bound[0]) : "-");
  }
  out += "  x roof: measured / roofline time; c = compute-bound, m = memory-bound roofline.\n";
  return out;
}

std::string format_summary(const BenchResult& r) {
  const BenchOptions& o = r.options;
  const BenchEnvironment& e = r.environment;
  std::string out;
  out += fmt::format("gpulab bench: {} ({}), batch {}, CUDA graph {}, transfers {}, {} stream{}\n", r.model,
                     r.precision, o.batch, o.cuda_graph ? "on" : "off",
                     o.include_transfers ? "included" : "not included", o.streams, o.streams == 1 ? "" : "s");
  out += fmt::format("GPU {}: {} (driver {}, CUDA runtime {}, cuDNN {}, cuBLAS {})\n", o.device,
                     e.gpu_name.empty() ? "?" : e.gpu_name, e.driver_version.empty() ? "?" : e.driver_version,
                     cuda_version_string(e.cuda_runtime_version), cudnn_version_string(e.cudnn_version),
                     cublas_version_string(e.cublas_version));
  if (e.start || e.end) {
    out += fmt::format("Start / end: SM clock {}, memory clock {}, power limit {}, power {}\n",
                       state_pair(e.start, e.end, &GpuState::sm_clock_mhz, "MHz"),
                       state_pair(e.start, e.end, &GpuState::memory_clock_mhz, "MHz"),
                       state_pair(e.start, e.end, &GpuState::power_limit_w, "W"),
                       state_pair(e.start, e.end, &GpuState::power_w, "W"));
  }
  if (!r.plan_source.empty() && r.plan_seconds) {
    out += r.plan_source == "build"
               ? fmt::format("Plan: built from the model in {:.2f} s (tactic timing included)\n",
                             *r.plan_seconds)
               : fmt::format("Plan: loaded in {:.3f} s\n", *r.plan_seconds);
  }
  out += fmt::format("Measured {} iterations in {:.3f} s after {:.0f} ms of warm-up\n\n", r.iterations,
                     r.wall_s, o.warmup_ms);
  out += fmt::format(
      "Throughput: {:.1f} inferences/s (host wall time); batch / median GPU compute: {:.1f}/s\n\n",
      r.throughput_ips, compute_throughput_ips(r));

  out += fmt::format("  {:<16}{:>10}{:>10}{:>10}", "time (ms)", "min", "mean", "median");
  for (double p : o.percentiles) out += fmt::format("{:>10}", percentile_name(p));
  out += fmt::format("{:>10}{:>9}\n", "max", "CoV");
  append_row(out, "Latency", r.latency_ms);
  if (r.h2d_ms) append_row(out, "H2D", *r.h2d_ms);
  append_row(out, "GPU compute", r.gpu_compute_ms);
  if (r.d2h_ms) append_row(out, "D2H", *r.d2h_ms);
  append_row(out, "Enqueue", r.enqueue_ms);

  if (!r.profile.empty()) out += "\n" + format_profile(r.profile, r.ceilings);
  if (!r.warnings.empty()) {
    out += "\nWarnings:\n";
    for (const std::string& w : r.warnings) out += "  - " + w + "\n";
  }
  out += "\n";
  out += kExplanation;
  return out;
}

// ---- Files -------------------------------------------------------------------------------------

Status export_times_csv(const std::filesystem::path& path, std::span<const IterationTimes> samples) {
  std::string text = "iteration,stream,start_ms,enqueue_ms,h2d_ms,compute_ms,d2h_ms,latency_ms\n";
  text.reserve(text.size() + samples.size() * 80);
  for (size_t i = 0; i < samples.size(); ++i) {
    const IterationTimes& t = samples[i];
    text += fmt::format("{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f}\n", i, t.stream, t.start_ms,
                        t.enqueue_ms, t.h2d_ms, t.compute_ms, t.d2h_ms, t.latency_ms);
  }
  return write_file_atomic(path, text).with_context("--export-times");
}

Status write_bench_json(const std::filesystem::path& path, const BenchResult& result) {
  return write_file_atomic(path, to_json(result).dump(2) + "\n").with_context("--json");
}

float bench_input_value(uint32_t state) {
  return static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
}

void BenchInputGenerator::fill(std::span<float> values) {
  for (float& v : values) {
    state_ = state_ * kMul + kAdd;
    v = bench_input_value(state_);
  }
}

BenchInputLanes bench_input_lanes(int64_t lanes) {
  BenchInputLanes l;
  l.starts.resize(static_cast<size_t>(std::max<int64_t>(lanes, 0)));
  uint32_t state = BenchInputGenerator::kSeed;
  for (uint32_t& start : l.starts) {
    state = state * BenchInputGenerator::kMul + BenchInputGenerator::kAdd;
    start = state;
    // After step k the map is state -> state * mul + add composed k times.
    l.mul *= BenchInputGenerator::kMul;
    l.add = l.add * BenchInputGenerator::kMul + BenchInputGenerator::kAdd;
  }
  return l;
}

void fill_bench_input(std::span<float> values) {
  BenchInputGenerator().fill(values);
}

Status write_output_npy(const std::filesystem::path& path, const BenchOutput& output) {
  if (output.batch < 1 || output.classes < 1 ||
      output.logits.size() != static_cast<size_t>(output.batch * output.classes)) {
    return Status::invalid_argument(fmt::format("--save-output: {} logits for a batch of {} x {} classes",
                                                output.logits.size(), output.batch, output.classes));
  }
  // Magic, version 1.0, a little-endian uint16 header length, then the header: a Python dict
  // literal padded with spaces to a multiple of 64 bytes in all, ending in a newline.
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
                                   output.batch, output.classes);
  constexpr size_t kPrefix = 10;  // magic (6), version (2), header length (2)
  header.append(63 - (kPrefix + header.size()) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  static_assert(std::endian::native == std::endian::little, "the .npy data is written as little-endian");
  bytes.append(reinterpret_cast<const char*>(output.logits.data()), output.logits.size() * sizeof(float));
  return write_file_atomic(path, bytes).with_context("--save-output");
}

}  // namespace gpulab::measure
