#include <map>
#include <string>

#include "core/log.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

std::map<OpType, int> op_counts(const Graph& graph) {
  std::map<OpType, int> counts;
  for (const Node& n : graph.nodes) ++counts[n.op];
  return counts;
}

// "-52 BatchNormalization, -1 Identity" (what the pass removed or added, by op).
std::string describe_change(const std::map<OpType, int>& before, const std::map<OpType, int>& after) {
  std::string s;
  auto all = before;
  for (const auto& [op, n] : after) all.emplace(op, 0);
  for (const auto& [op, unused] : all) {
    const int b = before.count(op) ? before.at(op) : 0;
    const int a = after.count(op) ? after.at(op) : 0;
    if (a == b) continue;
    if (!s.empty()) s += ", ";
    s += (a > b ? "+" : "") + std::to_string(a - b) + " " + std::string(op_name(op));
  }
  return s.empty() ? "no node removed or added" : s;
}

}  // namespace

Status run_passes(Graph& graph, const PassOptions& options) {
  struct Step {
    const char* name;
    bool enabled;
    Status (*run)(Graph&);
  };
  const Step steps[] = {
      {"fold_qdq", options.fold_qdq, fold_qdq},
      {"drop_identity", options.drop_identity, drop_identity},
      {"fold_constants", options.fold_constants, fold_constants},
      {"drop_noops", options.fold_constants, drop_noops},
      {"fuse_layer_norm", options.fuse_transformer, fuse_layer_norm},
      {"fuse_gelu", options.fuse_transformer, fuse_gelu},
      {"fuse_l2_normalize", options.fuse_transformer, fuse_l2_normalize},
      {"unflatten_gemm", options.fuse_transformer, unflatten_gemm},
      {"fold_layer_scale", options.fuse_transformer, fold_layer_scale},
      {"fuse_attention", options.fuse_transformer, fuse_attention},
      {"fold_channel_shuffle", options.fuse_transformer, fold_channel_shuffle},
      {"fold_batchnorm", options.fold_batchnorm, fold_batchnorm},
      {"batchnorm_to_conv", options.fold_batchnorm, batchnorm_to_conv},
      {"matmul_to_gemm", options.fold_flatten, matmul_to_gemm},
      {"fold_flatten_into_gemm", options.fold_flatten, fold_flatten_into_gemm},
      {"fuse_conv_epilogue", options.fuse, fuse_conv_epilogue},
  };
  GPULAB_TRY(graph.infer_shapes());
  for (const Step& step : steps) {
    if (!step.enabled) continue;
    const auto before = op_counts(graph);
    const size_t nodes_before = graph.nodes.size();
    Status s = step.run(graph);
    if (!s.is_ok()) return s.with_context(std::string("pass ") + step.name);
    graph.remove_dead_code();
    GPULAB_TRY(graph.infer_shapes());
    GPULAB_TRY(graph.validate());
    log_info("pass {}: {} -> {} nodes ({})", step.name, nodes_before, graph.nodes.size(),
             describe_change(before, op_counts(graph)));
  }
  return Status::ok();
}

}  // namespace gpulab
