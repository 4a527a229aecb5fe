// An INT8 or FP8 convolution through the cuDNN graph API, computing what gpulab's 8-bit kernels
// compute (core/quant.h's epilogue) as one operation graph:
//   conv_fprop (int8: int32 sums; E4M3: float32) -> x multiplier[k] -> + bias[k]
//     -> [+ residual x residual_scale] -> ReLU / Clip -> x (1 / y_scale) -> int8 / E4M3
// NHWC activations, KRSC weights, one 8-bit type for x, w, residual and y (a layer whose output is
// a float type stays on gpulab's kernels), groups 1. multiplier[k] = x_scale * w_scale[k] and the
// two scalars are float32, computed on the host as the kernels' launchers compute them, and held
// in a small device buffer this object owns.
//
// Whether cuDNN's epilogue rounds each step as the rule does is not something cuDNN promises: the
// tactic search (runtime/tactics.cc) runs each configuration on the layer's weights and keeps only
// those whose bytes equal the direct kernel's (INT8), or lie within one E4M3 step of them (FP8).
// bench/kernels/cudnn_q8_probe found that on an H100 (cuDNN 9.19) engines 4 and 7 compute the
// multiply and the bias add as one fused multiply-add, and the residual's term as another (engine 2
// differs once there is a residual), and
// rounds the INT8 conversion's ties to even (bench/results/2026-12-07-9df951c): quant.h's rule.
//
// Tactics are "cudnn-q8:<engine id>;<knob>=<value>,...;<engine name>" (cudnn_engine_config.h).
// Building may allocate and take milliseconds to seconds (runtime-compiled engines); launch() never
// allocates or synchronizes and may be captured in a CUDA graph. One object per (layer, batch size).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backends/cuda/kernels/quant_desc.h"
#include "gpulab/status.h"

namespace cudnn_frontend::graph {
class Graph;
}

namespace gpulab::cuda {

inline constexpr std::string_view kCudnnQ8TacticPrefix = "cudnn-q8:";

struct Q8ConvPointers {
  const void* x = nullptr;
  const void* w = nullptr;
  const float* bias = nullptr;     // null: no bias
  const void* residual = nullptr;  // when desc.has_residual
  void* y = nullptr;
};

// OK when the graph above can express `desc` (it says nothing of whether cuDNN has an engine):
// groups 1, x and y of the same 8-bit type. Unsupported, with the reason, otherwise.
Status cudnn_q8_conv_supports(const kernels::Q8ConvDesc& desc);

class CudnnQ8Conv {
 public:
  ~CudnnQ8Conv();
  CudnnQ8Conv(const CudnnQ8Conv&) = delete;
  CudnnQ8Conv& operator=(const CudnnQ8Conv&) = delete;

  // The heuristics' candidates for `desc` (w_scale: desc.k host floats; has_bias: whether launches
  // pass a bias), none built. Unsupported when cudnn_q8_conv_supports refuses or cuDNN has no engine.
  static Result<std::unique_ptr<CudnnQ8Conv>> with_candidates(cudnnHandle_t handle,
                                                              const kernels::Q8ConvDesc& desc, bool has_bias,
                                                              std::span<const float> w_scale);
  // Exactly the configuration `tactic` names, built and selected.
  static Result<std::unique_ptr<CudnnQ8Conv>> with_tactic(cudnnHandle_t handle,
                                                          const kernels::Q8ConvDesc& desc, bool has_bias,
                                                          std::span<const float> w_scale,
                                                          std::string_view tactic);

  int64_t candidate_count() const;
  // Builds candidate `index` and selects it for launch(). Fails for a candidate cuDNN rejects.
  Status select(int64_t index);
  std::string tactic(int64_t index) const;
  int64_t workspace_bytes() const;  // of the selected candidate

  Status launch(cudnnHandle_t handle, const Q8ConvPointers& ptrs, void* workspace) const;

 private:
  struct Impl;
  explicit CudnnQ8Conv(std::unique_ptr<Impl> impl);
  // Over `graph` (its execution plans created, none built), the scales uploaded.
  static Result<std::unique_ptr<CudnnQ8Conv>> create(std::shared_ptr<cudnn_frontend::graph::Graph> graph,
                                                     const kernels::Q8ConvDesc& desc, bool has_bias,
                                                     std::span<const float> w_scale);
  std::unique_ptr<Impl> impl_;
  int64_t selected_ = -1;
};

}  // namespace gpulab::cuda
