// Reference data-movement ops of the transformer classifiers' exports (Transpose, Slice, Split,
// Squeeze, Expand, Pad, Where, ScatterND, ConstantOfShape, Range), which copy elements of any dtype,
// and the math unary ops (Sqrt, Erf, Tanh, Exp, Neg, Gelu, Not, Cast). Math is done in double and
// rounded to float32 once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/reference/kernels.h"

namespace gpulab::reference {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

std::vector<int64_t> broadcast_strides(const Shape& s, size_t rank) {
  std::vector<int64_t> out(rank, 0);
  const std::vector<int64_t> own = contiguous_strides(s.dims);
  for (size_t i = 0; i < s.rank(); ++i)
    if (s[i] != 1) out[rank - s.rank() + i] = own[i];
  return out;
}

Result<Shape> broadcast_shape(const Node& node, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (size_t i = 0; i < rank; ++i) {
    const size_t pa = rank - a.rank(), pb = rank - b.rank();
    const int64_t da = i < pa ? 1 : a[i - pa];
    const int64_t db = i < pb ? 1 : b[i - pb];
    if (da != db && da != 1 && db != 1) {
      return Status::invalid_argument(where(node) + ": shapes " + a.to_string() + " and " + b.to_string() +
                                      " do not broadcast (dim " + std::to_string(i) + ": " +
                                      std::to_string(da) + " vs " + std::to_string(db) + ").");
    }
    dims[i] = da == 1 ? db : da;
  }
  return Shape(dims);
}

void for_each_index(const std::vector<int64_t>& dims,
                    const std::function<void(int64_t flat, const std::vector<int64_t>& coords)>& fn) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> c(dims.size(), 0);
  for (int64_t e = 0; e < total; ++e) {
    fn(e, c);
    for (size_t i = dims.size(); i-- > 0;) {
      if (++c[i] < dims[i]) break;
      c[i] = 0;
    }
  }
}

namespace {

// The int64 values of a 1-D (or scalar) int64 input.
Result<std::vector<int64_t>> int_values(const Node& node, const Tensor& t, std::string_view role) {
  if (t.dtype() != DataType::kInt64)
    return Status::unsupported(where(node) + ": " + std::string(role) + " is " +
                               std::string(dtype_name(t.dtype())) + ", expected int64.");
  return std::vector<int64_t>(t.i64().begin(), t.i64().end());
}

// y[coords] = x[source(coords)] for every element of y (dims `out`); elements of any dtype.
Tensor gather_copy(const Tensor& x, const std::vector<int64_t>& out,
                   const std::function<int64_t(const std::vector<int64_t>&)>& source) {
  Tensor y(x.dtype(), Shape(out));
  const size_t elem = dtype_size(x.dtype());
  for_each_index(out, [&](int64_t e, const std::vector<int64_t>& c) {
    std::memcpy(y.data() + static_cast<size_t>(e) * elem, x.data() + static_cast<size_t>(source(c)) * elem,
                elem);
  });
  return y;
}

Status run_transpose(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const TransposeAttrs a, attrs_or_default<TransposeAttrs>(node));
  const Tensor& x = *inputs[0];
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  std::vector<int64_t> perm = a.perm;
  if (perm.empty()) {
    perm.resize(static_cast<size_t>(rank));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  if (static_cast<int64_t>(perm.size()) != rank)
    return Status::invalid_argument(where(node) + ": perm has " + std::to_string(perm.size()) +
                                    " entries for rank " + std::to_string(rank) + ".");
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  std::vector<int64_t> out_dims;
  for (int64_t& p : perm) {
    GPULAB_ASSIGN_OR_RETURN(p, normalize_axis(node, p, rank));
    if (seen[static_cast<size_t>(p)])
      return Status::invalid_argument(where(node) + ": perm repeats an axis.");
    seen[static_cast<size_t>(p)] = true;
    out_dims.push_back(x.shape()[static_cast<size_t>(p)]);
  }
  const std::vector<int64_t> st = contiguous_strides(x.shape().dims);
  outputs[0] = gather_copy(x, out_dims, [&](const std::vector<int64_t>& c) {
    int64_t at = 0;
    for (size_t i = 0; i < c.size(); ++i) at += c[i] * st[static_cast<size_t>(perm[i])];
    return at;
  });
  return Status::ok();
}

Status run_slice(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 3, 2));
  const Tensor& x = *inputs[0];
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> starts, int_values(node, *inputs[1], "starts"));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> ends, int_values(node, *inputs[2], "ends"));
  std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
  std::iota(axes.begin(), axes.end(), 0);
  if (inputs.size() > 3 && inputs[3]) {
    GPULAB_ASSIGN_OR_RETURN(axes, int_values(node, *inputs[3], "axes"));
  }
  if (inputs.size() > 4 && inputs[4]) {
    GPULAB_ASSIGN_OR_RETURN(steps, int_values(node, *inputs[4], "steps"));
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return Status::invalid_argument(where(node) + ": starts, ends, axes and steps differ in length.");
  std::vector<int64_t> first(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
  std::vector<int64_t> out = x.shape().dims;
  for (size_t i = 0; i < starts.size(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, axes[i], rank));
    auto r = resolve_slice(x.shape()[static_cast<size_t>(axis)], starts[i], ends[i], steps[i]);
    if (!r.is_ok()) return Status::invalid_argument(where(node) + ": " + r.status().message());
    first[static_cast<size_t>(axis)] = r->first;
    step[static_cast<size_t>(axis)] = r->step;
    out[static_cast<size_t>(axis)] = r->count;
  }
  const std::vector<int64_t> st = contiguous_strides(x.shape().dims);
  outputs[0] = gather_copy(x, out, [&](const std::vector<int64_t>& c) {
    int64_t at = 0;
    for (size_t i = 0; i < c.size(); ++i) at += (first[i] + c[i] * step[i]) * st[i];
    return at;
  });
  return Status::ok();
}

Status run_split(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const SplitAttrs a, attrs_or_default<SplitAttrs>(node));
  const Tensor& x = *inputs[0];
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, a.axis, rank));
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  const int64_t parts = static_cast<int64_t>(node.outputs.size());
  std::vector<int64_t> sizes = a.sizes;
  if (sizes.empty()) {
    const int64_t each = (dim + parts - 1) / parts;
    for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - p * each)));
  }
  if (static_cast<int64_t>(sizes.size()) != parts ||
      std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != dim)
    return Status::invalid_argument(where(node) + ": split sizes do not add up to dimension " +
                                    std::to_string(axis) + " of " + x.shape().to_string() + ".");
  const std::vector<int64_t> st = contiguous_strides(x.shape().dims);
  int64_t offset = 0;
  for (int64_t p = 0; p < parts; ++p) {
    std::vector<int64_t> out = x.shape().dims;
    out[static_cast<size_t>(axis)] = sizes[static_cast<size_t>(p)];
    outputs[static_cast<size_t>(p)] = gather_copy(x, out, [&](const std::vector<int64_t>& c) {
      int64_t at = 0;
      for (size_t i = 0; i < c.size(); ++i)
        at += (c[i] + (static_cast<int64_t>(i) == axis ? offset : 0)) * st[i];
      return at;
    });
    offset += sizes[static_cast<size_t>(p)];
  }
  return Status::ok();
}

Status run_squeeze(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const UnsqueezeAttrs a, attrs_or_default<UnsqueezeAttrs>(node));
  const Tensor& x = *inputs[0];
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  for (int64_t i = 0; i < rank && a.axes.empty(); ++i)
    drop[static_cast<size_t>(i)] = x.shape()[static_cast<size_t>(i)] == 1;
  for (int64_t axis : a.axes) {
    GPULAB_ASSIGN_OR_RETURN(const int64_t ax, normalize_axis(node, axis, rank));
    if (x.shape()[static_cast<size_t>(ax)] != 1)
      return Status::invalid_argument(where(node) + ": dimension " + std::to_string(ax) + " of " +
                                      x.shape().to_string() + " is not 1.");
    drop[static_cast<size_t>(ax)] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[static_cast<size_t>(i)]) dims.push_back(x.shape()[static_cast<size_t>(i)]);
  GPULAB_ASSIGN_OR_RETURN(outputs[0], x.reshaped(Shape(dims)));
  return Status::ok();
}

// Expand and Where: numpy broadcasting of every input to the output.
Status run_broadcast(const Node& node, Inputs inputs, Outputs& outputs) {
  const bool where_op = node.op == OpType::kWhere;
  GPULAB_TRY(check_input_count(node, inputs, where_op ? 3 : 2));
  Shape out;
  std::vector<const Tensor*> sources;
  if (where_op) {
    if (inputs[0]->dtype() != DataType::kBool || inputs[1]->dtype() != inputs[2]->dtype())
      return Status::unsupported(where(node) + ": needs a bool condition and two inputs of one type.");
    GPULAB_ASSIGN_OR_RETURN(out, broadcast_shape(node, inputs[0]->shape(), inputs[1]->shape()));
    GPULAB_ASSIGN_OR_RETURN(out, broadcast_shape(node, out, inputs[2]->shape()));
    sources = {inputs[0], inputs[1], inputs[2]};
  } else {
    GPULAB_ASSIGN_OR_RETURN(std::vector<int64_t> target, int_values(node, *inputs[1], "shape"));
    for (int64_t& d : target)
      if (d < 0) return Status::invalid_argument(where(node) + ": shape has a negative dimension.");
    GPULAB_ASSIGN_OR_RETURN(out, broadcast_shape(node, inputs[0]->shape(), Shape(target)));
    sources = {inputs[0]};
  }
  std::vector<std::vector<int64_t>> strides;
  for (const Tensor* t : sources) strides.push_back(broadcast_strides(t->shape(), out.rank()));
  const Tensor& data = *sources[where_op ? 1 : 0];
  const size_t elem = dtype_size(data.dtype());
  Tensor y(data.dtype(), out);
  for_each_index(out.dims, [&](int64_t e, const std::vector<int64_t>& c) {
    auto offset = [&](size_t s) {
      int64_t at = 0;
      for (size_t i = 0; i < c.size(); ++i) at += c[i] * strides[s][i];
      return static_cast<size_t>(at);
    };
    const std::byte* src =
        where_op ? (sources[0]->data()[offset(0)] != std::byte{0} ? sources[1]->data() + offset(1) * elem
                                                                  : sources[2]->data() + offset(2) * elem)
                 : data.data() + offset(0) * elem;
    std::memcpy(y.data() + static_cast<size_t>(e) * elem, src, elem);
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_pad(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 2, 1));
  const Tensor& x = *inputs[0];
  const size_t rank = x.shape().rank();
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> pads, int_values(node, *inputs[1], "pads"));
  if (pads.size() != 2 * rank)
    return Status::invalid_argument(where(node) + ": " + std::to_string(pads.size()) + " pads for rank " +
                                    std::to_string(rank) + ".");
  Tensor fill(x.dtype(), Shape{});
  if (inputs.size() > 2 && inputs[2]) {
    if (inputs[2]->dtype() != x.dtype() || inputs[2]->numel() != 1)
      return Status::invalid_argument(where(node) + ": constant_value is not one value of the data's type.");
    std::memcpy(fill.data(), inputs[2]->data(), fill.size_bytes());
  }
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    out[i] = x.shape()[i] + pads[i] + pads[i + rank];
    if (out[i] < 0) return Status::invalid_argument(where(node) + ": pads crop below zero.");
  }
  const std::vector<int64_t> st = contiguous_strides(x.shape().dims);
  const size_t elem = dtype_size(x.dtype());
  Tensor y(x.dtype(), Shape(out));
  for_each_index(out, [&](int64_t e, const std::vector<int64_t>& c) {
    int64_t at = 0;
    bool inside = true;
    for (size_t i = 0; i < rank && inside; ++i) {
      const int64_t xi = c[i] - pads[i];
      inside = xi >= 0 && xi < x.shape()[i];
      at += xi * st[i];
    }
    std::memcpy(y.data() + static_cast<size_t>(e) * elem,
                inside ? x.data() + static_cast<size_t>(at) * elem : fill.data(), elem);
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_scatter_nd(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 3));
  const Tensor& data = *inputs[0];
  const Tensor& indices = *inputs[1];
  const Tensor& updates = *inputs[2];
  GPULAB_TRY(check_dtype(node, indices, DataType::kInt64, "indices"));
  if (updates.dtype() != data.dtype())
    return Status::invalid_argument(where(node) + ": updates and data differ in type.");
  const auto& id = indices.shape().dims;
  if (id.empty() || id.back() < 1 || id.back() > static_cast<int64_t>(data.shape().rank()))
    return Status::invalid_argument(where(node) + ": indices " + indices.shape().to_string() + " for data " +
                                    data.shape().to_string() + ".");
  const size_t depth = static_cast<size_t>(id.back());
  const std::vector<int64_t> st = contiguous_strides(data.shape().dims);
  int64_t slice = 1;
  for (size_t d = depth; d < data.shape().rank(); ++d) slice *= data.shape()[d];
  const int64_t count = indices.numel() / static_cast<int64_t>(depth);
  if (updates.numel() != count * slice)
    return Status::invalid_argument(where(node) + ": updates " + updates.shape().to_string() +
                                    " do not fit the indices.");
  Tensor y = data;
  const size_t elem = dtype_size(data.dtype());
  for (int64_t u = 0; u < count; ++u) {
    int64_t at = 0;
    for (size_t d = 0; d < depth; ++d) {
      int64_t i = indices.i64()[static_cast<size_t>(u) * depth + d];
      if (i < 0) i += data.shape()[d];
      if (i < 0 || i >= data.shape()[d])
        return Status::invalid_argument(where(node) + ": index " + std::to_string(i) + " is out of range.");
      at += i * st[d];
    }
    std::memcpy(y.data() + static_cast<size_t>(at) * elem,
                updates.data() + static_cast<size_t>(u * slice) * elem, static_cast<size_t>(slice) * elem);
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_constant_of_shape(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  GPULAB_ASSIGN_OR_RETURN(const ConstantOfShapeAttrs a, attrs_or_default<ConstantOfShapeAttrs>(node));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> dims, int_values(node, *inputs[0], "shape"));
  for (int64_t d : dims)
    if (d < 0) return Status::invalid_argument(where(node) + ": shape has a negative dimension.");
  Tensor y(a.dtype, Shape(dims));
  if (a.dtype == DataType::kFloat32) std::fill(y.f32().begin(), y.f32().end(), static_cast<float>(a.value));
  if (a.dtype == DataType::kInt64) std::fill(y.i64().begin(), y.i64().end(), static_cast<int64_t>(a.value));
  if (a.dtype == DataType::kBool) std::memset(y.data(), a.value != 0 ? 1 : 0, y.size_bytes());
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_range(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_TRY(check_input_count(node, inputs, 3));
  for (size_t i = 0; i < 3; ++i)
    if (inputs[i]->numel() != 1 || inputs[i]->dtype() != inputs[0]->dtype())
      return Status::invalid_argument(where(node) + ": start, limit and delta must be scalars of one type.");
  if (inputs[0]->dtype() == DataType::kInt64) {
    const int64_t start = inputs[0]->i64()[0], limit = inputs[1]->i64()[0], delta = inputs[2]->i64()[0];
    if (delta == 0) return Status::invalid_argument(where(node) + ": delta is 0.");
    const int64_t n = std::max<int64_t>(0, (limit - start + delta + (delta > 0 ? -1 : 1)) / delta);
    Tensor y(DataType::kInt64, Shape{n});
    for (int64_t i = 0; i < n; ++i) y.i64()[static_cast<size_t>(i)] = start + i * delta;
    outputs[0] = std::move(y);
    return Status::ok();
  }
  GPULAB_TRY(check_dtype(node, *inputs[0], DataType::kFloat32, "start"));
  const double start = inputs[0]->f32()[0], limit = inputs[1]->f32()[0], delta = inputs[2]->f32()[0];
  if (delta == 0) return Status::invalid_argument(where(node) + ": delta is 0.");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  Tensor y(DataType::kFloat32, Shape{n});
  for (int64_t i = 0; i < n; ++i)
    y.f32()[static_cast<size_t>(i)] = static_cast<float>(start + static_cast<double>(i) * delta);
  outputs[0] = std::move(y);
  return Status::ok();
}

double gelu(double x, bool tanh_approximation) {
  if (tanh_approximation) return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
}

Status run_cast(const Node& node, const Tensor& x, Outputs& outputs) {
  GPULAB_ASSIGN_OR_RETURN(const CastAttrs a, attrs_or_default<CastAttrs>(node));
  Tensor y(a.to, x.shape());
  const size_t n = static_cast<size_t>(x.numel());
  auto read = [&](size_t i) -> double {
    switch (x.dtype()) {
      case DataType::kFloat32: return x.f32()[i];
      case DataType::kInt64: return static_cast<double>(x.i64()[i]);
      default: return x.data()[i] != std::byte{0} ? 1.0 : 0.0;
    }
  };
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kInt64 && x.dtype() != DataType::kBool)
    return Status::unsupported(where(node) + ": a Cast from " + std::string(dtype_name(x.dtype())) + ".");
  for (size_t i = 0; i < n; ++i) {
    switch (a.to) {
      case DataType::kFloat32: y.f32()[i] = static_cast<float>(read(i)); break;
      // float -> int truncates toward zero (ONNX); int64 -> int64 is exact.
      case DataType::kInt64:
        y.i64()[i] = x.dtype() == DataType::kInt64 ? x.i64()[i] : static_cast<int64_t>(read(i));
        break;
      case DataType::kBool:
        y.data()[i] =
            static_cast<std::byte>(x.dtype() == DataType::kInt64 ? x.i64()[i] != 0 : read(i) != 0.0);
        break;
      default: return Status::unsupported(where(node) + ": a Cast to " + std::string(dtype_name(a.to)) + ".");
    }
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace

Status run_math_unary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  const Tensor& x = *inputs[0];
  if (node.op == OpType::kCast) return run_cast(node, x, outputs);
  if (node.op == OpType::kNot) {
    GPULAB_TRY(check_dtype(node, x, DataType::kBool, "X"));
    Tensor y(DataType::kBool, x.shape());
    for (size_t i = 0; i < y.size_bytes(); ++i)
      y.data()[i] = static_cast<std::byte>(x.data()[i] == std::byte{0});
    outputs[0] = std::move(y);
    return Status::ok();
  }
  if (node.op == OpType::kNeg && x.dtype() == DataType::kInt64) {
    Tensor y(DataType::kInt64, x.shape());
    for (size_t i = 0; i < y.i64().size(); ++i) y.i64()[i] = -x.i64()[i];
    outputs[0] = std::move(y);
    return Status::ok();
  }
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  bool tanh_approximation = false;
  if (node.op == OpType::kGelu) {
    GPULAB_ASSIGN_OR_RETURN(const GeluAttrs a, attrs_or_default<GeluAttrs>(node));
    tanh_approximation = a.tanh_approximation;
  }
  Tensor y(DataType::kFloat32, x.shape());
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  const OpType op = node.op;
  Status status;
  if (op != OpType::kSqrt && op != OpType::kErf && op != OpType::kTanh && op != OpType::kExp &&
      op != OpType::kNeg && op != OpType::kGelu)
    return Status::internal(where(node) + ": not a math unary op.");
  parallel_for(x.numel(), 8, options, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double v = xp[i];
      double r = 0;
      switch (op) {
        case OpType::kSqrt: r = std::sqrt(v); break;
        case OpType::kErf: r = std::erf(v); break;
        case OpType::kTanh: r = std::tanh(v); break;
        case OpType::kExp: r = std::exp(v); break;
        case OpType::kNeg: r = -v; break;
        default: r = gelu(v, tanh_approximation); break;
      }
      yp[i] = static_cast<float>(r);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_tensor_op(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions&) {
  switch (node.op) {
    case OpType::kTranspose: return run_transpose(node, inputs, outputs);
    case OpType::kSlice: return run_slice(node, inputs, outputs);
    case OpType::kSplit: return run_split(node, inputs, outputs);
    case OpType::kSqueeze: return run_squeeze(node, inputs, outputs);
    case OpType::kExpand:
    case OpType::kWhere: return run_broadcast(node, inputs, outputs);
    case OpType::kPad: return run_pad(node, inputs, outputs);
    case OpType::kScatterND: return run_scatter_nd(node, inputs, outputs);
    case OpType::kConstantOfShape: return run_constant_of_shape(node, inputs, outputs);
    case OpType::kRange: return run_range(node, inputs, outputs);
    default: return Status::internal(where(node) + ": not a tensor op.");
  }
}

}  // namespace gpulab::reference
