#include "graph/graph.h"

#include <algorithm>
#include <set>

namespace gpulab {

const std::string& Node::input(size_t i) const {
  static const std::string kEmpty;
  return i < inputs.size() ? inputs[i] : kEmpty;
}

const Tensor* Graph::initializer(const std::string& value) const {
  auto it = initializers.find(value);
  return it == initializers.end() ? nullptr : &it->second;
}

const ValueInfo* Graph::value(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

int Graph::producer(const std::string& value) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const std::string& out : nodes[i].outputs)
      if (out == value) return static_cast<int>(i);
  return -1;
}

std::vector<int> Graph::consumers(const std::string& value) const {
  std::vector<int> result;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& in : nodes[i].inputs) {
      if (in == value) {
        result.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  return result;
}

bool Graph::is_graph_output(const std::string& value) const {
  for (const std::string& out : outputs)
    if (out == value) return true;
  return false;
}

int Graph::use_count(const std::string& value) const {
  int n = is_graph_output(value) ? 1 : 0;
  for (const Node& node : nodes)
    for (const std::string& in : node.inputs)
      if (in == value) ++n;
  return n;
}

void Graph::replace_uses(const std::string& from, const std::string& to) {
  for (Node& node : nodes)
    for (std::string& in : node.inputs)
      if (in == from) in = to;
  for (std::string& out : outputs)
    if (out == from) out = to;
}

void Graph::remove_dead_code() {
  // Walk backwards: a node is live if any of its outputs is read by a live node or is a graph
  // output. One backward sweep suffices because nodes are in topological order.
  std::set<std::string> live(outputs.begin(), outputs.end());
  std::vector<bool> keep(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    for (const std::string& out : nodes[i].outputs)
      if (live.count(out)) keep[i] = true;
    if (keep[i])
      for (const std::string& in : nodes[i].inputs) live.insert(in);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  for (auto it = initializers.begin(); it != initializers.end();)
    it = live.count(it->first) ? std::next(it) : initializers.erase(it);
  for (auto it = values.begin(); it != values.end();) {
    const bool is_input = std::find(inputs.begin(), inputs.end(), it->first) != inputs.end();
    it = (live.count(it->first) || is_input) ? std::next(it) : values.erase(it);
  }
}

std::string Graph::unique_name(const std::string& base) const {
  auto taken = [&](const std::string& n) {
    if (values.count(n) || initializers.count(n)) return true;
    for (const Node& node : nodes) {
      if (node.name == n) return true;
      for (const std::string& out : node.outputs)
        if (out == n) return true;
    }
    return false;
  };
  if (!taken(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = base + "_" + std::to_string(i);
    if (!taken(candidate)) return candidate;
  }
}

Status Graph::validate() const {
  std::set<std::string> defined(inputs.begin(), inputs.end());
  for (const auto& [n, t] : initializers) defined.insert(n);
  for (const Node& node : nodes) {
    for (const std::string& in : node.inputs) {
      if (!in.empty() && !defined.count(in)) {
        return Status::invalid_model("node '" + node.name + "' (" + std::string(op_name(node.op)) +
                                     ") reads '" + in +
                                     "', which no earlier node, graph input or initializer defines. "
                                     "The graph is not in topological order or is incomplete.");
      }
    }
    for (const std::string& out : node.outputs) {
      if (out.empty()) continue;
      if (!defined.insert(out).second) {
        return Status::invalid_model("node '" + node.name + "' writes '" + out +
                                     "', which is already defined. Each value must have one producer.");
      }
    }
  }
  for (const std::string& out : outputs)
    if (!defined.count(out)) return Status::invalid_model("graph output '" + out + "' is never produced.");
  return Status::ok();
}

Result<SliceRange> resolve_slice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (step == 0) return Status::invalid_argument("Slice: a step of 0 is not allowed.");
  // Starts and ends beyond the dimension (INT64_MAX for "to the end") clamp; adding `dim` to a
  // huge negative value cannot overflow.
  if (start < 0) start = start < -dim ? -1 : start + dim;
  if (end < 0) end = end < -dim ? -1 : end + dim;
  SliceRange r;
  r.step = step;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    r.first = start;
    r.count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, -1, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    r.first = start;
    r.count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
  }
  return r;
}

bool softmax_over_classes(const Graph& graph, const Node& node) {
  if (node.op != OpType::kSoftmax) return false;
  const ValueInfo* in = graph.value(node.input(0));
  if (!in) return false;
  const auto& dims = in->shape.dims;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t axis = node.attr<AxisAttrs>().axis;
  return rank >= 2 && (axis < 0 ? axis + rank : axis) == 1 &&
         std::all_of(dims.begin() + 2, dims.end(), [](int64_t d) { return d == 1; });
}

}  // namespace gpulab
