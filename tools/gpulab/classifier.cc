#include "classifier.h"

#include <algorithm>
#include <cstdio>

#include "data_paths.h"
#include "graph/classifier.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"

namespace gpulab::cli {
namespace {

Result<PreprocessSpec> choose_preprocess(const ClassifierOptions& o,
                                         const std::map<std::string, std::string>& metadata) {
  if (o.preset == "torchvision") return PreprocessSpec::torchvision_imagenet();
  if (o.preset == "tf-slim") return PreprocessSpec::tf_slim_inception();
  if (o.preset != "auto")
    return Status::invalid_argument(o.preset_flag + " must be auto, torchvision or tf-slim (got '" +
                                    o.preset + "')");
  const bool has_preprocess_keys = std::any_of(
      metadata.begin(), metadata.end(), [](const auto& kv) { return kv.first.starts_with("preprocess."); });
  if (!has_preprocess_keys) {
    std::fprintf(stderr,
                 "gpulab: the model names no preprocessing (no preprocess.* metadata); using torchvision's "
                 "ImageNet transform. Override with %s.\n",
                 o.preset_flag.c_str());
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

class BackendRunner final : public HostBatchRunner {
 public:
  explicit BackendRunner(Classifier& classifier) : classifier_(classifier) {}
  Result<Tensor> run(const Tensor& input) override { return classifier_.backend->run(input); }
  bool outputs_probabilities() const override { return classifier_.probabilities; }
  bool sets_up_per_batch_size() const override { return classifier_.backend->engine() != nullptr; }

 private:
  Classifier& classifier_;
};

}  // namespace

Result<std::unique_ptr<Classifier>> load_classifier(const ClassifierOptions& o) {
  auto c = std::make_unique<Classifier>();
  c->model_path = o.model_path;
  if (o.model_path.empty() && o.plan_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(c->model_path, default_model_path());
  }
  if (!c->model_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(c->graph, load_onnx(c->model_path));
    GPULAB_TRY(run_passes(*c->graph, PassOptions{}).with_context("optimizing '" + c->model_path + "'"));
    GPULAB_TRY(check_image_input(*c->graph, c->model_path));
  }
  const ClassifyBackendOptions backend_options{.device = o.device,
                                               .precision = o.precision,
                                               .max_batch = o.max_batch,
                                               .plan_path = o.plan_path,
                                               .build = o.build};
  GPULAB_ASSIGN_OR_RETURN(c->backend,
                          make_classify_backend(c->graph ? &*c->graph : nullptr, backend_options));
  GPULAB_ASSIGN_OR_RETURN(c->spec, choose_preprocess(o, c->backend->metadata()));
  // From the model's graph, or from a plan (whose output step applies the model's Softmax).
  c->probabilities = c->graph ? outputs_class_probabilities(*c->graph) : c->backend->outputs_probabilities();
  c->spec.output_size = static_cast<int>(c->backend->input_shape()[2]);
  return c;
}

std::unique_ptr<HostBatchRunner> make_host_runner(Classifier& classifier) {
  return std::make_unique<BackendRunner>(classifier);
}

}  // namespace gpulab::cli
