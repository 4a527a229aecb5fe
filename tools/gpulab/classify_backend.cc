#include "classify_backend.h"

#include <cstdio>

#include "backends/reference/reference_executor.h"

namespace gpulab::cli {

#ifdef GPULAB_HAVE_RUNTIME
// classify_backend_cuda.cc: the GPU engine; kUnavailable (with the reason) when no GPU is usable.
Result<std::unique_ptr<ClassifyBackend>> make_cuda_classify_backend(const Graph* graph,
                                                                    const ClassifyBackendOptions& options);
#endif

namespace {

class ReferenceBackend final : public ClassifyBackend {
 public:
  explicit ReferenceBackend(ReferenceExecutor executor) : executor_(std::move(executor)) {}
  Result<Tensor> run(const Tensor& input) override {
    GPULAB_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, executor_.run(std::span<const Tensor>(&input, 1)));
    if (outputs.empty()) return Status::internal("reference executor returned no outputs");
    return std::move(outputs.front());
  }
  std::string name() const override { return "cpu (reference backend)"; }
  Shape input_shape() const override {
    const ValueInfo* in = executor_.graph().value(executor_.graph().inputs.at(0));
    return in ? in->shape : Shape{};
  }
  std::map<std::string, std::string> metadata() const override { return executor_.graph().metadata; }

 private:
  ReferenceExecutor executor_;
};

Result<std::unique_ptr<ClassifyBackend>> make_reference_backend(const Graph& graph) {
  GPULAB_ASSIGN_OR_RETURN(ReferenceExecutor executor, ReferenceExecutor::create(graph, ReferenceOptions{}));
  return std::unique_ptr<ClassifyBackend>(std::make_unique<ReferenceBackend>(std::move(executor)));
}

}  // namespace

Result<std::unique_ptr<ClassifyBackend>> make_classify_backend(const Graph* graph,
                                                               const ClassifyBackendOptions& options) {
  const auto cpu = [&]() -> Result<std::unique_ptr<ClassifyBackend>> {
    if (!graph)
      return Status::invalid_argument(
          "--plan runs on the GPU only (a plan holds GPU kernels); give --model to run on the CPU.");
    return make_reference_backend(*graph);
  };
  if (options.device == "cpu") return cpu();
#ifdef GPULAB_HAVE_RUNTIME
  auto cuda = make_cuda_classify_backend(graph, options);
  if (cuda.is_ok() || options.device == "cuda") return cuda;
  if (cuda.status().code() != StatusCode::kUnavailable) return cuda;  // a GPU, but the build failed
  std::fprintf(stderr, "gpulab: no usable GPU (%s); using the CPU reference backend\n",
               cuda.status().message().c_str());
#else
  if (options.device == "cuda")
    return Status::unavailable(
        "this gpulab was built without CUDA (preset cpu-only or no nvcc). "
        "Rebuild with `cmake --preset release` on a machine with the CUDA toolkit.");
  std::fprintf(stderr, "gpulab: this build has no CUDA backend; using the CPU reference backend\n");
#endif
  return cpu();
}

}  // namespace gpulab::cli
