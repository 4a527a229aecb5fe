// What `classify` and `pipeline` share: resolving the model (the bundled default, --model or
// --plan), building its backend, choosing its preprocessing, and running it as the pipeline's
// host-side batch runner.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "classify_backend.h"
#include "gpulab/status.h"
#include "graph/graph.h"
#include "image/preprocess.h"
#include "pipeline/pipeline.h"

namespace gpulab::cli {

struct ClassifierOptions {
  std::string model_path;  // empty with an empty plan_path: the bundled MobileNetV2
  std::string plan_path;
  std::string device = "auto";
  std::string precision = "fp32";
  std::string preset = "auto";               // auto (the model's metadata), torchvision, tf-slim
  std::string preset_flag = "--preprocess";  // the flag that sets `preset`, for messages
  int64_t max_batch = 8;
  std::optional<BuildOptions> build;  // ClassifyBackendOptions::build
};

// A loaded model. Held by pointer: the reference backend keeps a reference to `graph`.
struct Classifier {
  std::string model_path;      // after resolving the default; empty for a plan
  std::optional<Graph> graph;  // optimized; absent for a plan
  std::unique_ptr<ClassifyBackend> backend;
  PreprocessSpec spec;         // output_size = the model's input side
  bool probabilities = false;  // the model's output already is a probability distribution
};

Result<std::unique_ptr<Classifier>> load_classifier(const ClassifierOptions& options);

// The classifier's backend as the pipeline's HostBatchRunner (the classifier must outlive it).
std::unique_ptr<HostBatchRunner> make_host_runner(Classifier& classifier);

}  // namespace gpulab::cli
