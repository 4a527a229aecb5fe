// Small helpers to build Graph objects by hand in the graph and passes tests.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace gpulab::testing {

class GraphBuilder {
 public:
  GraphBuilder& input(const std::string& name, Shape shape, DataType dtype = DataType::kFloat32) {
    graph_.inputs.push_back(name);
    graph_.values[name] = ValueInfo{dtype, std::move(shape), std::nullopt};
    return *this;
  }
  // A float initializer filled with 0.5, 1.5, 2.5, ... unless `values` is given.
  GraphBuilder& weight(const std::string& name, Shape shape, std::vector<float> values = {}) {
    if (values.empty()) {
      values.resize(static_cast<size_t>(shape.numel()));
      for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f + static_cast<float>(i);
    }
    graph_.initializers[name] = Tensor::from_floats(std::move(shape), values);
    return *this;
  }
  GraphBuilder& ints(const std::string& name, Shape shape, std::vector<int64_t> values) {
    graph_.initializers[name] = Tensor::from_int64s(std::move(shape), values);
    return *this;
  }
  GraphBuilder& node(OpType op, const std::string& name, std::vector<std::string> inputs,
                     std::vector<std::string> outputs, NodeAttrs attrs = {}) {
    Node n;
    n.op = op;
    n.name = name;
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.attrs = std::move(attrs);
    graph_.nodes.push_back(std::move(n));
    return *this;
  }
  GraphBuilder& output(const std::string& name) {
    graph_.outputs.push_back(name);
    return *this;
  }
  Graph build() const { return graph_; }

 private:
  Graph graph_;
};

inline ConvAttrs conv_attrs(int64_t k, int64_t stride = 1, int64_t pad = 0, int64_t groups = 1) {
  ConvAttrs a;
  a.kernel = {k, k};
  a.stride = {stride, stride};
  a.pads = {pad, pad, pad, pad};
  a.groups = groups;
  return a;
}

inline PoolAttrs pool_attrs(int64_t k, int64_t stride, int64_t pad = 0, bool ceil_mode = false) {
  PoolAttrs a;
  a.kernel = {k, k};
  a.stride = {stride, stride};
  a.pads = {pad, pad, pad, pad};
  a.ceil_mode = ceil_mode;
  return a;
}

inline int count_ops(const Graph& g, OpType op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

}  // namespace gpulab::testing
