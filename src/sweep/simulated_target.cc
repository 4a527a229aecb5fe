#include "sweep/simulated_target.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "core/file_io.h"
#include "image/dataset.h"

namespace gpulab::sweep {
namespace {

using nlohmann::json;

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads `key` of `obj` into `out` when present; kInvalidFile when it has the wrong type.
template <typename T>
Status read(const json& obj, const char* key, T& out, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return Status::ok();
  const json& v = obj[key];
  const bool ok = std::is_same_v<T, std::string> ? v.is_string()
                  : std::is_integral_v<T>        ? v.is_number_integer()
                                                 : v.is_number();
  if (!ok) return Status::invalid_file(fmt::format("scenario: {}{} has the wrong type", where, key));
  out = v.get<T>();
  return Status::ok();
}

constexpr double kMiB = 1024.0 * 1024.0;
// What a thermal slowdown leaves of the clock in the simulation.
constexpr double kThermalClockRatio = 0.9;

}  // namespace

Result<SimulatedScenario> parse_scenario(const json& doc) {
  if (!doc.is_object()) return Status::invalid_file("scenario: not a JSON object");
  SimulatedScenario s;
  GPULAB_TRY(read(doc, "gpu_name", s.gpu_name, ""));
  for (const auto& [key, field] : {std::pair{"memory_mib", &s.memory_mib},
                                   {"baseline_used_mib", &s.baseline_used_mib},
                                   {"h2d_gb_s", &s.h2d_gb_s},
                                   {"power_limit_w", &s.power_limit_w},
                                   {"idle_power_w", &s.idle_power_w},
                                   {"watts_per_tflops", &s.watts_per_tflops},
                                   {"sm_clock_max_mhz", &s.sm_clock_max_mhz},
                                   {"leak_mib_per_oom", &s.leak_mib_per_oom},
                                   {"sample_period_ms", &s.sample_period_ms},
                                   {"point_delay_ms", &s.point_delay_ms}}) {
    GPULAB_TRY(read(doc, key, *field, ""));
  }
  if (doc.contains("thermal_from_batch")) {
    int64_t b = 0;
    GPULAB_TRY(read(doc, "thermal_from_batch", b, ""));
    if (!doc["thermal_from_batch"].is_null()) s.thermal_from_batch = b;
  }
  if (doc.contains("pcie")) {
    const json& p = doc["pcie"];
    if (!p.is_object()) return Status::invalid_file("scenario: pcie is not an object");
    for (const auto& [key, field] : {std::pair{"gen", &s.pcie_gen},
                                     {"gen_max", &s.pcie_gen_max},
                                     {"width", &s.pcie_width},
                                     {"width_max", &s.pcie_width_max}}) {
      GPULAB_TRY(read(p, key, *field, "pcie."));
    }
  }
  if (doc.contains("model")) {
    const json& m = doc["model"];
    if (!m.is_object()) return Status::invalid_file("scenario: model is not an object");
    GPULAB_TRY(read(m, "flops_per_image", s.flops_per_image, "model."));
    GPULAB_TRY(read(m, "bytes_per_image", s.bytes_per_image, "model."));
    GPULAB_TRY(read(m, "param_bytes", s.param_bytes, "model."));
    GPULAB_TRY(read(m, "input_bytes_per_image", s.input_bytes_per_image, "model."));
    GPULAB_TRY(read(m, "classes", s.classes, "model."));
  }
  if (doc.contains("precisions")) {
    const json& ps = doc["precisions"];
    if (!ps.is_object()) return Status::invalid_file("scenario: precisions is not an object");
    for (const auto& [name, spec] : ps.items()) {
      auto precision = parse_precision(name);
      if (!precision.is_ok())
        return Status::invalid_file(fmt::format("scenario: precisions.{}: not a precision", name));
      if (!spec.is_object())
        return Status::invalid_file(fmt::format("scenario: precisions.{} is not an object", name));
      SimulatedPrecision sp;
      const std::string where = "precisions." + name + ".";
      for (const auto& [key, field] : {std::pair{"launch_ms", &sp.launch_ms},
                                       {"per_image_ms", &sp.per_image_ms},
                                       {"enqueue_ms", &sp.enqueue_ms},
                                       {"host_gap_ms", &sp.host_gap_ms},
                                       {"tflops_ceiling", &sp.tflops_ceiling},
                                       {"memory_gb_s", &sp.memory_gb_s},
                                       {"weights_mib", &sp.weights_mib},
                                       {"mib_per_image", &sp.mib_per_image},
                                       {"agreement", &sp.agreement},
                                       {"jitter", &sp.jitter}}) {
        GPULAB_TRY(read(spec, key, *field, where));
        if (*field < 0 || !std::isfinite(*field)) {
          return Status::invalid_file(fmt::format("scenario: {}{} is negative", where, key));
        }
      }
      std::string stage = "context";
      GPULAB_TRY(read(spec, "oom_stage", stage, where));
      if (stage == "build") {
        sp.oom_stage = OomStage::kBuild;
      } else if (stage == "context") {
        sp.oom_stage = OomStage::kContext;
      } else if (stage == "run") {
        sp.oom_stage = OomStage::kRun;
      } else {
        return Status::invalid_file(
            fmt::format("scenario: {}oom_stage '{}' is not build, context or run", where, stage));
      }
      s.precisions[*precision] = sp;
    }
  }
  if (s.memory_mib <= 0 || s.h2d_gb_s <= 0 || s.power_limit_w <= 0 || s.sm_clock_max_mhz <= 0 ||
      s.sample_period_ms <= 0) {
    return Status::invalid_file(
        "scenario: memory_mib, h2d_gb_s, power_limit_w, sm_clock_max_mhz and sample_period_ms must be "
        "positive");
  }
  return s;
}

Result<std::vector<SimulatedScenario>> load_scenarios(const std::filesystem::path& path, size_t count) {
  GPULAB_ASSIGN_OR_RETURN(const std::string text, read_file_text(path));
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::invalid_file(fmt::format("scenario '{}': not a JSON object", path.string()));
  }
  const json per_gpu = doc.value("gpus", json::array());
  if (!per_gpu.is_array())
    return Status::invalid_file(fmt::format("scenario '{}': gpus is not a list", path.string()));
  std::vector<SimulatedScenario> out;
  for (size_t i = 0; i < count; ++i) {
    json merged = doc;
    merged.erase("gpus");
    if (i < per_gpu.size()) merged.merge_patch(per_gpu[i]);
    auto s = parse_scenario(merged);
    if (!s.is_ok()) return s.status().with_context(fmt::format("'{}', GPU {}", path.string(), i));
    out.push_back(std::move(*s));
  }
  return out;
}

Result<SimulatedScenario> load_scenario(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(const std::string text, read_file_text(path));
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded())
    return Status::invalid_file(fmt::format("scenario '{}': not valid JSON", path.string()));
  auto s = parse_scenario(doc);
  if (!s.is_ok()) return s.status().with_context(fmt::format("'{}'", path.string()));
  return s;
}

SimulatedTarget::SimulatedTarget(SimulatedScenario scenario, std::string description)
    : scenario_(std::move(scenario)), description_(std::move(description)) {}

TargetInfo SimulatedTarget::info() const {
  return {.kind = "simulated", .description = description_, .device = 0};
}

const SimulatedPrecision& SimulatedTarget::current() const {
  static const SimulatedPrecision kDefault;
  auto it = scenario_.precisions.find(*precision_);
  return it == scenario_.precisions.end() ? kDefault : it->second;
}

double SimulatedTarget::used_mib() const {
  return scenario_.baseline_used_mib + leaked_mib_ + plan_mib_ + context_mib_;
}

double SimulatedTarget::power_limit_w() const {
  if (power_limit_) {
    if (auto w = power_limit_()) return *w;
  }
  return scenario_.power_limit_w;
}

Result<PlanFacts> SimulatedTarget::prepare_plan(Precision precision, int64_t batch) {
  release();
  precision_ = precision;
  const SimulatedPrecision& p = current();
  const double needed =
      p.weights_mib + (p.oom_stage == OomStage::kBuild ? p.mib_per_image * static_cast<double>(batch) : 0);
  if (used_mib() + needed > scenario_.memory_mib) {
    leaked_mib_ += scenario_.leak_mib_per_oom;
    return Status::out_of_memory(
        fmt::format("simulated: building the {} plan for batch {} needs {:.0f} MiB, {:.0f} MiB free",
                    precision_name(precision), batch, needed, scenario_.memory_mib - used_mib()));
  }
  plan_mib_ = p.weights_mib;
  return PlanFacts{.flops_per_image = scenario_.flops_per_image,
                   .bytes_per_image = scenario_.bytes_per_image,
                   .param_bytes = scenario_.param_bytes,
                   .input_bytes_per_image = scenario_.input_bytes_per_image,
                   .max_batch = batch,
                   .source = "build",
                   .tactics = "simulated",
                   .seconds = 0};
}

Status SimulatedTarget::prepare_context(int64_t batch) {
  if (!precision_) return Status::internal("simulated: prepare_context before prepare_plan");
  const SimulatedPrecision& p = current();
  const double needed = p.mib_per_image * static_cast<double>(batch);
  if (p.oom_stage == OomStage::kContext && used_mib() + needed > scenario_.memory_mib) {
    leaked_mib_ += scenario_.leak_mib_per_oom;
    return Status::out_of_memory(
        fmt::format("simulated: the context for batch {} needs {:.0f} MiB, {:.0f} MiB free", batch, needed,
                    scenario_.memory_mib - used_mib()));
  }
  context_mib_ = std::min(needed, scenario_.memory_mib - used_mib());
  context_batch_ = batch;
  return Status::ok();
}

Result<measure::BenchResult> SimulatedTarget::measure(const measure::BenchOptions& options) {
  if (!precision_ || context_batch_ < options.batch)
    return Status::internal("simulated: measure before prepare");
  if (before_measure_) before_measure_();  // the warm-up is instantaneous here
  const SimulatedPrecision& p = current();
  const auto batch = static_cast<double>(options.batch);
  if (p.oom_stage == OomStage::kRun &&
      used_mib() + p.mib_per_image * batch - context_mib_ > scenario_.memory_mib) {
    leaked_mib_ += scenario_.leak_mib_per_oom;
    return Status::out_of_memory(
        fmt::format("simulated: running batch {} ran out of device memory", options.batch));
  }
  // Power and clock (see the header's model).
  const double full_ms = p.launch_ms + batch * p.per_image_ms;
  const double demand_w = scenario_.idle_power_w + scenario_.watts_per_tflops * scenario_.flops_per_image *
                                                       batch / (full_ms * 1e-3) / 1e12;
  const double limit_w = power_limit_w();
  Point pt{.batch = options.batch};
  if (demand_w > limit_w && demand_w > scenario_.idle_power_w) {
    pt.capped = true;
    pt.clock_ratio =
        std::clamp((limit_w - scenario_.idle_power_w) / (demand_w - scenario_.idle_power_w), 0.3, 1.0);
    pt.power_w = limit_w;
  } else {
    pt.power_w = demand_w;
  }
  pt.thermal = scenario_.thermal_from_batch && options.batch >= *scenario_.thermal_from_batch;
  if (pt.thermal) pt.clock_ratio *= kThermalClockRatio;
  const double compute_ms = p.launch_ms + batch * p.per_image_ms / pt.clock_ratio;
  const double h2d_ms =
      options.include_transfers
          ? batch * static_cast<double>(scenario_.input_bytes_per_image) / (scenario_.h2d_gb_s * 1e6)
          : 0;
  const double d2h_ms = options.include_transfers
                            ? batch * static_cast<double>(scenario_.classes) * 4 / (scenario_.h2d_gb_s * 1e6)
                            : 0;
  const double period_ms = std::max(h2d_ms + compute_ms + d2h_ms, p.enqueue_ms) + p.host_gap_ms;
  const auto iterations =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(options.min_duration_s * 1000.0 / period_ms)),
                          options.min_iterations, 500000);

  std::vector<measure::IterationTimes> samples;
  samples.reserve(static_cast<size_t>(iterations));
  auto noise = [&]() {
    lcg_ = lcg_ * 1664525u + 1013904223u;
    return (static_cast<double>(lcg_ >> 8) / 8388608.0 - 1.0) * p.jitter;  // [-jitter, jitter)
  };
  double wall_ms = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    measure::IterationTimes t;
    t.start_ms = wall_ms;
    t.enqueue_ms = p.enqueue_ms * (1 + noise());
    t.h2d_ms = h2d_ms * (1 + noise());
    t.compute_ms = compute_ms * (1 + noise());
    t.d2h_ms = d2h_ms * (1 + noise());
    t.latency_ms = t.h2d_ms + t.compute_ms + t.d2h_ms;
    wall_ms += std::max(t.latency_ms, t.enqueue_ms) + p.host_gap_ms;
    samples.push_back(t);
  }
  GPULAB_ASSIGN_OR_RETURN(measure::BenchResult result,
                          measure::make_bench_result(options, std::move(samples), wall_ms / 1000.0));
  result.precision = std::string(precision_name(*precision_));
  result.environment.gpu_name = scenario_.gpu_name;
  pt.wall_s = result.wall_s;
  pt.end_unix_ms = now_unix_ms();
  pt.busy_share = (h2d_ms + compute_ms + d2h_ms) / period_ms;
  const double images_per_s = result.throughput_ips;
  pt.rx_kb_s = options.include_transfers
                   ? images_per_s * static_cast<double>(scenario_.input_bytes_per_image) / 1024
                   : 0;
  pt.tx_kb_s =
      options.include_transfers ? images_per_s * static_cast<double>(scenario_.classes) * 4 / 1024 : 0;
  energy_mj_ += pt.power_w * result.wall_s * 1000.0;
  last_ = pt;
  if (scenario_.point_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(scenario_.point_delay_ms));
    last_->end_unix_ms = now_unix_ms();
  }
  return result;
}

void SimulatedTarget::release() {
  plan_mib_ = 0;
  context_mib_ = 0;
  context_batch_ = 0;
}

std::optional<int64_t> SimulatedTarget::device_memory_used_bytes() {
  return static_cast<int64_t>(used_mib() * kMiB);
}

Result<measure::Ceilings> SimulatedTarget::ceilings(Precision precision) {
  precision_ = precision;
  const SimulatedPrecision& p = current();
  return measure::Ceilings{.memory_gb_s = p.memory_gb_s, .tflops = p.tflops_ceiling, .source = "simulated"};
}

Result<double> SimulatedTarget::h2d_gb_s() {
  return scenario_.h2d_gb_s;
}

Result<AgreementResult> SimulatedTarget::agreement(Precision precision,
                                                   const std::filesystem::path& dataset_dir,
                                                   int64_t max_images) {
  // The images are counted for real (a missing or empty folder is the same error as on a GPU);
  // the agreement is the scenario's.
  GPULAB_ASSIGN_OR_RETURN(const std::vector<LabelledImage> dataset,
                          load_gate_images(dataset_dir, max_images));
  const auto images = static_cast<int64_t>(dataset.size());
  precision_ = precision;
  return AgreementResult{
      .images = images, .agreement = current().agreement, .top1_accuracy = std::nullopt, .seconds = 0};
}

void SimulatedTarget::start() {
  window_open_ = true;
  last_.reset();
}

std::vector<telemetry::GpuSample> SimulatedTarget::stop() {
  window_open_ = false;
  std::vector<telemetry::GpuSample> out;
  const int64_t end_ms = last_ ? last_->end_unix_ms : now_unix_ms();
  const double span_ms = last_ ? last_->wall_s * 1000.0 : scenario_.sample_period_ms;
  const auto count = std::max<int64_t>(1, static_cast<int64_t>(span_ms / scenario_.sample_period_ms));
  const double energy_start_mj = energy_mj_ - (last_ ? last_->power_w * last_->wall_s * 1000.0 : 0);
  for (int64_t i = 0; i < count; ++i) {
    telemetry::GpuSample s;
    const double t_ms = span_ms * static_cast<double>(i + 1) / static_cast<double>(count);
    s.timestamp_ms = end_ms - static_cast<int64_t>(span_ms - t_ms);
    s.index = device_index_;
    s.name = scenario_.gpu_name;
    s.power_limit_w = power_limit_w();
    s.sm_clock_max_mhz = static_cast<uint32_t>(scenario_.sm_clock_max_mhz);
    s.memory_total_bytes = static_cast<uint64_t>(scenario_.memory_mib * kMiB);
    s.memory_used_bytes = static_cast<uint64_t>(used_mib() * kMiB);
    s.processes.emplace();
    s.processes->push_back({.pid = static_cast<uint32_t>(::getpid()),
                            .name = "gpulab",
                            .used_bytes = static_cast<uint64_t>((plan_mib_ + context_mib_) * kMiB)});
    s.pcie_gen = static_cast<uint32_t>(scenario_.pcie_gen);
    s.pcie_gen_max = static_cast<uint32_t>(scenario_.pcie_gen_max);
    s.pcie_width = static_cast<uint32_t>(scenario_.pcie_width);
    s.pcie_width_max = static_cast<uint32_t>(scenario_.pcie_width_max);
    if (last_) {
      const Point& p = *last_;
      s.power_w = p.power_w;
      s.energy_mj = static_cast<uint64_t>(energy_start_mj + p.power_w * t_ms);
      s.sm_clock_mhz = static_cast<uint32_t>(std::lround(scenario_.sm_clock_max_mhz * p.clock_ratio));
      s.gpu_util_pct = static_cast<uint32_t>(std::lround(100 * p.busy_share));
      uint64_t reasons = 0;
      if (p.capped) reasons |= telemetry::clock_event::kSwPowerCap;
      if (p.thermal && i % 2 == 0) reasons |= telemetry::clock_event::kHwThermalSlowdown;
      s.clock_event_reasons = reasons;
      s.temperature_c = p.thermal ? 88u : static_cast<uint32_t>(40 + p.power_w / 20);
      s.pcie_rx_kb_s = static_cast<uint32_t>(p.rx_kb_s);
      s.pcie_tx_kb_s = static_cast<uint32_t>(p.tx_kb_s);
    } else {
      s.power_w = scenario_.idle_power_w;
      s.sm_clock_mhz = static_cast<uint32_t>(scenario_.sm_clock_max_mhz);
      s.gpu_util_pct = 0;
      s.clock_event_reasons = telemetry::clock_event::kGpuIdle;
      s.temperature_c = 35;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace gpulab::sweep
