// The bench driver: trtexec-grade timing of any engine, independent of CUDA.
//
// The engine side is reached only through BenchHooks (enqueue one iteration on a stream, wait for
// the oldest outstanding one and return its device-event times), so the loop below, the
// statistics, the warnings, the JSON and the printed table are all testable on the CPU with fake
// hooks. `gpulab bench` provides hooks that drive an ExecutionContext per stream with CUDA events.
//
// Every metric is defined once in docs/metrics.md; format_summary() prints the same definitions.
// Times are milliseconds (suffix _ms), durations of a whole run seconds (_s), rates per second.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"
#include "measure/stats.h"

namespace gpulab::measure {

// ---- Options -----------------------------------------------------------------------------------

struct BenchOptions {
  int64_t batch = 1;                                // images per inference
  double warmup_ms = 200;                           // host time spent warming up before measuring
  double min_duration_s = 3;                        // measure at least this long (host wall time) ...
  int64_t min_iterations = 10;                      // ... and at least this many iterations (both must hold)
  bool cuda_graph = true;                           // replay a captured CUDA graph instead of eager launches
  bool include_transfers = true;                    // H2D of the input from pinned host memory and D2H of the
                                                    // logits are part of each iteration
  int streams = 1;                                  // concurrent ExecutionContexts, one CUDA stream each
  std::vector<double> percentiles{50, 90, 95, 99};  // each in (0, 100]
  std::string json_path;                            // "" = no JSON file
  std::string export_times_path;                    // "" = no per-iteration CSV
  std::string output_path;                          // "" = no .npy of the logits (--save-output)
  int device = 0;                                   // CUDA device ordinal
  bool profile = false;         // also time each step of the plan (eager, events between steps)
  int profile_iterations = 20;  // runs per step for the profile's median
};

// Largest --streams accepted: beyond this, contexts only compete for the same SMs.
inline constexpr int kMaxStreams = 64;

// Ok, or kInvalidArgument naming the flag, the bad value and what to give instead: batch < 1,
// negative or non-finite warm-up / duration, min_iterations < 1, streams outside 1..kMaxStreams,
// no percentiles or one outside (0, 100], device < 0, profile_iterations < 1, two of the JSON,
// CSV and .npy paths being the same file.
Status validate(const BenchOptions& options);

// ---- The loop ----------------------------------------------------------------------------------

// What the device measured for one iteration (CUDA events). h2d_ms and d2h_ms are 0 when
// transfers are not included.
struct DeviceTimes {
  double h2d_ms = 0;
  double compute_ms = 0;
  double d2h_ms = 0;
};

// One measured iteration.
struct IterationTimes {
  int stream = 0;         // 0..streams-1
  double start_ms = 0;    // host time of its enqueue, from the start of the measurement
  double enqueue_ms = 0;  // host time the enqueue call took
  double h2d_ms = 0;      // device events around the input copy (0 without transfers)
  double compute_ms = 0;  // device events around the inference: "GPU compute time"
  double d2h_ms = 0;      // device events around the output copy (0 without transfers)
  double latency_ms = 0;  // h2d_ms + compute_ms + d2h_ms
};

// At most this many iterations are outstanding on one stream: the loop queues the next
// iteration before waiting for the previous one, so the GPU never idles while the host
// enqueues. Hooks must keep this many sets of events (and may share buffers: a stream
// serializes them).
inline constexpr int kMaxInFlightPerStream = 2;

struct BenchHooks {
  // Queues one iteration on stream `stream` (0..streams-1) and returns without waiting for the
  // GPU. Called again before the previous iteration of that stream was waited for (see
  // kMaxInFlightPerStream).
  std::function<Status(int stream)> enqueue;
  // Blocks until the oldest outstanding iteration on `stream` has finished; returns its times.
  std::function<Result<DeviceTimes>(int stream)> wait;
  // Monotonic host clock in seconds. Empty: std::chrono::steady_clock.
  std::function<double()> now_s;
  // Called once between the warm-up and the measurement (may block: several GPUs start their
  // timed windows together). Empty: nothing.
  std::function<void()> before_measure;
};

// ---- Results -----------------------------------------------------------------------------------

// GPU state read at one moment (through NVML by the CLI). nullopt: not readable.
struct GpuState {
  std::optional<double> sm_clock_mhz;
  std::optional<double> memory_clock_mhz;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;
  std::optional<double> temperature_c;
  std::vector<std::string> clock_event_reasons;  // active reasons, e.g. {"sw_power_cap"}
  bool performance_limited = false;              // a reason that slows the GPU under load is active
};

// Where a result was measured. Library versions are the libraries' own integers
// (cudaRuntimeGetVersion 13000, cudnnGetVersion 91900, cublasLtGetVersion 130100).
struct BenchEnvironment {
  std::string gpu_name;                   // "" when unknown
  std::optional<int> compute_capability;  // 90 for sm_90
  std::string driver_version;             // "580.65.06"
  std::optional<int> cuda_driver_version;
  std::optional<int> cuda_runtime_version;
  std::optional<int> cudnn_version;
  std::optional<int> cublas_version;
  std::optional<GpuState> start, end;  // at the start and the end of the measurement
  std::string gpulab_version;
  std::string gpulab_commit;  // what the binary was built from (GPULAB_GIT_COMMIT)
  std::string command_line;
};

// The compute and memory ceilings a roofline is drawn against.
struct Ceilings {
  double memory_gb_s = 0;  // device memory, bytes read + written per second / 1e9
  double tflops = 0;       // dense rate of the plan's precision, 1e12 FLOP/s
  std::string source;      // "measured (gpulab bench --ceilings)", "datasheet", ...
};

// One step of the plan as the profile measured it.
struct LayerTiming {
  std::string name;
  std::string kind;       // "conv", "gemm", "maxpool", ...
  std::string tactic;     // the chosen implementation
  std::string precision;  // "fp16"
  double flops = 0;       // per batch
  double bytes = 0;       // per batch: activations read + written, weights read once
  double gpu_ms = 0;      // median of the profile's iterations
};

struct LayerProfileRow {
  LayerTiming layer;
  double share = 0;                       // gpu_ms / sum of all steps' gpu_ms (fraction)
  double achieved_tflops = 0;             // flops / gpu_ms
  double achieved_gb_s = 0;               // bytes / gpu_ms
  std::optional<double> roofline_ms;      // max(flops / tflops, bytes / bandwidth)
  std::optional<double> roofline_factor;  // gpu_ms / roofline_ms (1 = on the roofline)
  std::string bound;                      // "compute" or "memory" (which term is larger); "" unknown
};

// Shares, achieved rates and roofline distances. Ceilings absent or zero: no roofline columns.
std::vector<LayerProfileRow> make_profile(std::span<const LayerTiming> layers,
                                          const std::optional<Ceilings>& ceilings);

// The input every iteration reads: float32 NCHW, element i of the batch (counting from 0 over
// the whole batch) the i-th value of a 32-bit LCG, state = state * 1664525 + 1013904223 (mod
// 2^32) from state 12345, value = (state >> 8) / 2^23 - 1, in [-1, 1). Image j is the same in
// every batch that has one, so bench/compare_pytorch.py rebuilds the first images to check the
// logits that --save-output writes (docs/metrics.md).
void fill_bench_input(std::span<float> values);
// The same sequence in pieces: each fill() continues where the last one ended, so a large batch
// can be generated through a small buffer.
class BenchInputGenerator {
 public:
  static constexpr uint32_t kSeed = 12345u, kMul = 1664525u, kAdd = 1013904223u;
  void fill(std::span<float> values);

 private:
  uint32_t state_ = kSeed;
};
// The value of one state: (state >> 8) / 2^23 - 1 (kernels::launch_lcg_lanes computes the same).
float bench_input_value(uint32_t state);

// The same sequence in `starts.size()` interleaved lanes, as the GPU generates it
// (kernels::launch_lcg_lanes): lane t holds elements t, t + lanes, t + 2 lanes, ...; its first
// state is starts[t], and each step to its next element maps state -> state * mul + add, the
// generator's step composed `lanes` times (mod 2^32). A batch of tens of thousands of images is
// generated on the device in milliseconds instead of seconds on one host core.
struct BenchInputLanes {
  std::vector<uint32_t> starts;
  uint32_t mul = 1, add = 0;
};
BenchInputLanes bench_input_lanes(int64_t lanes);

// The logits of one inference (the first stream's, after the measurement): --save-output.
struct BenchOutput {
  int64_t batch = 0;
  int64_t classes = 0;
  std::vector<float> logits;  // batch * classes, row-major
};

struct BenchResult {
  std::string model;      // the ONNX or plan path benchmarked
  std::string precision;  // "fp16", ...
  BenchOptions options;
  int64_t iterations = 0;     // measured iterations (all streams)
  double wall_s = 0;          // host wall time of the measurement
  double throughput_ips = 0;  // iterations * batch / wall_s: inferences (images) per second
  Summary gpu_compute_ms;
  Summary latency_ms;
  Summary enqueue_ms;
  std::optional<Summary> h2d_ms;  // only with include_transfers
  std::optional<Summary> d2h_ms;
  std::vector<IterationTimes> samples;
  std::vector<std::string> warnings;
  BenchEnvironment environment;
  std::vector<LayerProfileRow> profile;  // with --profile
  std::optional<Ceilings> ceilings;
  // How the engine came to be before the measurement: "build" (from the ONNX model, tactic timing
  // included) or "load" (a plan file), and the host seconds it took. Empty when not recorded.
  std::string plan_source;
  std::optional<double> plan_seconds;
  std::optional<BenchOutput> output;  // with options.output_path
};

// Runs the measurement:
//   1. warm-up: rounds of (enqueue on every stream, wait on every stream) until warmup_ms of host
//      time have passed; at least one round, which also lets the engine prepare its plans and
//      capture its CUDA graph outside the measurement;
//   2. measurement: round-robin over the streams, each keeping up to kMaxInFlightPerStream
//      iterations queued, until at least min_iterations iterations have completed AND
//      min_duration_s of host time has passed; then the outstanding ones are waited for and
//      counted. Wall time runs from the first enqueue to the last wait.
// A hook's error stops the loop and is returned with context. The result has every summary and
// warning filled; its environment is left for the caller.
Result<BenchResult> run_bench_loop(const BenchOptions& options, const BenchHooks& hooks);

// Thresholds of the warnings.
inline constexpr double kUnstableCov = 0.025;  // GPU compute time CoV above 2.5%
// How that warning starts (gpulab sweep counts the unstable points instead of listing each).
inline constexpr std::string_view kUnstableWarning = "unstable:";

// Builds a result from measured iterations: summaries, throughput (from `wall_s`) and the
// warnings (unstable, enqueue-bound, transfer-bound; see docs/metrics.md). kInvalidArgument for
// no samples, a non-positive wall time or invalid options.
Result<BenchResult> make_bench_result(const BenchOptions& options, std::vector<IterationTimes> samples,
                                      double wall_s);

// batch / median GPU compute time, in inferences per second: the rate the GPU alone sustains
// (what bench/compare_pytorch.py compares). 0 when the median is 0.
double compute_throughput_ips(const BenchResult& result);

// Adds warnings that need the environment: clocks that dropped between start and end, or an
// active performance-limiting clock-event reason (power cap, thermal slowdown). Call after
// filling result.environment.
void add_environment_warnings(BenchResult& result);

// The JSON document of a result; schema "gpulab.bench", schema_version kBenchSchemaVersion,
// described field by field in docs/metrics.md. Per-iteration samples are not included (see
// export_times_csv). Unknown values are null.
inline constexpr int kBenchSchemaVersion = 1;
nlohmann::json to_json(const BenchResult& result);
// One metric's statistics as the JSON writes them ({"count", "min", ..., "percentiles": {"p99": ..}}),
// and back (kInvalidFile naming what is missing; percentiles in the document's order).
nlohmann::json summary_json(const Summary& summary);
Result<Summary> summary_from_json(const nlohmann::json& doc);

// The printed report: header (model, options, GPU, versions, clocks), throughput, the table of
// latency / GPU compute / H2D / D2H / enqueue (min, mean, median, percentiles, max, CoV),
// warnings, the per-layer profile when present, and the block defining each metric.
std::string format_summary(const BenchResult& result);
// The per-layer table alone (empty string for no rows).
std::string format_profile(std::span<const LayerProfileRow> rows, const std::optional<Ceilings>& ceilings);

// Reads a document written by to_json back (gpulab report): kInvalidFile naming the field that is
// missing or of the wrong type, or a schema other than "gpulab.bench" version kBenchSchemaVersion.
// Never throws. Samples, the .npy output and the profile's inputs are not in the JSON: the result
// has no samples, and each profile row's layer and derived columns are as written.
Result<BenchResult> bench_from_json(const nlohmann::json& doc);

// Library versions as the libraries encode them, for printing ("?" when unknown):
// CUDA 13000 -> "13.0"; cuDNN 91900 -> "9.19.0"; cuBLAS(Lt) 130100 -> "13.1.0".
std::string cuda_version_string(const std::optional<int>& version);
std::string cudnn_version_string(const std::optional<int>& version);
std::string cublas_version_string(const std::optional<int>& version);

// Writes one CSV row per iteration (header: iteration,stream,start_ms,enqueue_ms,h2d_ms,
// compute_ms,d2h_ms,latency_ms), crash-safe (temporary file, then rename).
Status export_times_csv(const std::filesystem::path& path, std::span<const IterationTimes> samples);
// Writes to_json(result) (indented) crash-safe.
Status write_bench_json(const std::filesystem::path& path, const BenchResult& result);
// Writes the logits as a NumPy .npy file (format 1.0, little-endian float32, shape (batch,
// classes)) crash-safe. kInvalidArgument when logits.size() != batch * classes.
Status write_output_npy(const std::filesystem::path& path, const BenchOutput& output);

}  // namespace gpulab::measure
