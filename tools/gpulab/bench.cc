// gpulab bench: trtexec-grade timing of a model or plan on the GPU.
//
// This file parses and validates the flags (on any build, so bad values get clear errors even
// without CUDA), then hands over to measure::run_engine_bench (CUDA builds only), prints
// the summary and writes the JSON / CSV files. Metric definitions: docs/metrics.md.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "build_flags.h"
#include "cli.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"
#include "measure/bench.h"
#include "measure/stats.h"

#include "core/file_io.h"

#ifdef GPULAB_HAVE_RUNTIME
#include "measure/engine_bench.h"
#endif
#if defined(GPULAB_HAVE_TELEMETRY) && defined(GPULAB_HAVE_RUNTIME)
#define GPULAB_BENCH_TELEMETRY 1
#include "telemetry/sample.h"
#include "telemetry/telemetry.h"
#include "telemetry/topology.h"
#endif

namespace gpulab::cli {
namespace {

struct BenchFlags {
  measure::BenchOptions options;
  std::string model_path;
  std::string plan_path;
  std::string precision = "fp16";
  std::string percentiles = "50,90,95,99";
  BuildFlags build;            // how --model is built
  BuildOptions build_options;  // from `build`, by check_flags
  bool ceilings = false;
  std::string gpus;  // --gpus: "" (one GPU, --device), "all" or "0,2"
  bool no_single_baseline = false;
  std::string command_line;
};

constexpr const char* kPrecisions[] = {"fp32", "tf32", "fp16", "bf16"};

Status check_flags(BenchFlags& f, bool precision_given) {
  GPULAB_ASSIGN_OR_RETURN(f.options.percentiles, measure::parse_percentiles(f.percentiles));
  GPULAB_TRY(measure::validate(f.options));
  bool known = false;
  for (const char* p : kPrecisions) known = known || f.precision == p;
  if (!known) {
    return Status::invalid_argument(fmt::format(
        "--precision: '{}' is not a precision. Give fp32 (TF32 off), tf32, fp16 or bf16.", f.precision));
  }
  GPULAB_ASSIGN_OR_RETURN(f.build_options, build_options_from(f.build));
  if (f.model_path.empty() && f.plan_path.empty() && !f.ceilings) {
    return Status::invalid_argument(
        "bench: no model. Give --model FILE.onnx or --plan FILE.plan (or --ceilings alone to "
        "measure the GPU's ceilings).");
  }
  if (!f.model_path.empty() && !f.plan_path.empty()) {
    return Status::invalid_argument(
        "bench: --model and --plan both given. Give one: a plan already fixes the model.");
  }
  if (!f.plan_path.empty() && precision_given) {
    return Status::invalid_argument(
        fmt::format("--precision: a plan's precision is fixed when it is built ('{}'). Drop --precision, or "
                    "benchmark the ONNX model with --model.",
                    f.plan_path));
  }
  // The other build options: a plan was built with its own, so they would be ignored.
  GPULAB_TRY(refuse_build_flags_with_plan(f.build, f.plan_path));
  if (!f.gpus.empty()) {
    for (const auto& [given, flag] : {std::pair{f.options.profile, "--profile"},
                                      {f.ceilings, "--ceilings"},
                                      {!f.options.output_path.empty(), "--save-output"},
                                      {!f.options.export_times_path.empty(), "--export-times"}}) {
      if (given) {
        return Status::invalid_argument(fmt::format(
            "{} and --gpus: {} is per GPU. Run it with --device N on the GPU you want.", flag, flag));
      }
    }
  }
  for (const auto& [flag, path] : {std::pair{"--model", &f.model_path}, {"--plan", &f.plan_path}}) {
    if (path->empty()) continue;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*path, ec)) {
      return Status::not_found(fmt::format("{}: '{}' is not a file. Check the path.", flag, *path));
    }
  }
  return Status::ok();
}

#ifdef GPULAB_BENCH_TELEMETRY
// NVML's device index is taken to be the CUDA ordinal (true unless CUDA_VISIBLE_DEVICES or
// CUDA_DEVICE_ORDER reorder the devices; the environment block then names another GPU).
std::optional<measure::GpuState> read_gpu_state(int device) {
  static auto nvml = telemetry::Telemetry::open();
  if (!nvml.is_ok() || device < 0) return std::nullopt;
  auto sample = (*nvml)->sample(static_cast<uint32_t>(device), {.processes = false});
  if (!sample.is_ok()) return std::nullopt;
  measure::GpuState s;
  auto to_double = [](const auto& v) -> std::optional<double> {
    if (!v) return std::nullopt;
    return static_cast<double>(*v);
  };
  s.sm_clock_mhz = to_double(sample->sm_clock_mhz);
  s.memory_clock_mhz = to_double(sample->memory_clock_mhz);
  s.power_w = sample->power_w;
  s.power_limit_w = sample->power_limit_w;
  s.temperature_c = to_double(sample->temperature_c);
  if (sample->clock_event_reasons) {
    s.clock_event_reasons = telemetry::decode_clock_event_reasons(*sample->clock_event_reasons);
    s.performance_limited =
        (*sample->clock_event_reasons & telemetry::clock_event::kPerformanceLimiting) != 0;
  }
  return s;
}

void fill_driver(measure::BenchEnvironment& env) {
  auto nvml = telemetry::Telemetry::open();
  if (!nvml.is_ok()) return;
  if (env.driver_version.empty()) env.driver_version = (*nvml)->driver_version();
  if (!env.cuda_driver_version) env.cuda_driver_version = (*nvml)->cuda_driver_version();
}
#endif

#ifdef GPULAB_BENCH_TELEMETRY
// `--gpus all|0,2`: every GPU at once, each fed by a thread on its NUMA node's CPUs (NVML).
int run_bench_gpus(const BenchFlags& f) {
  auto nvml = telemetry::Telemetry::open();
  if (!nvml.is_ok()) return report(nvml.status().with_context("bench --gpus: the GPUs' CPU affinity"));
  GPULAB_ASSIGN_OR_REPORT(const auto devices, measure::parse_gpu_list(f.gpus, (*nvml)->device_count()));
  GPULAB_ASSIGN_OR_REPORT(const telemetry::Topology topo, telemetry::read_topology(**nvml));
  std::vector<measure::GpuPlacement> gpus;
  for (uint32_t d : devices) {
    const telemetry::GpuPlace& place = topo.gpus[d];
    gpus.push_back({.device = static_cast<int>(d), .cpus = place.cpus, .numa_node = place.numa_node});
  }
  measure::EngineBenchRequest request;
  request.model_path = f.model_path;
  request.plan_path = f.plan_path;
  request.precision = f.precision;
  request.build = f.build_options;
  const measure::MultiBenchOptions options{.bench = f.options, .single_baseline = !f.no_single_baseline};
  GPULAB_ASSIGN_OR_REPORT(const measure::MultiBenchResult result,
                          measure::run_engine_bench_multi(options, request, gpus));
  std::fputs(
      fmt::format("gpulab bench --gpus {}: {} ({}), batch {} per GPU, {}, transfers {}\n\n", f.gpus,
                  f.model_path.empty() ? f.plan_path : f.model_path, result.gpus.front().bench.precision,
                  f.options.batch, f.options.cuda_graph ? "CUDA graphs" : "eager",
                  f.options.include_transfers ? "included" : "not included")
          .c_str(),
      stdout);
  std::fputs(measure::format_multi_summary(result).c_str(), stdout);
  std::fputs(("\n" + telemetry::format_topology(topo)).c_str(), stdout);
  if (!f.options.json_path.empty()) {
    const nlohmann::json header = {{"model", f.model_path.empty() ? f.plan_path : f.model_path},
                                   {"precision", result.gpus.front().bench.precision},
                                   {"gpulab_version", GPULAB_VERSION},
                                   {"command_line", f.command_line},
                                   {"topology", telemetry::to_json(topo)}};
    GPULAB_TRY_CLI(write_file_atomic(f.options.json_path, measure::to_json(result, header).dump(2) + "\n")
                       .with_context("--json"));
  }
  return 0;
}
#endif

int run_bench(BenchFlags f, bool precision_given) {
  GPULAB_TRY_CLI(check_flags(f, precision_given));
#ifndef GPULAB_HAVE_RUNTIME
  return report(Status::unavailable(
      "bench: this gpulab was built without the CUDA runtime (GPULAB_WITH_CUDA=OFF or no CUDA "
      "compiler), so it cannot time a model. Build with the release or dev preset on a machine "
      "with the CUDA toolkit, or see bench/README.md for timing with PyTorch."));
#else
  if (f.model_path.empty() && f.plan_path.empty()) {  // --ceilings alone
    std::vector<measure::Ceilings> ceilings;
    for (const char* p : kPrecisions) {
      GPULAB_ASSIGN_OR_REPORT(measure::Ceilings c, measure::measure_ceilings(f.options.device, p));
      ceilings.push_back(std::move(c));
    }
    fmt::print("Ceilings of GPU {} (gpulab bench --ceilings):\n", f.options.device);
    for (size_t i = 0; i < ceilings.size(); ++i) {
      fmt::print("  {:<5} GEMM {:8.1f} TFLOP/s   device copy {:8.1f} GB/s\n", kPrecisions[i],
                 ceilings[i].tflops, ceilings[i].memory_gb_s);
    }
    fmt::print("  ({})\n",
               "dense 8192^3 cuBLASLt GEMM, FP32 accumulation; 512 MiB device copy, "
               "bytes read + written; docs/metrics.md");
    return 0;
  }
#ifdef GPULAB_BENCH_TELEMETRY
  if (!f.gpus.empty()) return run_bench_gpus(f);
#endif
  measure::EngineBenchRequest request;
  request.model_path = f.model_path;
  request.plan_path = f.plan_path;
  request.precision = f.precision;
  request.build = f.build_options;
  request.measure_ceilings = f.ceilings;
#ifdef GPULAB_BENCH_TELEMETRY
  request.read_gpu_state = read_gpu_state;
#endif
  GPULAB_ASSIGN_OR_REPORT(measure::BenchResult result, measure::run_engine_bench(f.options, request));
  result.model = f.model_path.empty() ? f.plan_path : f.model_path;
  result.environment.gpulab_version = GPULAB_VERSION;
  result.environment.gpulab_commit = GPULAB_GIT_COMMIT;
  result.environment.command_line = f.command_line;
#ifdef GPULAB_BENCH_TELEMETRY
  fill_driver(result.environment);
#endif
  measure::add_environment_warnings(result);
  std::fputs(measure::format_summary(result).c_str(), stdout);
  if (!f.options.json_path.empty()) {
    GPULAB_TRY_CLI(measure::write_bench_json(f.options.json_path, result));
  }
  if (!f.options.export_times_path.empty()) {
    GPULAB_TRY_CLI(measure::export_times_csv(f.options.export_times_path, result.samples));
  }
  if (!f.options.output_path.empty()) {
    if (!result.output) GPULAB_TRY_CLI(Status::internal("bench --save-output: the run returned no logits"));
    GPULAB_TRY_CLI(measure::write_output_npy(f.options.output_path, *result.output));
  }
  return 0;
#endif
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("bench",
                         "Time a model or plan on the GPU: throughput, latency, GPU compute, H2D, D2H, "
                         "enqueue time with percentiles (metrics: docs/metrics.md)");
  auto flags = std::make_shared<BenchFlags>();
  measure::BenchOptions& o = flags->options;

  auto* model = sub->add_option("--model", flags->model_path, "ONNX model to build and time");
  auto* plan = sub->add_option("--plan", flags->plan_path, "Saved plan (gpulab build) to time");
  model->excludes(plan);
  auto* precision = sub->add_option("--precision", flags->precision,
                                    "Plan precision for --model: fp32 (TF32 off), tf32, fp16, bf16")
                        ->capture_default_str();
  add_build_flags(sub, &flags->build, "[--model] ");
  sub->add_option("--batch", o.batch, "Images per inference")->capture_default_str();
  sub->add_option("--warmup-ms", o.warmup_ms, "Warm-up before measuring, milliseconds of host time")
      ->capture_default_str();
  sub->add_option("--min-duration-s", o.min_duration_s,
                  "Measure at least this many seconds of host wall time ...")
      ->capture_default_str();
  sub->add_option("--min-iterations", o.min_iterations, "... and at least this many iterations")
      ->capture_default_str();
  sub->add_flag("--cuda-graph,!--no-cuda-graph", o.cuda_graph,
                "Replay a CUDA graph per inference (default) or launch eagerly");
  sub->add_flag("--include-transfers,!--no-include-transfers", o.include_transfers,
                "Copy the input from pinned host memory and the logits back in each iteration "
                "(default), or keep them on the device");
  sub->add_option("--streams", o.streams, "Concurrent execution contexts, one stream each")
      ->capture_default_str();
  sub->add_option("--percentiles", flags->percentiles, "Comma-separated percentiles in (0,100], nearest rank")
      ->capture_default_str();
  sub->add_option("--json", o.json_path, "Write the result as JSON (schema: docs/metrics.md)");
  sub->add_option("--export-times", o.export_times_path,
                  "Write per-iteration enqueue, H2D, compute, D2H times as CSV");
  sub->add_option("--save-output", o.output_path,
                  "Write the logits of one inference as a NumPy .npy file, float32 [batch, classes] "
                  "(the input: docs/metrics.md)");
  auto* device = sub->add_option("--device", o.device, "CUDA device ordinal")->capture_default_str();
  sub->add_option(
         "--gpus", flags->gpus,
         "Several GPUs at once: all, or indices like 0,2; each with its own engine and a host thread on "
         "its NUMA node; per-GPU and aggregate img/s, scaling efficiency")
      ->excludes(device);
  sub->add_flag("--no-single-baseline", flags->no_single_baseline,
                "With --gpus: skip timing the first GPU alone (no scaling efficiency)");
  sub->add_flag("--profile", o.profile,
                "Also time each layer (eager, events between steps) against its roofline");
  sub->add_flag("--ceilings", flags->ceilings,
                "Measure device copy bandwidth and GEMM rate (cuBLASLt) for the roofline; alone: "
                "print them for every precision");

  on_run(sub, [flags, precision] {
    BenchFlags f = *flags;
    f.command_line = process_command_line();
    return run_bench(std::move(f), precision->count() > 0);
  });
}

}  // namespace gpulab::cli
