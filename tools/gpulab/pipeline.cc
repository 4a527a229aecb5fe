// gpulab pipeline: image files on disk to predictions, measured stage by stage (docs/metrics.md,
// "gpulab pipeline").
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "build_flags.h"
#include "classifier.h"
#include "cli.h"
#include "core/log.h"
#include "data_paths.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"
#include "image/dataset.h"
#include "pipeline/pipeline.h"
#ifdef GPULAB_HAVE_GPU_PIPELINE
#include "pipeline/pipeline_cuda.h"
#endif
#include "progress.h"

namespace gpulab::cli {
namespace {

struct PipelineCliOptions {
  std::string model_path;
  std::string plan_path;
  std::vector<std::string> inputs;
  int64_t batch = 256;
  int decode_threads = 0;
  int queue_depth = 4;
  std::string preprocess = "auto";  // where: auto, gpu, cpu
  std::string decoder = "turbojpeg";
  int loop = 1;
  int top_k = 5;
  bool json = false;
  bool predictions = false;
  bool dct_scaling = true;
  int64_t cache_mib = 2048;
  std::string device = "auto";
  std::string precision = "fp32";
  std::string preset = "auto";
  bool no_tactic_timing = false;
  bool cuda_graph = true;
  BuildFlags build;  // how --model is built on the GPU
};

constexpr double kMiB = 1024.0 * 1024.0;

// The stage with the lowest capacity limits the run; "by how much" is the next stage's capacity
// over it (1.0: two stages tie).
struct Limiter {
  const StageStats* limiting = nullptr;
  const StageStats* next = nullptr;
  double margin = 0;
};

Limiter find_limiter(const PipelineStats& s) {
  std::vector<const StageStats*> order;
  for (const StageStats& st : s.stages)
    if (st.capacity_ips() > 0) order.push_back(&st);
  std::sort(order.begin(), order.end(),
            [](const StageStats* a, const StageStats* b) { return a->capacity_ips() < b->capacity_ips(); });
  Limiter l;
  if (order.empty()) return l;
  l.limiting = order[0];
  if (order.size() > 1) {
    l.next = order[1];
    l.margin = order[1]->capacity_ips() / order[0]->capacity_ips();
  }
  return l;
}

double busy_share(const StageStats& st, double wall_s) {
  return wall_s > 0 ? st.busy_s / (st.threads * wall_s) : 0;
}

// Growth of the resident set from the end of pass 1 to the end of the run, as a fraction.
nlohmann::json rss_growth(const PipelineStats& s) {
  if (s.passes < 2 || s.rss_after_first_pass_bytes <= 0) return nullptr;
  return static_cast<double>(s.rss_final_bytes - s.rss_after_first_pass_bytes) /
         static_cast<double>(s.rss_after_first_pass_bytes);
}

nlohmann::json null_if_zero(double v) {
  return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// Where preprocessing ran and the compute-only figure the ratio uses.
struct RunFacts {
  std::string preprocess = "cpu";
  double compute_only_ips = 0;
  std::string compute_only_source = "infer stage";
};

nlohmann::json or_null(bool known, double v) {
  return known ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const PipelineCliOptions& o, const Classifier& c, const PipelineResult& r,
                       const std::vector<std::filesystem::path>& files, const RunFacts& facts) {
  const PipelineStats& s = r.stats;
  const DeviceAccount& dev = s.device;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageStats& st : s.stages) {
    stages.push_back({{"name", st.name},
                      {"threads", st.threads},
                      {"items", st.items},
                      {"images", st.images},
                      {"busy_s", st.busy_s},
                      {"busy_share", busy_share(st, s.wall_s)},
                      {"cpu_s", st.cpu_s},
                      {"capacity_ips", st.capacity_ips()},
                      {"wait_input_s", st.wait_input_s},
                      {"wait_output_s", st.wait_output_s}});
  }
  const Limiter l = find_limiter(s);
  const double compute_ips = facts.compute_only_ips;
  nlohmann::json errors = nlohmann::json::array();
  for (const InputError& e : r.errors)
    errors.push_back({{"file", e.path.string()}, {"error", e.status.to_string()}});
  nlohmann::json j = {
      {"schema", "gpulab.pipeline"},
      {"schema_version", 1},
      {"model", c.model_path.empty() ? o.plan_path : c.model_path},
      {"backend", c.backend->name()},
      {"preprocess", facts.preprocess},
      {"preprocess_spec", c.spec.describe()},
      {"decoder", "turbojpeg"},
      {"options",
       {{"batch", s.batch},
        {"decode_threads", s.decode_threads},
        {"queue_depth", s.queue_depth},
        {"loop", s.passes},
        {"top_k", o.top_k},
        {"dct_scaling", o.dct_scaling},
        {"file_cache_bytes", o.cache_mib * static_cast<int64_t>(kMiB)}}},
      {"files", s.files},
      {"passes", s.passes},
      {"images", s.images},
      {"failed_images", s.failed_images},
      {"setup_s", s.setup_s},
      {"wall_s", s.wall_s},
      {"first_pass_s", s.first_pass_s},
      {"throughput_ips", s.throughput_ips},
      {"warm_throughput_ips", null_if_zero(s.warm_throughput_ips)},
      {"files_cached_in_ram", s.files_cached},
      {"cached_bytes", s.cached_bytes},
      {"dct_scaled_images", s.dct_scaled_images},
      {"decode_split", {{"decode_s", s.decode_s}, {"stage_s", s.stage_s}}},
      {"stages", std::move(stages)},
      {"limiting_stage",
       {{"name", l.limiting ? nlohmann::json(l.limiting->name) : nlohmann::json(nullptr)},
        {"capacity_ips", l.limiting ? nlohmann::json(l.limiting->capacity_ips()) : nlohmann::json(nullptr)},
        {"next_name", l.next ? nlohmann::json(l.next->name) : nlohmann::json(nullptr)},
        {"margin", l.next ? nlohmann::json(l.margin) : nlohmann::json(nullptr)}}},
      {"compute_only_ips", null_if_zero(compute_ips)},
      {"compute_only_source", facts.compute_only_source},
      {"end_to_end_vs_compute",
       compute_ips > 0 ? nlohmann::json(s.throughput_ips / compute_ips) : nlohmann::json(nullptr)},
      {"h2d_gb_s",
       or_null(dev.present && dev.h2d_s > 0, dev.h2d_s > 0 ? dev.h2d_bytes / dev.h2d_s * 1e-9 : 0)},
      {"gpu_busy_share", or_null(dev.present && s.wall_s > 0, s.wall_s > 0 ? dev.gpu_busy_s / s.wall_s : 0)},
      {"gpu_split", dev.present ? nlohmann::json{{"busy_s", dev.gpu_busy_s},
                                                 {"preprocess_s", dev.preprocess_s},
                                                 {"model_s", dev.model_s},
                                                 {"output_s", dev.output_s},
                                                 {"host_enqueue_s", dev.host_enqueue_s},
                                                 {"host_wait_s", dev.host_wait_s},
                                                 {"host_submit_s", dev.host_submit_s}}
                                : nlohmann::json(nullptr)},
      {"memory",
       {{"rss_after_first_pass_bytes", s.rss_after_first_pass_bytes},
        {"rss_final_bytes", s.rss_final_bytes},
        {"rss_peak_bytes", s.rss_peak_bytes},
        {"rss_growth_fraction", rss_growth(s)},
        {"heap_after_first_pass_bytes", s.heap_after_first_pass_bytes},
        {"heap_before_last_pass_bytes", s.heap_before_last_pass_bytes},
        {"device_used_after_first_pass_bytes",
         dev.present ? nlohmann::json(s.device_used_after_first_pass_bytes) : nlohmann::json(nullptr)},
        {"device_used_final_bytes",
         dev.present ? nlohmann::json(dev.device_used_bytes) : nlohmann::json(nullptr)},
        {"device_used_peak_bytes",
         dev.present ? nlohmann::json(dev.device_used_peak_bytes) : nlohmann::json(nullptr)}}},
      {"errors", std::move(errors)},
      {"environment",
       {{"gpulab_version", GPULAB_VERSION},
        {"gpulab_commit", GPULAB_GIT_COMMIT},
        {"command_line", process_command_line()},
        {"hardware_threads", std::thread::hardware_concurrency()}}}};
  if (o.predictions) {
    nlohmann::json preds = nlohmann::json::array();
    for (size_t i = 0; i < files.size(); ++i) {
      nlohmann::json top = nlohmann::json::array();
      for (const Prediction& p : r.predictions[i])
        if (p.index >= 0)
          top.push_back({{"index", p.index}, {"score", p.score}, {"probability", p.probability}});
      preds.push_back({{"file", files[i].string()}, {"top", std::move(top)}});
    }
    j["predictions"] = std::move(preds);
  }
  return j;
}

void print_table(const PipelineCliOptions& o, const Classifier& c, const PipelineResult& r,
                 const RunFacts& facts) {
  const PipelineStats& s = r.stats;
  fmt::print("Pipeline: {} files x {} pass(es), batch {}, {} decode thread(s), {} staging slots\n", s.files,
             s.passes, s.batch, s.decode_threads, s.queue_depth);
  fmt::print("Model: {} on {}; preprocessing on the {} ({})\n",
             c.model_path.empty() ? o.plan_path : c.model_path, c.backend->name(),
             facts.preprocess == "gpu" ? "GPU" : "CPU", c.spec.describe());
  fmt::print("JPEG: libjpeg-turbo, DCT scaling {} ({} image(s) decoded below full size)\n",
             o.dct_scaling ? "on" : "off", s.dct_scaled_images);
  fmt::print("Files in RAM after pass 1: {} ({:.1f} MiB cached)\n", s.files_cached ? "yes" : "no",
             static_cast<double>(s.cached_bytes) / kMiB);
  fmt::print("Set-up before the clock: {:.2f} s (staging buffers{})\n", s.setup_s,
             c.backend->engine() ? "; the engine's plans and CUDA graph at this batch" : "");
  fmt::print("End to end: {} images in {:.2f} s: {:.1f} img/s", s.images, s.wall_s, s.throughput_ips);
  if (s.warm_throughput_ips > 0)
    fmt::print(" (pass 1: {:.2f} s; passes 2-{}: {:.1f} img/s)", s.first_pass_s, s.passes,
               s.warm_throughput_ips);
  fmt::print("\n\n{:<8} {:>7} {:>8} {:>9} {:>7} {:>14} {:>10} {:>10} {:>9}\n", "stage", "threads", "images",
             "busy s", "busy %", "capacity img/s", "wait in s", "wait out s", "cpu s");
  for (const StageStats& st : s.stages) {
    fmt::print("{:<8} {:>7} {:>8} {:>9.2f} {:>6.1f}% {:>14.1f} {:>10.2f} {:>10.2f} {:>9.2f}\n", st.name,
               st.threads, st.images, st.busy_s, 100.0 * busy_share(st, s.wall_s), st.capacity_ips(),
               st.wait_input_s, st.wait_output_s, st.cpu_s);
  }
  fmt::print(
      "decode busy time: {:.2f} s decoding, {:.2f} s in the backend's staging (resize, crop, normalize)\n",
      s.decode_s, s.stage_s);
  const Limiter l = find_limiter(s);
  if (l.limiting) {
    fmt::print("\nLimiting stage: {} ({:.1f} img/s)", l.limiting->name, l.limiting->capacity_ips());
    if (l.next)
      fmt::print("; next: {} at {:.1f} img/s ({:.2f}x)", l.next->name, l.next->capacity_ips(), l.margin);
    fmt::print("\n");
  }
  const double compute_ips = facts.compute_only_ips;
  if (compute_ips > 0)
    fmt::print("Compute only: {:.1f} img/s ({}); end to end is {:.0f}% of it\n", compute_ips,
               facts.compute_only_source, 100.0 * s.throughput_ips / compute_ips);
  const DeviceAccount& dev = s.device;
  if (dev.present) {
    fmt::print(
        "GPU: busy {:.1f}% of the wall time; H2D {:.2f} GB/s ({:.1f} MiB uploaded in {:.3f} s of copies)\n",
        s.wall_s > 0 ? 100.0 * dev.gpu_busy_s / s.wall_s : 0.0,
        dev.h2d_s > 0 ? dev.h2d_bytes / dev.h2d_s * 1e-9 : 0.0, dev.h2d_bytes / kMiB, dev.h2d_s);
    fmt::print("GPU busy time: {:.3f} s preprocessing, {:.3f} s the model, {:.3f} s top-k and results\n",
               dev.preprocess_s, dev.model_s, dev.output_s);
    fmt::print(
        "Infer thread: {:.3f} s queueing batches ({:.3f} s of it in the engine's enqueue), {:.3f} s waiting "
        "for "
        "them to finish\n",
        dev.host_submit_s, dev.host_enqueue_s, dev.host_wait_s);
    fmt::print("Device memory in use: {:.1f} MiB after pass 1, {:.1f} MiB at the end, peak {:.1f} MiB\n",
               s.device_used_after_first_pass_bytes / kMiB, dev.device_used_bytes / kMiB,
               dev.device_used_peak_bytes / kMiB);
  }
  fmt::print("Memory: RSS {:.1f} MiB after pass 1, {:.1f} MiB at the end",
             s.rss_after_first_pass_bytes / kMiB, s.rss_final_bytes / kMiB);
  const nlohmann::json growth = rss_growth(s);
  if (!growth.is_null()) fmt::print(" ({:+.2f}%)", 100.0 * growth.get<double>());
  fmt::print(", peak {:.1f} MiB", s.rss_peak_bytes / kMiB);
  if (s.passes > 1 && s.heap_before_last_pass_bytes > 0)
    fmt::print("; heap in use {:.1f} MiB after pass 1, {:.1f} MiB after pass {}",
               s.heap_after_first_pass_bytes / kMiB, s.heap_before_last_pass_bytes / kMiB, s.passes - 1);
  fmt::print("\n");
  if (s.failed_images > 0)
    fmt::print("Skipped: {} image(s) over all passes (named on stderr)\n", s.failed_images);
}

// nvJPEG is loaded at run time only; this build decodes with libjpeg-turbo either way and says
// why when nvJPEG was asked for.
void explain_decoder(const std::string& decoder) {
  if (decoder != "nvjpeg") return;
  void* lib = dlopen("libnvjpeg.so.12", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libnvjpeg.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr,
                 "gpulab: --decoder nvjpeg: nvJPEG is not installed (%s); decoding with libjpeg-turbo\n",
                 dlerror());
    return;
  }
  dlclose(lib);
  std::fprintf(stderr,
               "gpulab: --decoder nvjpeg: nvJPEG is installed, but this gpulab does not decode with it yet; "
               "decoding with libjpeg-turbo\n");
}

int run_pipeline_command(PipelineCliOptions o) {
  if (o.inputs.empty()) {
    GPULAB_ASSIGN_OR_REPORT(std::string images_dir, default_images_dir());
    o.inputs.push_back(images_dir);
  }
  if (o.cache_mib < 0) return report(Status::invalid_argument("--cache-mib must not be negative."));
  // A plan was built with its own options; the build flags would be ignored.
  if (const Status s = refuse_build_flags_with_plan(o.build, o.plan_path,
                                                    o.no_tactic_timing ? "--no-tactic-timing" : nullptr);
      !s.is_ok())
    return report(s);
  // A throughput run: the candidates' timing (seconds to a minute, once per timing cache) buys
  // inference many times faster than cuDNN's first choices on some models (the bundled
  // MobileNetV2 in FP16 on an H100: 137 ms per batch of 256 with them).
  GPULAB_ASSIGN_OR_REPORT(BuildOptions build, build_options_from(o.build));
  build.time_tactics = !o.no_tactic_timing;
  GPULAB_ASSIGN_OR_REPORT(auto files, list_images(o.inputs));
  explain_decoder(o.decoder);
#ifdef GPULAB_HAVE_GPU_PIPELINE
  // A plan build with tactic timing takes seconds to a minute: say what the pause is, on a terminal.
  if (isatty(STDERR_FILENO) && log_level() < LogLevel::kError && o.device != "cpu" && o.plan_path.empty() &&
      !o.no_tactic_timing && o.build.timing_cache.empty() && cuda_device_available())
    std::fprintf(
        stderr,
        "gpulab: building the plan, timing each layer's tactics (--timing-cache FILE keeps them for the "
        "next run; --no-tactic-timing skips them)\n");
#endif
  GPULAB_ASSIGN_OR_REPORT(std::unique_ptr<Classifier> classifier, load_classifier({.model_path = o.model_path,
                                                                                   .plan_path = o.plan_path,
                                                                                   .device = o.device,
                                                                                   .precision = o.precision,
                                                                                   .preset = o.preset,
                                                                                   .preset_flag = "--preset",
                                                                                   .max_batch = o.batch,
                                                                                   .build = build}));
  RunFacts facts;
  std::unique_ptr<BatchBackend> backend;
#ifdef GPULAB_HAVE_GPU_PIPELINE
  const std::shared_ptr<Engine> engine = classifier->backend->engine();
  facts.preprocess = o.preprocess == "auto" ? (engine ? "gpu" : "cpu") : o.preprocess;
  if (facts.preprocess == "gpu") {
    if (!engine)
      return report(
          Status::unavailable("--preprocess gpu needs the GPU engine, and the model runs on the CPU "
                              "(--device cpu, or no usable GPU). "
                              "Use --preprocess cpu."));
    GPULAB_ASSIGN_OR_REPORT(
        backend,
        make_gpu_backend({.engine = engine, .spec = classifier->spec, .use_cuda_graph = o.cuda_graph}));
  }
#else
  if (o.preprocess == "gpu")
    return report(Status::unavailable(
        "--preprocess gpu: this gpulab was built without CUDA. Use --preprocess cpu, or rebuild with the "
        "CUDA toolkit (cmake --preset release)."));
#endif
  if (!backend) backend = make_cpu_backend(make_host_runner(*classifier), classifier->spec);
  ProgressLine progress("pipeline");
  PipelineOptions options{.files = files,
                          .spec = classifier->spec,
                          .batch = o.batch,
                          .decode_threads = o.decode_threads,
                          .queue_depth = o.queue_depth,
                          .loop = o.loop,
                          .top_k = o.top_k,
                          .dct_scaling = o.dct_scaling,
                          .file_cache_bytes = o.cache_mib * static_cast<int64_t>(kMiB),
                          .progress = [&](const PipelineProgress& p) { progress.update(p); }};
  GPULAB_ASSIGN_OR_REPORT(PipelineResult result, run_pipeline(options, *backend));
  progress.finish();
  facts.compute_only_ips = result.stats.stages.back().capacity_ips();  // CPU: the infer stage's own rate
  if (facts.preprocess == "gpu") {
    GPULAB_ASSIGN_OR_REPORT(const double ips, backend->compute_only_ips(result.stats.batch));
    facts.compute_only_ips = ips;
    facts.compute_only_source = "the engine alone on a device-resident batch, CUDA events";
  }
  if (o.json) {
    fmt::print("{}\n", to_json(o, *classifier, result, files, facts).dump(2));
  } else {
    print_table(o, *classifier, result, facts);
  }
  return report_skipped(result.errors, files.size());
}

}  // namespace

void add_pipeline_command(CLI::App& app) {
  auto o = std::make_shared<PipelineCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "pipeline",
      "Image files to predictions through threaded decode, staging and inference, measured per stage");
  sub->add_option("inputs", o->inputs, "Image files or folders (default: the bundled photos)");
  sub->add_option("-m,--model", o->model_path, "ONNX classifier (default: the bundled MobileNetV2)");
  sub->add_option("--plan", o->plan_path, "A plan built by `gpulab build` (GPU only)");
  sub->add_option("-b,--batch", o->batch, "Images per batch")->capture_default_str();
  sub->add_option("--decode-threads", o->decode_threads, "Decode threads (0: one per core but one)")
      ->capture_default_str();
  sub->add_option("--queue-depth", o->queue_depth, "Staging buffers (batches) between decoding and inference")
      ->capture_default_str();
  sub->add_option("--preprocess", o->preprocess, "Where to resize, crop and normalize: auto, gpu or cpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}))
      ->capture_default_str();
  sub->add_option("--decoder", o->decoder, "JPEG decoder: turbojpeg, or nvjpeg when installed")
      ->check(CLI::IsMember({"turbojpeg", "nvjpeg"}))
      ->capture_default_str();
  sub->add_option("--loop", o->loop, "Passes over the files (files stay in RAM after the first)")
      ->capture_default_str();
  sub->add_option("-k,--top-k", o->top_k, "Classes kept per image")->capture_default_str();
  sub->add_flag("!--no-dct-scaling", o->dct_scaling,
                "Decode JPEGs at full size (exactly classify's pixels on large photos; slower)");
  sub->add_option("--cache-mib", o->cache_mib, "RAM for files kept after their first read, MiB")
      ->capture_default_str();
  sub->add_option("--device", o->device, "Inference on cuda, cpu or auto (GPU when usable)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--precision", o->precision, "GPU precision: fp32, tf32, fp16, bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}))
      ->capture_default_str();
  sub->add_option("--preset", o->preset,
                  "Preprocessing: auto (from the model's metadata), torchvision or tf-slim")
      ->check(CLI::IsMember({"auto", "torchvision", "tf-slim"}))
      ->capture_default_str();
  sub->add_flag("--no-tactic-timing", o->no_tactic_timing,
                "[--model] Take cuDNN's heuristic choice for each layer instead of timing the candidates (a "
                "build in seconds; inference can be much slower)");
  add_build_flags(sub, &o->build, "[--model] ");
  sub->add_flag("!--no-cuda-graph", o->cuda_graph,
                "--preprocess gpu: launch the model's kernels one by one instead of replaying a CUDA graph");
  sub->add_flag("--predictions", o->predictions, "With --json: include pass 1's top-k for every file");
  sub->add_flag("--json", o->json, "Print JSON (schema gpulab.pipeline, docs/metrics.md) instead of a table");
  on_run(sub, [o] { return run_pipeline_command(*o); });
}

}  // namespace gpulab::cli
