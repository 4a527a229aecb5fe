// The inference backend behind `classify` (and `accuracy` later): the GPU engine when asked for
// and usable, else the CPU reference executor.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab::cli {

struct ClassifyBackendOptions {
  std::string device = "auto";  // cuda, cpu, auto
  std::string precision = "fp32";
  int64_t max_batch = 8;
  std::string plan_path;  // load this plan instead of building from the graph (GPU only)
  // How a GPU plan is built from the graph (its precision and max batch come from the fields
  // above). Unset: cuDNN's heuristic choices, a build in seconds for a few images (classify).
  std::optional<BuildOptions> build;
};

class ClassifyBackend {
 public:
  virtual ~ClassifyBackend() = default;
  // Float NCHW batch in, float [N, classes] logits out.
  virtual Result<Tensor> run(const Tensor& input) = 0;
  // "cpu (reference)", "cuda fp16 (NVIDIA H200)", ...
  virtual std::string name() const = 0;
  // The model's input shape ([N,3,H,W] for an image classifier) and ONNX metadata_props.
  virtual Shape input_shape() const = 0;
  virtual std::map<std::string, std::string> metadata() const = 0;
  // True when run() returns probabilities (a plan whose model ends in Softmax). A backend built
  // from a graph returns false; classify reads the graph itself.
  virtual bool outputs_probabilities() const { return false; }
  // The GPU engine behind run(), for the pipeline's GPU backend; null on the CPU.
  virtual std::shared_ptr<Engine> engine() const { return nullptr; }
};

// `graph` (optimized by run_passes) may be null only when options.plan_path names a plan.
// device "cpu": the reference executor. "cuda": the GPU engine, or an error saying why not.
// "auto": the GPU engine when a GPU is usable, else the reference executor with a one-line
// notice on stderr.
Result<std::unique_ptr<ClassifyBackend>> make_classify_backend(const Graph* graph,
                                                               const ClassifyBackendOptions& options);

}  // namespace gpulab::cli
