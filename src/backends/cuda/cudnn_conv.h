// Fused convolution through the cuDNN graph API (NVIDIA's cuDNN frontend headers):
//   y = act(conv(x, w) + bias + residual)   with act in {none, ReLU, Clip}
// as one cuDNN operation graph (conv_fprop -> pointwise add bias -> [add residual] -> relu/clip),
// NHWC activations, KRSC weights, FP32 compute whatever the storage type.
//
// Tactics are cuDNN engine configurations: the heuristics' candidates (modes A and FALLBACK),
// filtered by the precision's numerical rules (FP32: no tensor cores, no down-conversion, no
// Winograd/FFT; FP16/BF16: FP32 accumulation only; all: deterministic engines only, so that
// eager and CUDA-graph runs are bitwise identical). A tactic string
//   "cudnn:<engine id>;<knob>=<value>,...;<engine name>"
// names one so that a plan file can rebuild exactly that engine configuration; "cudnn-unfused:"
// marks a configuration of the convolution-only graph (ConvProblem::fused = false).
//
// Building (create/build_candidate) may allocate and take milliseconds to seconds (runtime
// compiled engines); launch() never allocates or synchronizes and may be captured in a CUDA graph.
// Not thread-safe; one object per (problem, batch size, cuDNN handle).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "graph/graph.h"

namespace gpulab::cuda {

struct ConvProblem {
  int64_t n = 0, c = 0, h = 0, w = 0;   // input NHWC; c = channels per pixel (padding included)
  int64_t k = 0, out_h = 0, out_w = 0;  // output NHWC
  ConvAttrs attrs;                      // kernel, stride, pads, dilation, groups, fused epilogue
  bool has_bias = false;
  DataType dtype = DataType::kFloat32;  // storage type of x, w, residual and y, and of the bias unless:
  bool bias_float32 = false;            // the bias is float32 (BF16 plans keep biases in float32)
  // x's storage type when it differs from dtype (DirectConvDesc::x_dtype): only gpulab's depthwise
  // kernel runs such a problem; CudnnConv refuses it.
  std::optional<DataType> x_dtype;
  Precision precision = Precision::kFp32;
  // false: the cuDNN graph holds the convolution alone and the caller applies bias, residual and
  // activation afterwards (for layers where no fused engine exists or the unfused pair is faster).
  bool fused = true;
};

// Identifies a problem for the timing cache: every field that changes which engine wins.
std::string conv_signature(const ConvProblem& problem);

struct ConvPointers {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;      // when has_bias
  const void* residual = nullptr;  // when attrs.has_residual
  void* y = nullptr;
};

class CudnnConv {
 public:
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // The heuristics' candidates, none built yet. kUnsupported when cuDNN has no engine at all.
  static Result<std::unique_ptr<CudnnConv>> with_candidates(cudnnHandle_t handle, const ConvProblem& problem);
  // Exactly the engine configuration named by `tactic`, built and selected.
  static Result<std::unique_ptr<CudnnConv>> with_tactic(cudnnHandle_t handle, const ConvProblem& problem,
                                                        const std::string& tactic);
  // The first candidate that builds and needs at most `max_workspace_bytes`, selected.
  static Result<std::unique_ptr<CudnnConv>> with_heuristic_choice(cudnnHandle_t handle,
                                                                  const ConvProblem& problem,
                                                                  int64_t max_workspace_bytes = int64_t{1}
                                                                                                << 30);

  int64_t candidate_count() const;
  // Builds candidate `index` and selects it for launch(). Fails for a candidate cuDNN rejects.
  Status select(int64_t index);
  // Tactic string of candidate `index` (see above).
  std::string tactic(int64_t index) const;
  std::string selected_tactic() const { return tactic(selected_); }
  // Workspace of the selected candidate.
  int64_t workspace_bytes() const;
  // Whether launch() applies bias, residual and activation itself.
  bool fused() const;

  Status launch(cudnnHandle_t handle, const ConvPointers& ptrs, void* workspace) const;

 private:
  struct Impl;
  explicit CudnnConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int64_t selected_ = -1;
};

}  // namespace gpulab::cuda
