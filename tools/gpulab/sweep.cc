// gpulab sweep: batch size x precision (x power limit) up to out-of-memory, what limits each point,
// and which batch to run. The search, verdicts and outputs live in src/sweep; this file parses
// the flags, picks the target (the CUDA engine, or --simulate), wires NVML telemetry, the power
// limit restore and SIGINT/SIGTERM, writes the JSON/CSV after every point and shows progress.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "build_flags.h"
#include "calibration_flags.h"
#include "cli.h"
#include "core/elapsed.h"
#include "core/file_io.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"
#include "measure/multi_bench.h"
#include "plan/plan.h"
#include "sweep/cuda_target.h"  // CudaTargetOptions (the defaults); make_cuda_target with the runtime
#include "sweep/multi_target.h"
#include "sweep/nvml_telemetry.h"
#include "sweep/simulated_target.h"
#include "sweep/sweep.h"
#include "telemetry/telemetry.h"
#include "telemetry/topology.h"
#ifdef GPULAB_HAVE_RUNTIME
#include "measure/engine_bench.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#endif

namespace gpulab::cli {
namespace {

#ifdef GPULAB_HAVE_RUNTIME
// A sweep without --json or --timing-cache still needs a timing cache: the plans between its timed
// batches and above --timed-tactics-up-to look up the timings of an earlier point. One in the
// temporary directory, removed when the sweep ends (or a signal ends it).
class ScratchTimingCache {
 public:
  ScratchTimingCache() : path_(scratch_path()), guard_(path_) {}
  ~ScratchTimingCache() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  ScratchTimingCache(const ScratchTimingCache&) = delete;
  ScratchTimingCache& operator=(const ScratchTimingCache&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  static std::filesystem::path scratch_path() {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec) dir = "/tmp";
    return dir / fmt::format("gpulab-sweep-{}.timing-cache", ::getpid());
  }
  std::filesystem::path path_;
  TemporaryFileGuard guard_;
};
#endif

struct SweepFlags {
  sweep::SweepOptions options;
  std::string precisions = "fp32,tf32,fp16,bf16";
  std::string batches = "auto";
  std::string power_limits;
  std::string thresholds;
  std::string percentiles = "50,90,95,99";
  std::optional<double> latency_budget_ms;
  std::string json_path, csv_path, resume_path;
  std::string simulate;
  std::string telemetry = "auto";
  int sample_period_ms = 50;
  int64_t timed_tactics_max_batch = sweep::CudaTargetOptions{}.timed_tactics_max_batch;
  int64_t timed_tactics_ratio = sweep::CudaTargetOptions{}.timed_tactics_ratio;
  std::string gpus;  // --gpus: "" (one GPU: --device), "all", "0,2"
  bool allow_power_limit_change = false;
  BuildFlags build;
  CalibrationFlags calibration;  // INT8/FP8 precisions
  std::string command_line;
};

// "1,8,64" -> {1, 8, 64}; "auto" -> {}.
Result<std::vector<int64_t>> parse_batches(const std::string& text) {
  if (text == "auto") return std::vector<int64_t>{};
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size()) {
      return Status::invalid_argument(
          fmt::format("--batches: '{}' is not a batch size. Give auto, or integers like 1,8,64.", item));
    }
    out.push_back(v);
  }
  if (out.empty()) return Status::invalid_argument("--batches: empty. Give auto, or integers like 1,8,64.");
  return out;
}

Result<std::vector<double>> parse_watts(const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const double w = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size()) {
      return Status::invalid_argument(
          fmt::format("--power-limits: '{}' is not a number of watts. Give e.g. 300,350,450.", item));
    }
    out.push_back(w);
  }
  return out;
}

Status check_flags(SweepFlags& f) {
  sweep::SweepOptions& o = f.options;
  o.precisions.clear();
  std::stringstream in(f.precisions);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto p = parse_precision(item);
    if (!p.is_ok()) {
      return Status::invalid_argument(fmt::format(
          "--precisions: '{}' is not a precision. Give a list of fp32 (TF32 off), tf32, fp16, bf16, int8, "
          "fp8 (sm_89+).",
          item));
    }
    o.precisions.push_back(*p);
  }
  GPULAB_ASSIGN_OR_RETURN(o.batches, parse_batches(f.batches));
  GPULAB_ASSIGN_OR_RETURN(o.power_limits_w, parse_watts(f.power_limits));
  GPULAB_ASSIGN_OR_RETURN(o.bench.percentiles, measure::parse_percentiles(f.percentiles));
  GPULAB_TRY(sweep::apply_threshold_overrides(f.thresholds, o.thresholds));
  o.latency_budget_ms = f.latency_budget_ms;
  GPULAB_TRY(sweep::validate(o));
  if (f.telemetry != "auto" && f.telemetry != "nvml" && f.telemetry != "none") {
    return Status::invalid_argument(fmt::format("--telemetry: '{}' is not auto, nvml or none.", f.telemetry));
  }
  if (f.timed_tactics_max_batch < 0) {
    return Status::invalid_argument(
        fmt::format("--timed-tactics-up-to: {} is negative (0 = time tactics at every batch).",
                    f.timed_tactics_max_batch));
  }
  if (f.timed_tactics_ratio < 1) {
    return Status::invalid_argument(fmt::format(
        "--timed-tactics-ratio: {} is below 1 (1 = time tactics at every batch).", f.timed_tactics_ratio));
  }
  if (f.sample_period_ms < 1) {
    return Status::invalid_argument(fmt::format("--sample-period-ms: {} is below 1.", f.sample_period_ms));
  }
  if (o.model_path.empty() && f.simulate.empty()) {
    return Status::invalid_argument("sweep: no model. Give --model FILE.onnx (or --simulate SCENARIO.json).");
  }
  if (!o.power_limits_w.empty() && !f.allow_power_limit_change) {
    return Status::invalid_argument(
        "--power-limits: changing a GPU's power limit affects everything on it and lasts until it is set "
        "back. "
        "Add --allow-power-limit-change to confirm (gpulab restores the original limit at the end, on error "
        "and "
        "on SIGINT/SIGTERM). Never use it on a shared GPU.");
  }
  for (const auto& [flag, path] : {std::pair{"--model", &o.model_path}, {"--simulate", &f.simulate}}) {
    std::error_code ec;
    if (!path->empty() && !std::filesystem::is_regular_file(*path, ec)) {
      return Status::not_found(fmt::format("{}: '{}' is not a file. Check the path.", flag, *path));
    }
  }
  if (!o.dataset_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.dataset_dir, ec)) {
      return Status::not_found(fmt::format(
          "--dataset: '{}' is not a folder. Give a folder of labelled images (labels.tsv) or of images.",
          o.dataset_dir));
    }
  }
  if (!f.resume_path.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f.resume_path, ec)) {
      return Status::not_found(
          fmt::format("--resume: '{}' is not a file. Give the --json file of the sweep to "
                      "continue.",
                      f.resume_path));
    }
    if (f.json_path.empty()) f.json_path = f.resume_path;
  }
  if (!f.json_path.empty() && f.json_path == f.csv_path) {
    return Status::invalid_argument("--json and --csv name the same file. Give two paths.");
  }
  GPULAB_ASSIGN_OR_RETURN(const BuildOptions build, build_options_from(f.build));
  (void)build;
  // INT8/FP8 plans need activation ranges: a calibration cache made for the model, or images to
  // calibrate on (--calibration-data, else the accuracy gate's --dataset). A simulation needs none.
  const bool quantized = std::any_of(o.precisions.begin(), o.precisions.end(), is_quantized);
  if (quantized && f.simulate.empty()) {
    std::error_code ec;
    const bool cache = !f.calibration.cache.empty() && std::filesystem::exists(f.calibration.cache, ec);
    if (!cache && f.calibration.data.empty() && o.dataset_dir.empty()) {
      return Status::invalid_argument(
          "--precisions: int8 and fp8 plans need activation ranges. Give --calibration-data DIR (a few "
          "hundred images like the model's inputs), --calibration-cache FILE made for this model, or "
          "--dataset DIR (the accuracy gate's folder, calibrated on then).");
    }
    if (!f.calibration.data.empty() && !std::filesystem::is_directory(f.calibration.data, ec)) {
      return Status::not_found(fmt::format(
          "--calibration-data: '{}' is not a folder. Give a folder of images like the model's inputs.",
          f.calibration.data));
    }
  }
  return Status::ok();
}

#ifdef GPULAB_HAVE_RUNTIME
// What an INT8/FP8 sweep's CUDA targets take besides the build options: each 8-bit precision's
// bias corrections, and the images the accuracy gate leaves out because they were calibrated on.
struct SweepQuantization {
  std::map<Precision, std::map<std::string, std::vector<float>>> bias_correction;
  std::set<std::filesystem::path> gate_exclude;
};

// Activation ranges (into `build`) and bias corrections for the 8-bit precisions of the sweep, on
// the CPU before the first point, as `gpulab build` gets them (calibration_flags.h): from the
// calibration cache when it was made for the model, else by calibrating on --calibration-data.
// Without that folder the accuracy gate's --dataset is calibrated on, at most half of its images,
// and every precision's gate scores the other half: agreement measured on the images the ranges
// came from would flatter INT8.
Result<sweep::SweepCalibration> calibrate_for_sweep(const SweepFlags& f, BuildOptions& build,
                                                    SweepQuantization& quantization) {
  const sweep::SweepOptions& o = f.options;
  CalibrationFlags flags = f.calibration;
  std::error_code ec;
  const bool cache = !flags.cache.empty() && std::filesystem::exists(flags.cache, ec);
  if (!cache && flags.data.empty()) {
    GPULAB_ASSIGN_OR_RETURN(const std::vector<std::filesystem::path> all, calibration_images(o.dataset_dir));
    const int64_t half = std::max<int64_t>(1, static_cast<int64_t>(all.size()) / 2);
    if (flags.images > half) {
      log_info("sweep: calibrating on {} of the {} images of --dataset (half; the gate scores the rest)",
               half, all.size());
      flags.images = half;
    }
    flags.data = o.dataset_dir;
  }
  const auto start = std::chrono::steady_clock::now();
  GPULAB_ASSIGN_OR_RETURN(Graph graph, load_onnx(o.model_path));
  GPULAB_TRY(run_passes(graph).with_context("optimizing '" + o.model_path + "'"));
  GPULAB_ASSIGN_OR_RETURN(const PreprocessSpec spec, model_preprocess(graph));
  GPULAB_ASSIGN_OR_RETURN(Calibration calibration, calibrate_model(flags, o.model_path, graph, spec, 0));
  build.activation_amax = calibration.cache.amax;
  sweep::SweepCalibration out{.source = calibration.from_cache ? flags.cache : flags.data,
                              .from_cache = calibration.from_cache,
                              .calibrator = std::string(calibrator_name(calibration.cache.calibrator)),
                              .percentile = calibration.cache.percentile,
                              .images = calibration.cache.images,
                              .tensors = static_cast<int64_t>(calibration.cache.amax.size())};
  for (Precision p : o.precisions) {
    if (!is_quantized(p)) continue;
    BuildOptions quantized = build;
    quantized.precision = p;
    GPULAB_ASSIGN_OR_RETURN(quantization.bias_correction[p],
                            model_bias_correction(flags, calibration, graph, quantized, spec, 0));
    out.bias_corrected_layers[std::string(precision_name(p))] =
        static_cast<int64_t>(quantization.bias_correction[p].size());
  }
  out.seconds = seconds_since(start);
  if (o.dataset_dir.empty() || calibration.images.empty()) return out;
  for (const auto& image : calibration.images)
    quantization.gate_exclude.insert(std::filesystem::weakly_canonical(image, ec));
  GPULAB_ASSIGN_OR_RETURN(const auto gate, sweep::load_gate_images(o.dataset_dir, o.accuracy_images));
  for (const LabelledImage& image : gate)
    out.gate_images_excluded +=
        quantization.gate_exclude.contains(std::filesystem::weakly_canonical(image.path, ec));
  if (out.gate_images_excluded == static_cast<int64_t>(gate.size())) {
    return Status::invalid_argument(fmt::format(
        "sweep: every image of the accuracy gate ({} of '{}') is one the 8-bit ranges were calibrated on. "
        "Calibrate on fewer of them (--calibration-images) or on another folder (--calibration-data).",
        gate.size(), o.dataset_dir));
  }
  return out;
}
#endif

std::string model_hash(const std::string& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.is_ok()) return "";
  return fmt::format("fnv1a64:{:016x}", fnv1a64(*bytes));
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void fill_environment_from_nvml(const telemetry::Telemetry& nvml, uint32_t device,
                                sweep::SweepEnvironment& e) {
  e.driver_version = nvml.driver_version();
  e.cuda_driver_version = nvml.cuda_driver_version();
  auto s = nvml.sample(device, {.processes = false});
  if (!s.is_ok()) return;
  if (e.gpu_name.empty()) e.gpu_name = s->name;
  auto d = [](const auto& v) -> std::optional<double> {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  auto i = [](const auto& v) -> std::optional<int> {
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  };
  e.power_limit_w = s->power_limit_w;
  e.power_default_limit_w = s->power_default_limit_w;
  e.sm_clock_mhz = d(s->sm_clock_mhz);
  e.sm_clock_max_mhz = d(s->sm_clock_max_mhz);
  e.memory_clock_mhz = d(s->memory_clock_mhz);
  e.pcie_gen = i(s->pcie_gen);
  e.pcie_gen_max = i(s->pcie_gen_max);
  e.pcie_width = i(s->pcie_width);
  e.pcie_width_max = i(s->pcie_width_max);
}

std::string duration_text(double s) {
  const auto total = static_cast<int64_t>(s + 0.5);
  if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

// The progress line on stderr: only on a terminal, and not with --quiet.
class Progress {
 public:
  explicit Progress(const sweep::SweepOptions& options)
      : options_(options), enabled_(::isatty(STDERR_FILENO) && log_level() < LogLevel::kError) {}

  void point_started(const sweep::SweepResult& r, Precision p, int64_t batch, std::string_view phase) {
    if (!enabled_) return;
    const int64_t done = static_cast<int64_t>(r.points.size());
    const int64_t left = sweep::estimate_remaining_points(options_, r);
    std::string eta;
    if (done > 0)
      eta = fmt::format(" | ~{} left",
                        duration_text(r.seconds / static_cast<double>(done) * static_cast<double>(left)));
    std::fprintf(stderr, "\r\033[Ksweep: point %lld of ~%lld | %s batch %lld (%.*s) | %s elapsed%s",
                 static_cast<long long>(done + 1), static_cast<long long>(done + left),
                 precision_name(p).data(), static_cast<long long>(batch), static_cast<int>(phase.size()),
                 phase.data(), duration_text(r.seconds).c_str(), eta.c_str());
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  const sweep::SweepOptions& options_;
  bool enabled_;
};

int run_sweep_command(SweepFlags f) {
  // First, before any thread exists (NVML's sampler, CUDA): SIGINT/SIGTERM become a flag.
  InterruptWatch interrupt;
  GPULAB_TRY_CLI(check_flags(f));
  sweep::SweepOptions& o = f.options;

#ifdef GPULAB_HAVE_RUNTIME
  std::optional<ScratchTimingCache> scratch_cache;  // outlives the targets that write it
#endif
  // NVML: telemetry, the environment block and the power-limit axis. Optional unless asked for.
  std::shared_ptr<telemetry::Telemetry> nvml;
  if (f.telemetry != "none" || !o.power_limits_w.empty()) {
    auto opened = telemetry::Telemetry::open();
    if (opened.is_ok()) {
      nvml = *opened;
    } else if (f.telemetry == "nvml" || !o.power_limits_w.empty()) {
      return report(opened.status().with_context("sweep: NVML (--telemetry nvml / --power-limits)"));
    } else {
      log_info("sweep: no NVML telemetry ({})", opened.status().message());
    }
  }
  if (!f.gpus.empty()) {
    // Without NVML (a simulation on a machine without a driver) any index up to 15 is a GPU.
    const uint32_t count = nvml ? nvml->device_count() : (f.simulate.empty() ? 0 : 16);
    GPULAB_ASSIGN_OR_REPORT(o.gpus, measure::parse_gpu_list(f.gpus, count));
  }
  const auto nvml_device = static_cast<uint32_t>(o.gpus.empty() ? o.device : o.gpus.front());

  // The target: one GPU, or several at once (--gpus), real or simulated.
  std::vector<uint32_t> devices = o.gpus.empty() ? std::vector<uint32_t>{nvml_device} : o.gpus;
  std::vector<sweep::SimulatedTarget*> simulated;
  std::unique_ptr<sweep::SweepTarget> target;
  sweep::SweepResult result;
  std::vector<std::unique_ptr<sweep::SweepTarget>> per_gpu;
  if (!f.simulate.empty()) {
    GPULAB_ASSIGN_OR_REPORT(auto scenarios, sweep::load_scenarios(f.simulate, devices.size()));
    for (size_t i = 0; i < devices.size(); ++i) {
      auto sim = std::make_unique<sweep::SimulatedTarget>(std::move(scenarios[i]),
                                                          fmt::format("simulated ({})", f.simulate));
      sim->set_device_index(devices[i]);
      if (nvml) {
        sim->set_power_limit_source([nvml, d = devices[i]]() -> std::optional<double> {
          auto w = nvml->power_limit_w(d);
          return w.is_ok() ? std::optional(*w) : std::nullopt;
        });
      }
      simulated.push_back(sim.get());
      per_gpu.push_back(std::move(sim));
    }
    result.model = o.model_path.empty() ? f.simulate : o.model_path;
  } else {
#ifdef GPULAB_HAVE_RUNTIME
    GPULAB_ASSIGN_OR_REPORT(BuildOptions build, build_options_from(f.build));
    if (build.timing_cache_path.empty() && !f.json_path.empty()) {
      build.timing_cache_path = f.json_path + ".timing-cache";
    } else if (build.timing_cache_path.empty() && build.time_tactics) {
      scratch_cache.emplace();
      build.timing_cache_path = scratch_cache->path().string();
      log_info("sweep: timing cache {} (removed at the end; --timing-cache keeps one)",
               build.timing_cache_path);
    }
    SweepQuantization quantization;
    if (std::any_of(o.precisions.begin(), o.precisions.end(), is_quantized)) {
      // A machine without a usable GPU says so before minutes of calibration.
      for (uint32_t d : devices) GPULAB_TRY_CLI(measure::use_cuda_device(static_cast<int>(d), "sweep"));
      GPULAB_ASSIGN_OR_REPORT(result.calibration, calibrate_for_sweep(f, build, quantization));
      log_info("sweep: {}", sweep::calibration_note(*result.calibration));
    }
    for (uint32_t d : devices) {
      GPULAB_ASSIGN_OR_REPORT(auto cuda,
                              sweep::make_cuda_target({.model_path = o.model_path,
                                                       .build = build,
                                                       .bias_correction = quantization.bias_correction,
                                                       .gate_exclude = quantization.gate_exclude,
                                                       .device = static_cast<int>(d),
                                                       .include_transfers = o.include_transfers,
                                                       .timed_tactics_max_batch = f.timed_tactics_max_batch,
                                                       .timed_tactics_ratio = f.timed_tactics_ratio}));
      per_gpu.push_back(std::move(cuda));
    }
    result.model = o.model_path;
#else
    return report(Status::unavailable(
        "sweep: this gpulab was built without the CUDA runtime (GPULAB_WITH_CUDA=OFF or no CUDA compiler), "
        "so it "
        "cannot time a model. Build with the release or dev preset on a machine with the CUDA toolkit; "
        "`gpulab sweep --simulate SCENARIO.json` runs the sweep on a simulated GPU (docs/metrics.md)."));
#endif
  }
  if (o.gpus.empty()) {
    target = std::move(per_gpu.front());
  } else {
    // Several GPUs: each fed from the CPUs NVML names for it (its NUMA node), when NVML says.
    std::optional<telemetry::Topology> topo;
    if (nvml) {
      if (auto t = telemetry::read_topology(*nvml); t.is_ok()) topo = std::move(*t);
    }
    std::vector<sweep::GpuTargetSlot> slots;
    for (size_t i = 0; i < devices.size(); ++i) {
      sweep::GpuTargetSlot slot{.device = devices[i], .target = std::move(per_gpu[i])};
      if (topo && devices[i] < topo->gpus.size()) slot.cpus = topo->gpus[devices[i]].cpus;
      slots.push_back(std::move(slot));
    }
    target = std::make_unique<sweep::MultiGpuTarget>(std::move(slots));
  }
  result.model_hash = model_hash(o.model_path.empty() ? f.simulate : o.model_path);
  result.target = target->info();
  result.options = o;

  // Telemetry source.
  std::unique_ptr<sweep::TelemetrySource> owned_telemetry;
  sweep::TelemetrySource* telemetry = nullptr;
  if (f.telemetry == "none") {
    telemetry = nullptr;
  } else if (!simulated.empty() && f.telemetry == "auto") {
    if (simulated.size() == 1) {
      telemetry = simulated.front();
    } else {
      owned_telemetry = std::make_unique<sweep::CombinedTelemetry>(
          std::vector<sweep::TelemetrySource*>(simulated.begin(), simulated.end()));
      telemetry = owned_telemetry.get();
    }
  } else if (nvml) {
    GPULAB_ASSIGN_OR_REPORT(owned_telemetry,
                            sweep::NvmlTelemetrySource::create(nvml, devices, f.sample_period_ms));
    telemetry = owned_telemetry.get();
  }

  // The environment block.
  sweep::SweepEnvironment& env = result.environment;
  if (nvml) fill_environment_from_nvml(*nvml, nvml_device, env);
  if (!simulated.empty() && env.gpu_name.empty()) env.gpu_name = result.target.description;
  env.gpulab_version = GPULAB_VERSION;
  env.gpulab_commit = GPULAB_GIT_COMMIT;
  env.command_line = f.command_line;
  env.started_at = utc_now_iso();

  // --resume: the earlier run's points, if it is the same sweep of the same model.
  std::optional<sweep::SweepResult> previous;
  if (!f.resume_path.empty()) {
    GPULAB_ASSIGN_OR_REPORT(previous, sweep::read_sweep_json(f.resume_path));
    if (previous->model_hash != result.model_hash) {
      return report(
          Status::invalid_argument(fmt::format("--resume: '{}' is a sweep of another model (or the model "
                                               "file changed: {} vs {}). Start a new sweep "
                                               "with --json.",
                                               f.resume_path, previous->model_hash, result.model_hash)));
    }
    if (previous->options.include_transfers != o.include_transfers) {
      return report(Status::invalid_argument(
          fmt::format("--resume: '{}' was measured {} transfers; give the same --include-transfers setting.",
                      f.resume_path, previous->options.include_transfers ? "with" : "without")));
    }
    if (previous->target.kind != result.target.kind) {
      return report(
          Status::invalid_argument(fmt::format("--resume: '{}' ran on a {} target, this sweep on a {} one.",
                                               f.resume_path, previous->target.kind, result.target.kind)));
    }
    // Points of two GPUs in one table would pass for one GPU's curve (an H100 sweep resumed on an
    // H200 is the case that asked for this).
    if (!previous->target.description.empty() && previous->target.description != result.target.description) {
      return report(Status::invalid_argument(fmt::format(
          "--resume: '{}' was measured on {}; this sweep runs on {}. Start a new sweep with --json.",
          f.resume_path, previous->target.description, result.target.description)));
    }
  }

  // The power-limit axis: remember the limit, restore it however the sweep ends.
  std::unique_ptr<sweep::NvmlPowerLimitControl> power;
  std::unique_ptr<sweep::PowerLimitRestore> restore;
  if (!o.power_limits_w.empty()) {
    if (::geteuid() != 0) {
      return report(
          Status::unavailable("--power-limits: setting a power limit needs root (NVML refuses it otherwise). "
                              "Run as root on a GPU "
                              "that is yours alone, or drop --power-limits."));
    }
    power = std::make_unique<sweep::NvmlPowerLimitControl>(nvml, nvml_device);
    GPULAB_ASSIGN_OR_REPORT(restore, sweep::PowerLimitRestore::remember(*power));
    interrupt.on_signal([r = restore.get()] {
      if (Status s = r->restore(); !s.is_ok()) std::fprintf(stderr, "gpulab: %s\n", s.to_string().c_str());
    });
  }

  Progress progress(o);
  Status write_status = Status::ok();
  sweep::SweepContext context{
      .target = target.get(),
      .telemetry = telemetry,
      .power = power.get(),
      .observer =
          [&](const sweep::SweepResult& r) {
            if (!f.json_path.empty() && write_status.is_ok())
              write_status = sweep::write_sweep_json(f.json_path, r);
            if (!f.csv_path.empty() && write_status.is_ok())
              write_status = sweep::write_sweep_csv(f.csv_path, r);
          },
      .on_point_start = [&](const sweep::SweepResult& r, Precision p, int64_t batch,
                            std::string_view phase) { progress.point_started(r, p, batch, phase); },
      .interrupted = &interrupt.interrupted(),
      .telemetry_device = nvml_device,
      .resume = previous ? &*previous : nullptr,
  };
  const Status status = sweep::run_sweep(o, context, result);
  progress.finish();
  if (restore) {
    if (Status s = restore->restore(); !s.is_ok()) return report(s);
  }
  std::fputs(sweep::format_sweep(result).c_str(), stdout);
  if (!write_status.is_ok()) return report(write_status);
  if (!status.is_ok()) return report(status);
  if (interrupt.interrupted()) return interrupt.exit_code();
  for (const sweep::SweepPoint& p : result.points) {
    if (p.status == sweep::PointStatus::kFailed) return 1;  // documented: some points failed
  }
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto* sub = app.add_subcommand("sweep",
                                 "Batch size x precision up to out-of-memory: throughput, latency, power, "
                                 "clocks and PCIe per point, what "
                                 "limits each, and the batch to run (docs/metrics.md)");
  auto flags = std::make_shared<SweepFlags>();
  sweep::SweepOptions& o = flags->options;
  sub->add_option("--model", o.model_path, "ONNX model to sweep");
  sub->add_option("--precisions", flags->precisions,
                  "Comma-separated: fp32 (TF32 off), tf32, fp16, bf16, int8, fp8 (sm_89+; int8 and fp8 need "
                  "activation ranges: --calibration-data, --calibration-cache or --dataset)")
      ->capture_default_str();
  sub->add_option(
         "--batches", flags->batches,
         "auto: 1, 2, 4, ... to out-of-memory or --max-batch, then bisection; or a strictly increasing "
         "list such as 1,8,64")
      ->capture_default_str();
  sub->add_option("--max-batch", o.max_batch, "The search grows no further")->capture_default_str();
  sub->add_option("--bisect-tolerance", o.bisect_tolerance,
                  "Bisection ends within this fraction of the batch (or 1 image)")
      ->capture_default_str();
  sub->add_option("--latency-budget-ms", flags->latency_budget_ms,
                  "p99 latency a recommended batch must stay within, milliseconds");
  sub->add_option("--accuracy-gate", o.accuracy_gate,
                  "Top-1 agreement with FP32 a precision must reach on --dataset (fraction)")
      ->capture_default_str();
  sub->add_option("--dataset", o.dataset_dir,
                  "Labelled image folder (labels.tsv) or image folder for the accuracy gate");
  sub->add_option("--accuracy-images", o.accuracy_images, "Images of --dataset to use (0 = all)")
      ->capture_default_str();
  sub->add_flag("--include-transfers,!--no-include-transfers", o.include_transfers,
                "Time H2D of the input and D2H of the logits in every iteration (default: inputs stay on the "
                "device)");
  sub->add_option("--warmup-ms", o.bench.warmup_ms, "Warm-up of each point, milliseconds")
      ->capture_default_str();
  sub->add_option("--min-duration-s", o.bench.min_duration_s, "Timed window of each point, at least, seconds")
      ->capture_default_str();
  sub->add_option("--min-iterations", o.bench.min_iterations, "... and at least this many iterations")
      ->capture_default_str();
  sub->add_flag("--cuda-graph,!--no-cuda-graph", o.bench.cuda_graph,
                "Replay a CUDA graph per inference (default)");
  sub->add_option("--percentiles", flags->percentiles, "Comma-separated latency percentiles; must include 99")
      ->capture_default_str();
  sub->add_option("--threshold", flags->thresholds,
                  "Override verdict thresholds: NAME=VALUE,... (names and defaults: docs/metrics.md)");
  sub->add_option("--power-limits", flags->power_limits,
                  "Sweep under each power limit, watts (root; needs --allow-power-limit-change)");
  sub->add_flag(
      "--allow-power-limit-change", flags->allow_power_limit_change,
      "Confirm --power-limits: the original limit is restored at the end, on error and on SIGINT/SIGTERM");
  sub->add_option("--json", flags->json_path,
                  "Write the sweep as JSON after every point (schema: docs/metrics.md)");
  sub->add_option("--csv", flags->csv_path, "Write one CSV row per point after every point");
  sub->add_option("--resume", flags->resume_path,
                  "Continue the sweep in this --json file (same model; measured points are kept)");
  sub->add_option(
      "--simulate", flags->simulate,
      "Run on a simulated GPU described by a scenario file (tests, demonstrations; docs/metrics.md)");
  sub->add_option("--telemetry", flags->telemetry, "auto (NVML, or the simulation's own), nvml, none")
      ->capture_default_str();
  sub->add_option("--sample-period-ms", flags->sample_period_ms, "NVML sampling period")
      ->capture_default_str();
  auto* device =
      sub->add_option("--device", o.device, "CUDA device ordinal (and NVML index)")->capture_default_str();
  sub->add_option(
         "--gpus", flags->gpus,
         "Several GPUs at once: all, or indices like 0,2; every point runs on each (a host thread per GPU "
         "on its NUMA node); per-GPU and aggregate img/s")
      ->excludes(device);
  sub->add_option(
         "--timed-tactics-up-to", flags->timed_tactics_max_batch,
         "Plans above this batch use the tactics timed at this batch (checked at their own) instead of "
         "timing each candidate again (0: time at every batch)")
      ->capture_default_str();
  sub->add_option(
         "--timed-tactics-ratio", flags->timed_tactics_ratio,
         "Up to --timed-tactics-up-to, time a plan's tactics only when its batch is at least this many "
         "times the last batch timed; the batches between use that batch's tactics (checked at their "
         "own). 1: time at every batch")
      ->capture_default_str();
  add_build_flags(sub, &flags->build);
  add_calibration_flags(sub, &flags->calibration, 500);
  on_run(sub, [flags] {
    SweepFlags f = *flags;
    f.command_line = process_command_line();
    return run_sweep_command(std::move(f));
  });
}

}  // namespace gpulab::cli
