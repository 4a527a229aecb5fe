#include "classify_backend.h"

#include <cstdio>

#include "backends/reference/reference_executor.h"

namespace gpulab::cli {

#ifdef GPULAB_HAVE_RUNTIME
// classify_backend_cuda.cc: the GPU engine; kUnavailable (with the reason) when no GPU is usable.
Result<std::unique_ptr<ClassifyBackend>> make_cuda_classify_backend(const Graph& graph,
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

 private:
  ReferenceExecutor executor_;
};

Result<std::unique_ptr<ClassifyBackend>> make_reference_backend(const Graph& graph) {
  GPULAB_ASSIGN_OR_RETURN(ReferenceExecutor executor, ReferenceExecutor::create(graph, ReferenceOptions{}));
  return std::unique_ptr<ClassifyBackend>(std::make_unique<ReferenceBackend>(std::move(executor)));
}

}  // namespace

Result<std::unique_ptr<ClassifyBackend>> make_classify_backend(const Graph& graph,
                                                               const ClassifyBackendOptions& options) {
  if (options.device == "cpu") {
    if (!options.plan_path.empty())
      return Status::invalid_argument("--plan needs --device cuda (a plan holds GPU kernels); use --model for the CPU.");
    return make_reference_backend(graph);
  }
#ifdef GPULAB_HAVE_RUNTIME
  auto cuda = make_cuda_classify_backend(graph, options);
  if (cuda.is_ok() || options.device == "cuda") return cuda;
  std::fprintf(stderr, "gpulab: no usable GPU (%s); using the CPU reference backend\n",
               cuda.status().message().c_str());
#else
  if (options.device == "cuda")
    return Status::unavailable("this gpulab was built without CUDA (preset cpu-only or no nvcc). "
                               "Rebuild with `cmake --preset release` on a machine with the CUDA toolkit.");
  std::fprintf(stderr, "gpulab: this build has no CUDA backend; using the CPU reference backend\n");
#endif
  return make_reference_backend(graph);
}

}  // namespace gpulab::cli
