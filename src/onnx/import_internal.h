// The ONNX importer's internals, shared by its three files (not installed, not used outside
// src/onnx):
//   onnx_import.cc   the model and graph level: opset, graph inputs, the node loop, the rewrites
//                    that have no node of their own (a folded Pad, a spatial ReduceMean, Einsum),
//                    checks after shape inference;
//   import_ops.cc    one converter per op: ONNX node + attributes -> gpulab Node;
//   import_tensor.cc TensorProto -> Tensor (inline or external data);
//   import_tensor_ops.cc the converters of the transformer classifiers' ops and Einsum.
// Adding an op: a value in OpType (graph.h), a converter in import_ops.cc and its line in
// convert_op's switch (or, for the transformer ops, in import_tensor_ops.cc).
#pragma once

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace gpulab::onnx_import {

struct ImportContext {
  std::string source;                             // for messages
  std::optional<std::filesystem::path> base_dir;  // folder of the model file, for external data
  int64_t opset = 0;
};

// Converts a TensorProto; float16 becomes float32 and int32 becomes int64; int8 and uint8 (Q/DQ
// weights and zero points) stay 8-bit. `where` names the
// tensor in messages.
Result<Tensor> convert_tensor(const onnx::TensorProto& t, const ImportContext& ctx, const std::string& where);

// Typed access to a node's attributes; remembers which were read so that any other is refused.
class AttrReader {
 public:
  AttrReader(const onnx::NodeProto& node, std::string where) : node_(node), where_(std::move(where)) {}

  // The attribute, marked as read, or null when absent.
  const onnx::AttributeProto* find(const std::string& name);
  // Whether it is present; does not mark it as read.
  bool has(const std::string& name) const;

  Result<int64_t> get_int(const std::string& name, int64_t fallback);
  Result<float> get_float(const std::string& name, float fallback);
  Result<std::string> get_string(const std::string& name, std::string fallback);
  // nullopt when absent.
  Result<std::optional<std::vector<int64_t>>> get_ints(const std::string& name);

  // Every attribute must have been read: an unknown one changes semantics we do not implement.
  [[nodiscard]] Status check_all_read() const;

 private:
  Status type_error(const std::string& name, const char* want) const;

  const onnx::NodeProto& node_;
  std::string where_;
  std::set<std::string> read_;
};

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

inline bool is_same_pad(AutoPad p) {
  return p == AutoPad::kSameUpper || p == AutoPad::kSameLower;
}

inline Pads add_pads(const Pads& a, const Pads& b) {
  return Pads{a.top + b.top, a.left + b.left, a.bottom + b.bottom, a.right + b.right};
}

// A zero Pad of the spatial dimensions (PyTorch exports AvgPool2d that way) is folded into the
// padding of the Conv or AveragePool it feeds.
struct FoldedPad {
  std::string input;  // what the Pad read
  Pads pads;
  std::string where;  // the Pad node, for messages
};

// What a per-op converter sees: the ONNX node, its attributes and the model-level facts it may
// consult. Converters read the graph (initializers) but never change it.
struct NodeContext {
  const onnx::NodeProto& n;
  const std::string& where;  // "node 'name' (Op)", for messages
  AttrReader& attrs;
  int64_t opset = 0;
  const Graph& graph;
  const std::set<std::string>& used_values;  // every value some node reads, plus graph outputs
  const FoldedPad* folded_input0 = nullptr;  // a zero Pad that produced input 0, if any
};

// A converter's result: the node (name, op, inputs and outputs already set from the ONNX node;
// the converter fills attrs and may drop inputs) and its auto_pad, resolved after shape inference
// when it is SAME_UPPER or SAME_LOWER.
struct ConvertedNode {
  Node node;
  AutoPad auto_pad = AutoPad::kNotSet;
};

// Input `i` of the node as a constant (initializer, including former Constant nodes), or an
// error naming it. `what` names the input in the message.
Result<const Tensor*> constant_input(const NodeContext& c, int i, const char* what);

// Converts the node of op `op` (not Constant) into `out`. The caller checks the attributes were
// all read afterwards.
[[nodiscard]] Status convert_op(OpType op, const NodeContext& c, ConvertedNode& out);

// The value of a Constant node (its `value*` attribute).
Result<Tensor> convert_constant(const NodeContext& c, const ImportContext& ctx);

// QuantizeLinear / DequantizeLinear (import_qdq.cc). The scale (input 1: constant float, scalar or
// 1-D), zero point (input 2: constant int8 or uint8; absent: uint8 0, as ONNX defines) and axis of
// either node; qmin/qmax from the zero point's type.
Result<QuantizeAttrs> read_quantize_params(const NodeContext& c);
bool same_quantize_params(const QuantizeAttrs& a, const QuantizeAttrs& b);
// An int8/uint8 constant dequantized, (q - zero_point) * scale; a float constant quantized and
// dequantized (core/quant.h's fake_quantize).
Result<Tensor> dequantize_constant(const Tensor& q, const QuantizeAttrs& a, const std::string& where);
Result<Tensor> fake_quantize_constant(const Tensor& x, const QuantizeAttrs& a, const std::string& where);
// One INT8 scale per output channel (axis 0) of a weight of `shape` quantized with `a`: symmetric
// int8 only (zero point 0, [-128, 127]), per tensor or along axis 0; nullopt otherwise.
std::optional<std::vector<float>> int8_weight_scales(const QuantizeAttrs& a, const Shape& shape);

// Refuses the node when its output `i` is read (a training-only output); `what` names it.
Status refuse_used_output(const NodeContext& c, int i, const char* what);

// The ops of the transformer classifiers and ShuffleNet (import_tensor_ops.cc): whether
// convert_tensor_op converts `op`, and the converter. Folds the inputs that older opsets held as
// attributes when they are constant (Split's split, Squeeze's axes from opset 13, ReduceMean's and
// ReduceL2's axes from opset 18); sets every output of Split.
bool is_tensor_op(OpType op);
[[nodiscard]] Status convert_tensor_op(OpType op, const NodeContext& c, ConvertedNode& out);

// Einsum of two operands that is a batched matrix product over shared leading letters, as MaxViT's
// attention writes it ("bghid,bghjd->bghij" and "bghij,bghjd->bghid"): MatMul of the operands, each
// first transposed over its last two axes where the equation asks for it. Any other equation is
// kUnsupported, naming the node and the equation.
Result<std::vector<Node>> convert_einsum(const NodeContext& c, const std::string& name);

}  // namespace gpulab::onnx_import
