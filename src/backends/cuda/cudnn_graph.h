// What the cuDNN graph-API wrappers (cudnn_conv.cc, cudnn_q8_conv.cc) share on top of NVIDIA's cuDNN
// frontend: its errors as Status, engine configurations as tactic strings (cudnn_engine_config.h),
// and the numerical notes no gpulab plan takes. Include only from files that build with the
// frontend's headers (src/backends/cuda).
#pragma once

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cudnn_engine_config.h"
#include "gpulab/status.h"

namespace gpulab::cuda {

// A frontend error as kUnsupported, "cuDNN <where>: <cuDNN's message>".
Status cudnn_error(cudnn_frontend::error_t e, const std::string& where);

// The knobs of `config` as the frontend takes them (Graph::create_execution_plan).
std::unordered_map<cudnn_frontend::KnobType_t, int64_t> frontend_knobs(const CudnnEngineConfig& config);

// `prefix` + the configuration of execution plan `index` of `graph` (after create_execution_plans);
// prefix + "?" when the graph cannot say.
std::string cudnn_engine_tactic(cudnn_frontend::graph::Graph& graph, int64_t index, std::string_view prefix);

// Bars the engines whose numerical notes `barred` lists, and NONDETERMINISTIC ones unless
// GPULAB_CUDNN_NONDETERMINISTIC=1: eager runs and CUDA-graph replays must agree bit for bit.
void deselect_cudnn_notes(cudnn_frontend::graph::Graph& graph,
                          std::vector<cudnn_frontend::NumericalNote_t> barred);

// The execution plans of one graph (the heuristics' candidates, or the one configuration a tactic
// names), each built on first use: building can take a fraction of a second (runtime-compiled
// engines), and a search builds only those it times.
class CudnnPlans {
 public:
  CudnnPlans() = default;
  // After create_execution_plans / create_execution_plan (and check_support).
  explicit CudnnPlans(std::shared_ptr<cudnn_frontend::graph::Graph> graph);
  cudnn_frontend::graph::Graph& graph() const { return *graph_; }
  int64_t count() const { return static_cast<int64_t>(built_.size()); }
  // Builds plan `index` unless it is built; `what` begins the messages ("cuDNN", "cudnn-q8").
  Status build(int64_t index, std::string_view what);
  // Workspace of plan `index`, or 0 when cuDNN cannot say.
  int64_t workspace_bytes(int64_t index) const;

 private:
  std::shared_ptr<cudnn_frontend::graph::Graph> graph_;
  std::vector<bool> built_;
};

}  // namespace gpulab::cuda
