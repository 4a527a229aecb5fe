// One converter per ONNX op: the node's attributes (with ONNX defaults) and constant inputs become
// the typed attrs of a gpulab Node. Each refuses, naming the node, what gpulab cannot run.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "onnx/import_internal.h"

namespace gpulab::onnx_import {

// --- attributes --------------------------------------------------------------------------------

const onnx::AttributeProto* AttrReader::find(const std::string& name) {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) {
      read_.insert(name);
      return &a;
    }
  }
  return nullptr;
}

bool AttrReader::has(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return true;
  return false;
}

Result<int64_t> AttrReader::get_int(const std::string& name, int64_t fallback) {
  const auto* a = find(name);
  if (!a) return fallback;
  if (a->type() != onnx::AttributeProto::INT) return type_error(name, "an int");
  return a->i();
}

Result<float> AttrReader::get_float(const std::string& name, float fallback) {
  const auto* a = find(name);
  if (!a) return fallback;
  if (a->type() != onnx::AttributeProto::FLOAT) return type_error(name, "a float");
  // No ONNX op gpulab reads takes an infinite or NaN attribute (epsilon, alpha, beta, ratio), and
  // plan headers (JSON) cannot carry one.
  if (!std::isfinite(a->f()))
    return Status::invalid_model(where_ + ": attribute '" + name + "' is " + std::to_string(a->f()) +
                                 ", not a finite number.");
  return a->f();
}

Result<std::string> AttrReader::get_string(const std::string& name, std::string fallback) {
  const auto* a = find(name);
  if (!a) return fallback;
  if (a->type() != onnx::AttributeProto::STRING) return type_error(name, "a string");
  return a->s();
}

Result<std::optional<std::vector<int64_t>>> AttrReader::get_ints(const std::string& name) {
  const auto* a = find(name);
  if (!a) return std::optional<std::vector<int64_t>>();
  if (a->type() != onnx::AttributeProto::INTS) return type_error(name, "a list of ints");
  return std::optional<std::vector<int64_t>>(std::vector<int64_t>(a->ints().begin(), a->ints().end()));
}

Status AttrReader::check_all_read() const {
  for (const auto& a : node_.attribute()) {
    if (!read_.count(a.name())) {
      return Status::unsupported(where_ + ": attribute '" + a.name() +
                                 "' is not supported. Re-export the model without it.");
    }
  }
  return Status::ok();
}

Status AttrReader::type_error(const std::string& name, const char* want) const {
  return Status::invalid_model(where_ + ": attribute '" + name + "' should be " + want + ".");
}

namespace {

struct Window {
  Hw kernel;
  Hw stride{1, 1};
  Pads pads;
  Hw dilation{1, 1};
  AutoPad auto_pad = AutoPad::kNotSet;
};

Result<Hw> get_hw(AttrReader& attrs, const std::string& where, const std::string& name, Hw fallback) {
  GPULAB_ASSIGN_OR_RETURN(auto v, attrs.get_ints(name));
  if (!v) return fallback;
  if (v->size() != 2) {
    return Status::unsupported(where + ": attribute '" + name + "' has " + std::to_string(v->size()) +
                               " values; only 2-D (NCHW) windows are supported.");
  }
  return Hw{(*v)[0], (*v)[1]};
}

// kernel_shape, strides, pads, dilations (when `with_dilation`) and auto_pad of Conv and pools.
Result<Window> read_window(AttrReader& attrs, const std::string& where, std::optional<Hw> kernel_fallback,
                           bool with_dilation) {
  Window w;
  GPULAB_ASSIGN_OR_RETURN(auto kernel, attrs.get_ints("kernel_shape"));
  if (kernel) {
    if (kernel->size() != 2) {
      return Status::unsupported(where + ": kernel_shape has " + std::to_string(kernel->size()) +
                                 " dimensions; only 2-D (NCHW) convolutions and pools are supported.");
    }
    w.kernel = Hw{(*kernel)[0], (*kernel)[1]};
  } else if (kernel_fallback) {
    w.kernel = *kernel_fallback;
  } else {
    return Status::invalid_model(where +
                                 ": kernel_shape is missing and cannot be taken from a constant weight.");
  }
  GPULAB_ASSIGN_OR_RETURN(w.stride, get_hw(attrs, where, "strides", Hw{1, 1}));
  if (with_dilation) {
    GPULAB_ASSIGN_OR_RETURN(w.dilation, get_hw(attrs, where, "dilations", Hw{1, 1}));
  }
  GPULAB_ASSIGN_OR_RETURN(auto pads, attrs.get_ints("pads"));
  if (pads) {
    if (pads->size() != 4) {
      return Status::unsupported(where + ": pads has " + std::to_string(pads->size()) +
                                 " values; 2-D windows need 4 (top, left, bottom, right).");
    }
    w.pads = Pads{(*pads)[0], (*pads)[1], (*pads)[2], (*pads)[3]};
  }
  GPULAB_ASSIGN_OR_RETURN(std::string auto_pad, attrs.get_string("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET" || auto_pad.empty()) {
    w.auto_pad = AutoPad::kNotSet;
  } else if (auto_pad == "VALID") {
    w.auto_pad = AutoPad::kValid;
    w.pads = Pads{};
  } else if (auto_pad == "SAME_UPPER") {
    w.auto_pad = AutoPad::kSameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    w.auto_pad = AutoPad::kSameLower;
  } else {
    return Status::invalid_model(where + ": auto_pad '" + auto_pad +
                                 "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER.");
  }
  return w;
}

// A float32 scalar constant input (Clip's min and max).
Result<float> scalar_input(const NodeContext& c, int i, const char* what) {
  GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(c, i, what));
  if (t->dtype() != DataType::kFloat32 || t->numel() != 1) {
    return Status::unsupported(c.where + ": " + what + " must be a float32 scalar.");
  }
  // Clip's bounds: +-infinity is a missing bound, NaN is no bound at all.
  if (std::isnan(t->f32()[0])) return Status::invalid_model(c.where + ": " + what + " is NaN.");
  return t->f32()[0];
}

// --- one converter per op ----------------------------------------------------------------------

Status convert_conv(const NodeContext& c, ConvertedNode& out) {
  const onnx::NodeProto& n = c.n;
  if (n.input_size() < 2) return Status::invalid_model(c.where + ": needs inputs X and W.");
  std::optional<Hw> kernel;
  if (const Tensor* w = c.graph.initializer(n.input(1)); w && w->shape().rank() == 4) {
    kernel = Hw{w->shape()[2], w->shape()[3]};
  }
  GPULAB_ASSIGN_OR_RETURN(Window win, read_window(c.attrs, c.where, kernel, true));
  ConvAttrs a;
  a.kernel = win.kernel;
  a.stride = win.stride;
  a.pads = win.pads;
  a.dilation = win.dilation;
  GPULAB_ASSIGN_OR_RETURN(a.groups, c.attrs.get_int("group", 1));
  if (const FoldedPad* pad = c.folded_input0) {
    if (is_same_pad(win.auto_pad))
      return Status::unsupported(pad->where + ": it feeds " + c.where +
                                 ", whose auto_pad SAME padding gpulab cannot combine with it.");
    a.pads = add_pads(a.pads, pad->pads);
    out.node.inputs[0] = pad->input;
  }
  out.node.attrs = a;
  out.node.inputs.resize(std::min<size_t>(out.node.inputs.size(), 3));
  out.auto_pad = win.auto_pad;
  return Status::ok();
}

// MaxPool and AveragePool.
Status convert_pool(const NodeContext& c, ConvertedNode& out) {
  const bool is_max = out.node.op == OpType::kMaxPool;
  GPULAB_ASSIGN_OR_RETURN(Window win, read_window(c.attrs, c.where, std::nullopt, is_max));
  PoolAttrs a;
  a.kernel = win.kernel;
  a.stride = win.stride;
  a.pads = win.pads;
  a.dilation = win.dilation;
  GPULAB_ASSIGN_OR_RETURN(int64_t ceil_mode, c.attrs.get_int("ceil_mode", 0));
  a.ceil_mode = ceil_mode != 0;
  if (is_max) {
    GPULAB_ASSIGN_OR_RETURN(int64_t storage_order, c.attrs.get_int("storage_order", 0));
    if (storage_order != 0) {
      return Status::unsupported(c.where + ": storage_order=1 (column-major indices) is not supported.");
    }
    GPULAB_TRY(refuse_used_output(c, 1, "Indices"));
  } else {
    GPULAB_ASSIGN_OR_RETURN(int64_t cip, c.attrs.get_int("count_include_pad", 0));
    a.count_include_pad = cip != 0;
    // Zeros a Pad added count in the average: the pool's own padding must count too, and
    // ceil_mode windows would also cover pixels beyond both.
    if (const FoldedPad* pad = c.folded_input0) {
      const bool own_pads = a.pads.top || a.pads.left || a.pads.bottom || a.pads.right;
      if ((own_pads && !a.count_include_pad) || a.ceil_mode || is_same_pad(win.auto_pad))
        return Status::unsupported(pad->where + ": it feeds " + c.where +
                                   ", whose own padding, ceil_mode or auto_pad it cannot be folded into.");
      a.pads = add_pads(a.pads, pad->pads);
      a.count_include_pad = true;
      out.node.inputs[0] = pad->input;
    }
  }
  out.node.attrs = a;
  out.auto_pad = win.auto_pad;
  return Status::ok();
}

Status convert_batch_norm(const NodeContext& c, ConvertedNode& out) {
  BatchNormAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.epsilon, c.attrs.get_float("epsilon", 1e-5f));
  GPULAB_ASSIGN_OR_RETURN(float momentum, c.attrs.get_float("momentum", 0.9f));
  (void)momentum;  // training only
  GPULAB_ASSIGN_OR_RETURN(int64_t training, c.attrs.get_int("training_mode", 0));
  if (training != 0) {
    return Status::unsupported(c.where +
                               ": training_mode=1 is not supported. Export the model in eval mode.");
  }
  for (int i = 1; i < c.n.output_size(); ++i) GPULAB_TRY(refuse_used_output(c, i, "running statistics"));
  if (c.n.input_size() != 5) return Status::invalid_model(c.where + ": needs inputs X, scale, B, mean, var.");
  out.node.attrs = a;
  return Status::ok();
}

// Opset >= 11: min and max are optional inputs, which gpulab folds into attributes.
Status convert_clip(const NodeContext& c, ConvertedNode& out) {
  ClipAttrs a;
  if (c.n.input_size() > 1 && !c.n.input(1).empty()) {
    GPULAB_ASSIGN_OR_RETURN(a.min, scalar_input(c, 1, "min"));
  }
  if (c.n.input_size() > 2 && !c.n.input(2).empty()) {
    GPULAB_ASSIGN_OR_RETURN(a.max, scalar_input(c, 2, "max"));
  }
  out.node.inputs.resize(1);
  out.node.attrs = a;
  return Status::ok();
}

// An identity at inference; refused when it is in training mode or its mask is read.
Status convert_dropout(const NodeContext& c, ConvertedNode& out) {
  GPULAB_ASSIGN_OR_RETURN(float ratio, c.attrs.get_float("ratio", 0.5f));
  GPULAB_ASSIGN_OR_RETURN(int64_t seed, c.attrs.get_int("seed", 0));
  (void)ratio;
  (void)seed;
  if (c.n.input_size() > 2 && !c.n.input(2).empty()) {
    GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(c, 2, "training_mode"));
    // Training mode drops nothing with a ratio of 0 (Swin calls F.dropout(x, p=0.0), whose
    // training argument defaults to true).
    bool no_drop = false;
    if (c.n.input_size() > 1 && !c.n.input(1).empty()) {
      const Tensor* r = c.graph.initializer(c.n.input(1));
      no_drop = r && r->dtype() == DataType::kFloat32 && r->numel() == 1 && r->f32()[0] == 0.0f;
    }
    if (t->numel() != 1 || (t->data()[0] != std::byte{0} && !no_drop)) {
      return Status::unsupported(c.where + ": training_mode is true. Export the model in eval mode.");
    }
  }
  GPULAB_TRY(refuse_used_output(c, 1, "mask"));
  out.node.inputs.resize(1);
  return Status::ok();
}

Status convert_flatten(const NodeContext& c, ConvertedNode& out) {
  FlattenAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.axis, c.attrs.get_int("axis", 1));
  out.node.attrs = a;
  return Status::ok();
}

Status convert_reshape(const NodeContext& c, ConvertedNode& out) {
  ReshapeAttrs a;
  GPULAB_ASSIGN_OR_RETURN(int64_t allowzero, c.attrs.get_int("allowzero", 0));
  a.allowzero = allowzero != 0;
  if (c.n.input_size() != 2) return Status::invalid_model(c.where + ": needs inputs data and shape.");
  out.node.attrs = a;
  return Status::ok();
}

Status convert_gemm(const NodeContext& c, ConvertedNode& out) {
  GemmAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.alpha, c.attrs.get_float("alpha", 1.0f));
  GPULAB_ASSIGN_OR_RETURN(a.beta, c.attrs.get_float("beta", 1.0f));
  GPULAB_ASSIGN_OR_RETURN(int64_t ta, c.attrs.get_int("transA", 0));
  GPULAB_ASSIGN_OR_RETURN(int64_t tb, c.attrs.get_int("transB", 0));
  a.trans_a = ta != 0;
  a.trans_b = tb != 0;
  out.node.attrs = a;
  return Status::ok();
}

Status convert_concat(const NodeContext& c, ConvertedNode& out) {
  if (!c.attrs.has("axis")) return Status::invalid_model(c.where + ": attribute 'axis' is required.");
  AxisAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.axis, c.attrs.get_int("axis", 0));
  out.node.attrs = a;
  return Status::ok();
}

Status convert_gather(const NodeContext& c, ConvertedNode& out) {
  AxisAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.axis, c.attrs.get_int("axis", 0));
  out.node.attrs = a;
  return Status::ok();
}

// Opset 13 changed the default axis from 1 to -1 (and the semantics from "flatten to 2-D at
// axis" to "along axis"; both agree on the [N, classes] tensors of classifiers).
Status convert_softmax(const NodeContext& c, ConvertedNode& out) {
  AxisAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.axis, c.attrs.get_int("axis", c.opset >= 13 ? -1 : 1));
  out.node.attrs = a;
  return Status::ok();
}

// Opset 13 moved axes from an attribute to a (constant) input.
Status convert_unsqueeze(const NodeContext& c, ConvertedNode& out) {
  UnsqueezeAttrs a;
  if (c.opset >= 13) {
    if (c.n.input_size() < 2 || c.n.input(1).empty())
      return Status::invalid_model(c.where + ": needs input axes.");
    GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(c, 1, "axes"));
    if (t->dtype() != DataType::kInt64) return Status::invalid_model(c.where + ": axes must be int64.");
    a.axes.assign(t->i64().begin(), t->i64().end());
    out.node.inputs.resize(1);
  } else {
    GPULAB_ASSIGN_OR_RETURN(auto axes, c.attrs.get_ints("axes"));
    if (!axes) return Status::invalid_model(c.where + ": attribute 'axes' is required before opset 13.");
    a.axes = *axes;
  }
  out.node.attrs = a;
  return Status::ok();
}

Status convert_hard_sigmoid(const NodeContext& c, ConvertedNode& out) {
  HardSigmoidAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.alpha, c.attrs.get_float("alpha", 0.2f));
  GPULAB_ASSIGN_OR_RETURN(a.beta, c.attrs.get_float("beta", 0.5f));
  out.node.attrs = a;
  return Status::ok();
}

Status convert_shape(const NodeContext& c, ConvertedNode&) {
  GPULAB_ASSIGN_OR_RETURN(int64_t start, c.attrs.get_int("start", 0));
  if (start != 0 || c.attrs.has("end")) {
    return Status::unsupported(c.where + ": the start/end attributes (opset 15) are not supported.");
  }
  return Status::ok();
}

}  // namespace

Result<const Tensor*> constant_input(const NodeContext& c, int i, const char* what) {
  const std::string& name = c.n.input(i);
  const Tensor* t = c.graph.initializer(name);
  if (!t) {
    return Status::unsupported(c.where + ": its " + what + " input '" + name +
                               "' is computed at run time; gpulab needs it to be a constant (initializer or "
                               "Constant node).");
  }
  return t;
}

// Refuses a node whose extra output `i` (training statistics, indices, a mask) is read by another
// node or is a graph output: gpulab computes only the first output.
Status refuse_used_output(const NodeContext& c, int i, const char* what) {
  const onnx::NodeProto& n = c.n;
  if (i < n.output_size() && !n.output(i).empty() && c.used_values.count(n.output(i))) {
    return Status::unsupported(c.where + ": its " + what + " output '" + n.output(i) +
                               "' is used, which gpulab does not support (inference only).");
  }
  return Status::ok();
}

Status convert_op(OpType op, const NodeContext& c, ConvertedNode& out) {
  switch (op) {
    case OpType::kConv: return convert_conv(c, out);
    case OpType::kMaxPool:
    case OpType::kAveragePool: return convert_pool(c, out);
    case OpType::kBatchNormalization: return convert_batch_norm(c, out);
    case OpType::kClip: return convert_clip(c, out);
    case OpType::kDropout: return convert_dropout(c, out);
    case OpType::kFlatten: return convert_flatten(c, out);
    case OpType::kReshape: return convert_reshape(c, out);
    case OpType::kGemm: return convert_gemm(c, out);
    case OpType::kConcat: return convert_concat(c, out);
    case OpType::kGather: return convert_gather(c, out);
    case OpType::kSoftmax: return convert_softmax(c, out);
    case OpType::kUnsqueeze: return convert_unsqueeze(c, out);
    case OpType::kHardSigmoid: return convert_hard_sigmoid(c, out);
    case OpType::kShape: return convert_shape(c, out);
    default:
      if (is_tensor_op(op)) return convert_tensor_op(op, c, out);
      return Status::ok();  // Relu, Add, Mul, GlobalAveragePool, MatMul, Identity, Sigmoid, HardSwish
  }
}

Result<Tensor> convert_constant(const NodeContext& c, const ImportContext& ctx) {
  if (c.n.output_size() != 1) return Status::invalid_model(c.where + ": a Constant has exactly one output.");
  Tensor t;
  if (const auto* a = c.attrs.find("value")) {
    GPULAB_ASSIGN_OR_RETURN(t, convert_tensor(a->t(), ctx, c.where));
  } else if (const auto* a = c.attrs.find("value_float")) {
    const float v = a->f();
    t = Tensor::from_floats(Shape{}, std::span<const float>(&v, 1));
  } else if (const auto* a = c.attrs.find("value_int")) {
    const int64_t v = a->i();
    t = Tensor::from_int64s(Shape{}, std::span<const int64_t>(&v, 1));
  } else if (const auto* a = c.attrs.find("value_floats")) {
    std::vector<float> v(a->floats().begin(), a->floats().end());
    t = Tensor::from_floats(Shape{static_cast<int64_t>(v.size())}, v);
  } else if (const auto* a = c.attrs.find("value_ints")) {
    std::vector<int64_t> v(a->ints().begin(), a->ints().end());
    t = Tensor::from_int64s(Shape{static_cast<int64_t>(v.size())}, v);
  } else {
    GPULAB_TRY(c.attrs.check_all_read());
    return Status::invalid_model(c.where + ": a Constant needs a value.");
  }
  GPULAB_TRY(c.attrs.check_all_read());
  return t;
}

}  // namespace gpulab::onnx_import
