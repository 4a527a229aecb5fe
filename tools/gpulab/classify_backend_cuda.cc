// The GPU engine behind `classify`: build a plan from the (already optimized) graph, or load one
// with --plan, and run batches through one ExecutionContext with CUDA graphs.
#ifdef GPULAB_HAVE_RUNTIME

#include <fmt/format.h>

#include "classify_backend.h"
#include "gpulab/engine.h"
#include "runtime/runtime.h"

namespace gpulab::cli {
namespace {

class EngineBackend final : public ClassifyBackend {
 public:
  EngineBackend(std::shared_ptr<Engine> engine, std::unique_ptr<ExecutionContext> context)
      : engine_(std::move(engine)), context_(std::move(context)) {}

  Result<Tensor> run(const Tensor& input) override {
    const int64_t batch = input.shape().rank() ? input.shape()[0] : 0;
    if (batch > engine_->info().max_batch)
      return Status::invalid_argument(fmt::format("batch {} exceeds the plan's max batch {}; lower --batch",
                                                  batch, engine_->info().max_batch));
    return context_->run(input, /*use_cuda_graph=*/true);
  }
  Shape input_shape() const override { return engine_->info().input_shape; }
  std::map<std::string, std::string> metadata() const override { return engine_->info().metadata; }
  bool outputs_probabilities() const override { return engine_->info().outputs_probabilities; }
  std::shared_ptr<Engine> engine() const override { return engine_; }
  std::string name() const override {
    const EngineInfo& info = engine_->info();
    return fmt::format("cuda {} ({})", precision_name(info.precision), info.gpu_name);
  }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ExecutionContext> context_;
};

}  // namespace

Result<std::unique_ptr<ClassifyBackend>> make_cuda_classify_backend(const Graph* graph,
                                                                    const ClassifyBackendOptions& options) {
  std::string reason;
  if (!cuda_device_available(&reason)) return Status::unavailable(reason);
  std::shared_ptr<Engine> engine;
  if (!options.plan_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(engine, Engine::load(options.plan_path));
  } else {
    if (!graph) return Status::internal("make_cuda_classify_backend: neither a graph nor a plan");
    GPULAB_ASSIGN_OR_RETURN(Precision precision, parse_precision(options.precision));
    BuildOptions build = options.build.value_or(BuildOptions{.time_tactics = false});
    build.precision = precision;
    build.max_batch = options.max_batch;
    GPULAB_ASSIGN_OR_RETURN(engine, build_engine_from_graph(*graph, build, /*apply_passes=*/false));
  }
  GPULAB_ASSIGN_OR_RETURN(std::unique_ptr<ExecutionContext> context, engine->create_context());
  return std::unique_ptr<ClassifyBackend>(
      std::make_unique<EngineBackend>(std::move(engine), std::move(context)));
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_RUNTIME
