// gpulab build: compile an ONNX classifier into an optimized plan for this GPU and save it.
//   gpulab build model.onnx -o model.plan --precision fp16 --max-batch 256 [--timing-cache F]
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "gpulab/engine.h"

namespace gpulab::cli {

void add_build_command(CLI::App& app) {
  struct Options {
    std::string model, output, precision = "fp16", timing_cache;
    int64_t max_batch = 32;
    std::vector<std::string> layer_precision;
    bool no_tactic_timing = false;
    bool no_stem_space_to_depth = false;
    bool no_fuse_stem = false;
    bool no_fold_casts = false;
    std::optional<int64_t> max_workspace_mib;
    int device = 0;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("build", "Compile an ONNX model into an optimized plan for this GPU");
  sub->add_option("model", opts->model, "ONNX model file")->required();
  sub->add_option("-o,--output", opts->output, "Plan file to write")->required();
  sub->add_option("--precision", opts->precision, "fp32 (TF32 off), tf32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  sub->add_option("--max-batch", opts->max_batch, "Largest batch the plan accepts (1..1048576)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--timing-cache", opts->timing_cache,
                  "Timing cache file: read before, updated after tactic timing");
  sub->add_option("--layer-precision", opts->layer_precision, "Per-layer precision, NAME=fp32 (repeatable)");
  sub->add_flag("--no-tactic-timing", opts->no_tactic_timing,
                "Take cuDNN's heuristic choice instead of timing");
  sub->add_flag("--no-stem-space-to-depth", opts->no_stem_space_to_depth,
                "Keep a strided few-channel stem convolution as it is (no space-to-depth rewrite)");
  sub->add_flag("--no-fuse-stem", opts->no_fuse_stem,
                "Keep the stem's input conversion, convolution and max pool as three steps (no fused "
                "stem kernel)");
  sub->add_flag("--no-fold-casts", opts->no_fold_casts,
                "Keep the float32 copy of each 16-bit input a float32 depthwise layer reads (BF16 "
                "MobileNetV2) instead of reading it directly");
  sub->add_option("--max-workspace-mib", opts->max_workspace_mib,
                  "Skip cuDNN candidates that need more workspace than this (MiB; 0..1048576; default: a "
                  "quarter of the GPU's free memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--device", opts->device, "CUDA device ordinal");
  on_run(sub, [opts]() -> int {
    BuildOptions options;
    auto precision = parse_precision(opts->precision);
    if (!precision.is_ok()) return report(precision.status());
    options.precision = *precision;
    options.max_batch = opts->max_batch;
    options.timing_cache_path = opts->timing_cache;
    options.time_tactics = !opts->no_tactic_timing;
    options.stem_space_to_depth = !opts->no_stem_space_to_depth;
    options.fuse_stem = !opts->no_fuse_stem;
    options.fold_input_casts = !opts->no_fold_casts;
    if (opts->max_workspace_mib) options.max_workspace_bytes = *opts->max_workspace_mib << 20;
    options.device = opts->device;
    for (const auto& item : opts->layer_precision) {
      const auto eq = item.find('=');
      if (eq == std::string::npos)
        return report(Status::invalid_argument("--layer-precision '" + item + "': expected NAME=PRECISION."));
      auto p = parse_precision(item.substr(eq + 1));
      if (!p.is_ok()) return report(p.status().with_context("--layer-precision '" + item + "'"));
      options.layer_precision[item.substr(0, eq)] = *p;
    }
#ifndef GPULAB_HAVE_RUNTIME
    return report(Status::unavailable(
        "this gpulab was built without CUDA (preset cpu-only or no nvcc), so it cannot build GPU plans. "
        "Rebuild with `cmake --preset release` on a machine with the CUDA toolkit."));
#else
    const auto start = std::chrono::steady_clock::now();
    auto engine = Engine::build_from_onnx(opts->model, options);
    if (!engine.is_ok()) return report(engine.status().with_context("building '" + opts->model + "'"));
    const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
