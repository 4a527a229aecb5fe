// gpulab classify: top-k labels for images, on the GPU engine or the CPU reference backend.
//
// With no arguments it runs the bundled default: the MobileNetV2 in models/ (real ImageNet
// weights) on the photos in data/images/.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "classify_backend.h"
#include "cli.h"
#include "core/math.h"
#include "data_paths.h"
#include "graph/classifier.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "image/labels.h"
#include "image/preprocess.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"

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

struct Prediction {
  int64_t index;
  float score;  // the model's output: a logit, or a probability when the model ends in Softmax
  float probability;
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

Result<PreprocessSpec> choose_preprocess(const ClassifyOptions& o,
                                         const std::map<std::string, std::string>& metadata) {
  if (o.preprocess == "torchvision") return PreprocessSpec::torchvision_imagenet();
  if (o.preprocess == "tf-slim") return PreprocessSpec::tf_slim_inception();
  if (o.preprocess != "auto")
    return Status::invalid_argument("--preprocess must be auto, torchvision or tf-slim (got '" +
                                    o.preprocess + "')");
  const bool has_preprocess_keys = std::any_of(
      metadata.begin(), metadata.end(), [](const auto& kv) { return kv.first.starts_with("preprocess."); });
  if (!has_preprocess_keys) {
    std::fprintf(stderr,
                 "gpulab: the model names no preprocessing (no preprocess.* metadata); using torchvision's "
                 "ImageNet transform. Override with --preprocess.\n");
    return PreprocessSpec::torchvision_imagenet();
  }
  return preprocess_from_metadata(metadata);
}

// The model's image input must be float [N, 3, H, W]; H and W give the preprocessing size.
Status check_image_input(const Graph& graph, const std::string& model_path) {
  if (graph.inputs.size() != 1)
    return Status::unsupported("'" + model_path + "' has " + std::to_string(graph.inputs.size()) +
                               " inputs; classify needs a model with one image input.");
  const ValueInfo* in = graph.value(graph.inputs[0]);
  const Shape shape = in ? in->shape : Shape{};
  if (shape.rank() != 4 || shape[1] != 3 || shape[2] <= 0 || shape[2] != shape[3]) {
    return Status::unsupported("'" + model_path + "': input '" + graph.inputs[0] + "' has shape " +
                               shape.to_string() +
                               "; classify needs an image input [N,3,S,S] (NCHW, RGB, square). "
                               "Use `gpulab inspect` to see the model's inputs.");
  }
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
nlohmann::json to_json(const std::vector<ImageResult>& results, const std::vector<std::string>& labels,
                       const ClassifyOptions& o, const std::string& backend, double total_ms,
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
  return {{"model", o.model_path},
          {"plan", o.plan_path},
          {"backend", backend},
          {"output", probabilities ? "probabilities" : "logits"},
          {"top_k", o.top_k},
          {"batch", o.batch},
          {"images", std::move(images)},
          {"wall_ms", total_ms}};
}

int run_classify(ClassifyOptions o) {
  GPULAB_TRY_CLI(validate(o));
  const bool default_model = o.model_path.empty() && o.plan_path.empty();
  if (default_model) {
    GPULAB_ASSIGN_OR_REPORT(o.model_path, default_model_path());
    if (o.labels_path.empty()) {
      auto labels = default_labels_path();
      if (labels.is_ok()) o.labels_path = *labels;
    }
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

  std::optional<Graph> graph;
  if (!o.model_path.empty()) {
    GPULAB_ASSIGN_OR_REPORT(graph, load_onnx(o.model_path));
    GPULAB_TRY_CLI(run_passes(*graph, PassOptions{}).with_context("optimizing '" + o.model_path + "'"));
    GPULAB_TRY_CLI(check_image_input(*graph, o.model_path));
  }
  ClassifyBackendOptions backend_options{
      .device = o.device, .precision = o.precision, .max_batch = o.batch, .plan_path = o.plan_path};
  GPULAB_ASSIGN_OR_REPORT(std::unique_ptr<ClassifyBackend> backend,
                          make_classify_backend(graph ? &*graph : nullptr, backend_options));
  GPULAB_ASSIGN_OR_REPORT(PreprocessSpec spec, choose_preprocess(o, backend->metadata()));
  // From the model's graph, or from a plan (whose output step applies the model's Softmax).
  const bool probabilities = graph ? outputs_class_probabilities(*graph) : backend->outputs_probabilities();
  spec.output_size = static_cast<int>(backend->input_shape()[2]);

  std::vector<ImageResult> results;
  for (size_t start = 0; start < files.size(); start += static_cast<size_t>(o.batch)) {
    const size_t end = std::min(files.size(), start + static_cast<size_t>(o.batch));
    std::vector<Image> images;
    for (size_t i = start; i < end; ++i) {
      GPULAB_ASSIGN_OR_REPORT(Image image, decode_image(files[i]));
      images.push_back(std::move(image));
    }
    GPULAB_ASSIGN_OR_REPORT(Tensor input, make_batch(images, spec));
    GPULAB_ASSIGN_OR_REPORT(Tensor logits, backend->run(input));
    if (logits.shape().rank() != 2 || logits.shape()[0] != static_cast<int64_t>(images.size())) {
      return report(Status::unsupported("'" + o.model_path + "': output shape " + logits.shape().to_string() +
                                        " is not [N, classes]; classify needs a classifier."));
    }
    const int64_t classes = logits.shape()[1];
    for (size_t i = 0; i < images.size(); ++i) {
      std::span<const float> row = logits.f32().subspan(i * classes, classes);
      const std::vector<float> probs =
          probabilities ? std::vector<float>(row.begin(), row.end()) : softmax(row);
      ImageResult r{.file = files[start + i].string()};
      for (int64_t idx : top_k(row, o.top_k)) r.top.push_back({idx, row[idx], probs[idx]});
      results.push_back(std::move(r));
    }
  }
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  if (o.json) {
    fmt::print("{}\n", to_json(results, labels, o, backend->name(), total_ms, probabilities).dump(2));
  } else {
    print_text(results, labels, probabilities);
    fmt::print("{} image(s), {} on {}, {:.0f} ms in all\n", results.size(),
               o.model_path.empty() ? o.plan_path : o.model_path, backend->name(), total_ms);
  }
  return 0;
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
