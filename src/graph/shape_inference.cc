// Shape inference for every OpType, with the symbolic batch dimension (N, or N * k where a model
// folds the batch into another dimension) flowing through, and propagation of small int64 values
// (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, and the arithmetic of an export's shape code,
// known_values.cc) so that a Reshape whose target shape is computed in the graph still gets a
// static output shape. The ops added for the transformer classifiers are in infer_tensor_ops.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/checked.h"
#include "graph/graph.h"
#include "graph/infer_util.h"

namespace gpulab {
namespace infer {

std::string node_where(const Node& node) {
  return "node '" + node.name + "' (" + std::string(op_name(node.op)) + ")";
}

Status fail(const Node& node, const std::string& what) {
  return Status::invalid_model(node_where(node) + ": " + what);
}

std::string dim_string(int64_t d) {
  return Shape::dim_string(d);
}

std::string values_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + dim_string(v[i]);
  return s + "]";
}

// Normalizes a possibly negative axis for a tensor of `rank` dims; false when out of range.
bool normalize_axis(int64_t& axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return axis >= 0 && axis < rank;
}

ValueInfo same_as(const ValueInfo& in) {
  ValueInfo out;
  out.dtype = in.dtype;
  out.shape = in.shape;
  return out;
}

Result<Shape> broadcast(const Node& node, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.rank(), b.rank());
  Shape out(std::vector<int64_t>(rank, 1));
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.rank() ? 1 : a[i - (rank - a.rank())];
    const int64_t db = i < rank - b.rank() ? 1 : b[i - (rank - b.rank())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return fail(node, "inputs of shapes " + a.to_string() + " and " + b.to_string() +
                            " do not broadcast (dimension " + std::to_string(i) + ": " + dim_string(da) +
                            " vs " + dim_string(db) + "). Check the model's shapes.");
    }
  }
  return out;
}

}  // namespace infer

namespace {

using namespace infer;

Status need_rank(const Node& node, const ValueInfo& in, size_t rank, const char* what) {
  if (in.shape.rank() != rank) {
    return fail(node, std::string("input ") + what + " has shape " + in.shape.to_string() + ", but " +
                          std::string(op_name(node.op)) + " needs rank " + std::to_string(rank) +
                          ". Only 2-D (NCHW) convolutions and pools are supported.");
  }
  return Status::ok();
}

Status need_static_spatial(const Node& node, const Shape& s) {
  for (size_t i = 1; i < s.rank(); ++i) {
    if (Shape::is_batch(s[i])) {
      return fail(node, "input shape " + s.to_string() +
                            " has a symbolic dimension other than the batch (dimension 0). "
                            "Export the model with fixed channel and spatial sizes.");
    }
  }
  return Status::ok();
}

// Output size of a sliding window (conv or pool) along one axis. Attributes come from the file:
// every step is checked, and a pooling window must reach the input from any position (with only
// padding under it, MaxPool has no value to take and AveragePool nothing to divide by).
Result<int64_t> window_out(const Node& node, int64_t in, int64_t kernel, int64_t stride, int64_t pad_begin,
                           int64_t pad_end, int64_t dilation, bool ceil_mode, const char* axis) {
  const std::string window = std::string(" along ") + axis + " (kernel " + std::to_string(kernel) +
                             ", stride " + std::to_string(stride) + ", dilation " + std::to_string(dilation) +
                             ", pads " + std::to_string(pad_begin) + "/" + std::to_string(pad_end) +
                             ", input " + std::to_string(in) + ")";
  if (kernel <= 0 || stride <= 0 || dilation <= 0 || pad_begin < 0 || pad_end < 0) {
    return fail(node, "invalid window" + window +
                          ". Kernel, stride and dilation must be positive, pads non-negative.");
  }
  const std::optional<int64_t> extent = checked_mul(dilation, kernel - 1);
  const std::optional<int64_t> pads = checked_add(pad_begin, pad_end);
  const std::optional<int64_t> padded = pads ? checked_add(in, *pads) : std::nullopt;
  if (!extent || *extent == std::numeric_limits<int64_t>::max() || !padded) {
    return fail(node, "window" + window + " is too large to compute with. The model file is corrupt.");
  }
  const int64_t span = *extent + 1;
  if (*padded < span) {
    return fail(node, "the window (" + std::to_string(span) + ") is larger than the padded input (" +
                          std::to_string(*padded) + ")" + window + ". Check the input size.");
  }
  const bool pool = node.op == OpType::kMaxPool || node.op == OpType::kAveragePool;
  if (pool && (pad_begin >= span || pad_end >= span)) {
    return fail(node, "padding" + window + " is as large as the window, which then covers no input pixel. " +
                          "Pads must be smaller than the kernel.");
  }
  // padded - span >= 0 and stride >= 1: no step below overflows.
  int64_t out = (*padded - span) / stride + 1;
  if (ceil_mode && (*padded - span) % stride != 0) ++out;
  // With ceil_mode the last window must start inside the input or its begin padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

Result<std::vector<ValueInfo>> infer_conv(const Node& node, const std::vector<const ValueInfo*>& in) {
  const ConvAttrs& a = node.attr<ConvAttrs>();
  if (!in[0] || !in[1]) return fail(node, "needs inputs X and W");
  const Shape& x = in[0]->shape;
  const Shape& w = in[1]->shape;
  GPULAB_TRY(need_rank(node, *in[0], 4, "X"));
  GPULAB_TRY(need_rank(node, *in[1], 4, "W"));
  GPULAB_TRY(need_static_spatial(node, x));
  if (w.has_batch()) return fail(node, "weight shape " + w.to_string() + " is symbolic");
  if (a.groups <= 0 || w[0] % a.groups != 0 || x[1] != w[1] * a.groups) {
    return fail(node, "input " + x.to_string() + " and weight " + w.to_string() +
                          " do not match with group=" + std::to_string(a.groups) +
                          " (needs C = W[1]*group and W[0] divisible by group).");
  }
  if (w[2] != a.kernel.h || w[3] != a.kernel.w) {
    return fail(node, "kernel_shape " + std::to_string(a.kernel.h) + "x" + std::to_string(a.kernel.w) +
                          " disagrees with weight shape " + w.to_string() + ".");
  }
  GPULAB_ASSIGN_OR_RETURN(int64_t oh, window_out(node, x[2], a.kernel.h, a.stride.h, a.pads.top,
                                                 a.pads.bottom, a.dilation.h, false, "H"));
  GPULAB_ASSIGN_OR_RETURN(int64_t ow, window_out(node, x[3], a.kernel.w, a.stride.w, a.pads.left,
                                                 a.pads.right, a.dilation.w, false, "W"));
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = Shape{x[0], w[0], oh, ow};
  if (in.size() > 2 && in[2]) {
    if (in[2]->shape != Shape{w[0]}) {
      return fail(node,
                  "bias shape " + in[2]->shape.to_string() + " should be [" + std::to_string(w[0]) + "].");
    }
  }
  if (a.has_residual) {
    if (in.size() < 4 || !in[3]) return fail(node, "has_residual is set but input 3 (residual) is absent.");
    if (in[3]->shape != out.shape) {
      return fail(node, "residual shape " + in[3]->shape.to_string() + " differs from the output shape " +
                            out.shape.to_string() + ".");
    }
  }
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_pool(const Node& node, const std::vector<const ValueInfo*>& in) {
  const PoolAttrs& a = node.attr<PoolAttrs>();
  GPULAB_TRY(need_rank(node, *in[0], 4, "X"));
  const Shape& x = in[0]->shape;
  GPULAB_TRY(need_static_spatial(node, x));
  GPULAB_ASSIGN_OR_RETURN(int64_t oh, window_out(node, x[2], a.kernel.h, a.stride.h, a.pads.top,
                                                 a.pads.bottom, a.dilation.h, a.ceil_mode, "H"));
  GPULAB_ASSIGN_OR_RETURN(int64_t ow, window_out(node, x[3], a.kernel.w, a.stride.w, a.pads.left,
                                                 a.pads.right, a.dilation.w, a.ceil_mode, "W"));
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = Shape{x[0], x[1], oh, ow};
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_flatten(const Node& node, const std::vector<const ValueInfo*>& in) {
  const Shape& x = in[0]->shape;
  int64_t axis = node.attr<FlattenAttrs>().axis;
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) {
    return fail(node, "axis " + std::to_string(node.attr<FlattenAttrs>().axis) +
                          " is out of range for input " + x.to_string() + ".");
  }
  // The product of dimensions [begin, end): N * p when one of them is the batch.
  auto product = [&](int64_t begin, int64_t end) -> Result<int64_t> {
    int64_t p = 1, batches = 0;
    for (int64_t i = begin; i < end; ++i) {
      if (Shape::is_batch(x[i])) {
        ++batches;
        p *= Shape::batch_factor(x[i]);
      } else {
        p *= x[i];
      }
    }
    if (batches == 0) return p;
    if (batches == 1 && p >= 1 && p < Shape::kMaxBatchFactor) return Shape::batch_times(p);
    return fail(node, "flattening " + x.to_string() + " at axis " + std::to_string(axis) +
                          " multiplies the symbolic batch with itself or with zero. Check the model.");
  };
  GPULAB_ASSIGN_OR_RETURN(int64_t outer, product(0, axis));
  GPULAB_ASSIGN_OR_RETURN(int64_t inner, product(axis, rank));
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = Shape{outer, inner};
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_reshape(const Node& node, const std::vector<const ValueInfo*>& in) {
  if (in.size() < 2 || !in[1]) return fail(node, "needs inputs data and shape");
  const std::vector<int64_t>* target = known(in[1]);
  if (!target) {
    return Status::unsupported(node_where(node) + ": the target shape '" + node.input(1) +
                               "' is computed at run time from values gpulab cannot determine ahead. "
                               "Export the model with a constant shape (or a Shape/Gather/Concat chain).");
  }
  const Shape& x = in[0]->shape;
  const bool allowzero = node.attr<ReshapeAttrs>().allowzero;
  // Element counts as (concrete product) * N^(batch power); N * k counts k into the product.
  int64_t in_concrete = 1, in_batch = 0;
  for (int64_t d : x.dims) {
    if (Shape::is_batch(d)) {
      ++in_batch;
      in_concrete *= Shape::batch_factor(d);
    } else {
      in_concrete *= d;
    }
  }
  std::vector<int64_t> dims = *target;
  int64_t infer_at = -1, out_concrete = 1, out_batch = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t& d = dims[i];
    if (d == 0 && !allowzero) {
      if (i >= x.rank()) {
        return fail(node, "shape " + values_string(*target) + " copies dimension " + std::to_string(i) +
                              " (0), which input " + x.to_string() + " does not have.");
      }
      d = x[i];
    }
    if (d == -1) {
      if (infer_at >= 0) return fail(node, "shape " + values_string(*target) + " has more than one -1.");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (Shape::is_batch(d)) {
      ++out_batch;
      out_concrete *= Shape::batch_factor(d);
    } else if (d < 0) {
      return fail(node,
                  "shape " + values_string(*target) + " has an invalid dimension " + std::to_string(d) + ".");
    } else if (const std::optional<int64_t> product = checked_mul(out_concrete, d)) {
      out_concrete = *product;
    } else {
      return fail(node, "shape " + values_string(*target) + " has more elements than int64 can count.");
    }
  }
  auto mismatch = [&] {
    return fail(node, "cannot reshape " + x.to_string() + " to " + values_string(*target) +
                          ": the element counts differ. Check the model's Reshape target.");
  };
  if (in_batch > 1 || out_batch > 1)
    return Status::unsupported(node_where(node) + ": reshaping " + x.to_string() + " to " +
                               values_string(*target) +
                               " involves the batch more than once. Keep one dimension with the batch.");
  if (infer_at >= 0) {
    if (out_concrete == 0 || in_concrete % out_concrete != 0) return mismatch();
    const int64_t ratio = in_concrete / out_concrete;
    if (in_batch == out_batch) {
      dims[infer_at] = ratio;
    } else if (in_batch == out_batch + 1 && ratio < Shape::kMaxBatchFactor) {
      dims[infer_at] = Shape::batch_times(ratio);  // the -1 takes the batch (N * ratio)
    } else {
      return mismatch();
    }
  } else if (in_concrete != out_concrete || in_batch != out_batch) {
    return mismatch();
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = Shape(std::move(dims));
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_gemm(const Node& node, const std::vector<const ValueInfo*>& in) {
  const GemmAttrs& a = node.attr<GemmAttrs>();
  if (!in[0] || in.size() < 2 || !in[1]) return fail(node, "needs inputs A and B");
  const Shape& sa = in[0]->shape;
  const Shape& sb = in[1]->shape;
  if (sa.rank() != 2 || sb.rank() != 2) {
    return fail(node, "A " + sa.to_string() + " and B " + sb.to_string() +
                          " must both be rank 2. Flatten the input before the Gemm.");
  }
  const int64_t m = a.trans_a ? sa[1] : sa[0];
  const int64_t ka = a.trans_a ? sa[0] : sa[1];
  const int64_t kb = a.trans_b ? sb[1] : sb[0];
  const int64_t n = a.trans_b ? sb[0] : sb[1];
  if (ka != kb || Shape::is_batch(ka)) {
    return fail(node, "inner dimensions differ: A " + sa.to_string() + (a.trans_a ? " (transposed)" : "") +
                          ", B " + sb.to_string() + (a.trans_b ? " (transposed)" : "") + ".");
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = Shape{m, n};
  if (in.size() > 2 && in[2]) {
    GPULAB_ASSIGN_OR_RETURN(Shape bc, broadcast(node, out.shape, in[2]->shape));
    if (bc != out.shape) {
      return fail(node,
                  "C " + in[2]->shape.to_string() + " does not broadcast to " + out.shape.to_string() + ".");
    }
  }
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_matmul(const Node& node, const std::vector<const ValueInfo*>& in) {
  if (!in[0] || in.size() < 2 || !in[1]) return fail(node, "needs inputs A and B");
  const Shape& sa = in[0]->shape;
  const Shape& sb = in[1]->shape;
  if (sa.rank() < 2 || sb.rank() < 2) {
    return Status::unsupported(node_where(node) + ": A " + sa.to_string() + " and B " + sb.to_string() +
                               " must be at least rank 2 (1-D MatMul is not supported).");
  }
  if (sa[sa.rank() - 1] != sb[sb.rank() - 2] || Shape::is_batch(sa[sa.rank() - 1])) {
    return fail(node, "inner dimensions differ: A " + sa.to_string() + ", B " + sb.to_string() + ".");
  }
  Shape batch_a(std::vector<int64_t>(sa.dims.begin(), sa.dims.end() - 2));
  Shape batch_b(std::vector<int64_t>(sb.dims.begin(), sb.dims.end() - 2));
  GPULAB_ASSIGN_OR_RETURN(Shape batch, broadcast(node, batch_a, batch_b));
  batch.dims.push_back(sa[sa.rank() - 2]);
  batch.dims.push_back(sb[sb.rank() - 1]);
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = std::move(batch);
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_gather(const Node& node, const std::vector<const ValueInfo*>& in) {
  if (!in[0] || in.size() < 2 || !in[1]) return fail(node, "needs inputs data and indices");
  const Shape& data = in[0]->shape;
  int64_t axis = node.attr<AxisAttrs>().axis;
  if (!normalize_axis(axis, static_cast<int64_t>(data.rank()))) {
    return fail(node, "axis " + std::to_string(node.attr<AxisAttrs>().axis) + " is out of range for data " +
                          data.to_string() + ".");
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  for (int64_t i = 0; i < axis; ++i) out.shape.dims.push_back(data[i]);
  for (int64_t d : in[1]->shape.dims) out.shape.dims.push_back(d);
  for (size_t i = axis + 1; i < data.rank(); ++i) out.shape.dims.push_back(data[i]);
  const std::vector<int64_t>* values = known(in[0]);
  const std::vector<int64_t>* indices = known(in[1]);
  if (values && indices && data.rank() == 1) {
    const int64_t n = static_cast<int64_t>(values->size());
    std::vector<int64_t> gathered;
    for (int64_t idx : *indices) {
      const int64_t i = idx < 0 ? idx + n : idx;
      if (i < 0 || i >= n) {
        return fail(node, "index " + std::to_string(idx) + " is out of range for " + std::to_string(n) +
                              " elements.");
      }
      gathered.push_back((*values)[i]);
    }
    out.known_values = std::move(gathered);
  }
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_unsqueeze(const Node& node, const std::vector<const ValueInfo*>& in) {
  const Shape& x = in[0]->shape;
  const std::vector<int64_t>& axes_in = node.attr<UnsqueezeAttrs>().axes;
  const int64_t out_rank = static_cast<int64_t>(x.rank() + axes_in.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t axis : axes_in) {
    int64_t a = axis;
    if (!normalize_axis(a, out_rank) || inserted[a]) {
      return fail(node, "axis " + std::to_string(axis) + " is out of range or repeated for output rank " +
                            std::to_string(out_rank) + ".");
    }
    inserted[a] = true;
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.shape.dims.push_back(inserted[i] ? 1 : x[next++]);
  out.known_values = in[0]->known_values;
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_concat(const Node& node, const std::vector<const ValueInfo*>& in) {
  if (in.empty() || !in[0]) return fail(node, "needs at least one input");
  const Shape& first = in[0]->shape;
  int64_t axis = node.attr<AxisAttrs>().axis;
  if (!normalize_axis(axis, static_cast<int64_t>(first.rank()))) {
    return fail(node, "axis " + std::to_string(node.attr<AxisAttrs>().axis) + " is out of range for " +
                          first.to_string() + ".");
  }
  ValueInfo out;
  out.dtype = in[0]->dtype;
  out.shape = first;
  std::vector<int64_t> values;
  bool all_known = first.rank() == 1;
  for (size_t k = 0; k < in.size(); ++k) {
    if (!in[k]) return fail(node, "input " + std::to_string(k) + " is absent");
    const Shape& s = in[k]->shape;
    if (s.rank() != first.rank()) {
      return fail(node, "inputs " + first.to_string() + " and " + s.to_string() + " differ in rank.");
    }
    for (size_t i = 0; i < s.rank(); ++i) {
      if (static_cast<int64_t>(i) != axis && s[i] != first[i]) {
        return fail(node, "inputs " + first.to_string() + " and " + s.to_string() + " differ outside axis " +
                              std::to_string(axis) + ".");
      }
    }
    if (k > 0) {
      if (Shape::is_batch(s[axis]) || Shape::is_batch(out.shape[axis])) {
        return fail(node, "concatenating along the symbolic batch dimension is not supported.");
      }
      out.shape[axis] += s[axis];
    }
    if (const std::vector<int64_t>* v = known(in[k])) {
      values.insert(values.end(), v->begin(), v->end());
    } else {
      all_known = false;
    }
  }
  if (all_known) out.known_values = std::move(values);
  return std::vector<ValueInfo>{out};
}

Result<std::vector<ValueInfo>> infer_dispatch(const Node& node, const std::vector<const ValueInfo*>& in) {
  switch (node.op) {
    case OpType::kConv: return infer_conv(node, in);
    case OpType::kMaxPool:
    case OpType::kAveragePool: return infer_pool(node, in);
    case OpType::kBatchNormalization: {
      GPULAB_TRY(need_rank(node, *in[0], 4, "X"));
      const int64_t c = in[0]->shape[1];
      for (size_t i = 1; i < 5; ++i) {
        if (i >= in.size() || !in[i]) return fail(node, "needs inputs X, scale, B, mean, var");
        if (in[i]->shape != Shape{c}) {
          return fail(node, "parameter '" + node.input(i) + "' has shape " + in[i]->shape.to_string() +
                                ", expected [" + dim_string(c) + "] for input " + in[0]->shape.to_string() +
                                ".");
        }
      }
      return std::vector<ValueInfo>{same_as(*in[0])};
    }
    case OpType::kRelu:
    case OpType::kClip:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
    case OpType::kQuantizeDequantize:
    case OpType::kIdentity:
    case OpType::kDropout: {
      ValueInfo out = same_as(*in[0]);
      if (node.op == OpType::kIdentity) out.known_values = in[0]->known_values;
      return std::vector<ValueInfo>{out};
    }
    case OpType::kSoftmax: {
      int64_t axis = node.attr<AxisAttrs>().axis;
      if (!normalize_axis(axis, static_cast<int64_t>(in[0]->shape.rank()))) {
        return fail(node, "axis " + std::to_string(node.attr<AxisAttrs>().axis) + " is out of range for " +
                              in[0]->shape.to_string() + ".");
      }
      return std::vector<ValueInfo>{same_as(*in[0])};
    }
    case OpType::kAdd:
    case OpType::kMul: {
      if (in.size() < 2 || !in[1]) return fail(node, "needs two inputs");
      GPULAB_ASSIGN_OR_RETURN(Shape s, broadcast(node, in[0]->shape, in[1]->shape));
      ValueInfo out;
      out.dtype = in[0]->dtype;
      out.shape = std::move(s);
      return std::vector<ValueInfo>{out};
    }
    case OpType::kGlobalAveragePool: {
      GPULAB_TRY(need_rank(node, *in[0], 4, "X"));
      ValueInfo out;
      out.dtype = in[0]->dtype;
      out.shape = Shape{in[0]->shape[0], in[0]->shape[1], 1, 1};
      return std::vector<ValueInfo>{out};
    }
    case OpType::kFlatten: return infer_flatten(node, in);
    case OpType::kReshape: return infer_reshape(node, in);
    case OpType::kGemm: return infer_gemm(node, in);
    case OpType::kMatMul: return infer_matmul(node, in);
    case OpType::kShape: {
      ValueInfo out;
      out.dtype = DataType::kInt64;
      out.shape = Shape{static_cast<int64_t>(in[0]->shape.rank())};
      out.known_values = in[0]->shape.dims;
      return std::vector<ValueInfo>{out};
    }
    case OpType::kGather: return infer_gather(node, in);
    case OpType::kUnsqueeze: return infer_unsqueeze(node, in);
    case OpType::kConcat: return infer_concat(node, in);
    case OpType::kConstant:
      return Status::internal(node_where(node) +
                              ": Constant nodes must be turned into initializers by the importer.");
    case OpType::kTranspose:
    case OpType::kSlice:
    case OpType::kSplit:
    case OpType::kSqueeze:
    case OpType::kSub:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kEqual:
    case OpType::kNot:
    case OpType::kWhere:
    case OpType::kSqrt:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kExp:
    case OpType::kNeg:
    case OpType::kReduceMean:
    case OpType::kReduceL2:
    case OpType::kLayerNormalization:
    case OpType::kLpNormalization:
    case OpType::kGelu:
    case OpType::kCast:
    case OpType::kExpand:
    case OpType::kConstantOfShape:
    case OpType::kRange:
    case OpType::kScatterND:
    case OpType::kPad:
    case OpType::kMax:
    case OpType::kMin:
    case OpType::kAttention:
      if (auto r = infer_tensor_op(node, in)) return std::move(*r);
      break;
  }
  return Status::internal(node_where(node) + ": no shape inference for this op");
}

// The attribute struct each op carries; a missing one is a bug in whoever built the node.
bool has_expected_attrs(const Node& node) {
  switch (node.op) {
    case OpType::kConv: return std::holds_alternative<ConvAttrs>(node.attrs);
    case OpType::kBatchNormalization: return std::holds_alternative<BatchNormAttrs>(node.attrs);
    case OpType::kClip: return std::holds_alternative<ClipAttrs>(node.attrs);
    case OpType::kMaxPool:
    case OpType::kAveragePool: return std::holds_alternative<PoolAttrs>(node.attrs);
    case OpType::kFlatten: return std::holds_alternative<FlattenAttrs>(node.attrs);
    case OpType::kReshape: return std::holds_alternative<ReshapeAttrs>(node.attrs);
    case OpType::kGemm: return std::holds_alternative<GemmAttrs>(node.attrs);
    case OpType::kConcat:
    case OpType::kGather:
    case OpType::kSoftmax: return std::holds_alternative<AxisAttrs>(node.attrs);
    case OpType::kUnsqueeze: return std::holds_alternative<UnsqueezeAttrs>(node.attrs);
    case OpType::kHardSigmoid: return std::holds_alternative<HardSigmoidAttrs>(node.attrs);
    case OpType::kTranspose: return std::holds_alternative<TransposeAttrs>(node.attrs);
    case OpType::kSplit: return std::holds_alternative<SplitAttrs>(node.attrs);
    case OpType::kSqueeze: return std::holds_alternative<UnsqueezeAttrs>(node.attrs);
    case OpType::kMod: return std::holds_alternative<ModAttrs>(node.attrs);
    case OpType::kReduceMean:
    case OpType::kReduceL2: return std::holds_alternative<ReduceAttrs>(node.attrs);
    case OpType::kLayerNormalization: return std::holds_alternative<LayerNormAttrs>(node.attrs);
    case OpType::kLpNormalization: return std::holds_alternative<LpNormAttrs>(node.attrs);
    case OpType::kGelu: return std::holds_alternative<GeluAttrs>(node.attrs);
    case OpType::kCast: return std::holds_alternative<CastAttrs>(node.attrs);
    case OpType::kConstantOfShape: return std::holds_alternative<ConstantOfShapeAttrs>(node.attrs);
    case OpType::kAttention: return std::holds_alternative<AttentionAttrs>(node.attrs);
    default: return true;
  }
}

// Every value's element count per image stays within kMaxTensorElements, so that whatever later
// multiplies sizes (cost, lowering, memory planning, the executors) works on small numbers, and a
// model whose declared shapes imply terabytes is refused here, before anything is allocated.
Status check_value_size(const std::string& name, const Shape& shape) {
  int64_t numel = 1;
  for (int64_t dim : shape.dims) {
    const int64_t d = Shape::is_batch(dim) ? Shape::batch_factor(dim) : dim;  // N * k: k per image
    const std::optional<int64_t> product = d >= 0 ? checked_mul(numel, d) : std::nullopt;
    if (!product || *product > kMaxTensorElements) {
      return Status::invalid_model("value '" + name + "' of shape " + shape.to_string() +
                                   " has a negative dimension or more than " +
                                   std::to_string(kMaxTensorElements) +
                                   " elements per image. The model's declared shapes are corrupt.");
    }
    numel = *product;
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<ValueInfo>> infer_node(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                          const Graph& graph) {
  (void)graph;
  if (!has_expected_attrs(node)) {
    return Status::internal(node_where(node) + ": the node carries the wrong attribute type for its op.");
  }
  if (inputs.empty() || !inputs[0]) return fail(node, "input 0 is absent");
  if (node.outputs.empty()) return fail(node, "has no outputs");
  GPULAB_ASSIGN_OR_RETURN(std::vector<ValueInfo> outs, infer_dispatch(node, inputs));
  // The values of an export's shape code (Mul of a gathered dimension, Where(Equal(...)) ...).
  if (!outs.empty() && !outs[0].known_values &&
      (outs[0].dtype == DataType::kInt64 || outs[0].dtype == DataType::kBool))
    outs[0].known_values = evaluate_known(node, inputs, outs[0]);
  return outs;
}

Status Graph::infer_shapes() {
  std::map<std::string, ValueInfo> next;
  for (const std::string& in : inputs) {
    auto it = values.find(in);
    if (it == values.end()) {
      return Status::invalid_model("graph input '" + in +
                                   "' has no shape. Give every graph input a type and shape.");
    }
    GPULAB_TRY(check_value_size(in, it->second.shape));
    next[in] = it->second;
  }
  for (const auto& [name, tensor] : initializers) {
    ValueInfo info;
    info.dtype = tensor.dtype();
    info.shape = tensor.shape();
    if (tensor.dtype() == DataType::kInt64 && tensor.numel() <= kMaxKnownValues) {
      auto v = tensor.i64();
      info.known_values = std::vector<int64_t>(v.begin(), v.end());
    } else if (tensor.dtype() == DataType::kBool && tensor.numel() <= kMaxKnownValues) {
      std::vector<int64_t> v(static_cast<size_t>(tensor.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = tensor.data()[i] != std::byte{0} ? 1 : 0;
      info.known_values = std::move(v);
    }
    next[name] = std::move(info);
  }
  for (const Node& node : nodes) {
    std::vector<const ValueInfo*> ins;
    for (const std::string& in : node.inputs) {
      if (in.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      auto it = next.find(in);
      if (it == next.end()) {
        return Status::invalid_model(node_where(node) + ": input '" + in +
                                     "' is not defined before this node. The graph is incomplete or not in "
                                     "topological order.");
      }
      ins.push_back(&it->second);
    }
    auto result = infer_node(node, ins, *this);
    if (!result.is_ok()) {
      std::string shapes;
      for (size_t i = 0; i < ins.size(); ++i) {
        shapes += (i ? ", " : "") + (ins[i] ? ins[i]->shape.to_string() : std::string("-"));
      }
      return result.status().with_context("shape inference (input shapes " + shapes + ")");
    }
    std::vector<ValueInfo>& outs = result.value();
    for (size_t i = 0; i < node.outputs.size() && i < outs.size(); ++i) {
      GPULAB_TRY(check_value_size(node.outputs[i], outs[i].shape).with_context(node_where(node)));
      if (!node.outputs[i].empty()) next[node.outputs[i]] = std::move(outs[i]);
    }
  }
  values = std::move(next);
  return Status::ok();
}

}  // namespace gpulab
