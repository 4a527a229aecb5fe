// gpulab build: compile an ONNX classifier into an optimized plan for this GPU and save it.
//   gpulab build model.onnx -o model.plan --precision fp16 --max-batch 256 [--timing-cache F]
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "build_flags.h"
#include "cli.h"
#include "gpulab/engine.h"

namespace gpulab::cli {

void add_build_command(CLI::App& app) {
  struct Options {
    std::string model, output, precision = "fp16";
    int64_t max_batch = 32;
    std::vector<std::string> layer_precision;
    bool no_tactic_timing = false;
    BuildFlags build;
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
  sub->add_option("--layer-precision", opts->layer_precision, "Per-layer precision, NAME=fp32 (repeatable)");
  sub->add_flag("--no-tactic-timing", opts->no_tactic_timing,
                "Take cuDNN's heuristic choice instead of timing");
  add_build_flags(sub, &opts->build);
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
