// The converters of the ops the transformer classifiers and ShuffleNet export to (Transpose, Slice,
// Split, Squeeze, Sub/Div/Pow/Mod/Equal/Not/Where/Max/Min, Sqrt/Erf/Tanh/Exp/Neg, ReduceMean/ReduceL2,
// LayerNormalization, Gelu, Cast, Expand, ConstantOfShape, Range, ScatterND, Pad) and Einsum, which
// becomes MatMul (and Transpose). Each refuses, naming the node, what gpulab cannot run.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "onnx/import_internal.h"

namespace gpulab::onnx_import {
namespace {

// gpulab holds int32 values as int64 and float64/float16 as float32 (onnx_import.cc's
// convert_tensor does the same for initializers).
Result<DataType> dtype_of(int onnx_type, const std::string& where, const char* what) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::FLOAT16: return DataType::kFloat32;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32: return DataType::kInt64;
    case onnx::TensorProto::BOOL: return DataType::kBool;
    default:
      return Status::unsupported(
          where + ": " + what + " " +
          onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnx_type)) +
          " is not supported (float32, float16, float64, int32, int64 and bool are).");
  }
}

// The single element of ConstantOfShape's value attribute.
Result<double> scalar_of(const onnx::TensorProto& t, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  if (n != 1) return Status::invalid_model(where + ": value must hold one element.");
  const std::string& raw = t.raw_data();
  auto raw_as = [&](auto zero) -> Result<double> {
    if (raw.size() != sizeof(zero))
      return Status::invalid_model(where + ": value holds " + std::to_string(raw.size()) + " bytes.");
    std::memcpy(&zero, raw.data(), sizeof(zero));
    return static_cast<double>(zero);
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (t.has_raw_data()) return raw_as(float{});
      if (t.float_data_size() == 1) return t.float_data(0);
      break;
    case onnx::TensorProto::DOUBLE:
      if (t.has_raw_data()) return raw_as(double{});
      if (t.double_data_size() == 1) return t.double_data(0);
      break;
    case onnx::TensorProto::INT64:
      if (t.has_raw_data()) return raw_as(int64_t{});
      if (t.int64_data_size() == 1) return static_cast<double>(t.int64_data(0));
      break;
    case onnx::TensorProto::INT32:
      if (t.has_raw_data()) return raw_as(int32_t{});
      if (t.int32_data_size() == 1) return t.int32_data(0);
      break;
    case onnx::TensorProto::BOOL:
      if (t.has_raw_data()) {
        GPULAB_ASSIGN_OR_RETURN(const double v, raw_as(uint8_t{}));
        return v != 0 ? 1.0 : 0.0;
      }
      if (t.int32_data_size() == 1) return t.int32_data(0) != 0 ? 1.0 : 0.0;
      break;
    default: break;
  }
  return Status::unsupported(
      where + ": a value of type " +
      onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t.data_type())) +
      " is not supported.");
}

// An int64 constant input, as a vector.
Result<std::vector<int64_t>> ints_input(const NodeContext& c, int i, const char* what) {
  GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(c, i, what));
  if (t->dtype() != DataType::kInt64) return Status::invalid_model(c.where + ": " + what + " must be int64.");
  return std::vector<int64_t>(t->i64().begin(), t->i64().end());
}

bool has_input(const onnx::NodeProto& n, int i) {
  return n.input_size() > i && !n.input(i).empty();
}

Status read_reduce(const NodeContext& c, Node& node) {
  const onnx::NodeProto& n = c.n;
  AttrReader& attrs = c.attrs;
  ReduceAttrs a;
  GPULAB_ASSIGN_OR_RETURN(int64_t keepdims, attrs.get_int("keepdims", 1));
  a.keepdims = keepdims != 0;
  if (c.opset < 18) {
    GPULAB_ASSIGN_OR_RETURN(auto axes, attrs.get_ints("axes"));
    if (axes) a.axes = *axes;
  } else {
    GPULAB_ASSIGN_OR_RETURN(int64_t noop, attrs.get_int("noop_with_empty_axes", 0));
    if (has_input(n, 1)) {
      GPULAB_ASSIGN_OR_RETURN(a.axes, ints_input(c, 1, "axes"));
    }
    if (a.axes.empty() && noop != 0)
      return Status::unsupported(c.where + ": noop_with_empty_axes=1 without axes is not supported.");
  }
  node.inputs.resize(1);
  node.attrs = a;
  return Status::ok();
}

}  // namespace

bool is_tensor_op(OpType op) {
  switch (op) {
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
    case OpType::kMin: return true;
    default: return false;
  }
}

Status convert_tensor_op(OpType op, const NodeContext& c, ConvertedNode& out) {
  const onnx::NodeProto& n = c.n;
  const std::string& where = c.where;
  const int64_t opset = c.opset;
  AttrReader& attrs = c.attrs;
  Node& node = out.node;
  if (op == OpType::kLayerNormalization) {
    GPULAB_TRY(refuse_used_output(c, 1, "Mean"));
    GPULAB_TRY(refuse_used_output(c, 2, "InvStdDev"));
  }
  auto need_inputs = [&](int count) -> Status {
    for (int i = 0; i < count; ++i)
      if (!has_input(n, i))
        return Status::invalid_model(where + ": needs " + std::to_string(count) + " inputs, input " +
                                     std::to_string(i) + " is missing.");
    return Status::ok();
  };
  switch (node.op) {
    case OpType::kTranspose: {
      TransposeAttrs a;
      GPULAB_ASSIGN_OR_RETURN(auto perm, attrs.get_ints("perm"));
      if (perm) a.perm = *perm;
      node.attrs = a;
      break;
    }
    case OpType::kSlice: GPULAB_TRY(need_inputs(3)); break;
    case OpType::kSplit: {
      SplitAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", 0));
      if (opset < 13) {
        GPULAB_ASSIGN_OR_RETURN(auto split, attrs.get_ints("split"));
        if (split) a.sizes = *split;
      } else if (has_input(n, 1)) {
        GPULAB_ASSIGN_OR_RETURN(a.sizes, ints_input(c, 1, "split"));
      }
      if (opset >= 18) {
        GPULAB_ASSIGN_OR_RETURN(int64_t parts, attrs.get_int("num_outputs", 0));
        if (parts != 0 && parts != n.output_size())
          return Status::invalid_model(where + ": num_outputs " + std::to_string(parts) + " but " +
                                       std::to_string(n.output_size()) + " outputs.");
      }
      node.inputs.resize(1);
      node.outputs.assign(n.output().begin(), n.output().end());
      node.attrs = a;
      break;
    }
    case OpType::kSqueeze: {
      UnsqueezeAttrs a;
      if (opset < 13) {
        GPULAB_ASSIGN_OR_RETURN(auto axes, attrs.get_ints("axes"));
        if (axes) a.axes = *axes;
      } else if (has_input(n, 1)) {
        GPULAB_ASSIGN_OR_RETURN(a.axes, ints_input(c, 1, "axes"));
      }
      node.inputs.resize(1);
      node.attrs = a;
      break;
    }
    case OpType::kMod: {
      ModAttrs a;
      GPULAB_ASSIGN_OR_RETURN(int64_t fmod, attrs.get_int("fmod", 0));
      a.fmod = fmod != 0;
      node.attrs = a;
      GPULAB_TRY(need_inputs(2));
      break;
    }
    case OpType::kMax:
    case OpType::kMin:
      if (n.input_size() != 2)
        return Status::unsupported(where + ": " + std::to_string(n.input_size()) +
                                   " inputs; gpulab reads Max and Min of two.");
      GPULAB_TRY(need_inputs(2));
      break;
    case OpType::kSub:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kEqual:
    case OpType::kExpand: GPULAB_TRY(need_inputs(2)); break;
    case OpType::kWhere:
    case OpType::kRange:
    case OpType::kScatterND: {
      GPULAB_TRY(need_inputs(3));
      if (node.op == OpType::kScatterND) {
        GPULAB_ASSIGN_OR_RETURN(std::string reduction, attrs.get_string("reduction", "none"));
        if (reduction != "none")
          return Status::unsupported(where + ": reduction '" + reduction + "' is not supported (only none).");
      }
      break;
    }
    case OpType::kNot:
    case OpType::kSqrt:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kExp:
    case OpType::kNeg: break;
    case OpType::kReduceMean:
    case OpType::kReduceL2: GPULAB_TRY(read_reduce(c, node)); break;
    case OpType::kLayerNormalization: {
      LayerNormAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", -1));
      GPULAB_ASSIGN_OR_RETURN(a.epsilon, attrs.get_float("epsilon", 1e-5f));
      GPULAB_ASSIGN_OR_RETURN(int64_t stash_type, attrs.get_int("stash_type", 1));
      (void)stash_type;  // the precision of the statistics: gpulab computes them in float64 (reference)
      GPULAB_TRY(need_inputs(2));
      node.attrs = a;
      node.inputs.resize(std::min<size_t>(node.inputs.size(), 3));
      break;
    }
    case OpType::kLpNormalization: {
      LpNormAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", -1));
      GPULAB_ASSIGN_OR_RETURN(a.p, attrs.get_int("p", 2));
      if (a.p != 1 && a.p != 2)
        return Status::invalid_model(where + ": p " + std::to_string(a.p) + " is not 1 or 2.");
      node.attrs = a;
      break;
    }
    case OpType::kGelu: {
      GeluAttrs a;
      GPULAB_ASSIGN_OR_RETURN(std::string approximate, attrs.get_string("approximate", "none"));
      if (approximate != "none" && approximate != "tanh")
        return Status::invalid_model(where + ": approximate '" + approximate + "' is not none or tanh.");
      a.tanh_approximation = approximate == "tanh";
      node.attrs = a;
      break;
    }
    case OpType::kCast: {
      CastAttrs a;
      GPULAB_ASSIGN_OR_RETURN(int64_t to, attrs.get_int("to", -1));
      if (to < 0) return Status::invalid_model(where + ": attribute 'to' is required.");
      GPULAB_ASSIGN_OR_RETURN(a.to, dtype_of(static_cast<int>(to), where, "a Cast to"));
      GPULAB_ASSIGN_OR_RETURN(int64_t saturate, attrs.get_int("saturate", 1));
      (void)saturate;  // float8 only
      node.attrs = a;
      break;
    }
    case OpType::kConstantOfShape: {
      ConstantOfShapeAttrs a;  // float32 0 without a value
      if (const auto* v = attrs.find("value")) {
        if (v->type() != onnx::AttributeProto::TENSOR)
          return Status::invalid_model(where + ": attribute 'value' should be a tensor.");
        GPULAB_ASSIGN_OR_RETURN(a.dtype, dtype_of(v->t().data_type(), where, "a value of type"));
        GPULAB_ASSIGN_OR_RETURN(a.value, scalar_of(v->t(), where));
      }
      node.attrs = a;
      break;
    }
    case OpType::kPad: {
      GPULAB_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "constant"));
      if (mode != "constant")
        return Status::unsupported(where + ": mode '" + mode + "' is not supported (only constant padding).");
      GPULAB_TRY(need_inputs(2));
      if (has_input(n, 3))
        return Status::unsupported(where + ": the axes input (opset 18) is not supported.");
      node.inputs.resize(std::min<size_t>(node.inputs.size(), 3));
      break;
    }
    default: return Status::internal(where + ": not one of the tensor ops.");
  }
  return Status::ok();
}

Result<std::vector<Node>> convert_einsum(const NodeContext& c, const std::string& name) {
  const onnx::NodeProto& n = c.n;
  const std::string& where = c.where;
  AttrReader& attrs = c.attrs;
  GPULAB_ASSIGN_OR_RETURN(std::string equation, attrs.get_string("equation", ""));
  GPULAB_TRY(attrs.check_all_read());
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  auto refuse = [&](const std::string& why) {
    return Status::unsupported(where + ": equation '" + equation + "' " + why +
                               "; gpulab reads Einsum as a batched matrix product of two operands "
                               "(e.g. 'bhid,bhjd->bhij').");
  };
  const size_t arrow = eq.find("->");
  const size_t comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow || n.input_size() != 2 ||
      eq.find(',', comma + 1) < arrow || eq.find("...") != std::string::npos)
    return refuse("is not of two operands with an explicit output");
  const std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1),
                    out = eq.substr(arrow + 2);
  const size_t rank = a.size();
  if (rank < 2 || b.size() != rank || out.size() != rank ||
      std::set<char>(a.begin(), a.end()).size() != rank || std::set<char>(b.begin(), b.end()).size() != rank)
    return refuse("does not have operands and output of one rank >= 2 without repeated letters");
  const std::string batch = out.substr(0, rank - 2);
  if (a.substr(0, rank - 2) != batch || b.substr(0, rank - 2) != batch)
    return refuse("does not share its leading letters between operands and output");
  const char i = out[rank - 2], j = out[rank - 1];
  const std::string a2 = a.substr(rank - 2), b2 = b.substr(rank - 2);
  // a holds i and the contracted k, b holds k and j.
  const char k = a2[0] == i ? a2[1] : a2[0];
  if (a2.find(i) == std::string::npos || k == j || b2.find(j) == std::string::npos ||
      b2.find(k) == std::string::npos)
    return refuse("is not a matrix product over its last two letters");
  std::vector<Node> nodes;
  std::vector<int64_t> swap(rank);
  for (size_t d = 0; d < rank; ++d) swap[d] = static_cast<int64_t>(d);
  std::swap(swap[rank - 2], swap[rank - 1]);
  std::string lhs = n.input(0), rhs = n.input(1);
  if (a2[0] != i) {  // a is [..., k, i]
    nodes.push_back(
        Node{name + "/transpose_a", OpType::kTranspose, {lhs}, {n.output(0) + "/a_t"}, TransposeAttrs{swap}});
    lhs = nodes.back().outputs[0];
  }
  if (b2[0] != k) {  // b is [..., j, k]
    nodes.push_back(
        Node{name + "/transpose_b", OpType::kTranspose, {rhs}, {n.output(0) + "/b_t"}, TransposeAttrs{swap}});
    rhs = nodes.back().outputs[0];
  }
  nodes.push_back(Node{name, OpType::kMatMul, {lhs, rhs}, {n.output(0)}, {}});
  return nodes;
}

}  // namespace gpulab::onnx_import
