// gpulab/reference_model.h: run an ONNX image classifier on the CPU with gpulab's reference
// backend, the oracle that the GPU engine is tested against. Every gpulab build has it, also one
// without CUDA, and it needs no GPU, driver or CUDA library.
//
//   auto model = gpulab::ReferenceModel::load_onnx("mobilenet_v2.onnx");
//   if (!model.is_ok()) return fail(model.status());
//   gpulab::Tensor input(gpulab::DataType::kFloat32, model->input_shape().bind_batch(1));
//   ... fill input.f32() with the preprocessed image (NCHW) ...
//   auto logits = model->run(input);  // float32 [1, num_classes]
//
// Model: as for the engine (engine.h), one float input [N, C, H, W] and one output [N, classes];
// ONNX opset 11-18 with the ops gpulab imports. The graph passes run at load (BatchNorm folding,
// Conv epilogue fusion), so the computation is the engine's graph in FP32 with FP64 accumulation.
// Preprocessing is the caller's: metadata() holds the model's ONNX metadata_props, where
// gpulab's bundled model names its transform (preprocess.*).
//
// Speed: plain loops over std::threads, meant for checks and small batches (MobileNetV2 takes
// about a second per image on two cores), not for throughput.
// Thread safety: run() is const and may be called from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab {

struct ReferenceModelOptions {
  int num_threads = 0;  // worker threads of the large ops; 0 = std::thread::hardware_concurrency()
};

class ReferenceModel {
 public:
  // Reads the ONNX file and runs the graph passes. kNotFound (no file), kInvalidModel (not a
  // valid ONNX model), kUnsupported (an op gpulab does not import, or not one image input and one
  // [N, classes] output).
  static Result<ReferenceModel> load_onnx(const std::string& onnx_path,
                                          const ReferenceModelOptions& options = {});

  // Movable, not copyable; a moved-from model may only be assigned to or destroyed.
  ReferenceModel(ReferenceModel&&) noexcept;
  ReferenceModel& operator=(ReferenceModel&&) noexcept;
  ~ReferenceModel();

  // [N, C, H, W]; N is Shape::kBatch when the model's batch dimension is symbolic.
  const Shape& input_shape() const;
  int64_t num_classes() const;
  // True when the model ends in a Softmax over the classes: run() returns probabilities.
  bool outputs_probabilities() const;
  const std::map<std::string, std::string>& metadata() const;

  // float32 [batch, C, H, W] in (batch >= 1; the model's batch when it is fixed), float32
  // [batch, num_classes] out. kInvalidArgument for another dtype or shape. Allocates.
  Result<Tensor> run(const Tensor& input_nchw) const;

 private:
  struct State;
  explicit ReferenceModel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gpulab
