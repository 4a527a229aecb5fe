// Work and traffic of each node, for `inspect`, the roofline profile and the sweep's verdicts.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace gpulab {

struct NodeCost {
  double flops = 0;          // a multiply-add counts as 2
  int64_t param_bytes = 0;   // initializers the node reads (weights, bias), at their stored dtype
  int64_t input_bytes = 0;   // non-initializer inputs read once
  int64_t output_bytes = 0;  // outputs written once
  int64_t bytes() const { return param_bytes + input_bytes + output_bytes; }
};

// Cost of one node at batch size `batch`, with activations stored as `activation_dtype`
// (weights are counted at the same element size). Requires Graph::infer_shapes to have run.
NodeCost node_cost(const Graph& graph, const Node& node, int64_t batch,
                   DataType activation_dtype = DataType::kFloat32);

// Sum over all nodes.
NodeCost graph_cost(const Graph& graph, int64_t batch, DataType activation_dtype = DataType::kFloat32);

}  // namespace gpulab
