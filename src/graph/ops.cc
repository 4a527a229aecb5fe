#include <array>
#include <utility>

#include "graph/graph.h"

namespace gpulab {
namespace {

constexpr std::array<std::pair<OpType, std::string_view>, 55> kOpNames{{
    {OpType::kConv, "Conv"},
    {OpType::kBatchNormalization, "BatchNormalization"},
    {OpType::kRelu, "Relu"},
    {OpType::kClip, "Clip"},
    {OpType::kAdd, "Add"},
    {OpType::kMul, "Mul"},
    {OpType::kMaxPool, "MaxPool"},
    {OpType::kAveragePool, "AveragePool"},
    {OpType::kGlobalAveragePool, "GlobalAveragePool"},
    {OpType::kFlatten, "Flatten"},
    {OpType::kReshape, "Reshape"},
    {OpType::kGemm, "Gemm"},
    {OpType::kMatMul, "MatMul"},
    {OpType::kIdentity, "Identity"},
    {OpType::kDropout, "Dropout"},
    {OpType::kConstant, "Constant"},
    {OpType::kShape, "Shape"},
    {OpType::kGather, "Gather"},
    {OpType::kUnsqueeze, "Unsqueeze"},
    {OpType::kConcat, "Concat"},
    {OpType::kSoftmax, "Softmax"},
    {OpType::kSigmoid, "Sigmoid"},
    {OpType::kHardSigmoid, "HardSigmoid"},
    {OpType::kHardSwish, "HardSwish"},
    {OpType::kTranspose, "Transpose"},
    {OpType::kSlice, "Slice"},
    {OpType::kSplit, "Split"},
    {OpType::kSqueeze, "Squeeze"},
    {OpType::kSub, "Sub"},
    {OpType::kDiv, "Div"},
    {OpType::kPow, "Pow"},
    {OpType::kMod, "Mod"},
    {OpType::kEqual, "Equal"},
    {OpType::kNot, "Not"},
    {OpType::kWhere, "Where"},
    {OpType::kSqrt, "Sqrt"},
    {OpType::kErf, "Erf"},
    {OpType::kTanh, "Tanh"},
    {OpType::kExp, "Exp"},
    {OpType::kNeg, "Neg"},
    {OpType::kReduceMean, "ReduceMean"},
    {OpType::kReduceL2, "ReduceL2"},
    {OpType::kLayerNormalization, "LayerNormalization"},
    {OpType::kLpNormalization, "LpNormalization"},
    {OpType::kGelu, "Gelu"},
    {OpType::kCast, "Cast"},
    {OpType::kExpand, "Expand"},
    {OpType::kConstantOfShape, "ConstantOfShape"},
    {OpType::kRange, "Range"},
    {OpType::kScatterND, "ScatterND"},
    {OpType::kPad, "Pad"},
    {OpType::kMax, "Max"},
    {OpType::kMin, "Min"},
    {OpType::kAttention, "Attention"},
    // Not an ONNX op_type (the importer pairs the two nodes), so no model names it.
    {OpType::kQuantizeDequantize, "QuantizeLinear+DequantizeLinear"},
}};

}  // namespace

std::string_view op_name(OpType op) {
  for (const auto& [type, name] : kOpNames)
    if (type == op) return name;
  return "?";
}

std::optional<OpType> op_from_name(std::string_view onnx_name) {
  for (const auto& [type, name] : kOpNames)
    if (name == onnx_name) return type;
  return std::nullopt;
}

std::string supported_ops_list() {
  std::string s;
  for (const auto& [type, name] : kOpNames) {
    if (type == OpType::kAttention) continue;           // made by fuse_attention, not read from ONNX
    if (type == OpType::kQuantizeDequantize) continue;  // named below
    if (!s.empty()) s += ", ";
    s += name;
  }
  // Imported as other ops (onnx_import.cc): no OpType of their own.
  return s +
         ", Einsum (batched matrix products, as MatMul and Transpose), "
         "QuantizeLinear and DequantizeLinear (in pairs, or dequantizing constants)";
}

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kClip: return "clip";
  }
  return "?";
}

}  // namespace gpulab
