// gpulab build: compile an ONNX classifier into an optimized plan for this GPU and save it.
//   gpulab build model.onnx -o model.plan --precision fp16 --max-batch 256 [--timing-cache F]
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "build_flags.h"
#include "calibration_flags.h"
#include "cli.h"
#include "core/elapsed.h"
#include "gpulab/engine.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "progress.h"
#include "quant/accuracy.h"

namespace gpulab::cli {

namespace {

struct BuildCommandOptions {
  std::string model, output, precision = "fp16";
  int64_t max_batch = 32;
  std::vector<std::string> layer_precision;
  bool no_tactic_timing = false;
  BuildFlags build;
  CalibrationFlags calibration;
  std::string fallback = "off";
  double gate_percent = 99.0;
  int64_t fallback_images = 300;
  int device = 0;
};

// INT8/FP8: the activation ranges (calibration_flags.h) and, with --fallback auto, the layers the
// accuracy gate moves to FP16, measured on the CPU on calibration-folder images not calibrated on.
Status quantize(const BuildCommandOptions& o, BuildOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(Graph graph, load_onnx(o.model));
  GPULAB_TRY(run_passes(graph).with_context("optimizing '" + o.model + "'"));
  GPULAB_ASSIGN_OR_RETURN(const PreprocessSpec spec, model_preprocess(graph));
  GPULAB_ASSIGN_OR_RETURN(Calibration calibration, calibrate_model(o.calibration, o.model, graph, spec, 0));
  options.activation_amax = calibration.cache.amax;
  if (calibration.from_cache)
    fmt::print("calibration: {} ranges of {} tensors from '{}'\n",
               calibrator_name(calibration.cache.calibrator), calibration.cache.amax.size(),
               o.calibration.cache);
  else
    fmt::print("calibration: {} ranges of {} tensors from {} images of {} in {:.1f} s{}\n",
               calibrator_name(calibration.cache.calibrator), calibration.cache.amax.size(),
               calibration.images.size(), o.calibration.data, calibration.seconds,
               o.calibration.cache.empty() ? "" : ", written to " + o.calibration.cache);
  GPULAB_ASSIGN_OR_RETURN(options.bias_correction,
                          model_bias_correction(o.calibration, calibration, graph, options, spec, 0));
  if (!options.bias_correction.empty())
    fmt::print("bias correction: {} layers\n", options.bias_correction.size());
  if (o.fallback != "auto") return Status::ok();
  if (o.calibration.data.empty())
    return Status::invalid_argument(
        "--fallback auto measures agreement with FP32 on images of --calibration-data; give that folder "
        "too.");
  GPULAB_ASSIGN_OR_RETURN(const std::vector<std::filesystem::path> all,
                          calibration_images(o.calibration.data));
  const std::set<std::filesystem::path> used(calibration.images.begin(), calibration.images.end());
  std::vector<std::filesystem::path> rest;
  for (const auto& p : all)
    if (!used.contains(p)) rest.push_back(p);
  if (rest.empty()) rest = all;  // every image was calibrated on: score on them anyway
  std::vector<LabelledImage> items;
  for (int64_t i : spread_subset(static_cast<int64_t>(rest.size()), o.fallback_images))
    items.push_back(LabelledImage{.path = rest[static_cast<size_t>(i)], .label = -1});
  ProgressLine progress("");
  const auto show = [&progress](std::string_view phase) {
    return [&progress, phase](int64_t d, int64_t t) { progress.update(phase, d, t); };
  };
  GPULAB_ASSIGN_OR_RETURN(const LabelledSet set,
                          load_labelled_set(items, spec, {.progress = show("decoding")}));
  GPULAB_ASSIGN_OR_RETURN(const Predictions fp32, fp32_reference(graph, set, {.progress = show("fp32")}));
  AccuracyOptions accuracy{
      .precision = options.precision,
      .activation_amax = options.activation_amax,
      .layer_precision = options.layer_precision,
      .bias_correction = options.bias_correction,
      .gate = o.gate_percent / 100.0,
      .fallback = true,
      .progress = [&](std::string_view phase, int64_t d, int64_t t) { progress.update(phase, d, t); }};
  GPULAB_ASSIGN_OR_RETURN(const AccuracyResult r, measure_agreement(graph, set, fp32, accuracy));
  progress.finish();
  options.layer_precision = r.layer_precision;
  std::string names;
  for (const auto& n : r.fallback_layers) names += (names.empty() ? "" : ", ") + n;
  fmt::print(
      "fallback: top-1 agreement with fp32 {:.2f}% -> {:.2f}% on {} images (gate {:.2f}%{}); {} layer(s) "
      "moved to fp16 ({:.1f}% of the Conv/Gemm FLOPs){}{}\n",
      100 * r.plain.agreement, 100 * r.final.agreement, set.size(), o.gate_percent,
      r.gate_met ? "" : ", NOT met", r.fallback_layers.size(), 100 * r.fallback_flops_share,
      names.empty() ? "" : ": ", names);
  return Status::ok();
}

}  // namespace

void add_build_command(CLI::App& app) {
  auto opts = std::make_shared<BuildCommandOptions>();
  CLI::App* sub = app.add_subcommand("build", "Compile an ONNX model into an optimized plan for this GPU");
  sub->add_option("model", opts->model, "ONNX model file")->required();
  sub->add_option("-o,--output", opts->output, "Plan file to write")->required();
  sub->add_option("--precision", opts->precision,
                  "fp32 (TF32 off), tf32, fp16, bf16, int8 or fp8 (sm_89+); int8/fp8 need calibration")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "int8", "fp8"}));
  sub->add_option("--max-batch", opts->max_batch, "Largest batch the plan accepts (1..1048576)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--layer-precision", opts->layer_precision,
                  "Per-layer precision, NAME=fp32 (repeatable; tf32 too; fp16 in BF16, INT8 and FP8 plans)");
  sub->add_flag("--no-tactic-timing", opts->no_tactic_timing,
                "Take cuDNN's heuristic choice instead of timing");
  add_build_flags(sub, &opts->build);
  add_calibration_flags(sub, &opts->calibration, 500);
  sub->add_option("--fallback", opts->fallback,
                  "INT8/FP8: auto moves the most sensitive layers to fp16 until the plan agrees with FP32 on "
                  "--gate percent of the calibration folder's other images (CPU emulation)")
      ->check(CLI::IsMember({"off", "auto"}));
  sub->add_option("--gate", opts->gate_percent,
                  "--fallback auto: top-1 agreement with FP32 to reach, percent")
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option(
         "--fallback-images", opts->fallback_images,
         "--fallback auto: images of the calibration folder (not calibrated on) the gate is measured on")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--device", opts->device, "CUDA device ordinal");
  on_run(sub, [opts]() -> int {
    GPULAB_ASSIGN_OR_REPORT(BuildOptions options, build_options_from(opts->build));
    auto precision = parse_precision(opts->precision);
    if (!precision.is_ok()) return report(precision.status());
    options.precision = *precision;
    options.max_batch = opts->max_batch;
    options.time_tactics = !opts->no_tactic_timing;
    options.device = opts->device;
    for (const auto& item : opts->layer_precision) {
      const auto eq = item.find('=');
      if (eq == std::string::npos)
        return report(Status::invalid_argument("--layer-precision '" + item + "': expected NAME=PRECISION."));
      auto p = parse_precision(item.substr(eq + 1));
      if (!p.is_ok()) return report(p.status().with_context("--layer-precision '" + item + "'"));
      options.layer_precision[item.substr(0, eq)] = *p;
    }
    if (is_quantized(options.precision)) GPULAB_TRY_CLI(quantize(*opts, options));
#ifndef GPULAB_HAVE_RUNTIME
    return report(Status::unavailable(
        "this gpulab was built without CUDA (preset cpu-only or no nvcc), so it cannot build GPU plans" +
        std::string(is_quantized(options.precision) && !opts->calibration.cache.empty()
                        ? " (the calibration cache is written: a CUDA build can use it)"
                        : "") +
        ". Rebuild with `cmake --preset release` on a machine with the CUDA toolkit."));
#else
    const auto start = std::chrono::steady_clock::now();
    auto engine = Engine::build_from_onnx(opts->model, options);
    if (!engine.is_ok()) return report(engine.status().with_context("building '" + opts->model + "'"));
    const double build_s = seconds_since(start);
    if (Status s = (*engine)->save(opts->output); !s.is_ok()) return report(s);
    const EngineInfo& info = (*engine)->info();
    fmt::print("{:<28} {:<15} {:<9} {:>12} {}\n", "layer", "kind", "precision", "GFLOP/img", "tactic");
    for (const auto& l : info.layers)
      fmt::print("{:<28} {:<15} {:<9} {:>12.4f} {}\n", l.name, l.kind, precision_name(l.precision),
                 l.flops_per_image / 1e9, l.tactic);
    fmt::print("\nplan      {}\nGPU       {} (sm_{})\nprecision {}\nmax batch {}\n", opts->output,
               info.gpu_name, info.compute_capability, precision_name(info.precision), info.max_batch);
    fmt::print("weights   {:.2f} MiB\narena     {:.2f} MiB per context at max batch\nbuild     {:.2f} s\n",
               info.weights_bytes / 1048576.0, info.arena_bytes / 1048576.0, build_s);
    return 0;
#endif
  });
}

}  // namespace gpulab::cli
