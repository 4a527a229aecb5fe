// Internal to the passes: small queries the pattern matchers share.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace gpulab::pass {

// The single node reading `value` (read once, not a graph output), or -1.
int single_reader(const Graph& graph, const std::string& value);

// The node producing `value`, or nullptr (graph input, initializer).
const Node* producer_of(const Graph& graph, const std::string& value);

// The value of a float32 initializer holding one element (any rank), or nullopt.
std::optional<float> scalar_constant(const Graph& graph, const std::string& value);

// True when `value` is a float32 initializer whose every element is within `tolerance` of `want`.
bool constant_near(const Graph& graph, const std::string& value, double want, double tolerance = 1e-6);

// Erases the nodes at `indices` (any order, no duplicates).
void erase_nodes(Graph& graph, std::vector<size_t> indices);

// Replaces the matched nodes at `indices` (any order, no duplicates, not empty) by `node`, placed
// where the last of them was, so that it follows whatever produced their inputs.
void replace_nodes(Graph& graph, std::vector<size_t> indices, Node node);

}  // namespace gpulab::pass
