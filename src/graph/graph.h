// The model IR: a Graph of Nodes in topological order, with typed attributes, initializers
// (weights) and the inferred dtype/shape of every value. No protobuf and no CUDA here.
//
// Conventions:
// - Activations are NCHW, as in ONNX. Backends choose their own layout.
// - A value is named by a string; "" in a node's inputs marks an absent optional input.
// - The batch dimension is symbolic (Shape::kBatch) until a backend binds it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab {

enum class OpType {
  kConv,                // inputs X, W, [B], [residual]; see ConvAttrs for the fused epilogue
  kBatchNormalization,  // inputs X, scale, B, mean, var (inference form)
  kRelu,
  kClip,  // min/max held in ClipAttrs (opset >= 11 constant inputs are folded in)
  kAdd,
  kMul,
  kMaxPool,
  kAveragePool,
  kGlobalAveragePool,
  kFlatten,
  kReshape,  // inputs data, shape (int64)
  kGemm,     // inputs A, B, [C]
  kMatMul,
  kIdentity,
  kDropout,   // inference: identity on its first output
  kConstant,  // import only: the importer turns Constants into initializers
  kShape,
  kGather,
  kUnsqueeze,  // axes held in UnsqueezeAttrs (opset >= 13 constant input folded in)
  kConcat,
  kSoftmax,
  kSigmoid,
  kHardSigmoid,
  kHardSwish,
  // The transformer classifiers (ConvNeXt, ViT, Swin, MaxViT) and ShuffleNet, and the shape code
  // their exports carry (constant-folded by fold_constants where only the batch is symbolic):
  kTranspose,  // TransposeAttrs
  kSlice,      // inputs data, starts, ends, [axes], [steps] (int64, known ahead for the GPU)
  kSplit,      // SplitAttrs; one output per part
  kSqueeze,    // axes held in UnsqueezeAttrs (opset >= 13 constant input folded in)
  kSub,
  kDiv,
  kPow,
  kMod,  // ModAttrs
  kEqual,
  kNot,
  kWhere,  // inputs condition (bool), X, Y
  kSqrt,
  kErf,
  kTanh,
  kExp,
  kNeg,
  kReduceMean,          // ReduceAttrs (a mean over H and W of a 4-D tensor is imported as GlobalAveragePool)
  kReduceL2,            // ReduceAttrs
  kLayerNormalization,  // inputs X, scale, [B]; LayerNormAttrs
  // x / max(||x||_p, epsilon) along one axis (LpNormAttrs); also made by fuse_l2_normalize from
  // F.normalize's ReduceL2 -> Clip -> [Expand] -> Div (Swin V2's cosine attention)
  kLpNormalization,
  kGelu,             // GeluAttrs; made by fuse_gelu from the exported Erf (or Tanh) pattern
  kCast,             // CastAttrs
  kExpand,           // inputs data, shape (int64)
  kConstantOfShape,  // input shape (int64); ConstantOfShapeAttrs
  kRange,            // inputs start, limit, delta (scalars)
  kScatterND,        // inputs data, indices (int64), updates; reduction none
  kPad,              // inputs data, pads (int64), [constant_value]; mode constant
  kMax,              // two inputs, numpy broadcasting
  kMin,
  // Scaled dot-product attention, made by fuse_attention: inputs Q [..., T, D], K [..., S, D],
  // V [..., S, Dv], [bias] (broadcast to [..., T, S]); y = softmax(scale * Q K^T + bias) V,
  // [..., T, Dv]. AttentionAttrs.
  kAttention,
  // A QuantizeLinear -> DequantizeLinear pair (QDQ form) as one float op; the importer makes it
  // and fold_qdq removes the pairs an INT8 plan takes over. See QuantizeAttrs.
  kQuantizeDequantize,
};

// ONNX op_type spelling ("Conv", "BatchNormalization", ...).
std::string_view op_name(OpType op);
// The reverse; nullopt for an op gpulab does not know.
std::optional<OpType> op_from_name(std::string_view onnx_name);
// Every supported op, comma separated, for error messages.
std::string supported_ops_list();

struct Hw {
  int64_t h = 1, w = 1;
  friend bool operator==(const Hw&, const Hw&) = default;
};
struct Pads {
  int64_t top = 0, left = 0, bottom = 0, right = 0;
  friend bool operator==(const Pads&, const Pads&) = default;
};

enum class Activation { kNone, kRelu, kClip };
std::string_view activation_name(Activation a);

struct ConvAttrs {
  Hw kernel;
  Hw stride{1, 1};
  Pads pads;
  Hw dilation{1, 1};
  int64_t groups = 1;
  // Fused epilogue, set by the fuse_conv_epilogue pass:
  //   y = act(conv(x, w) + b + residual), residual = inputs[3] when has_residual.
  Activation activation = Activation::kNone;
  float clip_min = 0.0f;
  float clip_max = 6.0f;
  bool has_residual = false;
};

struct BatchNormAttrs {
  float epsilon = 1e-5f;
};

struct ClipAttrs {
  float min = -std::numeric_limits<float>::infinity();
  float max = std::numeric_limits<float>::infinity();
};

struct PoolAttrs {
  Hw kernel;
  Hw stride{1, 1};
  Pads pads;
  Hw dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = false;  // AveragePool only
};

struct FlattenAttrs {
  int64_t axis = 1;
};

struct ReshapeAttrs {
  bool allowzero = false;
};

struct GemmAttrs {
  float alpha = 1.0f;
  float beta = 1.0f;
  bool trans_a = false;
  bool trans_b = false;
};

struct AxisAttrs {  // Concat, Gather, Softmax
  int64_t axis = 0;
};

struct UnsqueezeAttrs {
  std::vector<int64_t> axes;
};

struct HardSigmoidAttrs {
  float alpha = 0.2f;
  float beta = 0.5f;
};

struct TransposeAttrs {
  std::vector<int64_t> perm;  // empty: reverse the dimensions (ONNX's default)
};

struct SplitAttrs {
  int64_t axis = 0;
  std::vector<int64_t> sizes;  // one per output; empty: equal parts
};

struct ModAttrs {
  bool fmod = false;  // true: C's fmod (sign of the dividend); false: Python's % (sign of the divisor)
};

struct ReduceAttrs {
  std::vector<int64_t> axes;  // empty: every axis
  bool keepdims = true;
};

struct LayerNormAttrs {
  int64_t axis = -1;  // normalizes over [axis, rank)
  float epsilon = 1e-5f;
};

struct LpNormAttrs {
  int64_t axis = -1;
  int64_t p = 2;  // 1 or 2
  // gpulab's own (0 for ONNX's op): the norm is taken as at least this, as F.normalize does; a
  // zero norm gives zeros.
  float epsilon = 0.0f;
};

struct GeluAttrs {
  // false: x/2 (1 + erf(x / sqrt 2)); true: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  bool tanh_approximation = false;
};

struct CastAttrs {
  DataType to = DataType::kFloat32;
};

struct ConstantOfShapeAttrs {
  DataType dtype = DataType::kFloat32;  // float32, int64 or bool
  double value = 0;
};

struct AttentionAttrs {
  float scale = 1.0f;
};

// kQuantizeDequantize: ONNX QuantizeLinear then DequantizeLinear,
//   q = clamp(round_half_to_even(x / scale) + zero_point, qmin, qmax),  y = (q - zero_point) * scale,
// with one scale and zero point per tensor, or one per index of `axis`. [qmin, qmax] is the
// quantized type's range: [-128, 127] for int8, [0, 255] for uint8.
struct QuantizeAttrs {
  std::vector<float> scale;
  std::vector<int64_t> zero_point;  // as many as scale
  int64_t axis = 1;
  int64_t qmin = -128, qmax = 127;
};

using NodeAttrs = std::variant<std::monostate, ConvAttrs, BatchNormAttrs, ClipAttrs, PoolAttrs, FlattenAttrs,
                               ReshapeAttrs, GemmAttrs, AxisAttrs, UnsqueezeAttrs, HardSigmoidAttrs,
                               TransposeAttrs, SplitAttrs, ModAttrs, ReduceAttrs, LayerNormAttrs, GeluAttrs,
                               CastAttrs, ConstantOfShapeAttrs, AttentionAttrs, QuantizeAttrs, LpNormAttrs>;

struct Node {
  std::string name;
  OpType op = OpType::kIdentity;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  NodeAttrs attrs;

  template <typename T>
  T& attr() {
    return std::get<T>(attrs);
  }
  template <typename T>
  const T& attr() const {
    return std::get<T>(attrs);
  }
  // inputs[i], or "" when the node has fewer inputs.
  const std::string& input(size_t i) const;
  bool has_input(size_t i) const { return !input(i).empty(); }
};

// The most elements a tensor may have, or a value per image (16 GiB of float32): far beyond any
// image classifier. Shape inference refuses a larger value, the importer a larger initializer, so
// that a corrupt dimension cannot ask for an absurd allocation or overflow a size computation.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 32;

// What shape inference knows about a value.
struct ValueInfo {
  DataType dtype = DataType::kFloat32;
  Shape shape;
  // For small int64 (and bool, as 0/1) tensors whose contents are known before running (the shape
  // code of an export: Shape/Gather/Concat/Mul/Where... chains): the values, where
  // Shape::batch_times(k) stands for k times the batch size.
  std::optional<std::vector<int64_t>> known_values;
};

// Scales a model gives itself through QuantizeLinear/DequantizeLinear pairs, recorded when the
// pairs are folded away (fold_qdq): the INT8 scale of an activation by value name, and one INT8
// scale per output channel of a weight by initializer name (real weight = scale * q). INT8/FP8
// lowering uses them instead of calibrated ranges.
struct ExplicitQuantization {
  std::map<std::string, float> activation_scales;
  std::map<std::string, std::vector<float>> weight_scales;
  bool empty() const { return activation_scales.empty() && weight_scales.empty(); }
};

class Graph {
 public:
  std::string name;
  int64_t opset = 0;
  std::vector<Node> nodes;          // topological order
  std::vector<std::string> inputs;  // runtime inputs (never initializers)
  std::vector<std::string> outputs;
  std::map<std::string, Tensor> initializers;   // weights and constants
  std::map<std::string, ValueInfo> values;      // inputs, outputs and every intermediate
  std::map<std::string, std::string> metadata;  // ONNX metadata_props (e.g. preprocess.*)
  ExplicitQuantization quantization;            // from folded Q/DQ pairs; empty for float models

  bool is_initializer(const std::string& value) const { return initializers.count(value) != 0; }
  const Tensor* initializer(const std::string& value) const;
  const ValueInfo* value(const std::string& name) const;

  // Index of the node that produces `value`, or -1 (graph input, initializer or unknown).
  int producer(const std::string& value) const;
  // Indices of nodes that read `value`.
  std::vector<int> consumers(const std::string& value) const;
  // Readers of `value` plus one if it is a graph output.
  int use_count(const std::string& value) const;
  bool is_graph_output(const std::string& value) const;

  // Replaces every use of `from` (node inputs and graph outputs) with `to`.
  void replace_uses(const std::string& from, const std::string& to);
  // Removes nodes whose outputs nobody uses, and initializers nobody reads.
  void remove_dead_code();
  // A name not yet used by any value, node or initializer: "<base>", "<base>_1", ...
  std::string unique_name(const std::string& base) const;

  // Checks structure: unique node outputs, every input defined before use, outputs produced.
  Status validate() const;
  // Recomputes `values` for every node output from the graph inputs and initializers.
  Status infer_shapes();
};

// One axis of an ONNX Slice resolved against a dimension of size `dim` (ONNX's clamping rules:
// negative starts and ends count from the end, then clamp to the dimension; a negative step walks
// backwards): output element i reads element first + i * step; `count` elements.
struct SliceRange {
  int64_t first = 0, count = 0, step = 1;
};
// kInvalidArgument for a zero step.
Result<SliceRange> resolve_slice(int64_t dim, int64_t start, int64_t end, int64_t step);

// True when `node` is a Softmax over axis 1 of [N, C] or [N, C, 1, ..., 1]: a classifier's
// probabilities over its classes (what classify prints as they are, and what the GPU engine runs
// in its output step).
bool softmax_over_classes(const Graph& graph, const Node& node);

// Output shapes (and known int64 values) of one node, given its inputs' infos. Used by
// Graph::infer_shapes and by backends that bind a concrete batch size.
// `inputs[i]` is nullptr for an absent optional input.
Result<std::vector<ValueInfo>> infer_node(const Node& node, const std::vector<const ValueInfo*>& inputs,
                                          const Graph& graph);

}  // namespace gpulab
