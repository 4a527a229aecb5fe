#include <algorithm>
#include <cmath>

#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

using pass::constant_near;
using pass::single_reader;

constexpr double kSqrt2 = 1.4142135623730951;
// The exported constants are float32: sqrt(2) rounds to 1.41421354, 1/sqrt(2) to 0.707106769.
constexpr double kTolerance = 1e-6;

std::string other_input(const Node& n, const std::string& known) {
  if (n.input(0) == known) return n.input(1);
  if (n.input(1) == known) return n.input(0);
  return "";
}

}  // namespace

// Matches GELU as torch.onnx writes nn.GELU() (opsets below 20 have no Gelu op):
//   e = Erf(Div(x, sqrt 2)) or Erf(Mul(x, 1/sqrt 2)); a = Add(e, 1);
//   y = Mul(Mul(x, a), 0.5), Mul(Mul(a, x), 0.5), Mul(Mul(x, 0.5), a) or Mul(x, Mul(a, 0.5))
// and replaces it by Gelu(x) (the exact, erf form).
Status fuse_gelu(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& erf = graph.nodes[i];
    if (erf.op != OpType::kErf) continue;
    const Node* scale = pass::producer_of(graph, erf.input(0));
    if (!scale || graph.use_count(erf.input(0)) != 1) continue;
    const bool by_div =
        scale->op == OpType::kDiv && constant_near(graph, scale->input(1), kSqrt2, kTolerance);
    const bool by_mul =
        scale->op == OpType::kMul && (constant_near(graph, scale->input(1), 1.0 / kSqrt2, kTolerance) ||
                                      constant_near(graph, scale->input(0), 1.0 / kSqrt2, kTolerance));
    if (!by_div && !by_mul) continue;
    const std::string x = by_div || constant_near(graph, scale->input(1), 1.0 / kSqrt2, kTolerance)
                              ? scale->input(0)
                              : scale->input(1);
    int r = single_reader(graph, erf.outputs[0]);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kAdd) continue;
    const Node& add = graph.nodes[static_cast<size_t>(r)];
    if (!constant_near(graph, other_input(add, erf.outputs[0]), 1.0)) continue;
    const std::string a = add.outputs[0];
    // Two Muls combine x, a and 0.5 in any order.
    r = single_reader(graph, a);
    if (r < 0 || graph.nodes[static_cast<size_t>(r)].op != OpType::kMul) continue;
    const Node& m1 = graph.nodes[static_cast<size_t>(r)];
    const std::string m1_other = other_input(m1, a);
    std::vector<size_t> gone{i, static_cast<size_t>(scale - graph.nodes.data()),
                             static_cast<size_t>(&add - graph.nodes.data()), static_cast<size_t>(r)};
    std::string out;
    const auto second = [&](const std::string& from, const std::string& want_other, bool half) -> bool {
      const int s = single_reader(graph, from);
      if (s < 0 || graph.nodes[static_cast<size_t>(s)].op != OpType::kMul) return false;
      const Node& m2 = graph.nodes[static_cast<size_t>(s)];
      const std::string o = other_input(m2, from);
      if (half ? !constant_near(graph, o, 0.5) : o != want_other) return false;
      gone.push_back(static_cast<size_t>(s));
      out = m2.outputs[0];
      return true;
    };
    if (m1_other == x) {
      if (!second(m1.outputs[0], "", true)) continue;  // Mul(Mul(x, a), 0.5)
    } else if (constant_near(graph, m1_other, 0.5)) {
      if (!second(m1.outputs[0], x, false)) continue;  // Mul(x, Mul(a, 0.5))
    } else if (const Node* half = pass::producer_of(graph, m1_other);
               half && half->op == OpType::kMul && graph.use_count(m1_other) == 1 &&
               other_input(*half, x) != "" && constant_near(graph, other_input(*half, x), 0.5)) {
      gone.push_back(static_cast<size_t>(half - graph.nodes.data()));  // Mul(Mul(x, 0.5), a)
      out = m1.outputs[0];
    } else {
      continue;
    }
    Node gelu{erf.name + "/gelu", OpType::kGelu, {x}, {out}, GeluAttrs{false}};
    pass::replace_nodes(graph, gone, std::move(gelu));
    i = static_cast<size_t>(-1);
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
