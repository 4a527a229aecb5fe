#include <algorithm>
#include <numeric>

#include "backends/reference/reference_executor.h"
#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

using pass::producer_of;
using pass::scalar_constant;

std::string other_input(const Node& n, const std::string& known) {
  if (n.input(0) == known) return n.input(1);
  if (n.input(1) == known) return n.input(0);
  return "";
}

std::vector<int64_t> leading(const Shape& s) {
  return std::vector<int64_t>(s.dims.begin(), s.dims.end() - 2);
}

// A dimension as (batch factor, or 0 without the batch; concrete factor).
struct DimProduct {
  int64_t batches = 0, factor = 1;
  void times(int64_t d) {
    if (Shape::is_batch(d)) {
      ++batches;
      factor *= Shape::batch_factor(d);
    } else {
      factor *= d;
    }
  }
  bool equals(int64_t d) const {
    return Shape::is_batch(d) ? batches == 1 && factor == Shape::batch_factor(d)
                              : batches == 0 && factor == d;
  }
};

// For each dimension of `coarse`, the range [first, last) of `fine`'s dimensions whose product it is;
// nullopt when `coarse` is not a grouping of `fine`.
std::optional<std::vector<std::pair<size_t, size_t>>> groups_of(const std::vector<int64_t>& coarse,
                                                                const std::vector<int64_t>& fine) {
  std::vector<std::pair<size_t, size_t>> groups;
  size_t f = 0;
  for (int64_t d : coarse) {
    DimProduct p;
    const size_t first = f;
    while (f < fine.size() && !p.equals(d)) p.times(fine[f++]);
    if (!p.equals(d)) return std::nullopt;
    // Trailing size-1 dims of `fine` join the last group that can take them.
    groups.emplace_back(first, f);
  }
  if (f != fine.size()) return std::nullopt;
  return groups;
}

// A constant `b` added to scores of shape `scores` (numpy broadcasting), as the same constant over
// scores whose leading dims are `fine` (a refinement of `scores`' leading dims): each leading dim
// of b is 1 (broadcast) or the whole scores dim, which then splits into its fine dims.
std::optional<Tensor> lift(const Tensor& b, const Shape& scores, const std::vector<int64_t>& fine) {
  const size_t rank = scores.rank();
  if (b.shape().rank() > rank) return std::nullopt;
  std::vector<int64_t> bd(rank - b.shape().rank(), 1);
  bd.insert(bd.end(), b.shape().dims.begin(), b.shape().dims.end());
  const auto groups = groups_of(leading(scores), fine);
  if (!groups) return std::nullopt;
  std::vector<int64_t> out;
  for (size_t j = 0; j < groups->size(); ++j) {
    const auto [first, last] = (*groups)[j];
    if (bd[j] == 1) {
      out.insert(out.end(), last - first, 1);
    } else if (!Shape::is_batch(scores[j]) && bd[j] == scores[j]) {
      out.insert(out.end(), fine.begin() + static_cast<std::ptrdiff_t>(first),
                 fine.begin() + static_cast<std::ptrdiff_t>(last));
    } else {
      return std::nullopt;
    }
  }
  out.push_back(bd[rank - 2]);
  out.push_back(bd[rank - 1]);
  auto t = b.reshaped(Shape(out));
  if (!t.is_ok()) return std::nullopt;
  return std::move(t).value();
}

// a (op) b with numpy broadcasting, by the reference backend.
std::optional<Tensor> combine(OpType op, const Tensor& a, const Tensor& b) {
  Node n{"fuse_attention/combine", op, {"a", "b"}, {"y"}, {}};
  std::vector<const Tensor*> in{&a, &b};
  std::vector<Tensor> out;
  if (!run_reference_node(n, in, out).is_ok()) return std::nullopt;
  return std::move(out[0]);
}

Tensor scalar(float v) {
  return Tensor::from_floats(Shape{}, std::span<const float>(&v, 1));
}

// A Reshape target for `shape` that ONNX reads without knowing the batch: -1 at its batch dim.
Tensor reshape_target(const Shape& shape) {
  std::vector<int64_t> dims = shape.dims;
  for (int64_t& d : dims)
    if (Shape::is_batch(d)) d = -1;
  return Tensor::from_int64s(Shape{static_cast<int64_t>(dims.size())}, dims);
}

class AttentionFuser {
 public:
  explicit AttentionFuser(Graph& graph) : g_(graph) {}

  // Fuses the pattern around the Softmax at `index`; false when it does not match.
  bool fuse(size_t index) {
    const Node& softmax = g_.nodes[index];
    const ValueInfo* in = g_.value(softmax.input(0));
    if (!in || in->shape.rank() < 2) return false;
    const int64_t rank = static_cast<int64_t>(in->shape.rank());
    const int64_t axis = softmax.attr<AxisAttrs>().axis;
    if (axis != -1 && axis != rank - 1) return false;
    const int pv_index = pass::single_reader(g_, softmax.outputs[0]);
    if (pv_index < 0) return false;
    const Node& pv = g_.nodes[static_cast<size_t>(pv_index)];
    if (pv.op != OpType::kMatMul || pv.input(0) != softmax.outputs[0]) return false;

    // Back from the Softmax to Q K^T: Reshapes of the leading dims, constant scales and biases.
    std::vector<const Node*> chain;  // softmax side first
    std::string cur = softmax.input(0);
    const Node* qk = nullptr;
    while (!qk) {
      const Node* p = producer_of(g_, cur);
      if (!p || g_.use_count(cur) != 1) return false;
      if (p->op == OpType::kMatMul) {
        qk = p;
      } else if (p->op == OpType::kReshape || p->op == OpType::kAdd || p->op == OpType::kMul ||
                 p->op == OpType::kDiv) {
        const std::string next =
            p->op == OpType::kReshape ? p->input(0) : other_input(*p, other_constant(*p));
        if (next.empty()) return false;
        chain.push_back(p);
        cur = next;
      } else {
        return false;
      }
    }
    const ValueInfo* qk_out = g_.value(qk->outputs[0]);
    if (!qk_out || qk_out->shape.rank() < 2) return false;
    // The finest leading dims among the shapes the scores pass through.
    std::vector<int64_t> fine = leading(qk_out->shape);
    for (const Node* n : chain) {
      const std::vector<int64_t> l = leading(g_.value(n->outputs[0])->shape);
      if (l.size() > fine.size()) fine = l;
      const Shape& s = g_.value(n->outputs[0])->shape;
      if (s.rank() < 2 || s[s.rank() - 2] != qk_out->shape[qk_out->shape.rank() - 2] ||
          s[s.rank() - 1] != qk_out->shape[qk_out->shape.rank() - 1])
        return false;
    }
    for (const Node* n : chain)
      if (!groups_of(leading(g_.value(n->outputs[0])->shape), fine)) return false;
    if (!groups_of(leading(qk_out->shape), fine)) return false;

    // Forward from Q K^T: score = scale * (Q K^T) * lead_scale + bias.
    float scale = 1.0f;
    std::optional<Tensor> bias, lead_scale;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& n = **it;
      if (n.op == OpType::kReshape) continue;
      const std::string c = other_constant(n);
      const Shape& at = g_.value(n.outputs[0])->shape;
      if (n.op == OpType::kAdd) {
        auto b = lift(*g_.initializer(c), at, fine);
        if (!b) return false;
        bias = bias ? combine(OpType::kAdd, *bias, *b) : std::move(b);
        if (!bias) return false;
        continue;
      }
      if (n.op == OpType::kDiv && n.input(1) != c) return false;  // c / scores
      if (auto s = scalar_constant(g_, c)) {
        const float f = n.op == OpType::kMul ? *s : 1.0f / *s;
        scale *= f;
        if (bias) bias = combine(OpType::kMul, *bias, scalar(f));
        continue;
      }
      // A constant that does not vary over T and S (Swin V2's per-head logit scale): moved onto Q.
      const Tensor* t = g_.initializer(c);
      if (n.op != OpType::kMul || bias || t->shape().rank() < 2 || t->shape()[t->shape().rank() - 1] != 1 ||
          t->shape()[t->shape().rank() - 2] != 1)
        return false;
      auto lifted = lift(*t, at, fine);
      if (!lifted) return false;
      lead_scale = lead_scale ? combine(OpType::kMul, *lead_scale, *lifted) : std::move(lifted);
      if (!lead_scale) return false;
    }
    if (bias && !bias_fits(*bias)) return false;

    // Q, K (from K^T) and V, each with the scalar scales in front of the product taken out.
    std::string q = absorb_scale(qk->input(0), scale);
    std::string kt = qk->input(1);
    std::string v = pv.input(1);
    const ValueInfo *qi = g_.value(q), *ki = g_.value(kt), *vi = g_.value(v);
    const ValueInfo* out = g_.value(pv.outputs[0]);
    if (!qi || !ki || !vi || !out || qi->shape.rank() != ki->shape.rank() ||
        vi->shape.rank() != qi->shape.rank())
      return false;
    const std::vector<int64_t> lead = leading(qk_out->shape);
    if (leading(qi->shape) != lead || leading(ki->shape) != lead || leading(vi->shape) != lead ||
        leading(out->shape) != lead)
      return false;

    std::vector<Node> added;
    std::string k = k_from_transposed(kt, scale, added);
    const std::string base = softmax.name + "/attention";
    if (lead_scale) {  // Q * c, c broadcast over T and D
      const std::string c = g_.unique_name(base + "/q_scale_value");
      g_.initializers[c] = std::move(*lead_scale);
      const std::string scaled = g_.unique_name(base + "/q_scaled");
      added.push_back(
          Node{base + "/q_scale", OpType::kMul, {reshaped(q, fine, added, base + "/q"), c}, {scaled}, {}});
      q = scaled;
    } else {
      q = reshaped(q, fine, added, base + "/q");
    }
    k = reshaped(k, fine, added, base + "/k");
    v = reshaped(v, fine, added, base + "/v");
    std::vector<std::string> inputs{q, k, v};
    if (bias) {
      const std::string b = g_.unique_name(base + "/bias");
      g_.initializers[b] = std::move(*bias);
      inputs.push_back(b);
    }
    const bool regroup = fine != lead;
    const std::string y = regroup ? g_.unique_name(base + "/out") : pv.outputs[0];
    added.push_back(Node{base, OpType::kAttention, inputs, {y}, AttentionAttrs{scale}});
    if (regroup) {
      const std::string target = g_.unique_name(base + "/out_shape");
      g_.initializers[target] = reshape_target(out->shape);
      added.push_back(
          Node{base + "/out_reshape", OpType::kReshape, {y, target}, {pv.outputs[0]}, ReshapeAttrs{}});
    }
    // The new nodes take the MatMul's place; what they replace becomes dead code.
    const std::string pv_out = pv.outputs[0];
    g_.nodes[static_cast<size_t>(pv_index)].outputs[0] = g_.unique_name(pv_out + "/unused");
    g_.nodes.insert(g_.nodes.begin() + pv_index + 1, added.begin(), added.end());
    return true;
  }

 private:
  // The constant input of a binary chain node ("" when none, or for a Reshape).
  std::string other_constant(const Node& n) const {
    if (n.op == OpType::kReshape) return "";
    for (size_t i = 0; i < 2; ++i) {
      const Tensor* t = g_.initializer(n.input(i));
      if (t && t->dtype() == DataType::kFloat32 && !g_.is_initializer(n.input(1 - i))) return n.input(i);
    }
    return "";
  }

  bool bias_fits(const Tensor& b) const { return b.dtype() == DataType::kFloat32 && b.shape().rank() >= 2; }

  // x, with Mul/Div-by-scalar nodes read only here peeled off into `scale`.
  std::string absorb_scale(std::string x, float& scale) {
    for (;;) {
      const Node* p = producer_of(g_, x);
      if (!p || g_.use_count(x) != 1 || (p->op != OpType::kMul && p->op != OpType::kDiv)) return x;
      const std::string c = other_constant(*p);
      const auto s = scalar_constant(g_, c);
      if (!s || (p->op == OpType::kDiv && p->input(1) != c) || *s == 0.0f) return x;
      scale *= p->op == OpType::kMul ? *s : 1.0f / *s;
      x = other_input(*p, c);
    }
  }

  // K [..., S, D] from K^T [..., D, S]: the source of a Transpose whose permutation, followed by a
  // swap of the last two axes, is the identity; else a Transpose node with that composition.
  std::string k_from_transposed(const std::string& kt, float& scale, std::vector<Node>& added) {
    const ValueInfo* info = g_.value(kt);
    const size_t rank = info->shape.rank();
    std::vector<int64_t> swap(rank);
    std::iota(swap.begin(), swap.end(), 0);
    std::swap(swap[rank - 2], swap[rank - 1]);
    std::string src = kt;
    std::vector<int64_t> perm = swap;
    const Node* t = producer_of(g_, kt);
    if (t && t->op == OpType::kTranspose && g_.use_count(kt) == 1) {
      std::vector<int64_t> p = t->attr<TransposeAttrs>().perm;
      if (p.empty()) {
        p.resize(rank);
        std::iota(p.rbegin(), p.rend(), 0);
      }
      for (size_t i = 0; i < rank; ++i) perm[i] = p[static_cast<size_t>(swap[i])];
      src = absorb_scale(t->input(0), scale);
    }
    bool identity = true;
    for (size_t i = 0; i < rank; ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (identity) return src;
    const std::string k = g_.unique_name(kt + "/k");
    added.push_back(Node{kt + "/to_k", OpType::kTranspose, {src}, {k}, TransposeAttrs{perm}});
    return k;
  }

  // x [lead..., A, B] with its leading dims regrouped as `fine` (a Reshape node), or x itself.
  std::string reshaped(const std::string& x, const std::vector<int64_t>& fine, std::vector<Node>& added,
                       const std::string& name) {
    const ValueInfo* info = g_.value(x);
    // Before the added nodes exist their outputs have no inferred shape: K's Transpose permutes its
    // source's.
    Shape shape = info ? info->shape : Shape();
    if (!info)
      for (const Node& n : added)
        if (n.outputs[0] == x && n.op == OpType::kTranspose) {
          const Shape& src = g_.value(n.inputs[0])->shape;
          shape = Shape();
          for (int64_t p : n.attr<TransposeAttrs>().perm) shape.dims.push_back(src[static_cast<size_t>(p)]);
        }
    if (leading(shape) == fine) return x;
    Shape target(fine);
    target.dims.push_back(shape[shape.rank() - 2]);
    target.dims.push_back(shape[shape.rank() - 1]);
    const std::string t = g_.unique_name(name + "_shape");
    g_.initializers[t] = reshape_target(target);
    const std::string y = g_.unique_name(name + "_regrouped");
    added.push_back(Node{name + "_regroup", OpType::kReshape, {x, t}, {y}, ReshapeAttrs{}});
    return y;
  }

  Graph& g_;
};

}  // namespace

// See passes.h.
Status fuse_attention(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  AttentionFuser fuser(graph);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op != OpType::kSoftmax) continue;
    if (fuser.fuse(i)) {
      graph.remove_dead_code();
      GPULAB_TRY(graph.infer_shapes());
      i = static_cast<size_t>(-1);
    }
  }
  graph.remove_dead_code();
  return graph.infer_shapes();
}

}  // namespace gpulab
