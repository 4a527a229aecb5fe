// Internal to the lowering (lower.cc): the ops of the transformer classifiers and ShuffleNet, lowered
// onto the view steps of plan.h (kCopy, kLinear, kMatMul, kAttention, kLayerNorm, kEltwise) and the
// pointwise ones.
//
// Layouts: every graph value has a layout, a TensorView over one plan value (or a weight) per image.
// A value written by a convolution-world step is NHWC: the view of its [C, H, W] (or [C]) dims has
// strides [1, W * c, c]. Transpose, Reshape (where the memory allows it), Squeeze, Unsqueeze,
// Flatten, Slice, Split and Gather of one index are views of their input's value: no step. A step
// that needs its input in another layout gets a kCopy into a dense value first, made once per graph
// value and shared by every reader ("conversions planned, not per op"): a convolution reading a
// token tensor gets it NHWC, a linear layer rows it can read with one stride. The row-wise steps
// (kLinear, kLayerNorm, kPointwise) write their output in the order their input's rows lie in memory,
// so that a transpose before them stays free after them too; kAttention writes token-major
// [..., T, H, Dv], so that merging the heads back is a view.
//
// The batch: a graph dim N * k (k >= 1) is a dim of extent k per image; images lie one after another
// in every value, so views are per image. A reshape is a view only where the dims before the batch
// dim keep their product (the batch stays the outermost part of its dim).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "gpulab/engine.h"
#include "graph/graph.h"
#include "plan/plan.h"

namespace gpulab {

// What the view lowering uses of lower.cc's state.
struct LoweringAccess {
  const Graph& graph;
  const BuildOptions& options;
  Plan& plan;
  DataType dtype;                        // the plan's storage dtype
  std::map<std::string, int>& value_of;  // graph value -> its NHWC (convolution-world) plan value
  std::function<int(std::string name, Shape shape, std::span<const float> values, DataType type)> add_weight;
  std::function<PlanStep(StepKind kind, const Node& node)> step;
};

class ViewLowering {
 public:
  explicit ViewLowering(LoweringAccess access) : a_(std::move(access)) {}

  // Whether lower() takes `node`: the ops above, the elementwise ops and reshapes of values that
  // have no NHWC value, and the nodes that only compute shape values (int64/bool, no step).
  bool lowers(const Node& node) const;
  Status lower(const Node& node);

  // The NHWC value of graph value `name` ([N, C, H, W] or [N, C]) for a convolution-world step:
  // nullopt when `name` has no layout here; else its own value when the layout already is NHWC,
  // or a kCopy into a new one (made once).
  std::optional<Result<int>> canonical(const Node& reader, const std::string& name);

 private:
  struct Layout {
    int value = -1;   // plan value, or -1 for a weight
    int weight = -1;  // plan weight (the same for every image)
    TensorView view;  // per image, the graph value's dims (the batch dim at its extent k)
  };

  Result<Layout> layout(const Node& node, const std::string& name);
  void set_layout(const std::string& name, Layout l) { layouts_[name] = std::move(l); }
  // A new value holding `dims` per image, dense in the memory `order` (outermost first; empty:
  // row-major), and its layout.
  Result<Layout> new_value(const Node& node, const std::string& name, const std::vector<int64_t>& dims,
                           const std::vector<size_t>& order = {}, std::optional<DataType> type = {});
  // `l` copied into a dense value (kCopy) unless it already is one; `order` as new_value's.
  Result<Layout> dense(const Node& node, const std::string& name, const Layout& l,
                       const std::vector<size_t>& order = {});
  // The rows of `l` ([rows, C], C contiguous, the rows at one stride), in the rows' memory order:
  // `order` receives that order of l's leading dims; copies into a dense value when needed.
  Result<std::pair<Layout, TensorView>> rows(const Node& node, const std::string& name, Layout l,
                                             std::vector<size_t>& order);
  Result<std::vector<int64_t>> per_image(const Node& node, const std::string& value) const;
  int weight_of(const std::string& initializer, const Shape& shape, DataType type);
  Status unsupported(const Node& node, const std::string& what) const;
  bool is_shape_value(const std::string& name) const;

  Status lower_view(const Node& node);  // Transpose, Reshape & co, Slice, Split, Gather, Expand
  Status lower_linear(const Node& node);
  Status lower_layer_norm(const Node& node);
  Status lower_attention(const Node& node);
  Status lower_matmul(const Node& node);
  Status lower_eltwise(const Node& node);
  Status lower_pointwise(const Node& node);
  Status lower_concat(const Node& node);
  // The single reader of `value` when it is `op` (and reads it as input `index`), else nullptr.
  const Node* only_reader(const std::string& value, OpType op) const;

  LoweringAccess a_;
  std::map<std::string, Layout> layouts_;
  std::set<std::string> fused_;  // nodes lowered as part of an earlier step
  std::map<std::string, int> weights_;
};

}  // namespace gpulab
