// gpulab sweep: batch size x precision (x power limit), up to out-of-memory, with what limits each
// point and which batch to run.
//
// The sweep drives a SweepTarget (the CUDA engine, or a simulation for tests and demonstrations)
// through the same interface, so the search, the out-of-memory handling, the verdicts, the
// recommendation and the output formats are exercised on machines without a GPU. Telemetry comes
// from a TelemetrySource: the NVML sampler (real, or the tests' fake NVML), or the simulation.
//
// Per precision, with `batches` empty, the search tries 1, 2, 4, ... until the first batch that
// does not fit (out of memory at plan build, context creation or run) or `max_batch`, then bisects
// between the last batch that fit and the first that did not, to within `bisect_tolerance` of the
// batch or one image. An out-of-memory point is recorded (status "oom", where it happened) and the
// sweep goes on; the target releases everything it holds after every point, and the device memory
// in use before and after each point is recorded.
//
// Units are in the names; every metric is defined in docs/metrics.md ("gpulab sweep").
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "image/dataset.h"
#include "measure/bench.h"
#include "sweep/verdict.h"
#include "telemetry/sample.h"

namespace gpulab::sweep {

// ---- What the sweep asks of a target ------------------------------------------------------------

// What a built plan tells about one image: the verdicts' denominators.
struct PlanFacts {
  double flops_per_image = 0;         // multiply-adds x 2, all layers
  double bytes_per_image = 0;         // activations read + written at storage type, all layers
  int64_t param_bytes = 0;            // weights, read once per batch
  int64_t input_bytes_per_image = 0;  // what the H2D copy moves per image (float32 NCHW)
  int64_t max_batch = 0;              // the plan's max batch
  std::string source;                 // "build" or "reuse" (the previous point's plan covers the batch)
  // "timed" (or from the timing cache), "timed at N" (chosen at batch N, --timed-tactics-up-to),
  // "heuristic" (cuDNN's first choice), "simulated"
  std::string tactics;
  double seconds = 0;  // host time the plan took
  // Of `seconds`, the tactic search's: cuDNN building candidate plans, and timing candidates (0
  // for a reused plan, a plan whose tactics all came from the timing cache, and older sweep files).
  double tactic_build_s = 0, tactic_timing_s = 0;
};
// PlanFacts::tactics of a plan that timed its tactics at its own batch.
inline constexpr std::string_view kTimedTactics = "timed";

// Where an out-of-memory happened.
enum class OomStage { kBuild, kContext, kRun };
std::string_view oom_stage_name(OomStage stage);  // "build", "context", "run"

// The accuracy gate of one precision: top-1 agreement with FP32 on a labelled image folder.
struct AgreementResult {
  int64_t images = 0;
  double agreement = 0;                 // fraction of images whose top-1 equals FP32's
  std::optional<double> top1_accuracy;  // against the folder's labels, when it has them
  double seconds = 0;                   // host time it took
};

// One device the sweep runs on, as the output describes it.
struct TargetInfo {
  std::string kind;         // "cuda", "simulated"
  std::string description;  // "NVIDIA H200 (sm_90)", "simulated: scenario.json"
  int device = 0;
};

// A device (or a simulation of one) the sweep measures. Not thread-safe; one sweep at a time.
// Every call that can run out of device memory returns kOutOfMemory for it (never crashes), after
// which release() brings the memory back to its level before prepare_plan().
class SweepTarget {
 public:
  virtual ~SweepTarget() = default;
  virtual TargetInfo info() const = 0;

  // Builds the plan of `precision` for `batch` images (or keeps the one it has when it covers
  // them: PlanFacts::source "reuse"). OOM here is stage "build".
  virtual Result<PlanFacts> prepare_plan(Precision precision, int64_t batch) = 0;
  // Creates the execution context(s) and buffers for `batch`. OOM here is stage "context".
  virtual Status prepare_context(int64_t batch) = 0;
  // Measures `options.batch` with the bench loop (warm-up, timed window). OOM here is stage "run".
  virtual Result<measure::BenchResult> measure(const measure::BenchOptions& options) = 0;
  // Frees contexts and plans.
  virtual void release() = 0;

  // Several GPUs at once (MultiGpuTarget): `fn` is called between the warm-up and the timed window
  // of every measure() (the GPUs' windows start together). One GPU: nothing to do.
  virtual void set_before_measure(std::function<void()> fn) { (void)fn; }
  // Several GPUs: each GPU's result of the last measure(), by device; one GPU: empty.
  virtual std::vector<std::pair<uint32_t, measure::BenchResult>> last_per_gpu() const { return {}; }
  // Device memory in use now (the whole device), bytes; nullopt when unknown.
  virtual std::optional<int64_t> device_memory_used_bytes() = 0;

  // The measured compute and memory ceilings for a precision (called once per precision).
  virtual Result<measure::Ceilings> ceilings(Precision precision) = 0;
  // The measured host-to-device rate of pinned copies, GB/s (called once, with transfers).
  virtual Result<double> h2d_gb_s() = 0;
  // Top-1 agreement of `precision` with FP32 on `dataset_dir` (at most `max_images`, 0 = all).
  virtual Result<AgreementResult> agreement(Precision precision, const std::filesystem::path& dataset_dir,
                                            int64_t max_images) = 0;
};

// Readings of the GPU while a point ran. start() before the point, stop() after it: the readings
// taken in between, oldest first. Implementations: telemetry::Sampler over NVML, the simulation.
class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  virtual void start() = 0;
  virtual std::vector<telemetry::GpuSample> stop() = 0;
};

// ---- Options -------------------------------------------------------------------------------------

struct SweepOptions {
  std::string model_path;
  std::vector<Precision> precisions{Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16};
  std::vector<int64_t> batches;             // strictly increasing; empty = the search
  int64_t max_batch = 65536;                // the search stops growing here
  double bisect_tolerance = 0.05;           // bisection ends within this fraction of the batch, or 1 image
  std::optional<double> latency_budget_ms;  // p99 latency budget of the recommendation
  double accuracy_gate = 0.99;              // top-1 agreement with FP32 a precision must reach
  std::string dataset_dir;                  // "" = no accuracy gate
  int64_t accuracy_images = 0;              // 0 = every image of the folder
  double knee_fraction = 0.95;              // the knee: smallest batch within this of the best throughput
  std::vector<double> power_limits_w;       // empty = leave the power limit alone
  bool include_transfers = false;
  measure::BenchOptions bench{.warmup_ms = 200, .min_duration_s = 1, .min_iterations = 10};
  VerdictThresholds thresholds;
  int device = 0;
  std::vector<uint32_t> gpus;  // --gpus: several GPUs at once (MultiGpuTarget); empty: `device` alone
};

// kInvalidArgument naming the flag: no precisions or one repeated, batches not strictly increasing
// or < 1, max_batch < 1, tolerance outside (0, 1), budget <= 0, gate outside (0, 1], knee outside
// (0, 1], a power limit <= 0, and the bench options' own rules.
Status validate(const SweepOptions& options);

// ---- Results -----------------------------------------------------------------------------------

enum class PointStatus { kOk, kOom, kFailed };
std::string_view point_status_name(PointStatus status);  // "ok", "oom", "failed"

// Telemetry aggregated over a point's timed window (see docs/metrics.md). nullopt: not measured.
struct PointTelemetry {
  int64_t samples = 0;
  std::optional<double> power_mean_w, power_max_w, power_limit_w;
  std::optional<double> power_mean_share, power_max_share;  // of the enforced limit
  std::optional<double> energy_per_image_j;
  std::string energy_source;  // "counter" (NVML total energy), "integrated" (mean power x time), ""
  std::optional<double> sm_clock_mean_mhz, sm_clock_min_mhz, sm_clock_max_mhz;
  std::optional<double> gpu_util_mean_pct;
  std::optional<double> temperature_mean_c, temperature_max_c;
  std::optional<int64_t> memory_used_total_max_bytes;    // the whole device
  std::optional<int64_t> memory_used_process_max_bytes;  // this process (NVML per-process memory)
  std::optional<double> pcie_tx_bytes_per_image, pcie_rx_bytes_per_image;
  std::map<std::string, double> clock_event_reason_shares;  // share of samples with the reason set
  std::optional<int> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
};

// Aggregates `samples` of `device` taken during a window in which `images` were inferred over
// `window_s` seconds. The process's memory is the entry of `pid` in each reading's process list.
PointTelemetry aggregate_telemetry(const std::vector<telemetry::GpuSample>& samples, uint32_t device,
                                   int64_t images, double window_s, uint32_t pid);

// One GPU's part of a point measured on several GPUs at once (`--gpus`).
struct GpuShare {
  uint32_t device = 0;
  double throughput_ips = 0;
  double gpu_compute_median_ms = 0;
  std::optional<double> latency_p99_ms;
  PointTelemetry telemetry;
  PointRates rates;
  std::vector<Verdict> verdicts;
};

struct SweepPoint {
  Precision precision = Precision::kFp32;
  int64_t batch = 0;
  std::optional<double> power_limit_w;  // the power-limit axis value the point ran under
  std::string phase;                    // "grow", "bisect", "list"
  PointStatus status = PointStatus::kOk;
  std::optional<OomStage> oom_stage;        // status oom
  std::string error;                        // status oom / failed: the message
  StatusCode error_code = StatusCode::kOk;  // status oom / failed: its code (JSON: status_code_name)
  // Device memory in use (whole device) before the point and after its release.
  std::optional<int64_t> memory_before_bytes, memory_after_bytes;
  double seconds = 0;  // host time of the whole point (plan, context, measurement)
  // status ok:
  PlanFacts plan;
  std::optional<measure::BenchResult> bench;  // statistics and warnings (samples dropped)
  PointTelemetry telemetry;
  PointRates rates;
  std::vector<Verdict> verdicts;  // the limiting one first
  // Several GPUs at once: each GPU's part, and slowest / fastest throughput. The point's bench is
  // then every GPU's iterations pooled (throughput = the aggregate), and its telemetry and
  // verdicts are the slowest GPU's.
  std::vector<GpuShare> per_gpu;
  std::optional<double> balance;
};

struct PrecisionRecommendation {
  Precision precision = Precision::kFp32;
  std::optional<double> power_limit_w;  // the power-limit axis value, when there is one
  std::optional<int64_t> largest_fitting_batch;
  std::optional<int64_t> first_oom_batch;
  std::optional<AgreementResult> accuracy;
  std::optional<bool> accuracy_passed;
  std::optional<int64_t> best_batch, knee_batch;
  std::optional<double> best_throughput_ips, knee_throughput_ips, best_p99_ms;
  std::string excluded;  // why no batch is recommended ("" when one is)
};

struct SweepEnvironment {
  std::string gpu_name, driver_version;
  std::optional<int> compute_capability, cuda_driver_version, cuda_runtime_version, cudnn_version,
      cublas_version;
  std::optional<double> power_limit_w, power_default_limit_w, sm_clock_mhz, sm_clock_max_mhz,
      memory_clock_mhz;
  std::optional<int> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
  std::string gpulab_version, gpulab_commit, command_line;
  std::string started_at;  // ISO 8601 UTC
};

// Where an INT8/FP8 sweep's activation ranges came from (calibration_flags.h of the CLI): the
// ranges of the model's activations and the per-channel bias corrections of its 8-bit layers.
struct SweepCalibration {
  std::string source;       // the calibration cache file, or the image folder calibrated on
  bool from_cache = false;  // read from a cache (no image was calibrated on in this run)
  std::string calibrator;   // "percentile", "entropy", "minmax"
  double percentile = 0;    // the percentile calibrator's
  int64_t images = 0;       // images the ranges were measured on
  int64_t tensors = 0;      // activations with a range
  double seconds = 0;       // of the calibration and bias-correction passes in this run (0 from a cache)
  // Per 8-bit precision ("int8", "fp8"): layers with a bias correction (0: none, or --bias-correction off).
  std::map<std::string, int64_t> bias_corrected_layers;
  // Images of the accuracy gate's folder left out because they were calibrated on (the gate scores
  // the rest in every precision); 0 when calibrated on another folder or read from a cache.
  int64_t gate_images_excluded = 0;
};

struct SweepResult {
  std::string model;
  std::string model_hash;  // "fnv1a64:<16 hex digits>" of the model file (what --resume checks)
  SweepOptions options;
  TargetInfo target;
  SweepEnvironment environment;
  std::map<std::string, measure::Ceilings> ceilings;  // by precision name
  std::optional<double> h2d_gb_s;
  std::vector<SweepPoint> points;                   // in the order they ran
  std::map<std::string, AgreementResult> accuracy;  // by precision name
  std::optional<SweepCalibration> calibration;      // when an INT8/FP8 precision is swept on a GPU
  std::vector<PrecisionRecommendation> recommendations;
  std::string state = "running";  // "running", "complete", "interrupted", "failed"
  std::string error;              // state failed: why
  double seconds = 0;             // host time of the sweep so far
};

// ---- The search ------------------------------------------------------------------------------------

// The batch sequence of one precision: grows 1, 2, 4, ... (up to max_batch, which is tried last
// when it is not a power of two), then bisects after the first batch that does not fit. Pure:
// feed it each result; the same results give the same sequence (what --resume relies on).
class BatchSearch {
 public:
  BatchSearch(int64_t max_batch, double tolerance);
  // The next batch to try, or nullopt when the search is done.
  std::optional<int64_t> next() const;
  // "grow" or "bisect" for the batch next() returns.
  std::string_view phase() const { return oom_ ? "bisect" : "grow"; }
  void record(int64_t batch, bool fits);
  std::optional<int64_t> largest_fit() const { return fit_; }
  std::optional<int64_t> smallest_oom() const { return oom_; }

 private:
  int64_t max_batch_;
  double tolerance_;
  std::optional<int64_t> fit_;  // largest batch that fit
  std::optional<int64_t> oom_;  // smallest batch that did not
  bool done_ = false;
};

// ---- Running --------------------------------------------------------------------------------------

// Called after each point (and after each accuracy result), with the sweep so far: the CLI writes
// the JSON/CSV files and the progress line from it.
using SweepObserver = std::function<void(const SweepResult&)>;

// Sets and restores the power limit of the power-limit axis (NVML). Only needed with power limits.
class PowerLimitControl {
 public:
  virtual ~PowerLimitControl() = default;
  virtual Result<double> current_w() = 0;
  virtual Status set_w(double watts) = 0;
};

struct SweepContext {
  SweepTarget* target = nullptr;
  TelemetrySource* telemetry = nullptr;  // may be null: no telemetry
  PowerLimitControl* power = nullptr;    // required when options.power_limits_w is not empty
  SweepObserver observer;
  // Called before each point is measured (not for points taken from `resume`): the progress line.
  std::function<void(const SweepResult&, Precision, int64_t batch, std::string_view phase)> on_point_start;
  // Set when the sweep must stop (SIGINT/SIGTERM): checked between points.
  const std::atomic<bool>* interrupted = nullptr;
  uint32_t telemetry_device = 0;  // NVML index of the target's GPU
  // A previous, interrupted run of the same sweep: its points and accuracy results are reused.
  const SweepResult* resume = nullptr;
};

// Runs the sweep. `result` holds the header (model, options, target, environment) on entry and
// everything measured on return, also when the returned Status is an error (state "failed") or
// the sweep was interrupted (state "interrupted"). Per-point errors (OOM, a failed build) are
// points, not errors: a failed point ends its precision, and the sweep goes on with the next one.
// An error is returned for what stops the whole sweep: the power limit cannot be set, an accuracy
// gate cannot be computed, or no point at all could be measured (a model the engine cannot build:
// the first point's error, e.g. kUnsupported).
Status run_sweep(const SweepOptions& options, const SweepContext& context, SweepResult& result);

// How many more points the sweep will probably measure, for a progress estimate: the rest of the
// current precision's search (growth to max_batch or bisection to the tolerance), and for each
// precision not started as many points as the finished ones took on average (else a full growth
// plus a bisection). At least 1 while the sweep runs.
int64_t estimate_remaining_points(const SweepOptions& options, const SweepResult& result);

// When the last of `points` (measured) has less than half the throughput of a smaller batch of the
// same precision and power limit, a warning on it saying so: a larger batch's plan that runs slower
// kernels, not a limit of the GPU (ResNet-18 FP32 fell from 11.0k to 1.9k img/s at batch 12288 on
// an H100, bench/results/2026-12-06-9553f1d). Nothing for the other points.
void warn_of_throughput_drop(std::vector<SweepPoint>& points);

// Where a sweep's time went (seconds): plan builds (tactic timing: most of a ResNet-18 sweep on an
// H100, bench/results/2026-12-06-9553f1d) and how many, the accuracy gates, the timed windows, and
// the rest (warm-ups, contexts, out-of-memory attempts, ceilings).
struct SweepTime {
  double builds = 0, gates = 0, windows = 0, rest = 0;
  int plans = 0;
  // Of the builds, those that timed tactics at their own batch (PlanFacts::tactics "timed"): the
  // cost --timed-tactics-ratio and --timed-tactics-up-to trade against throughput.
  double timed_builds = 0;
  int timed_plans = 0;
  // Of the timed builds, the tactic search's cuDNN candidate-plan building and candidate timing
  // (PlanFacts::tactic_build_s, tactic_timing_s; 0 in sweep files that predate them).
  double tactic_build = 0, tactic_timing = 0;
};
SweepTime sweep_time(const SweepResult& result);
// "; 418.8 s in the 20 that timed tactics" (the H100 sweep of bench/results/2026-12-06-ef9bcb0) for
// the printout and the report, with ": 150.2 s building cuDNN candidates, 240.1 s timing them" where
// the file has that split; "" when no plan timed its tactics.
std::string timed_builds_note(const SweepTime& t);

// The points' warnings worth reading one by one, in order (a throughput drop, dropped samples...),
// and how many of the measured points only say they are unstable, a note that a power cap makes
// common and that the printout and the report count instead of repeating.
struct PointWarnings {
  std::vector<std::pair<const SweepPoint*, std::string>> listed;
  int unstable = 0, measured = 0;
};
PointWarnings point_warnings(const SweepResult& result);

// Best and knee batch per precision from the points (see docs/metrics.md).
std::vector<PrecisionRecommendation> recommend(const SweepOptions& options, const SweepResult& result);

// The images of an accuracy-gate folder: labels.tsv's rows when it has one (LabelledImage::label
// then holds the class), else every image in it (label -1). At most `max_images` (0 = all).
// kNotFound for a missing folder or one without images.
Result<std::vector<LabelledImage>> load_gate_images(const std::filesystem::path& folder, int64_t max_images);

// ---- Output ------------------------------------------------------------------------------------------

inline constexpr int kSweepSchemaVersion = 1;
nlohmann::json to_json(const SweepResult& result);
// Reads a sweep JSON written by to_json (for --resume and gpulab report), environment and
// recommendations included. kInvalidFile naming the field that is wrong; never throws.
Result<SweepResult> sweep_from_json(const nlohmann::json& doc);
Result<SweepResult> read_sweep_json(const std::filesystem::path& path);
// Crash-safe (temporary file, then rename).
Status write_sweep_json(const std::filesystem::path& path, const SweepResult& result);
// One row per point; header documented in docs/metrics.md. Crash-safe.
std::string to_csv(const SweepResult& result);
Status write_sweep_csv(const std::filesystem::path& path, const SweepResult& result);
// "8-bit ranges: percentile 99.99 of 62 activations, 500 images of DIR calibrated on the CPU; int8
// bias correction on 21 layers (41.2 s, before the sweep's time)": the printout's line on where an
// INT8/FP8 sweep's ranges came from.
std::string calibration_note(const SweepCalibration& calibration);
// The table, the verdicts and the recommendations, for stdout.
std::string format_sweep(const SweepResult& result);

}  // namespace gpulab::sweep
