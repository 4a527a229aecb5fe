// Reference data-movement ops: Identity, Dropout (inference), Flatten, Reshape, Shape, Gather,
// Unsqueeze and Concat. They copy bytes, so they work for every dtype (float32 activations and
// the int64 shape values of a Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain).
#include <algorithm>
#include <cstring>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += Shape::dim_string(dims[i]);
  }
  return s + "]";
}

// The same bytes under a new shape (the element count is checked by the caller).
Result<Tensor> with_shape(const Node& node, const Tensor& x, Shape shape) {
  if (shape.numel() != x.numel()) {
    return Status::internal(where(node) + ": reshape of " + x.shape().to_string() + " to " +
                            shape.to_string() + " changes the element count.");
  }
  return Tensor::from_bytes(x.dtype(), std::move(shape), {x.data(), x.size_bytes()});
}

Status run_flatten(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_ASSIGN_OR_RETURN(const FlattenAttrs attrs, attrs_or_default<FlattenAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 1));
  const Tensor& x = *inputs[0];
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  // Flatten's axis may equal the rank: [-rank, rank].
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, attrs.axis, rank + 1));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= x.shape()[static_cast<size_t>(d)];
  GPULAB_ASSIGN_OR_RETURN(outputs[0], with_shape(node, x, Shape{outer, inner}));
  return Status::ok();
}

Status run_reshape(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const ReshapeAttrs attrs, attrs_or_default<ReshapeAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 2));
  const Tensor& x = *inputs[0];
  const Tensor& shape_t = *inputs[1];
  GPULAB_TRY(check_dtype(node, shape_t, DataType::kInt64, "shape"));
  GPULAB_TRY(check_rank(node, shape_t, 1, "shape"));
  std::vector<int64_t> dims(shape_t.i64().begin(), shape_t.i64().end());
  const std::string requested = dims_string(dims);
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t& d = dims[i];
    if (Shape::is_batch(d)) {
      if (options.bound_batch <= 0) {
        return Status::invalid_argument(where(node) + ": target shape " + requested +
                                        " names the batch, but no batch size is bound. Run the "
                                        "graph through ReferenceExecutor or set bound_batch.");
      }
      d = options.bound_batch * Shape::batch_factor(d);
    } else if (d == 0 && !attrs.allowzero) {
      if (i >= x.shape().rank()) {
        return Status::invalid_argument(where(node) + ": target shape " + requested + " copies dim " +
                                        std::to_string(i) + " (0) of input " + x.shape().to_string() +
                                        ", which has no such dim.");
      }
      d = x.shape()[i];
    } else if (d == -1) {
      if (infer_at >= 0) {
        return Status::invalid_argument(where(node) + ": target shape " + requested +
                                        " has more than one -1.");
      }
      infer_at = static_cast<int64_t>(i);
      continue;
    } else if (d < 0) {
      return Status::invalid_argument(where(node) + ": target shape " + requested +
                                      " has a negative dimension.");
    }
    known *= d;
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known != 0) {
      return Status::invalid_argument(where(node) + ": cannot reshape " + x.shape().to_string() + " to " +
                                      requested + " (" + std::to_string(x.numel()) +
                                      " elements do not divide into " + std::to_string(known) + ").");
    }
    dims[static_cast<size_t>(infer_at)] = x.numel() / known;
  } else if (known != x.numel()) {
    return Status::invalid_argument(where(node) + ": cannot reshape " + x.shape().to_string() + " (" +
                                    std::to_string(x.numel()) + " elements) to " + requested + " (" +
                                    std::to_string(known) + " elements).");
  }
  GPULAB_ASSIGN_OR_RETURN(outputs[0], with_shape(node, x, Shape(dims)));
  return Status::ok();
}

Status run_gather(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_ASSIGN_OR_RETURN(const AxisAttrs attrs, attrs_or_default<AxisAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 2));
  const Tensor& data = *inputs[0];
  const Tensor& indices = *inputs[1];
  if (indices.dtype() != DataType::kInt64 && indices.dtype() != DataType::kInt32) {
    return Status::unsupported(where(node) + ": indices are " + std::string(dtype_name(indices.dtype())) +
                               "; expected int64 or int32.");
  }
  const int64_t rank = static_cast<int64_t>(data.shape().rank());
  if (rank == 0) return Status::invalid_argument(where(node) + ": data is a scalar; expected rank >= 1.");
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, attrs.axis, rank));
  const int64_t axis_len = data.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> index_values(static_cast<size_t>(indices.numel()));
  for (size_t i = 0; i < index_values.size(); ++i) {
    int64_t v = indices.dtype() == DataType::kInt64 ? indices.i64()[i]
                                                    : reinterpret_cast<const int32_t*>(indices.data())[i];
    if (v < -axis_len || v >= axis_len) {
      return Status::invalid_argument(where(node) + ": index " + std::to_string(v) +
                                      " is out of range for axis " + std::to_string(axis) + " of length " +
                                      std::to_string(axis_len) + ".");
    }
    index_values[i] = v < 0 ? v + axis_len : v;
  }
  std::vector<int64_t> out_dims(data.shape().dims.begin(), data.shape().dims.begin() + axis);
  out_dims.insert(out_dims.end(), indices.shape().dims.begin(), indices.shape().dims.end());
  out_dims.insert(out_dims.end(), data.shape().dims.begin() + axis + 1, data.shape().dims.end());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= data.shape()[static_cast<size_t>(d)];
  Tensor y(data.dtype(), Shape(out_dims));
  const size_t element = dtype_size(data.dtype());
  const size_t row_bytes = static_cast<size_t>(inner) * element;
  const std::byte* src = data.data();
  std::byte* dst = y.data();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t idx : index_values) {
      if (row_bytes)
        std::memcpy(dst, src + static_cast<size_t>((o * axis_len + idx) * inner) * element, row_bytes);
      dst += row_bytes;
    }
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_unsqueeze(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_ASSIGN_OR_RETURN(const UnsqueezeAttrs attrs, attrs_or_default<UnsqueezeAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 1, 1));
  const Tensor& x = *inputs[0];
  std::vector<int64_t> axes = attrs.axes;
  if (inputs.size() > 1 && inputs[1] != nullptr) {  // opset >= 13, when the importer left it
    GPULAB_TRY(check_dtype(node, *inputs[1], DataType::kInt64, "axes"));
    axes.assign(inputs[1]->i64().begin(), inputs[1]->i64().end());
  }
  if (axes.empty()) {
    return Status::invalid_model(where(node) + ": no axes given. Check the model.");
  }
  const int64_t out_rank = static_cast<int64_t>(x.shape().rank() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) {
    GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, a, out_rank));
    if (inserted[static_cast<size_t>(axis)]) {
      return Status::invalid_model(where(node) + ": axis " + std::to_string(a) + " is repeated.");
    }
    inserted[static_cast<size_t>(axis)] = true;
  }
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    dims.push_back(inserted[static_cast<size_t>(i)] ? 1 : x.shape()[next++]);
  GPULAB_ASSIGN_OR_RETURN(outputs[0], with_shape(node, x, Shape(dims)));
  return Status::ok();
}

Status run_concat(const Node& node, Inputs inputs, Outputs& outputs) {
  GPULAB_ASSIGN_OR_RETURN(const AxisAttrs attrs, attrs_or_default<AxisAttrs>(node));
  if (inputs.empty()) return Status::invalid_model(where(node) + ": has no inputs.");
  GPULAB_TRY(check_input_count(node, inputs, inputs.size()));
  const Tensor& first = *inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape().rank());
  if (rank == 0) return Status::invalid_argument(where(node) + ": inputs are scalars; expected rank >= 1.");
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, attrs.axis, rank));
  std::vector<int64_t> out_dims = first.shape().dims;
  out_dims[static_cast<size_t>(axis)] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = *inputs[i];
    bool ok = t.dtype() == first.dtype() && t.shape().rank() == first.shape().rank();
    for (int64_t d = 0; ok && d < rank; ++d)
      ok = d == axis || t.shape()[static_cast<size_t>(d)] == first.shape()[static_cast<size_t>(d)];
    if (!ok) {
      return Status::invalid_argument(
          where(node) + ": input " + std::to_string(i) + " (" + std::string(dtype_name(t.dtype())) + " " +
          t.shape().to_string() + ") does not match input 0 (" + std::string(dtype_name(first.dtype())) +
          " " + first.shape().to_string() + ") outside axis " + std::to_string(axis) + ".");
    }
    out_dims[static_cast<size_t>(axis)] += t.shape()[static_cast<size_t>(axis)];
  }
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= first.shape()[static_cast<size_t>(d)];
  Tensor y(first.dtype(), Shape(out_dims));
  std::byte* dst = y.data();
  for (int64_t o = 0; outer > 0 && o < outer; ++o) {
    for (const Tensor* t : inputs) {
      const size_t block = t->size_bytes() / static_cast<size_t>(outer);
      if (block) std::memcpy(dst, t->data() + static_cast<size_t>(o) * block, block);
      dst += block;
    }
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace

Status run_shape_op(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  switch (node.op) {
    case OpType::kIdentity:
      GPULAB_TRY(check_input_count(node, inputs, 1));
      outputs[0] = *inputs[0];
      return Status::ok();
    case OpType::kDropout:
      // Inference: the data passes through; the optional mask is all true.
      GPULAB_TRY(check_input_count(node, inputs, 1, 2));
      outputs[0] = *inputs[0];
      if (node.outputs.size() > 1 && !node.outputs[1].empty()) {
        Tensor mask(DataType::kBool, inputs[0]->shape());
        std::memset(mask.data(), 1, mask.size_bytes());
        outputs[1] = std::move(mask);
      }
      return Status::ok();
    case OpType::kFlatten: return run_flatten(node, inputs, outputs);
    case OpType::kReshape: return run_reshape(node, inputs, outputs, options);
    case OpType::kShape: {
      GPULAB_TRY(check_input_count(node, inputs, 1));
      const auto& dims = inputs[0]->shape().dims;
      Tensor shape(DataType::kInt64, Shape{static_cast<int64_t>(dims.size())});
      std::copy(dims.begin(), dims.end(), shape.i64().begin());
      outputs[0] = std::move(shape);
      return Status::ok();
    }
    case OpType::kGather: return run_gather(node, inputs, outputs);
    case OpType::kUnsqueeze: return run_unsqueeze(node, inputs, outputs);
    case OpType::kConcat: return run_concat(node, inputs, outputs);
    default: return Status::internal(where(node) + ": not a shape op.");
  }
}

}  // namespace gpulab::reference
