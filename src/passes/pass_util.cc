#include "passes/pass_util.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace gpulab::pass {

int single_reader(const Graph& graph, const std::string& value) {
  if (graph.use_count(value) != 1) return -1;
  const std::vector<int> readers = graph.consumers(value);
  return readers.size() == 1 ? readers[0] : -1;
}

const Node* producer_of(const Graph& graph, const std::string& value) {
  const int p = graph.producer(value);
  return p < 0 ? nullptr : &graph.nodes[static_cast<size_t>(p)];
}

std::optional<float> scalar_constant(const Graph& graph, const std::string& value) {
  const Tensor* t = graph.initializer(value);
  if (!t || t->dtype() != DataType::kFloat32 || t->numel() != 1) return std::nullopt;
  return t->f32()[0];
}

bool constant_near(const Graph& graph, const std::string& value, double want, double tolerance) {
  const Tensor* t = graph.initializer(value);
  if (!t || t->dtype() != DataType::kFloat32 || t->numel() < 1) return false;
  return std::all_of(t->f32().begin(), t->f32().end(),
                     [&](float v) { return std::abs(static_cast<double>(v) - want) <= tolerance; });
}

void erase_nodes(Graph& graph, std::vector<size_t> indices) {
  std::sort(indices.begin(), indices.end(), std::greater<>());
  for (size_t i : indices) graph.nodes.erase(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i));
}

void replace_nodes(Graph& graph, std::vector<size_t> indices, Node node) {
  const size_t last = *std::max_element(indices.begin(), indices.end());
  graph.nodes.insert(graph.nodes.begin() + static_cast<std::ptrdiff_t>(last) + 1, std::move(node));
  erase_nodes(graph, std::move(indices));
}

}  // namespace gpulab::pass
