// gpulab classify: top-k labels for images, on the GPU engine or the CPU reference backend.
//
// With no arguments it runs the bundled default: the MobileNetV2 in models/ (real ImageNet
// weights) on the photos in data/images/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "classifier.h"
#include "cli.h"
#include "data_paths.h"
#include "image/dataset.h"
#include "image/labels.h"
#include "pipeline/pipeline.h"
#include "progress.h"

namespace gpulab::cli {
namespace {

struct ClassifyOptions {
  std::string model_path;
  std::string plan_path;
  std::string labels_path;
  int64_t top_k = 5;
  int64_t batch = 8;
  bool json = false;
  std::string device = "auto";
  std::string precision = "fp32";
  std::string preprocess = "auto";
  std::vector<std::string> inputs;
};

struct ImageResult {
  std::string file;
  std::vector<Prediction> top;
};

Status validate(const ClassifyOptions& o) {
  if (o.top_k < 1)
    return Status::invalid_argument("--top-k must be at least 1 (got " + std::to_string(o.top_k) + ")");
  if (o.batch < 1 || o.batch > 4096)
    return Status::invalid_argument("--batch must be in 1..4096 (got " + std::to_string(o.batch) + ")");
  return Status::ok();
}

void print_text(const std::vector<ImageResult>& results, const std::vector<std::string>& labels,
                bool probabilities) {
  for (const ImageResult& r : results) {
    fmt::print("{}\n", r.file);
    for (size_t i = 0; i < r.top.size(); ++i) {
      const Prediction& p = r.top[i];
      const std::string name = p.index < static_cast<int64_t>(labels.size()) ? labels[p.index] : "";
      const std::string logit = probabilities ? "" : fmt::format(", logit {:.3f}", p.score);
      fmt::print("  {}. {:6.2f}%  {:<28} (class {}{})\n", i + 1, 100.0 * p.probability,
                 name.empty() ? "-" : name, p.index, logit);
    }
  }
}

// "output" says what the model computes: "logits" (each top entry has its "logit" and the
// softmax's "probability") or "probabilities" (the model's own, in "probability").
nlohmann::json to_json(const std::vector<ImageResult>& results, const std::vector<InputError>& errors,
                       const std::vector<std::string>& labels, const ClassifyOptions& o,
                       const std::string& model, const std::string& backend, double total_ms,
                       bool probabilities) {
  nlohmann::json images = nlohmann::json::array();
  for (const ImageResult& r : results) {
    nlohmann::json top = nlohmann::json::array();
    for (const Prediction& p : r.top) {
      nlohmann::json j{{"index", p.index}, {"probability", p.probability}};
      if (!probabilities) j["logit"] = p.score;
      if (p.index < static_cast<int64_t>(labels.size())) j["label"] = labels[p.index];
      top.push_back(std::move(j));
    }
    images.push_back({{"file", r.file}, {"top", std::move(top)}});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const InputError& e : errors)
    skipped.push_back({{"file", e.path.string()}, {"error", e.status.to_string()}});
  return {{"model", model},
          {"plan", o.plan_path},
          {"backend", backend},
          {"output", probabilities ? "probabilities" : "logits"},
          {"top_k", o.top_k},
          {"batch", o.batch},
          {"images", std::move(images)},
          {"skipped", std::move(skipped)},
          {"wall_ms", total_ms}};
}

int run_classify(ClassifyOptions o) {
  GPULAB_TRY_CLI(validate(o));
  if (o.model_path.empty() && o.plan_path.empty() && o.labels_path.empty()) {
    auto labels = default_labels_path();
    if (labels.is_ok()) o.labels_path = *labels;
  }
  if (o.inputs.empty()) {
    GPULAB_ASSIGN_OR_REPORT(std::string images_dir, default_images_dir());
    o.inputs.push_back(images_dir);
  }
  const auto t0 = std::chrono::steady_clock::now();

  GPULAB_ASSIGN_OR_REPORT(auto files, list_images(o.inputs));
  std::vector<std::string> labels;
  if (!o.labels_path.empty()) {
    GPULAB_ASSIGN_OR_REPORT(labels, load_labels(o.labels_path));
  }
  GPULAB_ASSIGN_OR_REPORT(std::unique_ptr<Classifier> classifier, load_classifier({.model_path = o.model_path,
                                                                                   .plan_path = o.plan_path,
                                                                                   .device = o.device,
                                                                                   .precision = o.precision,
                                                                                   .preset = o.preprocess,
                                                                                   .max_batch = o.batch}));

  // The input pipeline with CPU preprocessing and full-size decodes (no DCT scaling), so that the
  // pixels are exactly torchvision's; decoding runs on all cores but one while the model runs.
  std::unique_ptr<BatchBackend> backend = make_cpu_backend(make_host_runner(*classifier), classifier->spec);
  ProgressLine progress("classify");
  PipelineOptions pipeline{.files = files,
                           .spec = classifier->spec,
                           .batch = o.batch,
                           .top_k = static_cast<int>(o.top_k),
                           .dct_scaling = false,
                           .progress = [&](const PipelineProgress& p) { progress.update(p); }};
  GPULAB_ASSIGN_OR_REPORT(PipelineResult run, run_pipeline(pipeline, *backend));
  progress.finish();

  std::vector<ImageResult> results;
  for (size_t i = 0; i < files.size(); ++i) {
    if (run.predictions[i].empty()) continue;
    std::vector<Prediction> top;
    for (const Prediction& p : run.predictions[i])
      if (p.index >= 0) top.push_back(p);
    results.push_back({.file = files[i].string(), .top = std::move(top)});
  }
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::string model = classifier->model_path.empty() ? o.plan_path : classifier->model_path;
  if (o.json) {
    fmt::print("{}\n", to_json(results, run.errors, labels, o, model, classifier->backend->name(), total_ms,
                               classifier->probabilities)
                           .dump(2));
  } else {
    print_text(results, labels, classifier->probabilities);
    fmt::print("{} image(s), {} on {}, {:.0f} ms in all\n", results.size(), model,
               classifier->backend->name(), total_ms);
  }
  return report_skipped(run.errors, files.size());
}

}  // namespace

void add_classify_command(CLI::App& app) {
  auto opts = std::make_shared<ClassifyOptions>();
  CLI::App* sub = app.add_subcommand(
      "classify", "Top-k labels for images (default: the bundled MobileNetV2 on the bundled photos)");
  sub->add_option("inputs", opts->inputs, "Image files or folders (default: the bundled photos)");
  sub->add_option("-m,--model", opts->model_path, "ONNX classifier (default: the bundled MobileNetV2)");
  sub->add_option("--plan", opts->plan_path, "A plan built by `gpulab build` (GPU only)");
  sub->add_option("-l,--labels", opts->labels_path, "Labels file, one class name per line");
  sub->add_option("-k,--top-k", opts->top_k, "Labels to print per image")->capture_default_str();
  sub->add_option("-b,--batch", opts->batch, "Images per inference")->capture_default_str();
  sub->add_option("--device", opts->device, "cuda, cpu or auto (GPU when usable)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--precision", opts->precision, "GPU precision: fp32, tf32, fp16, bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}))
      ->capture_default_str();
  sub->add_option("--preprocess", opts->preprocess,
                  "auto (from the model's metadata), torchvision or tf-slim")
      ->check(CLI::IsMember({"auto", "torchvision", "tf-slim"}))
      ->capture_default_str();
  sub->add_flag("--json", opts->json, "Print JSON instead of a table");
  on_run(sub, [opts] { return run_classify(*opts); });
}

}  // namespace gpulab::cli
