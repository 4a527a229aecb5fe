#include "backends/cuda/cudnn_graph.h"

#include <fmt/format.h>

#include <cstdlib>

namespace gpulab::cuda {

namespace fe = cudnn_frontend;

Status cudnn_error(fe::error_t e, const std::string& where) {
  return Status::unsupported(fmt::format("cuDNN {}: {}", where, e.get_message()));
}

std::unordered_map<fe::KnobType_t, int64_t> frontend_knobs(const CudnnEngineConfig& config) {
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  for (const auto& [k, v] : config.knobs) knobs[static_cast<fe::KnobType_t>(k)] = v;
  return knobs;
}

std::string cudnn_engine_tactic(fe::graph::Graph& graph, int64_t index, std::string_view prefix) {
  CudnnEngineConfig config;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  std::string name;
  if (graph.get_engine_and_knobs_at_index(index, config.engine, knobs).is_bad())
    return fmt::format("{}?", prefix);
  (void)graph.get_plan_name_at_index(index, name);
  for (const auto& [k, v] : knobs) config.knobs.emplace_back(static_cast<int>(k), v);
  return format_cudnn_engine_config(prefix, std::move(config), name);
}

void deselect_cudnn_notes(fe::graph::Graph& graph, std::vector<fe::NumericalNote_t> barred) {
  static const bool allow_nondeterministic = [] {
    const char* env = std::getenv("GPULAB_CUDNN_NONDETERMINISTIC");
    return env && std::string_view(env) == "1";
  }();
  if (!allow_nondeterministic) barred.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  graph.deselect_numeric_notes(barred);
}

CudnnPlans::CudnnPlans(std::shared_ptr<fe::graph::Graph> graph)
    : graph_(std::move(graph)), built_(static_cast<size_t>(graph_->get_execution_plan_count()), false) {}

Status CudnnPlans::build(int64_t index, std::string_view what) {
  if (index < 0 || index >= count())
    return Status::internal(fmt::format("{}: candidate {} of {}", what, index, count()));
  if (built_[static_cast<size_t>(index)]) return Status::ok();
  if (auto e = graph_->build_plan_at_index(index); e.is_bad())
    return cudnn_error(e, fmt::format("build candidate {}", index));
  built_[static_cast<size_t>(index)] = true;
  return Status::ok();
}

int64_t CudnnPlans::workspace_bytes(int64_t index) const {
  int64_t bytes = 0;
  if (graph_->get_workspace_size_plan_at_index(index, bytes).is_bad()) return 0;
  return bytes;
}

}  // namespace gpulab::cuda
