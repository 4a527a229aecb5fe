#include "plan/lower_views.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "graph/cost.h"
#include "plan/lower.h"
#include "plan/views.h"

namespace gpulab {
namespace {

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

std::optional<size_t> batch_axis(const Shape& s) {
  for (size_t i = 0; i < s.rank(); ++i)
    if (Shape::is_batch(s[i])) return i;
  return std::nullopt;
}

std::vector<size_t> identity_order(size_t rank) {
  std::vector<size_t> o(rank);
  std::iota(o.begin(), o.end(), 0);
  return o;
}

// v's dims right-aligned to `rank` (leading dims of 1) and broadcast to `dims`.
std::optional<TensorView> aligned(const TensorView& v, const std::vector<int64_t>& dims) {
  if (v.dims.size() > dims.size()) return std::nullopt;
  return broadcast_view(lead_ones(v, dims.size() - v.dims.size()), dims);
}

bool is_pointwise_op(OpType op) {
  switch (op) {
    case OpType::kGelu:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kSqrt:
    case OpType::kExp:
    case OpType::kNeg:
    case OpType::kRelu:
    case OpType::kClip:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish: return true;
    default: return false;
  }
}

}  // namespace

Status ViewLowering::unsupported(const Node& node, const std::string& what) const {
  return Status::unsupported(
      fmt::format("plan: node '{}' ({}): {}. Run it with --device cpu, or re-export the model without it.",
                  node.name, op_name(node.op), what));
}

bool ViewLowering::is_shape_value(const std::string& name) const {
  const ValueInfo* v = a_.graph.value(name);
  return v && (v->dtype == DataType::kInt64 || v->dtype == DataType::kBool);
}

const Node* ViewLowering::only_reader(const std::string& value, OpType op) const {
  if (a_.graph.use_count(value) != 1) return nullptr;
  const std::vector<int> readers = a_.graph.consumers(value);
  if (readers.size() != 1) return nullptr;
  const Node& n = a_.graph.nodes[static_cast<size_t>(readers[0])];
  return n.op == op ? &n : nullptr;
}

bool ViewLowering::lowers(const Node& node) const {
  if (fused_.contains(node.name)) return true;
  if (std::all_of(node.outputs.begin(), node.outputs.end(),
                  [&](const std::string& o) { return o.empty() || is_shape_value(o); }))
    return true;
  // An activation input without an NHWC value of its own: a token tensor.
  const auto token_input = [&](size_t i) {
    const std::string& in = node.input(i);
    return !in.empty() && !a_.graph.is_initializer(in) && !is_shape_value(in) && !a_.value_of.contains(in);
  };
  switch (node.op) {
    case OpType::kTranspose:
    case OpType::kSlice:
    case OpType::kSplit:
    case OpType::kSqueeze:
    case OpType::kUnsqueeze:
    case OpType::kExpand:
    case OpType::kGather:
    case OpType::kLayerNormalization:
    case OpType::kLpNormalization:
    case OpType::kAttention:
    case OpType::kMatMul:
    case OpType::kSub:
    case OpType::kDiv:
    case OpType::kGelu:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kSqrt:
    case OpType::kExp:
    case OpType::kNeg: return true;
    case OpType::kAdd:
    case OpType::kMul:
      return token_input(0) || token_input(1) || a_.graph.is_initializer(node.input(0)) ||
             a_.graph.is_initializer(node.input(1));
    case OpType::kReshape:
    case OpType::kFlatten: {
      const ValueInfo* out = a_.graph.value(node.outputs[0]);
      return token_input(0) || !out || out->shape.rank() != 2;
    }
    case OpType::kConcat: {
      const ValueInfo* out = a_.graph.value(node.outputs[0]);
      const int64_t rank = out ? static_cast<int64_t>(out->shape.rank()) : 0;
      const int64_t axis =
          node.attr<AxisAttrs>().axis < 0 ? node.attr<AxisAttrs>().axis + rank : node.attr<AxisAttrs>().axis;
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (token_input(i) || a_.graph.is_initializer(node.input(i))) return true;
      return axis != 1;
    }
    case OpType::kRelu:
    case OpType::kClip:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
    case OpType::kIdentity:
    case OpType::kDropout: return token_input(0);
    default: return false;
  }
}

Status ViewLowering::lower(const Node& node) {
  if (fused_.contains(node.name)) return Status::ok();
  if (std::all_of(node.outputs.begin(), node.outputs.end(),
                  [&](const std::string& o) { return o.empty() || is_shape_value(o); }))
    return Status::ok();  // shape code: its values are known (the steps read the inferred shapes)
  switch (node.op) {
    case OpType::kMatMul: {
      const Tensor* b = a_.graph.initializer(node.input(1));
      return b && b->shape().rank() == 2 ? lower_linear(node) : lower_matmul(node);
    }
    case OpType::kLayerNormalization:
    case OpType::kLpNormalization: return lower_layer_norm(node);
    case OpType::kAttention: return lower_attention(node);
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv: return lower_eltwise(node);
    case OpType::kConcat: return lower_concat(node);
    default:
      if (is_pointwise_op(node.op)) return lower_pointwise(node);
      return lower_view(node);
  }
}

Result<std::vector<int64_t>> ViewLowering::per_image(const Node& node, const std::string& value) const {
  const ValueInfo* info = a_.graph.value(value);
  if (!info) return unsupported(node, "'" + value + "' has no inferred shape");
  std::vector<int64_t> dims = info->shape.dims;
  int batches = 0;
  for (int64_t& d : dims)
    if (Shape::is_batch(d)) {
      d = Shape::batch_factor(d);
      ++batches;
    }
  if (batches != 1)
    return unsupported(
        node, fmt::format("'{}' has shape {}; the GPU engine needs one dimension that holds the batch", value,
                          info->shape.to_string()));
  return dims;
}

int ViewLowering::weight_of(const std::string& initializer, const Shape& shape, DataType type) {
  const std::string key = initializer + "/" + std::string(dtype_name(type)) + shape.to_string();
  if (auto it = weights_.find(key); it != weights_.end()) return it->second;
  const Tensor* t = a_.graph.initializer(initializer);
  const int w = a_.add_weight(initializer, shape, t->f32(), type);
  weights_[key] = w;
  return w;
}

Result<ViewLowering::Layout> ViewLowering::new_value(const Node& node, const std::string& name,
                                                     const std::vector<int64_t>& dims,
                                                     const std::vector<size_t>& order,
                                                     std::optional<DataType> type) {
  const std::vector<size_t> o = order.empty() ? identity_order(dims.size()) : order;
  std::vector<int64_t> phys;
  for (size_t i : o) phys.push_back(dims[i]);
  PlanValue v;
  v.name = name;
  v.dtype = type.value_or(a_.dtype);
  const size_t r = phys.size();
  v.c = r >= 1 ? phys[r - 1] : 1;
  v.w = r >= 2 ? phys[r - 2] : 1;
  v.h = r >= 3 ? product(phys, 0, r - 2) : 1;
  v.c_valid = v.c;
  if (v.c < 1 || v.w < 1 || v.h < 1)
    return unsupported(node, fmt::format("'{}' would hold an empty tensor [{}]", name, fmt::join(dims, ",")));
  a_.plan.values.push_back(v);
  Layout l;
  l.value = static_cast<int>(a_.plan.values.size()) - 1;
  const TensorView phys_view = contiguous_view(phys);
  l.view.dims = dims;
  l.view.strides.assign(dims.size(), 0);
  for (size_t i = 0; i < o.size(); ++i) l.view.strides[o[i]] = phys_view.strides[i];
  return l;
}

Result<ViewLowering::Layout> ViewLowering::dense(const Node& node, const std::string& name, const Layout& l,
                                                 const std::vector<size_t>& order) {
  if (l.value >= 0 && a_.plan.values[static_cast<size_t>(l.value)].dtype == a_.dtype) {
    const PlanValue& v = a_.plan.values[static_cast<size_t>(l.value)];
    std::vector<size_t> have;
    const bool whole = l.view.numel() == v.h * v.w * v.c && is_permuted_dense(l.view, &have);
    if (whole && (order.empty() ? is_dense(l.view) : true)) {
      if (order.empty() || have == order) return l;
    }
  }
  GPULAB_ASSIGN_OR_RETURN(Layout out, new_value(node, name + ".dense", l.view.dims, order));
  PlanStep st = a_.step(StepKind::kCopy, node);
  st.name = node.name + ".layout";
  st.flops_per_image = 0;
  if (l.value >= 0) {
    st.inputs = {l.value};
  } else {
    st.weight = l.weight;
  }
  st.views = {l.view, out.view};
  st.output = out.value;
  a_.plan.steps.push_back(std::move(st));
  return out;
}

Result<ViewLowering::Layout> ViewLowering::layout(const Node& node, const std::string& name) {
  if (auto it = layouts_.find(name); it != layouts_.end()) return it->second;
  if (auto it = a_.value_of.find(name); it != a_.value_of.end()) {
    const PlanValue& v = a_.plan.values[static_cast<size_t>(it->second)];
    GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, name));
    Layout l;
    l.value = it->second;
    l.view.dims = dims;
    if (dims.size() == 4) {
      l.view.strides = {v.h * v.w * v.c, 1, v.w * v.c, v.c};
    } else if (dims.size() == 2) {
      l.view.strides = {v.c, 1};
    } else {
      return unsupported(node, "'" + name + "' is an NHWC value of rank " + std::to_string(dims.size()));
    }
    // Views and steps read the plan's type; a float32 value of a TF32 layer in a 16-bit plan is
    // converted once.
    if (v.dtype != a_.dtype) {
      GPULAB_ASSIGN_OR_RETURN(l, dense(node, name + ".to_" + std::string(dtype_name(a_.dtype)), l));
    }
    layouts_[name] = l;
    return l;
  }
  if (const Tensor* t = a_.graph.initializer(name)) {
    if (t->dtype() != DataType::kFloat32) return unsupported(node, "'" + name + "' is a non-float constant");
    Layout l;
    l.weight = weight_of(name, t->shape(), a_.dtype);
    l.view = contiguous_view(t->shape().dims);
    return l;
  }
  return unsupported(node, "its input '" + name + "' has no value on the GPU");
}

std::optional<Result<int>> ViewLowering::canonical(const Node& reader, const std::string& name) {
  if (!layouts_.contains(name)) return std::nullopt;
  const Layout& l = layouts_[name];
  auto dims = per_image(reader, name);
  if (!dims.is_ok()) return Result<int>(dims.status());
  const std::vector<int64_t>& d = *dims;
  const bool nchw = d.size() == 4 && d[0] == 1;
  if (!nchw && !(d.size() == 2 && d[0] == 1))
    return Result<int>(
        unsupported(reader, fmt::format("it reads '{}' [{}], which the convolution-world steps cannot "
                                        "take (they need [N, C, H, W] or [N, C])",
                                        name, fmt::join(d, ","))));
  const int64_t c = d[1], h = nchw ? d[2] : 1, w = nchw ? d[3] : 1;
  const TensorView want =
      nchw ? TensorView{0, {1, c, h, w}, {h * w * c, 1, w * c, c}} : TensorView{0, {1, c}, {c, 1}};
  if (l.value >= 0) {
    const PlanValue& v = a_.plan.values[static_cast<size_t>(l.value)];
    TensorView have = l.view;
    have.strides[0] = want.strides[0];  // a dim of extent 1 has any stride
    if (v.h == h && v.w == w && v.c == c && v.dtype == a_.dtype && have == want) {
      a_.value_of[name] = l.value;
      return Result<int>(l.value);
    }
  }
  PlanValue v{name + ".nhwc", h, w, c, c, a_.dtype};
  a_.plan.values.push_back(v);
  const int out = static_cast<int>(a_.plan.values.size()) - 1;
  PlanStep st = a_.step(StepKind::kCopy, reader);
  st.name = reader.name + ".to_nhwc";
  st.flops_per_image = 0;
  if (l.value >= 0) {
    st.inputs = {l.value};
  } else {
    st.weight = l.weight;
  }
  st.views = {l.view, want};
  st.output = out;
  a_.plan.steps.push_back(std::move(st));
  a_.value_of[name] = out;
  return Result<int>(out);
}

Result<std::pair<ViewLowering::Layout, TensorView>> ViewLowering::rows(const Node& node,
                                                                       const std::string& name, Layout l,
                                                                       std::vector<size_t>& order) {
  const size_t r = l.view.dims.size();
  if (r == 0) return unsupported(node, "'" + name + "' is a scalar");
  const auto try_rows = [&](const Layout& x) -> std::optional<TensorView> {
    if (x.value < 0 || (x.view.dims[r - 1] != 1 && x.view.strides[r - 1] != 1)) return std::nullopt;
    // The leading dims in the order they lie in memory, then merged into one.
    std::vector<size_t> lead(r - 1);
    std::iota(lead.begin(), lead.end(), 0);
    std::stable_sort(lead.begin(), lead.end(), [&](size_t a, size_t b) {
      if ((x.view.dims[a] == 1) != (x.view.dims[b] == 1)) return x.view.dims[a] == 1;
      return x.view.dims[a] != 1 && x.view.strides[a] > x.view.strides[b];
    });
    std::vector<int64_t> perm(lead.begin(), lead.end());
    perm.push_back(static_cast<int64_t>(r - 1));
    const TensorView p = permute_view(x.view, perm);
    auto merged = reshape_view(p, {product(p.dims, 0, r - 1), p.dims[r - 1]});
    if (!merged) return std::nullopt;
    order.assign(lead.begin(), lead.end());
    order.push_back(r - 1);
    return merged;
  };
  if (auto v = try_rows(l); v && a_.plan.values[static_cast<size_t>(l.value)].dtype == a_.dtype)
    return std::make_pair(l, *v);
  GPULAB_ASSIGN_OR_RETURN(Layout d, dense(node, name, l));
  auto v = try_rows(d);
  if (!v) return Status::internal(fmt::format("plan: node '{}': a dense value has no rows", node.name));
  return std::make_pair(d, *v);
}

Status ViewLowering::lower_view(const Node& node) {
  const std::string& out_name = node.outputs[0];
  GPULAB_ASSIGN_OR_RETURN(const Layout in, layout(node, node.input(0)));
  const ValueInfo* in_info = a_.graph.value(node.input(0));
  switch (node.op) {
    case OpType::kTranspose: {
      std::vector<int64_t> perm = node.attr<TransposeAttrs>().perm;
      if (perm.empty()) {
        perm.resize(in.view.dims.size());
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      for (int64_t& p : perm) p = p < 0 ? p + static_cast<int64_t>(perm.size()) : p;
      set_layout(out_name, Layout{in.value, in.weight, permute_view(in.view, perm)});
      return Status::ok();
    }
    case OpType::kIdentity:
    case OpType::kDropout: set_layout(out_name, in); return Status::ok();
    case OpType::kReshape:
    case OpType::kFlatten:
    case OpType::kSqueeze:
    case OpType::kUnsqueeze: {
      GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, out_name));
      // The batch stays the outermost part of its dim: the dims before it keep their product.
      const auto before = [&](const std::string& v, const std::vector<int64_t>& d) {
        return product(d, 0, *batch_axis(a_.graph.value(v)->shape));
      };
      if (!in_info || !batch_axis(in_info->shape) ||
          before(node.input(0), in.view.dims) != before(out_name, dims))
        return unsupported(node, "a reshape that moves the batch dimension relative to the others");
      if (auto v = reshape_view(in.view, dims)) {
        set_layout(out_name, Layout{in.value, in.weight, *v});
        return Status::ok();
      }
      GPULAB_ASSIGN_OR_RETURN(const Layout d, dense(node, node.input(0), in));
      set_layout(out_name, Layout{d.value, d.weight, *reshape_view(d.view, dims)});
      return Status::ok();
    }
    case OpType::kSlice: {
      const Tensor* starts = a_.graph.initializer(node.input(1));
      const Tensor* ends = a_.graph.initializer(node.input(2));
      const Tensor* axes = node.has_input(3) ? a_.graph.initializer(node.input(3)) : nullptr;
      const Tensor* steps = node.has_input(4) ? a_.graph.initializer(node.input(4)) : nullptr;
      if (!starts || !ends || (node.has_input(3) && !axes) || (node.has_input(4) && !steps))
        return unsupported(node, "its starts, ends, axes or steps are computed at run time");
      TensorView v = in.view;
      const int64_t rank = static_cast<int64_t>(v.dims.size());
      const std::optional<size_t> ba = batch_axis(in_info->shape);
      for (int64_t i = 0; i < starts->numel(); ++i) {
        int64_t axis = axes ? axes->i64()[static_cast<size_t>(i)] : i;
        if (axis < 0) axis += rank;
        const int64_t step = steps ? steps->i64()[static_cast<size_t>(i)] : 1;
        if (axis < 0 || axis >= rank || step < 1)
          return unsupported(node, "a slice with a negative step or a bad axis");
        if (ba && static_cast<size_t>(axis) == *ba) continue;  // the whole batch (shape inference checked it)
        auto r = resolve_slice(v.dims[static_cast<size_t>(axis)], starts->i64()[static_cast<size_t>(i)],
                               ends->i64()[static_cast<size_t>(i)], step);
        if (!r.is_ok()) return unsupported(node, r.status().message());
        v = slice_view(v, static_cast<size_t>(axis), r->first, r->count, r->step);
      }
      set_layout(out_name, Layout{in.value, in.weight, v});
      return Status::ok();
    }
    case OpType::kSplit: {
      const int64_t rank = static_cast<int64_t>(in.view.dims.size());
      int64_t axis = node.attr<SplitAttrs>().axis;
      if (axis < 0) axis += rank;
      int64_t first = 0;
      for (const std::string& o : node.outputs) {
        GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, o));
        const int64_t count = dims[static_cast<size_t>(axis)];
        set_layout(
            o, Layout{in.value, in.weight, slice_view(in.view, static_cast<size_t>(axis), first, count, 1)});
        first += count;
      }
      return Status::ok();
    }
    case OpType::kGather: {
      const Tensor* idx = a_.graph.initializer(node.input(1));
      const int64_t rank = static_cast<int64_t>(in.view.dims.size());
      int64_t axis = node.attr<AxisAttrs>().axis;
      if (axis < 0) axis += rank;
      if (!idx || idx->dtype() != DataType::kInt64 ||
          (batch_axis(in_info->shape) == static_cast<size_t>(axis)))
        return unsupported(node, "a gather with indices computed at run time, or along the batch");
      const int64_t len = in.view.dims[static_cast<size_t>(axis)];
      const auto at = [&](int64_t i) {
        return idx->i64()[static_cast<size_t>(i)] < 0 ? idx->i64()[static_cast<size_t>(i)] + len
                                                      : idx->i64()[static_cast<size_t>(i)];
      };
      if (idx->shape().rank() == 0) {
        set_layout(out_name,
                   Layout{in.value, in.weight, select_view(in.view, static_cast<size_t>(axis), at(0))});
        return Status::ok();
      }
      if (idx->numel() == 1) {
        set_layout(out_name,
                   Layout{in.value, in.weight, slice_view(in.view, static_cast<size_t>(axis), at(0), 1, 1)});
        return Status::ok();
      }
      // A channel shuffle (fold_channel_shuffle): output channel a * g + b reads b * per + a.
      const int64_t n = idx->numel();
      for (int64_t g = 2; g < n; ++g) {
        if (n % g != 0 || idx->shape().rank() != 1) continue;
        const int64_t per = n / g;
        bool match = n == len;
        for (int64_t a = 0; a < per && match; ++a)
          for (int64_t b = 0; b < g && match; ++b) match = at(a * g + b) == b * per + a;
        if (!match) continue;
        std::vector<size_t> order;
        const bool permuted = in.value >= 0 && is_permuted_dense(in.view, &order);
        GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, out_name));
        GPULAB_ASSIGN_OR_RETURN(const Layout out,
                                new_value(node, out_name, dims, permuted ? order : std::vector<size_t>{}));
        // Source [.., per, g, ..] over the input, destination the output's channel dim split in two.
        std::vector<int64_t> split_dims = dims;
        split_dims[static_cast<size_t>(axis)] = g;
        split_dims.insert(split_dims.begin() + axis, per);
        TensorView src = in.view;
        const int64_t cs = in.view.strides[static_cast<size_t>(axis)];
        src.dims = split_dims;
        src.strides.insert(src.strides.begin() + axis, cs);
        src.strides[static_cast<size_t>(axis) + 1] = per * cs;
        auto dst = reshape_view(out.view, split_dims);
        if (!dst) return Status::internal("plan: a channel shuffle's output view");
        PlanStep st = a_.step(StepKind::kCopy, node);
        st.flops_per_image = 0;
        st.inputs = {in.value};
        st.views = {src, *dst};
        st.output = out.value;
        if (in.value < 0) return unsupported(node, "a channel shuffle of a constant");
        a_.plan.steps.push_back(std::move(st));
        set_layout(out_name, out);
        return Status::ok();
      }
      return unsupported(node, "a gather of " + std::to_string(n) + " indices that is not a channel shuffle");
    }
    case OpType::kExpand: {
      GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, out_name));
      auto v = aligned(in.view, dims);
      if (!v) return unsupported(node, "an expand that does not broadcast");
      set_layout(out_name, Layout{in.value, in.weight, *v});
      return Status::ok();
    }
    default: return unsupported(node, "no GPU implementation of this op");
  }
}

Status ViewLowering::lower_linear(const Node& node) {
  const Tensor* b = a_.graph.initializer(node.input(1));
  if (b->dtype() != DataType::kFloat32) return unsupported(node, "B is not a float matrix");
  const int64_t k = b->shape()[0], m = b->shape()[1];
  GPULAB_ASSIGN_OR_RETURN(Layout x, layout(node, node.input(0)));
  std::vector<size_t> order;
  GPULAB_ASSIGN_OR_RETURN(auto xr, rows(node, node.input(0), x, order));
  if (xr.second.dims[1] != k) return unsupported(node, "A's last dim differs from B's rows");
  PlanStep st = a_.step(StepKind::kLinear, node);
  st.pointwise = PointwiseFn::kIdentity;
  // W [K, M] -> [M, K] rows of the storage type.
  std::vector<float> wt(static_cast<size_t>(m * k));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < m; ++j)
      wt[static_cast<size_t>(j * k + kk)] = b->f32()[static_cast<size_t>(kk * m + j)];
  st.weight = a_.add_weight(node.input(1), Shape{m, k}, wt, a_.dtype);
  // The fused epilogue: + bias, GELU, + residual (the last only without an activation).
  std::string out = node.outputs[0];
  const Tensor* bias = nullptr;
  std::string bias_name;
  if (const Node* add = only_reader(out, OpType::kAdd)) {
    const std::string other = add->input(0) == out ? add->input(1) : add->input(0);
    const Tensor* t = a_.graph.initializer(other);
    if (t && t->dtype() == DataType::kFloat32 && t->numel() == m) {
      bias = t;
      bias_name = other;
      fused_.insert(add->name);
      out = add->outputs[0];
    }
  }
  if (const Node* gelu = only_reader(out, OpType::kGelu)) {
    // 16-bit plans take cuBLASLt's fused bias + GELU epilogue, which computes the tanh form
    // (|difference| < 5e-4, below their storage's rounding); FP32/TF32 plans keep the exact one.
    const bool tanh = gelu->attr<GeluAttrs>().tanh_approximation || a_.dtype != DataType::kFloat32;
    st.pointwise = tanh ? PointwiseFn::kGeluTanh : PointwiseFn::kGelu;
    fused_.insert(gelu->name);
    out = gelu->outputs[0];
  }
  if (bias) {
    // BF16 layers keep their bias in float32 (8 significand bits would shift every output), and so
    // do FP16 layers with a GELU: cuBLASLt 13.1 has no GELU_BIAS algorithm for a float16 bias under
    // FP32 compute (status 7 for ViT-B's [100, 768] x [768, 3072] on an H100, 2026-12-05). It had
    // none for a float32 one either in a later run; the runtime then adds the bias and the GELU
    // with kernels of its own (prepare_matmul_plan), which read a float32 bias too.
    const bool float32_bias = a_.dtype == DataType::kBFloat16 ||
                              (a_.dtype == DataType::kFloat16 && st.pointwise == PointwiseFn::kGeluTanh);
    st.bias = a_.add_weight(bias_name, Shape{m}, bias->f32(), float32_bias ? DataType::kFloat32 : a_.dtype);
  }
  GPULAB_ASSIGN_OR_RETURN(std::vector<int64_t> dims, per_image(node, out));
  GPULAB_ASSIGN_OR_RETURN(const Layout y, new_value(node, out, dims, order));
  auto yrows = reshape_view(permute_view(y.view, std::vector<int64_t>(order.begin(), order.end())),
                            {xr.second.dims[0], m});
  if (!yrows) return Status::internal("plan: a linear layer's output rows");
  st.inputs = {xr.first.value};
  st.views = {xr.second};
  if (st.pointwise == PointwiseFn::kIdentity) {
    if (const Node* add = only_reader(out, OpType::kAdd)) {
      const std::string other = add->input(0) == out ? add->input(1) : add->input(0);
      auto rl = a_.graph.is_initializer(other)
                    ? Result<Layout>(Status::unsupported("a constant addend has no layout"))
                    : layout(node, other);
      if (!a_.graph.is_initializer(other) && rl.is_ok() && rl->value >= 0 && rl->view.dims == dims &&
          a_.plan.values[static_cast<size_t>(rl->value)].dtype == a_.dtype) {
        auto rv = reshape_view(permute_view(rl->view, std::vector<int64_t>(order.begin(), order.end())),
                               {xr.second.dims[0], m});
        if (rv && rv->strides[1] == 1) {
          st.inputs.push_back(rl->value);
          st.views.push_back(*rv);
          fused_.insert(add->name);
          out = add->outputs[0];
        }
      }
    }
  }
  st.views.push_back(*yrows);
  st.output = y.value;
  a_.plan.values[static_cast<size_t>(y.value)].name = out;
  a_.plan.steps.push_back(std::move(st));
  set_layout(out, y);
  return Status::ok();
}

// LayerNormalization over the last axis, and LpNormalization (p 2) along it: one kLayerNorm step
// (PlanStep::l2_norm for the latter, with a weight of ones and no bias).
Status ViewLowering::lower_layer_norm(const Node& node) {
  GPULAB_ASSIGN_OR_RETURN(const Layout x, layout(node, node.input(0)));
  const int64_t rank = static_cast<int64_t>(x.view.dims.size());
  const bool l2 = node.op == OpType::kLpNormalization;
  if (l2 && node.attr<LpNormAttrs>().p != 2) return unsupported(node, "an L1 normalization");
  int64_t axis = l2 ? node.attr<LpNormAttrs>().axis : node.attr<LayerNormAttrs>().axis;
  if (axis < 0) axis += rank;
  if (axis != rank - 1)
    return unsupported(node, l2 ? "a normalization along another than the last dimension"
                                : "a layer norm over more than the last dimension");
  const int64_t c = x.view.dims.back();
  const auto param = [&](size_t i, float fill) -> Result<int> {
    std::vector<float> v(static_cast<size_t>(c), fill);
    if (node.has_input(i)) {
      const Tensor* t = a_.graph.initializer(node.input(i));
      if (!t || t->dtype() != DataType::kFloat32 || (t->numel() != c && t->numel() != 1))
        return unsupported(node, "its scale or bias is not a constant of the normalized size");
      for (int64_t j = 0; j < c; ++j)
        v[static_cast<size_t>(j)] = t->f32()[static_cast<size_t>(t->numel() == 1 ? 0 : j)];
    }
    return a_.add_weight(node.has_input(i) ? node.input(i) : node.name + "/ones", Shape{c}, v,
                         DataType::kFloat32);
  };
  std::vector<size_t> order;
  GPULAB_ASSIGN_OR_RETURN(auto xr, rows(node, node.input(0), x, order));
  PlanStep st = a_.step(StepKind::kLayerNorm, node);
  GPULAB_ASSIGN_OR_RETURN(st.weight, param(1, 1.0f));
  if (!l2 && node.has_input(2)) {
    GPULAB_ASSIGN_OR_RETURN(st.bias, param(2, 0.0f));
  }
  st.epsilon = l2 ? node.attr<LpNormAttrs>().epsilon : node.attr<LayerNormAttrs>().epsilon;
  st.l2_norm = l2;
  GPULAB_ASSIGN_OR_RETURN(const Layout y, new_value(node, node.outputs[0], x.view.dims, order));
  auto yrows = reshape_view(permute_view(y.view, std::vector<int64_t>(order.begin(), order.end())),
                            {xr.second.dims[0], c});
  st.inputs = {xr.first.value};
  st.views = {xr.second, *yrows};
  st.output = y.value;
  a_.plan.steps.push_back(std::move(st));
  set_layout(node.outputs[0], y);
  return Status::ok();
}

Status ViewLowering::lower_attention(const Node& node) {
  PlanStep st = a_.step(StepKind::kAttention, node);
  st.scale = node.attr<AttentionAttrs>().scale;
  std::vector<int64_t> lead;
  for (size_t i = 0; i < 3; ++i) {
    GPULAB_ASSIGN_OR_RETURN(Layout l, layout(node, node.input(i)));
    if (i == 0) lead.assign(l.view.dims.begin(), l.view.dims.end() - 2);
    if (std::vector<int64_t>(l.view.dims.begin(), l.view.dims.end() - 2) != lead)
      return unsupported(node, "Q, K and V of different leading dims");
    std::optional<TensorView> v;
    if (l.value >= 0 && l.view.strides.back() == 1 &&
        a_.plan.values[static_cast<size_t>(l.value)].dtype == a_.dtype)
      v = merge_leading(l.view, 2, 2);
    if (!v) {
      GPULAB_ASSIGN_OR_RETURN(l, dense(node, node.input(i), l));
      v = merge_leading(l.view, 2, 2);
    }
    st.inputs.push_back(l.value);
    st.views.push_back(*v);
  }
  // The output token-major: [lead..., H] x [T, Dv] stored as [lead..., T, H, Dv].
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, node.outputs[0]));
  const size_t r = dims.size();
  std::vector<size_t> order = identity_order(r);
  if (r >= 3) std::swap(order[r - 3], order[r - 2]);
  GPULAB_ASSIGN_OR_RETURN(const Layout y, new_value(node, node.outputs[0], dims, order));
  st.views.push_back(*merge_leading(y.view, 2, 2));
  if (node.has_input(3)) {
    const Tensor* b = a_.graph.initializer(node.input(3));
    if (!b || b->dtype() != DataType::kFloat32) return unsupported(node, "its bias is not a float constant");
    std::vector<int64_t> scores = lead;
    scores.push_back(st.views[0].dims[2]);
    scores.push_back(st.views[1].dims[2]);
    auto v = aligned(contiguous_view(b->shape().dims), scores);
    std::optional<TensorView> merged = v ? merge_leading(*v, 2, 2) : std::nullopt;
    if (!merged)
      return unsupported(node,
                         "a bias " + b->shape().to_string() + " that does not broadcast over the heads");
    st.weight = weight_of(node.input(3), b->shape(), a_.dtype);
    st.views.push_back(*merged);
  }
  st.output = y.value;
  a_.plan.steps.push_back(std::move(st));
  set_layout(node.outputs[0], y);
  return Status::ok();
}

Status ViewLowering::lower_matmul(const Node& node) {
  PlanStep st = a_.step(StepKind::kMatMul, node);
  std::vector<int64_t> lead;
  for (size_t i = 0; i < 2; ++i) {
    GPULAB_ASSIGN_OR_RETURN(Layout l, layout(node, node.input(i)));
    if (l.view.dims.size() < 2) return unsupported(node, "a 1-D matrix product");
    if (i == 0) lead.assign(l.view.dims.begin(), l.view.dims.end() - 2);
    if (std::vector<int64_t>(l.view.dims.begin(), l.view.dims.end() - 2) != lead)
      return unsupported(node, "operands of different batch dims (broadcasting)");
    std::optional<TensorView> v;
    if (l.value >= 0 && a_.plan.values[static_cast<size_t>(l.value)].dtype == a_.dtype)
      v = merge_leading(l.view, 2, 1);
    if (!v) {
      GPULAB_ASSIGN_OR_RETURN(l, dense(node, node.input(i), l));
      v = merge_leading(l.view, 2, 1);
    }
    st.inputs.push_back(l.value);
    st.views.push_back(*v);
  }
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, node.outputs[0]));
  GPULAB_ASSIGN_OR_RETURN(const Layout y, new_value(node, node.outputs[0], dims));
  st.views.push_back(*merge_leading(y.view, 2, 1));
  st.output = y.value;
  a_.plan.steps.push_back(std::move(st));
  set_layout(node.outputs[0], y);
  return Status::ok();
}

Status ViewLowering::lower_eltwise(const Node& node) {
  std::string a_name = node.input(0), b_name = node.input(1);
  const bool commutes = node.op == OpType::kAdd || node.op == OpType::kMul;
  if (a_.graph.is_initializer(a_name)) {
    if (!commutes) return unsupported(node, "a constant minus or divided by an activation");
    std::swap(a_name, b_name);
  }
  GPULAB_ASSIGN_OR_RETURN(Layout a, layout(node, a_name));
  GPULAB_ASSIGN_OR_RETURN(Layout b, layout(node, b_name));
  if (a.value < 0) return unsupported(node, "an operation of two constants");
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, node.outputs[0]));
  auto av = aligned(a.view, dims);
  auto bv = aligned(b.view, dims);
  if (!av || !bv) return unsupported(node, "inputs that do not broadcast per image");
  if (a_.plan.values[static_cast<size_t>(a.value)].dtype != a_.dtype) {
    GPULAB_ASSIGN_OR_RETURN(a, dense(node, a_name, a));
    av = aligned(a.view, dims);
  }
  if (b.value >= 0 && a_.plan.values[static_cast<size_t>(b.value)].dtype != a_.dtype) {
    GPULAB_ASSIGN_OR_RETURN(b, dense(node, b_name, b));
    bv = aligned(b.view, dims);
  }
  std::vector<size_t> order;
  const bool keep_order = a.view.dims == dims && is_permuted_dense(a.view, &order);
  GPULAB_ASSIGN_OR_RETURN(const Layout y,
                          new_value(node, node.outputs[0], dims, keep_order ? order : std::vector<size_t>{}));
  PlanStep st = a_.step(StepKind::kEltwise, node);
  st.eltwise = node.op == OpType::kAdd   ? EltwiseOp::kAdd
               : node.op == OpType::kSub ? EltwiseOp::kSub
               : node.op == OpType::kMul ? EltwiseOp::kMul
                                         : EltwiseOp::kDiv;
  st.inputs = {a.value};
  if (b.value >= 0) {
    st.inputs.push_back(b.value);
  } else {
    st.weight = b.weight;
  }
  st.views = {*av, *bv, y.view};
  st.output = y.value;
  a_.plan.steps.push_back(std::move(st));
  set_layout(node.outputs[0], y);
  return Status::ok();
}

Status ViewLowering::lower_pointwise(const Node& node) {
  GPULAB_ASSIGN_OR_RETURN(Layout x, layout(node, node.input(0)));
  std::vector<size_t> order;
  const auto whole = [&](const Layout& l) {
    if (l.value < 0) return false;
    const PlanValue& v = a_.plan.values[static_cast<size_t>(l.value)];
    return v.dtype == a_.dtype && l.view.numel() == v.h * v.w * v.c && is_permuted_dense(l.view, &order);
  };
  if (!whole(x)) {
    GPULAB_ASSIGN_OR_RETURN(x, dense(node, node.input(0), x));
    if (!whole(x)) return Status::internal("plan: a dense value is not whole");
  }
  // The output has the input's value shape (kPointwise and kActivation work on whole values), and
  // the same view.
  PlanValue out = a_.plan.values[static_cast<size_t>(x.value)];
  out.name = node.outputs[0];
  a_.plan.values.push_back(out);
  const int y = static_cast<int>(a_.plan.values.size()) - 1;
  PlanStep st = a_.step(
      node.op == OpType::kRelu || node.op == OpType::kClip ? StepKind::kActivation : StepKind::kPointwise,
      node);
  switch (node.op) {
    case OpType::kRelu: st.activation = Activation::kRelu; break;
    case OpType::kClip:
      st.activation = Activation::kClip;
      st.clip_min = node.attr<ClipAttrs>().min;
      st.clip_max = node.attr<ClipAttrs>().max;
      break;
    case OpType::kSigmoid: st.pointwise = PointwiseFn::kSigmoid; break;
    case OpType::kHardSigmoid:
      st.pointwise = PointwiseFn::kHardSigmoid;
      st.alpha = node.attr<HardSigmoidAttrs>().alpha;
      st.beta = node.attr<HardSigmoidAttrs>().beta;
      break;
    case OpType::kHardSwish: st.pointwise = PointwiseFn::kHardSwish; break;
    case OpType::kGelu:
      st.pointwise = node.attr<GeluAttrs>().tanh_approximation ? PointwiseFn::kGeluTanh : PointwiseFn::kGelu;
      break;
    case OpType::kErf: st.pointwise = PointwiseFn::kErf; break;
    case OpType::kTanh: st.pointwise = PointwiseFn::kTanh; break;
    case OpType::kSqrt: st.pointwise = PointwiseFn::kSqrt; break;
    case OpType::kExp: st.pointwise = PointwiseFn::kExp; break;
    default: st.pointwise = PointwiseFn::kNeg; break;
  }
  st.inputs = {x.value};
  st.output = y;
  a_.plan.steps.push_back(std::move(st));
  set_layout(node.outputs[0], Layout{y, -1, x.view});
  return Status::ok();
}

Status ViewLowering::lower_concat(const Node& node) {
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, per_image(node, node.outputs[0]));
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t axis = node.attr<AxisAttrs>().axis;
  if (axis < 0) axis += rank;
  if (batch_axis(a_.graph.value(node.outputs[0])->shape) == static_cast<size_t>(axis))
    return unsupported(node, "a concatenation along the batch");
  GPULAB_ASSIGN_OR_RETURN(const Layout y, new_value(node, node.outputs[0], dims));
  int64_t first = 0;
  for (const std::string& in : node.inputs) {
    GPULAB_ASSIGN_OR_RETURN(const Layout l, layout(node, in));
    const ValueInfo* info = a_.graph.value(in);
    std::vector<int64_t> in_dims = dims;
    in_dims[static_cast<size_t>(axis)] = info->shape[static_cast<size_t>(axis)];
    auto src = aligned(l.view, in_dims);
    if (!src) return unsupported(node, "an input that does not broadcast to its part of the output");
    PlanStep st = a_.step(StepKind::kCopy, node);
    st.name = node.name + "." + std::to_string(first);
    st.flops_per_image = 0;
    if (l.value >= 0) {
      st.inputs = {l.value};
    } else {
      st.weight = l.weight;
    }
    st.views = {*src,
                slice_view(y.view, static_cast<size_t>(axis), first, in_dims[static_cast<size_t>(axis)], 1)};
    st.output = y.value;
    a_.plan.steps.push_back(std::move(st));
    first += in_dims[static_cast<size_t>(axis)];
  }
  set_layout(node.outputs[0], y);
  return Status::ok();
}

}  // namespace gpulab
