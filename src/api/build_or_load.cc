// build_or_load_engine (engine.h), for either build: in one without CUDA, Engine's factories
// (engine_unavailable.cc) answer kUnavailable.
#include "gpulab/engine.h"

namespace gpulab {

Result<std::shared_ptr<Engine>> build_or_load_engine(const std::string& plan_path,
                                                     const std::string& model_path,
                                                     const BuildOptions& options) {
  if (!plan_path.empty()) return Engine::load(plan_path, options.device);
  if (model_path.empty()) return Status::invalid_argument("engine: give a plan file or a model file.");
  return Engine::build_from_onnx(model_path, options);
}

}  // namespace gpulab
