// Engine's factories in a build without CUDA (the GPU runtime, src/runtime, implements them in a
// CUDA build): each says that this gpulab has no GPU engine, so that an application written
// against engine.h links with either install and falls back to ReferenceModel at run time.
#include "gpulab/engine.h"

namespace gpulab {
namespace {

constexpr const char* kNoCuda =
    "this gpulab was built without CUDA (preset ci or cpu-only, or no nvcc), so it has no GPU engine. "
    "Use gpulab::ReferenceModel (gpulab/reference_model.h) on the CPU, or install a CUDA build "
    "(cmake --preset release on a machine with the CUDA toolkit).";

}  // namespace

Result<std::shared_ptr<Engine>> Engine::build_from_onnx(const std::string& onnx_path, const BuildOptions&) {
  return Status::unavailable("Engine::build_from_onnx('" + onnx_path + "'): " + kNoCuda);
}

Result<std::shared_ptr<Engine>> Engine::load(const std::string& plan_path, int) {
  return Status::unavailable("Engine::load('" + plan_path + "'): " + kNoCuda);
}

bool cuda_device_available(std::string* reason) {
  if (reason) *reason = kNoCuda;
  return false;
}

}  // namespace gpulab
