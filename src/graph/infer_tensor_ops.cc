// Shape inference of the ops the transformer classifiers and ShuffleNet export to (Transpose, Slice,
// Split, Squeeze, the elementwise ops beyond Add/Mul, the reductions, LayerNormalization, Gelu,
// Cast, Expand, ConstantOfShape, Range, ScatterND, Pad, Max/Min) and of the Attention node the passes
// make. Inputs whose values decide a shape (Slice's starts, Expand's shape, Range's bounds ...) must
// have known_values; the symbolic batch N (or N * k) may flow through every dimension but may not be
// sliced, split, reduced or padded.
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "core/checked.h"
#include "graph/infer_util.h"

namespace gpulab::infer {
namespace {

Result<std::vector<ValueInfo>> one(ValueInfo v) {
  return std::vector<ValueInfo>{std::move(v)};
}

const ValueInfo* input(const std::vector<const ValueInfo*>& in, size_t i) {
  return i < in.size() ? in[i] : nullptr;
}

// The known values of input `i` (concrete, no batch), or an error naming `role`.
Result<std::vector<int64_t>> need_known(const Node& node, const std::vector<const ValueInfo*>& in, size_t i,
                                        const char* role, bool batch_ok = false) {
  const ValueInfo* v = input(in, i);
  if (!v) return fail(node, std::string("input ") + role + " is missing");
  const std::vector<int64_t>* values = known(v);
  if (!values)
    return Status::unsupported(node_where(node) + ": its " + role + " input '" + node.input(i) +
                               "' is computed at run time from values gpulab cannot determine ahead. Export "
                               "the model with a fixed image size, so that only the batch is symbolic.");
  if (!batch_ok)
    for (int64_t x : *values)
      if (Shape::is_batch(x))
        return Status::unsupported(
            node_where(node) + ": its " + role + " input '" + node.input(i) + "' " + values_string(*values) +
            " depends on the batch size. Keep the batch out of this op's " + role + ".");
  return *values;
}

Status no_batch_on(const Node& node, const Shape& s, int64_t axis, const char* what) {
  if (Shape::is_batch(s[static_cast<size_t>(axis)]))
    return Status::unsupported(node_where(node) + ": it " + what + " dimension " + std::to_string(axis) +
                               " of " + s.to_string() +
                               ", which holds the batch. gpulab keeps the batch dimension whole.");
  return Status::ok();
}

Result<std::vector<ValueInfo>> infer_transpose(const Node& node, const ValueInfo& x) {
  const int64_t rank = static_cast<int64_t>(x.shape.rank());
  std::vector<int64_t> perm = node.attr<TransposeAttrs>().perm;
  if (perm.empty()) {
    perm.resize(static_cast<size_t>(rank));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  if (static_cast<int64_t>(perm.size()) != rank)
    return fail(node, "perm " + values_string(perm) + " for " + x.shape.to_string());
  ValueInfo out;
  out.dtype = x.dtype;
  for (int64_t p : perm) {
    int64_t a = p;
    if (!normalize_axis(a, rank) || seen[static_cast<size_t>(a)])
      return fail(node, "perm " + values_string(perm) + " is not a permutation of " + std::to_string(rank) +
                            " dimensions.");
    seen[static_cast<size_t>(a)] = true;
    out.shape.dims.push_back(x.shape[static_cast<size_t>(a)]);
  }
  return one(out);
}

Result<std::vector<ValueInfo>> infer_slice(const Node& node, const std::vector<const ValueInfo*>& in) {
  const Shape& x = in[0]->shape;
  const int64_t rank = static_cast<int64_t>(x.rank());
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> starts, need_known(node, in, 1, "starts"));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> ends, need_known(node, in, 2, "ends"));
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (input(in, 3)) {
    GPULAB_ASSIGN_OR_RETURN(axes, need_known(node, in, 3, "axes"));
  }
  if (input(in, 4)) {
    GPULAB_ASSIGN_OR_RETURN(steps, need_known(node, in, 4, "steps"));
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return fail(node, "starts, ends, axes and steps differ in length");
  ValueInfo out = same_as(*in[0]);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t axis = axes[i];
    if (!normalize_axis(axis, rank) || seen[static_cast<size_t>(axis)])
      return fail(node,
                  "axis " + std::to_string(axes[i]) + " is out of range or repeated for " + x.to_string());
    seen[static_cast<size_t>(axis)] = true;
    const int64_t dim = x[static_cast<size_t>(axis)];
    if (Shape::is_batch(dim)) {
      // The whole batch: start 0 (or before), end at or past the end, step 1.
      if (steps[i] == 1 && starts[i] == 0 && ends[i] >= (int64_t{1} << 40)) continue;
      GPULAB_TRY(no_batch_on(node, x, axis, "slices"));
    }
    auto r = resolve_slice(dim, starts[i], ends[i], steps[i]);
    if (!r.is_ok()) return fail(node, r.status().message());
    out.shape[static_cast<size_t>(axis)] = r->count;
  }
  return one(out);
}

Result<std::vector<ValueInfo>> infer_split(const Node& node, const ValueInfo& x) {
  const SplitAttrs& a = node.attr<SplitAttrs>();
  int64_t axis = a.axis;
  if (!normalize_axis(axis, static_cast<int64_t>(x.shape.rank())))
    return fail(node, "axis " + std::to_string(a.axis) + " is out of range for " + x.shape.to_string());
  GPULAB_TRY(no_batch_on(node, x.shape, axis, "splits"));
  const int64_t dim = x.shape[static_cast<size_t>(axis)];
  const int64_t parts = static_cast<int64_t>(node.outputs.size());
  std::vector<int64_t> sizes = a.sizes;
  if (sizes.empty()) {  // equal parts; the last one smaller when they do not divide (opset 18)
    const int64_t each = dim / parts + (dim % parts != 0 ? 1 : 0);  // ceil, without dim + parts overflowing
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - p * each)));
  }
  if (static_cast<int64_t>(sizes.size()) != parts ||
      std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != dim ||
      std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; }))
    return fail(node, "split sizes " + values_string(sizes) + " into " + std::to_string(parts) +
                          " outputs do not add up to dimension " + std::to_string(axis) + " of " +
                          x.shape.to_string());
  std::vector<ValueInfo> outs;
  for (int64_t s : sizes) {
    ValueInfo o = same_as(x);
    o.shape[static_cast<size_t>(axis)] = s;
    outs.push_back(std::move(o));
  }
  return outs;
}

Result<std::vector<ValueInfo>> infer_squeeze(const Node& node, const ValueInfo& x) {
  const int64_t rank = static_cast<int64_t>(x.shape.rank());
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  const std::vector<int64_t>& axes = node.attr<UnsqueezeAttrs>().axes;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) drop[static_cast<size_t>(i)] = x.shape[static_cast<size_t>(i)] == 1;
  }
  for (int64_t a : axes) {
    int64_t axis = a;
    if (!normalize_axis(axis, rank) || x.shape[static_cast<size_t>(axis)] != 1)
      return fail(node, "axis " + std::to_string(a) + " of " + x.shape.to_string() +
                            " is out of range or not of size 1.");
    drop[static_cast<size_t>(axis)] = true;
  }
  ValueInfo out;
  out.dtype = x.dtype;
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[static_cast<size_t>(i)]) out.shape.dims.push_back(x.shape[static_cast<size_t>(i)]);
  out.known_values = x.known_values;
  return one(out);
}

Result<std::vector<ValueInfo>> infer_elementwise(const Node& node, const std::vector<const ValueInfo*>& in,
                                                 size_t arity) {
  Shape s = in[0]->shape;
  for (size_t i = 1; i < arity; ++i) {
    if (!input(in, i)) return fail(node, "needs " + std::to_string(arity) + " inputs");
    GPULAB_ASSIGN_OR_RETURN(s, broadcast(node, s, in[i]->shape));
  }
  ValueInfo out;
  out.dtype = node.op == OpType::kEqual   ? DataType::kBool
              : node.op == OpType::kWhere ? in[1]->dtype
                                          : in[0]->dtype;
  out.shape = std::move(s);
  return one(out);
}

Result<std::vector<ValueInfo>> infer_reduce(const Node& node, const ValueInfo& x) {
  const ReduceAttrs& a = node.attr<ReduceAttrs>();
  const int64_t rank = static_cast<int64_t>(x.shape.rank());
  std::vector<bool> reduce(static_cast<size_t>(rank), a.axes.empty());
  for (int64_t axis : a.axes) {
    int64_t ax = axis;
    if (!normalize_axis(ax, rank))
      return fail(node, "axis " + std::to_string(axis) + " is out of range for " + x.shape.to_string());
    reduce[static_cast<size_t>(ax)] = true;
  }
  ValueInfo out;
  out.dtype = x.dtype;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduce[static_cast<size_t>(i)]) {
      out.shape.dims.push_back(x.shape[static_cast<size_t>(i)]);
      continue;
    }
    GPULAB_TRY(no_batch_on(node, x.shape, i, "reduces"));
    if (a.keepdims) out.shape.dims.push_back(1);
  }
  return one(out);
}

Result<std::vector<ValueInfo>> infer_layer_norm(const Node& node, const std::vector<const ValueInfo*>& in) {
  const Shape& x = in[0]->shape;
  int64_t axis = node.attr<LayerNormAttrs>().axis;
  if (!normalize_axis(axis, static_cast<int64_t>(x.rank())))
    return fail(node, "axis " + std::to_string(node.attr<LayerNormAttrs>().axis) + " is out of range for " +
                          x.to_string());
  const Shape normalized(std::vector<int64_t>(x.dims.begin() + axis, x.dims.end()));
  if (normalized.has_batch())
    return Status::unsupported(node_where(node) + ": it normalizes over " + normalized.to_string() +
                               ", which holds the batch. Normalize over the feature dimensions.");
  for (size_t i = 1; i < 3; ++i) {
    const ValueInfo* p = input(in, i);
    if (!p) {
      if (i == 1) return fail(node, "needs inputs X and scale");
      continue;
    }
    GPULAB_ASSIGN_OR_RETURN(Shape b, broadcast(node, normalized, p->shape));
    if (b != normalized)
      return fail(node, std::string(i == 1 ? "scale " : "bias ") + p->shape.to_string() +
                            " does not broadcast to the normalized shape " + normalized.to_string());
  }
  return one(same_as(*in[0]));
}

Result<std::vector<ValueInfo>> infer_expand(const Node& node, const std::vector<const ValueInfo*>& in) {
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> target, need_known(node, in, 1, "shape", true));
  // ONNX Expand broadcasts both ways (a 1 in the target keeps the input's dimension).
  GPULAB_ASSIGN_OR_RETURN(Shape s, broadcast(node, in[0]->shape, Shape(target)));
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = std::move(s);
  return one(out);
}

Result<std::vector<ValueInfo>> infer_constant_of_shape(const Node& node,
                                                       const std::vector<const ValueInfo*>& in) {
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, need_known(node, in, 0, "shape", true));
  for (int64_t d : dims)
    if (d < 0 && !Shape::is_batch(d))
      return fail(node, "shape " + values_string(dims) + " has a negative dimension");
  ValueInfo out;
  out.dtype = node.attr<ConstantOfShapeAttrs>().dtype;
  out.shape = Shape(dims);
  return one(out);
}

Result<std::vector<ValueInfo>> infer_range(const Node& node, const std::vector<const ValueInfo*>& in) {
  if (in[0]->dtype != DataType::kInt64)
    return Status::unsupported(node_where(node) + ": a Range of " + std::string(dtype_name(in[0]->dtype)) +
                               " is not supported (int64 only).");
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> start, need_known(node, in, 0, "start"));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> limit, need_known(node, in, 1, "limit"));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> delta, need_known(node, in, 2, "delta"));
  if (start.size() != 1 || limit.size() != 1 || delta.size() != 1 || delta[0] == 0)
    return fail(node, "start, limit and delta must be scalars and delta non-zero");
  // ceil((limit - start) / delta) elements, computed so that values read from the file cannot overflow.
  const std::optional<int64_t> span = checked_sub(limit[0], start[0]);
  std::optional<int64_t> n = 0;
  if (span && delta[0] > 0 && *span > 0) n = checked_add((*span - 1) / delta[0], 1);
  if (span && delta[0] < 0 && *span < 0) n = checked_add((*span + 1) / delta[0], 1);
  if (!span || !n)
    return fail(node, "start " + std::to_string(start[0]) + ", limit " + std::to_string(limit[0]) +
                          " and delta " + std::to_string(delta[0]) +
                          " make more elements than a size can count");
  ValueInfo out;
  out.dtype = DataType::kInt64;
  out.shape = Shape{*n};
  return one(out);
}

Result<std::vector<ValueInfo>> infer_pad(const Node& node, const std::vector<const ValueInfo*>& in) {
  const Shape& x = in[0]->shape;
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> pads, need_known(node, in, 1, "pads"));
  if (pads.size() != 2 * x.rank())
    return fail(node, "pads " + values_string(pads) + " for " + x.to_string() + " (needs 2 per dimension)");
  ValueInfo out = same_as(*in[0]);
  for (size_t i = 0; i < x.rank(); ++i) {
    const int64_t begin = pads[i], end = pads[i + x.rank()];
    if (begin == 0 && end == 0) continue;
    GPULAB_TRY(no_batch_on(node, x, static_cast<int64_t>(i), "pads"));
    const std::optional<int64_t> both = checked_add(begin, end);
    const std::optional<int64_t> padded = both ? checked_add(x[i], *both) : std::nullopt;
    if (!padded)
      return fail(node, "pads " + values_string(pads) + " for " + x.to_string() + " overflow a size");
    out.shape[i] = *padded;
    if (out.shape[i] < 0)
      return fail(node, "pads " + values_string(pads) + " crop " + x.to_string() + " below zero");
  }
  return one(out);
}

Result<std::vector<ValueInfo>> infer_attention(const Node& node, const std::vector<const ValueInfo*>& in) {
  for (size_t i = 0; i < 3; ++i)
    if (!input(in, i) || in[i]->shape.rank() < 2) return fail(node, "needs inputs Q, K, V of rank 2 or more");
  const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
  const size_t r = q.rank();
  if (k.rank() != r || v.rank() != r || q[r - 1] != k[r - 1] || k[r - 2] != v[r - 2])
    return fail(node, "Q " + q.to_string() + ", K " + k.to_string() + " and V " + v.to_string() +
                          " do not fit (Q [..., T, D], K [..., S, D], V [..., S, Dv])");
  const Shape lead_q(std::vector<int64_t>(q.dims.begin(), q.dims.end() - 2));
  GPULAB_ASSIGN_OR_RETURN(
      Shape lead, broadcast(node, lead_q, Shape(std::vector<int64_t>(k.dims.begin(), k.dims.end() - 2))));
  GPULAB_ASSIGN_OR_RETURN(
      lead, broadcast(node, lead, Shape(std::vector<int64_t>(v.dims.begin(), v.dims.end() - 2))));
  Shape scores = lead;
  scores.dims.push_back(q[r - 2]);
  scores.dims.push_back(k[r - 2]);
  if (const ValueInfo* bias = input(in, 3)) {
    GPULAB_ASSIGN_OR_RETURN(Shape b, broadcast(node, scores, bias->shape));
    if (b != scores)
      return fail(node, "bias " + bias->shape.to_string() + " does not broadcast to " + scores.to_string());
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = lead;
  out.shape.dims.push_back(q[r - 2]);
  out.shape.dims.push_back(v[r - 1]);
  return one(out);
}

}  // namespace

std::optional<Result<std::vector<ValueInfo>>> infer_tensor_op(const Node& node,
                                                              const std::vector<const ValueInfo*>& in) {
  const ValueInfo& x = *in[0];
  switch (node.op) {
    case OpType::kTranspose: return infer_transpose(node, x);
    case OpType::kSlice: return infer_slice(node, in);
    case OpType::kSplit: return infer_split(node, x);
    case OpType::kSqueeze: return infer_squeeze(node, x);
    case OpType::kSub:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kEqual:
    case OpType::kMax:
    case OpType::kMin: return infer_elementwise(node, in, 2);
    case OpType::kWhere: return infer_elementwise(node, in, 3);
    case OpType::kNot:
    case OpType::kSqrt:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kExp:
    case OpType::kNeg:
    case OpType::kGelu:
    case OpType::kScatterND: return one(same_as(x));
    case OpType::kReduceMean:
    case OpType::kReduceL2: return infer_reduce(node, x);
    case OpType::kLayerNormalization: return infer_layer_norm(node, in);
    case OpType::kLpNormalization: {
      int64_t axis = node.attr<LpNormAttrs>().axis;
      if (!normalize_axis(axis, static_cast<int64_t>(x.shape.rank())))
        return fail(node, "axis " + std::to_string(node.attr<LpNormAttrs>().axis) + " is out of range for " +
                              x.shape.to_string());
      return one(same_as(x));
    }
    case OpType::kCast: {
      ValueInfo out = same_as(x);
      out.dtype = node.attr<CastAttrs>().to;
      return one(out);
    }
    case OpType::kExpand: return infer_expand(node, in);
    case OpType::kConstantOfShape: return infer_constant_of_shape(node, in);
    case OpType::kRange: return infer_range(node, in);
    case OpType::kPad: return infer_pad(node, in);
    case OpType::kAttention: return infer_attention(node, in);
    default: return std::nullopt;
  }
}

}  // namespace gpulab::infer
