// Internal to the ONNX importer: the ops of the transformer classifiers and ShuffleNet (Transpose,
// Slice, Split, Squeeze, Sub/Div/Pow/Mod/Equal/Not/Where/Max/Min, Sqrt/Erf/Tanh/Exp/Neg, ReduceMean/
// ReduceL2, LayerNormalization, Gelu, Cast, Expand, ConstantOfShape, Range, ScatterND, Pad) and
// Einsum, which becomes MatMul (and Transpose).
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "onnx/attr_reader.h"

namespace gpulab {

// How the importer looks up input `input` of the node being converted as a constant (an
// initializer or a former Constant node); the error names the node and `what`.
using ConstantInput = std::function<Result<const Tensor*>(int input, const char* what)>;

// Whether `op` is converted by read_tensor_op.
bool is_tensor_op(OpType op);

// Reads the attributes of one of those ops into `node` (whose op, name, inputs and first output are
// set), and folds the inputs that older opsets held as attributes when they are constant (Split's
// split, Squeeze's axes from opset 13, ReduceMean's and ReduceL2's axes from opset 18). Sets every
// output of Split. Errors name the node: kUnsupported for what gpulab does not implement (a Cast to
// a type it does not hold, a ScatterND reduction, non-constant Pad modes ...), kInvalidModel for
// malformed attributes.
Status read_tensor_op(const onnx::NodeProto& n, const std::string& where, int64_t opset, AttrReader& attrs,
                      const ConstantInput& constant, Node& node);

// Einsum of two operands that is a batched matrix product over shared leading letters, as MaxViT's
// attention writes it ("bghid,bghjd->bghij" and "bghij,bghjd->bghid"): MatMul of the operands, each
// first transposed over its last two axes where the equation asks for it. Any other equation is
// kUnsupported, naming the node and the equation.
Result<std::vector<Node>> convert_einsum(const onnx::NodeProto& n, const std::string& name,
                                         const std::string& where, AttrReader& attrs);

}  // namespace gpulab
