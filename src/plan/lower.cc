#include "plan/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <variant>

#include "core/half.h"
#include "core/log.h"
#include "core/quant.h"
#include "gpulab/version.h"
#include "graph/cost.h"
#include "plan/lower_quant.h"
#include "plan/lower_views.h"

namespace gpulab {

std::vector<std::byte> convert_floats(std::span<const float> values, DataType dtype) {
  std::vector<std::byte> out(values.size() * dtype_size(dtype));
  if (dtype == DataType::kFloat32) {
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  if (dtype == DataType::kInt8 || dtype == DataType::kFp8E4M3) {
    for (size_t i = 0; i < values.size(); ++i)
      out[i] = static_cast<std::byte>(dtype == DataType::kFp8E4M3
                                          ? float_to_e4m3(values[i])
                                          : static_cast<uint8_t>(quantize_int8(values[i], 1.0f)));
    return out;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits =
        dtype == DataType::kFloat16 ? float_to_half_bits(values[i]) : float_to_bf16_bits(values[i]);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

std::vector<float> floats_from_bytes(std::span<const std::byte> bytes, DataType dtype) {
  if (dtype == DataType::kFloat32) {
    std::vector<float> out(bytes.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  if (dtype == DataType::kInt8 || dtype == DataType::kFp8E4M3) {
    std::vector<float> out(bytes.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const auto byte = static_cast<uint8_t>(bytes[i]);
      out[i] =
          dtype == DataType::kFp8E4M3 ? e4m3_to_float(byte) : static_cast<float>(static_cast<int8_t>(byte));
    }
    return out;
  }
  if (dtype != DataType::kFloat16 && dtype != DataType::kBFloat16) return {};
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    out[i] = dtype == DataType::kFloat16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  return out;
}

float round_to_dtype(float value, DataType dtype) {
  if (dtype == DataType::kFloat16) return half_bits_to_float(float_to_half_bits(value));
  if (dtype == DataType::kBFloat16) return bf16_bits_to_float(float_to_bf16_bits(value));
  return value;
}

namespace {

// Channels of an input value of `dtype` holding `channels`: a whole number of 16-byte vectors
// (4 float32, 8 float16/bfloat16 or 16 int8/fp8e4m3), as the tensor cores want them.
int64_t padded_channels(int64_t channels, DataType dtype) {
  const int64_t multiple = 16 / static_cast<int64_t>(dtype_size(dtype));
  return (channels + multiple - 1) / multiple * multiple;
}

// A float32 initializer whose values FP16 holds without overflow (finite, |v| <= 65504).
bool fits_fp16(const Tensor* t) {
  if (t == nullptr || t->dtype() != DataType::kFloat32) return false;
  const std::span<const float> v = t->f32();
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x) && std::fabs(x) <= 65504.0f; });
}

}  // namespace

int64_t padded_input_channels(int64_t channels, Precision precision) {
  return channels >= 8 ? channels : padded_channels(channels, storage_dtype(precision));
}

std::map<std::string, Precision> default_layer_precision(const Graph& graph, Precision precision) {
  std::map<std::string, Precision> out;
  if (precision != Precision::kBf16 && !is_quantized(precision)) return out;
  const auto is_depthwise = [&](int index) {
    if (index < 0) return false;
    const Node& n = graph.nodes[static_cast<size_t>(index)];
    return n.op == OpType::kConv && std::holds_alternative<ConvAttrs>(n.attrs) &&
           n.attr<ConvAttrs>().groups > 1;
  };
  for (const Node& node : graph.nodes) {
    if (node.op != OpType::kConv || !std::holds_alternative<ConvAttrs>(node.attrs)) continue;
    const auto& a = node.attr<ConvAttrs>();
    // The linear bottleneck of an inverted residual block: a projection without activation
    // that reads a depthwise convolution's output and feeds the residual stream.
    const bool projection =
        a.groups == 1 && a.activation == Activation::kNone && is_depthwise(graph.producer(node.input(0)));
    // TF32, not FP32: the error comes from rounding these layers' weights to BF16's 8 significant
    // bits (9 taps per depthwise output do not average it out; projections feed the residual
    // stream); TF32 keeps 11, with FP32 storage, and still runs on the tensor cores, where FP32
    // arithmetic would run these 46% of MobileNetV2's FLOPs on the CUDA cores. Networks without
    // depthwise convolutions (ResNets) are left alone: they meet the BF16 bound as they are.
    // The stem: its rounding error reaches every later layer (the largest single gain left).
    // TF32; or FP16 where a max pool alone reads it (ResNet's stem, which the fused stem kernel
    // runs: convolution, ReLU and pool in one kernel, where a TF32 stem ran cuDNN's convolution,
    // wrote a float32 output four times the pool's and pooled it in a second step) and its
    // weights and bias are float32 values within FP16's range. FP16 keeps TF32's 11 significant
    // bits, and the stem reads the normalized image, far inside FP16's range.
    const bool stem =
        std::find(graph.inputs.begin(), graph.inputs.end(), node.input(0)) != graph.inputs.end();
    const auto pooled = [&] {  // a scan of the graph: asked of the stem alone
      const std::vector<int> readers = graph.consumers(node.outputs[0]);
      return readers.size() == 1 && graph.nodes[static_cast<size_t>(readers[0])].op == OpType::kMaxPool;
    };
    const bool fp16_stem = stem && pooled() && fits_fp16(graph.initializer(node.input(1))) &&
                           (!node.has_input(2) || fits_fp16(graph.initializer(node.input(2))));
    // INT8/FP8 plans: the pooled stem alone, in FP16, for the fused stem. Its 8-bit form ran as
    // three steps (quantizing input conversion, convolution, 8-bit max pool): 2.8 of ResNet-18's
    // 6.6 ms at batch 256 on the H200 (2026-12-06 at 5b3cf93), where FP16's fused stem takes the
    // input as it is; the pool's output is quantized for layer1.
    if (is_quantized(precision)) {
      if (fp16_stem) out[node.name] = Precision::kFp16;
    } else if (stem) {
      out[node.name] = fp16_stem ? Precision::kFp16 : Precision::kTf32;
    } else if (a.groups > 1 || projection) {
      out[node.name] = Precision::kTf32;
    }
  }
  return out;
}

std::optional<StemRewrite> stem_space_to_depth(const Graph& graph, const BuildOptions& options) {
  if (!options.stem_space_to_depth || graph.inputs.size() != 1) return std::nullopt;
  const std::vector<int> readers = graph.consumers(graph.inputs[0]);
  if (readers.size() != 1) return std::nullopt;
  const Node& conv = graph.nodes[static_cast<size_t>(readers[0])];
  if (conv.op != OpType::kConv || !std::holds_alternative<ConvAttrs>(conv.attrs) ||
      conv.input(0) != graph.inputs[0])
    return std::nullopt;
  const auto& a = conv.attr<ConvAttrs>();
  const Tensor* w = graph.initializer(conv.input(1));
  const ValueInfo* in = graph.value(graph.inputs[0]);
  const ValueInfo* out = graph.value(conv.outputs[0]);
  if (!w || w->shape().rank() != 4 || !in || in->shape.rank() != 4 || !out || out->shape.rank() != 4)
    return std::nullopt;
  const int64_t b = a.stride.h, channels = in->shape[1];
  if (a.stride.w != b || b < 2 || b > 4 || a.groups != 1 || a.dilation.h != 1 || a.dilation.w != 1 ||
      a.kernel.h < b || a.kernel.w < b || b * b * channels > 16 || a.pads.top >= 64 || a.pads.left >= 64)
    return std::nullopt;
  StemRewrite r;
  r.node = conv.name;
  r.layout = SpaceToDepth{b, a.pads.top, a.pads.left};
  // Output (oy, ox) reads s2d pixels oy .. oy + ceil(k / b) - 1; taps past k have zero weights.
  r.h = out->shape[2] + (a.kernel.h + b - 1) / b - 1;
  r.w = out->shape[3] + (a.kernel.w + b - 1) / b - 1;
  r.c_valid = b * b * channels;
  return r;
}

namespace {

struct Lowering {
  Lowering(const Graph& g, const BuildOptions& o)
      : graph(g),
        options(o),
        dtype(storage_dtype(fallback_precision(o.precision))),
        quantized(is_quantized(o.precision)),
        qdtype(storage_dtype(o.precision)) {}
  const Graph& graph;
  const BuildOptions& options;
  Plan plan;
  std::map<std::string, int> value_of;  // graph value name -> plan value index
  DataType dtype;  // of the steps that compute in float: FP16 in an INT8/FP8 plan (lower_quant.h)
  // INT8/FP8 plans: the 8-bit type, the graph values stored in it (quantized_values) and the scale
  // of each (activation_scale).
  bool quantized = false;
  DataType qdtype;
  std::set<std::string> q_values;
  std::map<std::string, float> scales;
  std::map<std::string, Precision> policy;        // default_layer_precision()
  std::map<std::pair<int, DataType>, int> casts;  // (value, dtype) -> its kCast copy
  StemRewrite stem;                               // node "" when the stem is not rewritten
  bool softmax_output = false;                    // lower_softmax: kOutput applies the Softmax
  std::unique_ptr<ViewLowering> views;            // the transformer ops (lower_views.h)
  // Graph values that flatten an HxWxC value with H or W > 1: the plan value keeps its NHWC
  // order, which differs from ONNX's CHW flattening.
  std::set<std::string> spatial_views;

  Status unsupported(const Node& node, const std::string& what) {
    return Status::unsupported(
        fmt::format("plan: node '{}' ({}): {}. Run it with --device cpu, or re-export the "
                    "model without it.",
                    node.name, op_name(node.op), what));
  }

  // The plan value of the node's input `i`. A flattened view kept in NHWC layout (spatial_views)
  // may be read only where `view_ok`: by a Gemm's A, or by another view.
  Result<int> input_value(const Node& node, size_t i, bool view_ok = false) {
    if (!view_ok && spatial_views.contains(node.input(i)))
      return unsupported(node, fmt::format("it reads '{}', a flattened tensor that the plan keeps in NHWC "
                                           "layout (more than one pixel, or padded channels), which on the "
                                           "GPU only a Gemm may read",
                                           node.input(i)));
    auto it = value_of.find(node.input(i));
    if (it == value_of.end() && views)
      if (auto v = views->canonical(node, node.input(i))) return *v;
    if (it == value_of.end())
      return unsupported(node, fmt::format("input '{}' is not an activation", node.input(i)));
    return it->second;
  }

  // A new NHWC value for the graph value `name` (shape [N, C, H, W] or [N, C]).
  Result<int> add_value(const Node& node, const std::string& name) { return add_value(node, name, dtype); }
  Result<int> add_value(const Node& node, const std::string& name, DataType type) {
    const ValueInfo* info = graph.value(name);
    if (!info) return unsupported(node, "output '" + name + "' has no inferred shape");
    const auto& d = info->shape.dims;
    PlanValue v;
    v.name = name;
    v.dtype = type;
    if (is_quantized_dtype(type)) {
      const auto scale = scales.find(name);
      if (scale == scales.end()) return unsupported(node, "output '" + name + "' has no 8-bit scale");
      v.scale = scale->second;
    }
    if (d.size() == 4) {
      v.c = v.c_valid = d[1];
      v.h = d[2];
      v.w = d[3];
    } else if (d.size() == 2) {
      v.c = v.c_valid = d[1];
    } else {
      return unsupported(
          node, fmt::format("output '{}' has shape {}; only [N,C,H,W] and [N,C] run on the GPU", name,
                            info->shape.to_string()));
    }
    if (v.c < 1 || v.h < 1 || v.w < 1) return unsupported(node, "output shape " + info->shape.to_string());
    plan.values.push_back(v);
    const int index = static_cast<int>(plan.values.size()) - 1;
    value_of[name] = index;
    return index;
  }

  int add_weight(std::string name, Shape shape, std::span<const float> values) {
    return add_weight(std::move(name), std::move(shape), values, dtype);
  }
  int add_weight(std::string name, Shape shape, std::span<const float> values, DataType type) {
    plan.weights.push_back(PlanWeight{std::move(name), type, std::move(shape), convert_floats(values, type)});
    return static_cast<int>(plan.weights.size()) - 1;
  }

  // INT8/FP8 plans: whether a Conv or Gemm runs in the plan's 8-bit precision.
  bool quantized_layer(const Node& node) const {
    return quantized && (node.op == OpType::kConv || node.op == OpType::kGemm) &&
           layer_precision(node) == options.precision;
  }
  // The bias weight of a Conv/Gemm with `k` outputs: the model's (`bias`, stored in `type`) plus,
  // for a layer in 8 bits (`q`), its BuildOptions::bias_correction (one value per output channel;
  // a correction of another length was made for another model and is not used), which gives a
  // layer without a bias one (float32, "<node>.bias_correction"). -1 when there is neither.
  int add_bias(const Node& node, bool q, std::optional<std::vector<float>> bias, int64_t k, DataType type) {
    const auto it = q ? options.bias_correction.find(node.name) : options.bias_correction.end();
    const bool corrected = it != options.bias_correction.end();
    if (!bias && !corrected) return -1;
    const std::string name = bias ? node.input(2) : node.name + ".bias_correction";
    if (!bias) {
      bias.emplace(static_cast<size_t>(k), 0.0f);
      type = DataType::kFloat32;
    }
    if (corrected && it->second.size() == bias->size())
      for (size_t c = 0; c < bias->size(); ++c) (*bias)[c] += it->second[c];
    return add_weight(name, Shape{k}, *bias, type);
  }
  // The quantized weight of a layer [channels, per_channel] and its scales (lower_quant.h).
  void add_quantized_weight(PlanStep& st, const Node& node, Shape shape, std::span<const float> values) {
    const auto it = graph.quantization.weight_scales.find(node.input(1));
    const int64_t channels = shape[0];
    QuantizedWeight q = quantize_weight(values, channels, qdtype,
                                        it == graph.quantization.weight_scales.end() ? nullptr : &it->second);
    plan.weights.push_back(PlanWeight{node.input(1), qdtype, std::move(shape), std::move(q.bytes)});
    st.weight = static_cast<int>(plan.weights.size()) - 1;
    st.weight_scale = add_weight(node.input(1) + ".scale", Shape{channels}, q.scales, DataType::kFloat32);
  }
  // The type a quantized layer writes `value` in: 8 bits when a reader reads it so, else float.
  DataType quantized_output_dtype(const std::string& value) const {
    return q_values.contains(value) ? qdtype : dtype;
  }

  // The precision of a layer: its --layer-precision override, else the precision policy's
  // choice, else the plan's.
  Precision layer_precision(const Node& node) const {
    if (auto it = options.layer_precision.find(node.name); it != options.layer_precision.end())
      return it->second;
    if (auto it = policy.find(node.name); it != policy.end()) return it->second;
    return options.precision;
  }

  // Value `v` in `type`: `v` itself when it has that type, else one kCast step's output, made on
  // first use and shared by every later reader (a float32 value a layer wrote is read as is by
  // the float32 layers after it, never rounded to the plan's dtype and widened again).
  int value_as(const Node& node, int v, DataType type) {
    if (plan.values[v].dtype == type) return v;
    if (auto it = casts.find({v, type}); it != casts.end()) return it->second;
    PlanValue copy = plan.values[v];
    copy.name = copy.name + ".to_" + std::string(dtype_name(type));
    copy.dtype = type;
    // A quantizing cast stores the value at its calibrated scale (every value read in 8 bits has
    // one: quantized_values, checked before lowering); a dequantizing one needs none.
    const auto scale = scales.find(plan.values[v].name);
    copy.scale = is_quantized_dtype(type) && scale != scales.end() ? scale->second : 0.0f;
    plan.values.push_back(copy);
    const int out = static_cast<int>(plan.values.size()) - 1;
    PlanStep st;
    st.kind = StepKind::kCast;
    st.name = node.name + ".cast_" + std::string(dtype_name(type));
    st.inputs = {v};
    st.output = out;
    st.precision = options.precision;
    plan.steps.push_back(std::move(st));
    casts[{v, type}] = out;
    casts[{out, plan.values[v].dtype}] = v;
    return out;
  }
  // The node's input `i` as a value of the plan's storage dtype.
  Result<int> plan_input(const Node& node, size_t i, bool view_ok = false) {
    GPULAB_ASSIGN_OR_RETURN(int v, input_value(node, i, view_ok));
    return value_as(node, v, dtype);
  }

  PlanStep step(StepKind kind, const Node& node) {
    PlanStep s;
    s.kind = kind;
    s.name = node.name;
    s.precision = fallback_precision(options.precision);  // 8-bit steps say so themselves
    s.flops_per_image = node_cost(graph, node, 1).flops;
    return s;
  }

  Status lower_conv(const Node& node) {
    GPULAB_ASSIGN_OR_RETURN(int x, input_value(node, 0));
    const Tensor* w = graph.initializer(node.input(1));
    if (!w || w->dtype() != DataType::kFloat32 || w->shape().rank() != 4)
      return unsupported(node, "the weight is not a constant float [K, C/groups, R, S] tensor");
    ConvAttrs attrs = node.attr<ConvAttrs>();
    const int64_t k = w->shape()[0], cg = w->shape()[1], r = w->shape()[2], s = w->shape()[3];
    const PlanValue xin = plan.values[x];
    // The stem over a space-to-depth input (see SpaceToDepth): tap (ri, si) of channel ci moves
    // to tap (ri / b, si / b) of channel ((ri % b) * b + si % b) * C + ci; b = 1 is the identity.
    const bool s2d = node.name == stem.node;
    const int64_t b = s2d ? stem.layout.block : 1;
    if (attrs.groups < 1 || cg * attrs.groups * b * b != xin.c_valid)
      return unsupported(node, fmt::format("weight {} does not match {} input channels in {} groups",
                                           w->shape().to_string(), xin.c_valid, attrs.groups));
    if (attrs.groups > 1 && xin.c != xin.c_valid)
      return unsupported(node, "a grouped convolution on a channel-padded input");
    const int64_t c_stored = attrs.groups == 1 ? xin.c : cg;  // per-group channels in the weight
    const int64_t rb = (r + b - 1) / b, sb = (s + b - 1) / b;
    std::vector<float> krsc(static_cast<size_t>(k * rb * sb * c_stored), 0.0f);
    const auto src = w->f32();
    for (int64_t ko = 0; ko < k; ++ko)
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t ri = 0; ri < r; ++ri)
          for (int64_t si = 0; si < s; ++si)
            krsc[((ko * rb + ri / b) * sb + si / b) * c_stored + ((ri % b) * b + si % b) * cg + ci] =
                src[((ko * cg + ci) * r + ri) * s + si];
    if (s2d) {
      attrs.kernel = {rb, sb};
      attrs.stride = {1, 1};
      attrs.pads = {};
    }
    // A layer in FP32/TF32 in an FP16/BF16 plan reads float32 copies of its inputs (kCast
    // steps) and writes a float32 value; readers of another dtype get a cast of it.
    const Precision precision = layer_precision(node);
    const bool q = quantized_layer(node);
    const DataType layer_dtype = q ? qdtype : storage_dtype(precision);
    // FP16 layers in BF16 plans: the policy's stem (default_layer_precision).
    const bool fp16_in_bf16 = layer_dtype == DataType::kFloat16 && dtype == DataType::kBFloat16;
    if (!q && layer_dtype != dtype && layer_dtype != DataType::kFloat32 && !fp16_in_bf16)
      return unsupported(
          node, fmt::format("--layer-precision {} in a {} plan; only {} overrides are supported",
                            precision_name(precision), precision_name(options.precision),
                            quantized || dtype == DataType::kBFloat16 ? "fp32/tf32/fp16" : "fp32/tf32"));
    PlanStep st = step(StepKind::kConv, node);
    st.precision = precision;
    st.conv = attrs;
    st.inputs = {value_as(node, x, layer_dtype)};
    if (q)
      add_quantized_weight(st, node, Shape{k, rb, sb, c_stored}, krsc);
    else
      st.weight = add_weight(node.input(1), Shape{k, rb, sb, c_stored}, krsc, layer_dtype);
    if (node.has_input(2)) {
      const Tensor* b = graph.initializer(node.input(2));
      if (!b || b->dtype() != DataType::kFloat32 || b->numel() != k)
        return unsupported(node, "the bias is not a constant float tensor of K values");
      // BF16 layers keep their bias in float32: BF16's 8-bit significand would shift every output
      // of a channel by the same rounding error (the epilogue adds it in FP32 either way).
      // INT8/FP8 layers add it in float32 in their epilogue (src/core/quant.h).
      const DataType bias_dtype = layer_dtype == DataType::kBFloat16 || q ? DataType::kFloat32 : layer_dtype;
      st.bias = add_bias(node, q, std::vector<float>(b->f32().begin(), b->f32().end()), k, bias_dtype);
    } else {
      st.bias = add_bias(node, q, std::nullopt, k, DataType::kFloat32);
    }
    if (attrs.has_residual) {
      GPULAB_ASSIGN_OR_RETURN(int res, input_value(node, 3));
      st.inputs.push_back(value_as(node, res, layer_dtype));
    }
    GPULAB_ASSIGN_OR_RETURN(
        int y_index,
        add_value(node, node.outputs[0], q ? quantized_output_dtype(node.outputs[0]) : layer_dtype));
    const PlanValue y = plan.values[y_index];
    if (y.c != k) return unsupported(node, fmt::format("output has {} channels, weight {}", y.c, k));
    if (attrs.has_residual) {
      const auto& rv = plan.values[st.inputs[1]];
      if (rv.h != y.h || rv.w != y.w || rv.c != y.c)
        return unsupported(node, "residual shape differs from output");
    }
    st.output = y_index;
    plan.steps.push_back(std::move(st));
    return Status::ok();
  }

  Status lower_gemm(const Node& node) {
    const bool q = quantized_layer(node);
    const Precision precision = layer_precision(node);
    if (quantized && !q && storage_dtype(precision) != dtype &&
        storage_dtype(precision) != DataType::kFloat32)
      return unsupported(node,
                         fmt::format("--layer-precision {} in a {} plan; only fp32/tf32/fp16 overrides are "
                                     "supported",
                                     precision_name(precision), precision_name(options.precision)));
    GPULAB_ASSIGN_OR_RETURN(int x0, input_value(node, 0, /*view_ok=*/true));
    // Layers in FP32/TF32 run on float32 in an INT8/FP8 plan, as convolutions do; other plans keep
    // their Gemm in the plan's type.
    const DataType gemm_dtype = q ? qdtype : quantized ? storage_dtype(precision) : dtype;
    const int x = value_as(node, x0, gemm_dtype);
    const auto& a = node.attr<GemmAttrs>();
    const PlanValue xin = plan.values[x];
    if (a.trans_a) return unsupported(node, "transA = 1");
    // A flattened HxWxC input (a spatial view) is read in its NHWC layout: plan feature
    // (y * W + x) * C + c holds ONNX's feature c * H * W + y * W + x, and a padding channel
    // (c >= C valid) gets zero weights.
    const bool spatial = spatial_views.contains(node.input(0));
    if (!spatial && (xin.h != 1 || xin.w != 1 || xin.c != xin.c_valid))
      return unsupported(node, "its input is not a flat [N, features] tensor");
    const int64_t pixels = xin.h * xin.w;
    const int64_t features = pixels * xin.c_valid;  // ONNX's
    const Tensor* b = graph.initializer(node.input(1));
    if (!b || b->dtype() != DataType::kFloat32 || b->shape().rank() != 2)
      return unsupported(node, "B is not a constant float matrix");
    const int64_t out = a.trans_b ? b->shape()[0] : b->shape()[1];
    const int64_t in = a.trans_b ? b->shape()[1] : b->shape()[0];
    if (in != features)
      return unsupported(node,
                         fmt::format("B {} does not take {} features", b->shape().to_string(), features));
    const int64_t stored = pixels * xin.c;  // the plan's, padding included
    std::vector<float> wt(static_cast<size_t>(out * stored), 0.0f);
    const auto src = b->f32();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < stored; ++i) {
        const int64_t channel = i % xin.c, pixel = i / xin.c;
        if (channel >= xin.c_valid) continue;
        const int64_t from = channel * pixels + pixel;  // ONNX's feature
        wt[o * stored + i] = a.alpha * (a.trans_b ? src[o * in + from] : src[from * out + o]);
      }
    PlanStep st = step(StepKind::kGemm, node);
    if (quantized) st.precision = precision;
    st.inputs = {x};
    if (q)
      add_quantized_weight(st, node, Shape{out, stored}, wt);
    else
      st.weight = add_weight(node.input(1), Shape{out, stored}, wt, gemm_dtype);
    if (node.has_input(2)) {
      const Tensor* c = graph.initializer(node.input(2));
      if (!c || c->dtype() != DataType::kFloat32 || c->numel() != out)
        return unsupported(node, "C is not a constant float vector of the output size");
      std::vector<float> bias(c->f32().begin(), c->f32().end());
      for (auto& v : bias) v *= a.beta;
      st.bias = add_bias(node, q, std::move(bias), out, q ? DataType::kFloat32 : gemm_dtype);
    } else {
      st.bias = add_bias(node, q, std::nullopt, out, DataType::kFloat32);
    }
    GPULAB_ASSIGN_OR_RETURN(st.output, add_value(node, node.outputs[0],
                                                 q ? quantized_output_dtype(node.outputs[0]) : gemm_dtype));
    plan.steps.push_back(std::move(st));
    return Status::ok();
  }

  // Add and Mul of two activations of one shape, or of an activation and one value per image and
  // channel ([N, C, 1, 1]: a squeeze-and-excitation scale), which the kernel broadcasts over the
  // activation's pixels. Both ops commute, so the broadcast value becomes the second input.
  Status lower_binary(const Node& node) {
    GPULAB_ASSIGN_OR_RETURN(int a, plan_input(node, 0));
    GPULAB_ASSIGN_OR_RETURN(int b, plan_input(node, 1));
    const auto per_channel_of = [this](int v, int other) {
      const PlanValue &x = plan.values[v], &o = plan.values[other];
      return x.h == 1 && x.w == 1 && x.c == o.c && x.c_valid == o.c_valid && (o.h != 1 || o.w != 1);
    };
    if (per_channel_of(a, b)) std::swap(a, b);
    const PlanValue &va = plan.values[a], &vb = plan.values[b];
    const bool same = va.h == vb.h && va.w == vb.w && va.c == vb.c && va.c_valid == vb.c_valid;
    if (!same && !per_channel_of(b, a))
      return unsupported(node, fmt::format("broadcasting [{}x{}x{}] against [{}x{}x{}] (HxWxC); only one "
                                           "value per image and channel broadcasts",
                                           va.h, va.w, va.c_valid, vb.h, vb.w, vb.c_valid));
    PlanStep st = step(node.op == OpType::kAdd ? StepKind::kAdd : StepKind::kMul, node);
    st.inputs = {a, b};
    GPULAB_ASSIGN_OR_RETURN(st.output, add_value(node, node.outputs[0]));
    plan.values[st.output].c = plan.values[a].c;  // keeps a's channel padding
    plan.steps.push_back(std::move(st));
    return Status::ok();
  }

  // A Softmax over the classes of the model's output: kOutput applies it to the float32 logits
  // (PlanStep::softmax), so the plan's last value stays the logits. A Softmax anywhere else has
  // no GPU step.
  Status lower_softmax(const Node& node) {
    GPULAB_ASSIGN_OR_RETURN(int x, input_value(node, 0));
    if (node.outputs[0] != graph.outputs[0] || !graph.consumers(node.outputs[0]).empty())
      return unsupported(node,
                         "a Softmax before the model's output (the GPU engine applies Softmax to "
                         "the output only)");
    if (!softmax_over_classes(graph, node)) {
      const ValueInfo* in = graph.value(node.input(0));
      return unsupported(node, fmt::format("a Softmax over axis {} of {}; the GPU engine normalizes the "
                                           "classes of [N, classes] only",
                                           node.attr<AxisAttrs>().axis, in ? in->shape.to_string() : "?"));
    }
    value_of[node.outputs[0]] = x;
    softmax_output = true;
    return Status::ok();
  }

  // Concat along the channels of activations of one pixel size: one kConcat step, whose inputs the
  // runtime copies into slices of the output's channels.
  Status lower_concat(const Node& node) {
    const ValueInfo* out = graph.value(node.outputs[0]);
    const int64_t rank = out ? out->shape.rank() : 0;
    const int64_t axis =
        node.attr<AxisAttrs>().axis < 0 ? node.attr<AxisAttrs>().axis + rank : node.attr<AxisAttrs>().axis;
    if (axis != 1)
      return unsupported(node,
                         fmt::format("a concatenation along axis {} of {}; the GPU engine joins channels "
                                     "(axis 1) only",
                                     node.attr<AxisAttrs>().axis, out ? out->shape.to_string() : "?"));
    PlanStep st = step(StepKind::kConcat, node);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      GPULAB_ASSIGN_OR_RETURN(int x, plan_input(node, i));
      st.inputs.push_back(x);  // a padded input contributes its valid channels
    }
    GPULAB_ASSIGN_OR_RETURN(st.output, add_value(node, node.outputs[0]));
    plan.steps.push_back(std::move(st));
    return Status::ok();
  }

  Status lower_node(const Node& node) {
    if (views->lowers(node)) return views->lower(node);
    switch (node.op) {
      case OpType::kConv: return lower_conv(node);
      case OpType::kGemm: return lower_gemm(node);
      case OpType::kMaxPool:
      case OpType::kAveragePool: {
        GPULAB_ASSIGN_OR_RETURN(int x, input_value(node, 0));
        // A max pool of quantized numbers is exact: it runs in 8 bits, at its input's scale. A max
        // pool of floats runs in its input's type too: rounding is monotonic, so the max of the
        // rounded values is the rounded max, and pooling first casts a quarter of the pixels (an
        // FP16 or TF32 stem's output in a BF16 plan; the FP16 one can then fuse with the pool).
        const bool q = node.op == OpType::kMaxPool && is_quantized_dtype(plan.values[x].dtype);
        const bool keep = node.op == OpType::kMaxPool;
        if (!keep) x = value_as(node, x, dtype);
        PlanStep st = step(node.op == OpType::kMaxPool ? StepKind::kMaxPool : StepKind::kAveragePool, node);
        st.pool = node.attr<PoolAttrs>();
        st.inputs = {x};
        if (q) {
          st.precision = options.precision;
          scales[node.outputs[0]] = plan.values[x].scale;
        }
        GPULAB_ASSIGN_OR_RETURN(st.output,
                                add_value(node, node.outputs[0], keep ? plan.values[x].dtype : dtype));
        plan.values[st.output].c = plan.values[x].c;  // pooling keeps channel padding
        plan.steps.push_back(std::move(st));
        return Status::ok();
      }
      case OpType::kGlobalAveragePool: {
        GPULAB_ASSIGN_OR_RETURN(int x, input_value(node, 0));
        // Quantized numbers are summed exactly (int32) and written at the output's scale, or in
        // float when no reader reads the mean in 8 bits.
        const bool q = is_quantized_dtype(plan.values[x].dtype);
        if (!q) x = value_as(node, x, dtype);
        PlanStep st = step(StepKind::kGlobalAveragePool, node);
        st.inputs = {x};
        if (q) st.precision = options.precision;
        GPULAB_ASSIGN_OR_RETURN(
            st.output, add_value(node, node.outputs[0], q ? quantized_output_dtype(node.outputs[0]) : dtype));
        plan.values[st.output].c = plan.values[x].c;
        plan.steps.push_back(std::move(st));
        return Status::ok();
      }
      case OpType::kRelu:
      case OpType::kClip: {
        GPULAB_ASSIGN_OR_RETURN(int x, plan_input(node, 0));
        PlanStep st = step(StepKind::kActivation, node);
        st.inputs = {x};
        if (node.op == OpType::kRelu) {
          st.activation = Activation::kRelu;
        } else {
          st.activation = Activation::kClip;
          st.clip_min = node.attr<ClipAttrs>().min;
          st.clip_max = node.attr<ClipAttrs>().max;
        }
        GPULAB_ASSIGN_OR_RETURN(st.output, add_value(node, node.outputs[0]));
        plan.values[st.output].c = plan.values[x].c;
        plan.steps.push_back(std::move(st));
        return Status::ok();
      }
      case OpType::kAdd:
      case OpType::kMul: return lower_binary(node);
      case OpType::kSigmoid:
      case OpType::kHardSigmoid:
      case OpType::kHardSwish:
      case OpType::kQuantizeDequantize: {
        GPULAB_ASSIGN_OR_RETURN(int x, plan_input(node, 0));
        PlanStep st = step(StepKind::kPointwise, node);
        st.inputs = {x};
        st.pointwise = node.op == OpType::kSigmoid       ? PointwiseFn::kSigmoid
                       : node.op == OpType::kHardSigmoid ? PointwiseFn::kHardSigmoid
                       : node.op == OpType::kHardSwish   ? PointwiseFn::kHardSwish
                                                         : PointwiseFn::kFakeQuantize;
        if (node.op == OpType::kHardSigmoid) {
          st.alpha = node.attr<HardSigmoidAttrs>().alpha;
          st.beta = node.attr<HardSigmoidAttrs>().beta;
        }
        if (node.op == OpType::kQuantizeDequantize) {  // a Q/DQ pair fold_qdq left: its float equivalent
          const auto& q = node.attr<QuantizeAttrs>();
          if (q.scale.size() != 1)
            return unsupported(node, fmt::format("fake quantization with {} scales (per channel) of an "
                                                 "activation; the GPU engine quantizes per tensor",
                                                 q.scale.size()));
          st.alpha = q.scale[0];
          st.beta = static_cast<float>(q.zero_point[0]);
          st.clip_min = static_cast<float>(q.qmin);
          st.clip_max = static_cast<float>(q.qmax);
        }
        GPULAB_ASSIGN_OR_RETURN(st.output, add_value(node, node.outputs[0]));
        plan.values[st.output].c = plan.values[x].c;
        plan.steps.push_back(std::move(st));
        return Status::ok();
      }
      case OpType::kSoftmax: return lower_softmax(node);
      case OpType::kConcat: return lower_concat(node);
      case OpType::kFlatten:
      case OpType::kReshape:
      case OpType::kIdentity:
      case OpType::kDropout: {
        GPULAB_ASSIGN_OR_RETURN(int x, input_value(node, 0, /*view_ok=*/true));
        const auto& v = plan.values[x];
        const ValueInfo* out = graph.value(node.outputs[0]);
        const bool identity = node.op == OpType::kIdentity || node.op == OpType::kDropout;
        const bool to_flat = out && out->shape.rank() == 2 && out->shape[1] == v.h * v.w * v.c_valid;
        // NHWC and NCHW hold a 1x1 spatial tensor in the same order, so a flatten is a view. A
        // larger one (VGG's 7x7x512), or one with padded channels, keeps its NHWC layout: a
        // spatial view, which only a Gemm may read, with its weight's columns permuted to match
        // (lower_gemm).
        if (!identity && !to_flat)
          return unsupported(node, fmt::format("a reshape of [{}x{}x{}] (HxWxC) to {}; the GPU engine only "
                                               "flattens to [N, features]",
                                               v.h, v.w, v.c_valid, out ? out->shape.to_string() : "?"));
        if ((!identity && (v.h > 1 || v.w > 1 || v.c != v.c_valid)) || spatial_views.contains(node.input(0)))
          spatial_views.insert(node.outputs[0]);
        value_of[node.outputs[0]] = x;
        return Status::ok();
      }
      default: return unsupported(node, "no GPU implementation of this op");
    }
  }
};

}  // namespace

Result<Plan> lower_graph(const Graph& graph, const BuildOptions& options) {
  if (options.max_batch < 1 || options.max_batch > (1 << 20))
    return Status::invalid_argument(
        fmt::format("plan: max batch {} is out of range. Use 1..1048576.", options.max_batch));
  if (graph.inputs.size() != 1 || graph.outputs.size() != 1)
    return Status::unsupported(
        fmt::format("plan: the model has {} inputs and {} outputs; the GPU engine runs "
                    "classifiers with one of each.",
                    graph.inputs.size(), graph.outputs.size()));
  Lowering low(graph, options);
  low.views = std::make_unique<ViewLowering>(
      LoweringAccess{graph, options, low.plan, low.dtype, low.value_of,
                     [&low](std::string name, Shape shape, std::span<const float> values, DataType type) {
                       return low.add_weight(std::move(name), std::move(shape), values, type);
                     },
                     [&low](StepKind kind, const Node& node) { return low.step(kind, node); }});
  low.policy = default_layer_precision(graph, options.precision);
  Plan& plan = low.plan;
  plan.gpulab_version = GPULAB_VERSION;
  plan.precision = options.precision;
  plan.max_batch = options.max_batch;
  plan.input_name = graph.inputs[0];
  plan.metadata = graph.metadata;
  plan.output_name = graph.outputs[0];
  const ValueInfo* in = graph.value(graph.inputs[0]);
  if (!in || in->dtype != DataType::kFloat32 || in->shape.rank() != 4 || in->shape[1] < 1 ||
      in->shape[2] < 1 || in->shape[3] < 1)
    return Status::unsupported(fmt::format("plan: input '{}' is not a float [N, C, H, W] tensor ({}).",
                                           graph.inputs[0], in ? in->shape.to_string() : "no shape"));
  plan.input_channels = in->shape[1];
  plan.input_h = in->shape[2];
  plan.input_w = in->shape[3];
  // The input value is stored as its readers compute when they all agree on a float type other
  // than the plan's: float32 for FP32/TF32 layers (rounding the image to the plan's dtype and
  // widening it again would lose what the layer keeps), float16 for the BF16 policy's FP16 stem.
  const std::vector<int> readers = graph.consumers(graph.inputs[0]);
  std::optional<DataType> readers_dtype;
  for (int i : readers) {
    const Node& n = graph.nodes[static_cast<size_t>(i)];
    const DataType t = storage_dtype(low.layer_precision(n));
    if (n.op != OpType::kConv || (readers_dtype && *readers_dtype != t)) {
      readers_dtype.reset();
      break;
    }
    readers_dtype = t;
  }
  if (low.quantized) {
    low.q_values = quantized_values(
        graph, [&low](const Node& n) { return low.quantized_layer(n); },
        [&](const std::string& v) { return activation_scale(graph, options, options.precision, v).is_ok(); });
    for (const std::string& value : low.q_values) {
      GPULAB_ASSIGN_OR_RETURN(low.scales[value], activation_scale(graph, options, options.precision, value));
    }
  }
  const bool quantized_input = low.q_values.contains(graph.inputs[0]);
  const DataType input_dtype = quantized_input                                        ? low.qdtype
                               : readers_dtype && !is_quantized_dtype(*readers_dtype) ? *readers_dtype
                                                                                      : low.dtype;
  PlanStep input_step;
  if (auto stem = stem_space_to_depth(graph, options)) {
    low.stem = *stem;
    input_step.space_to_depth = stem->layout;
    plan.values.push_back(PlanValue{graph.inputs[0], stem->h, stem->w,
                                    padded_channels(stem->c_valid, input_dtype), stem->c_valid, input_dtype});
  } else {
    const int64_t c = plan.input_channels;
    plan.values.push_back(PlanValue{graph.inputs[0], plan.input_h, plan.input_w,
                                    c >= 8 ? c : padded_channels(c, input_dtype), c, input_dtype});
  }
  if (quantized_input) plan.values[0].scale = low.scales.at(graph.inputs[0]);
  low.value_of[graph.inputs[0]] = 0;
  input_step.kind = StepKind::kInput;
  input_step.name = "input";
  input_step.output = 0;
  input_step.precision = quantized_input ? options.precision : fallback_precision(options.precision);
  plan.steps.push_back(input_step);
  for (const auto& [name, precision] : options.layer_precision) {
    // INT8/FP8 plans move Gemms too (the classifier head); others only convolutions. (A named
    // capture: clang refuses a structured binding in a lambda.)
    const bool found =
        std::any_of(graph.nodes.begin(), graph.nodes.end(), [&wanted = name, &low](const Node& n) {
          return n.name == wanted && (n.op == OpType::kConv || (low.quantized && n.op == OpType::kGemm));
        });
    if (!found)
      return Status::invalid_argument(fmt::format(
          "plan: --layer-precision names '{}' ({}), but the model has no {} of that name. "
          "`gpulab inspect` lists the layers.",
          name, precision_name(precision), low.quantized ? "convolution or Gemm" : "convolution"));
    if (is_quantized(precision) && precision != options.precision)
      return Status::invalid_argument(
          fmt::format("plan: --layer-precision {}={} in a {} plan; a layer may move to fp16, fp32 or tf32, "
                      "or stay in the plan's precision.",
                      name, precision_name(precision), precision_name(options.precision)));
  }
  for (const Node& node : graph.nodes) GPULAB_TRY(low.lower_node(node));
  if (!low.policy.empty()) {
    int64_t tf32 = 0, fp16 = 0, extra_bytes = 0;
    for (const auto& [name, precision] : low.policy) {
      if (options.layer_precision.contains(name)) continue;
      ++(precision == Precision::kTf32 ? tf32 : fp16);
      if (precision != Precision::kTf32) continue;  // FP16 weights take BF16's bytes
      for (const PlanStep& s : plan.steps)
        if (s.name == name && s.kind == StepKind::kConv) {
          if (s.weight >= 0) extra_bytes += static_cast<int64_t>(plan.weights[s.weight].bytes.size()) / 2;
          if (s.bias >= 0) extra_bytes += static_cast<int64_t>(plan.weights[s.bias].bytes.size()) / 2;
        }
    }
    log_info(
        "plan: {} precision policy: {} depthwise, linear-bottleneck or stem convolutions run in tf32 "
        "(+{:.2f} MiB of weights), {} stem in fp16; --layer-precision NAME={} keeps one in {}",
        precision_name(options.precision), tf32, extra_bytes / 1048576.0, fp16,
        precision_name(options.precision), precision_name(options.precision));
  }
  if (!low.value_of.contains(graph.outputs[0])) {
    const Node* last = graph.nodes.empty() ? nullptr : &graph.nodes.back();
    if (auto v = last ? low.views->canonical(*last, graph.outputs[0]) : std::nullopt) GPULAB_TRY(v->status());
  }
  auto out = low.value_of.find(graph.outputs[0]);
  if (out == low.value_of.end())
    return Status::unsupported("plan: the output '" + graph.outputs[0] + "' is not computed on the GPU.");
  // The output step reads float: an 8-bit value at the end (a max pool's) is dequantized first.
  if (is_quantized_dtype(plan.values[out->second].dtype)) {
    Node output_node;
    output_node.name = "output";
    out->second = low.value_as(output_node, out->second, low.dtype);
  }
  const PlanValue& ov = plan.values[out->second];
  if (ov.h != 1 || ov.w != 1)
    return Status::unsupported(
        fmt::format("plan: the output '{}' is [{}x{}x{}], not [N, classes].", ov.name, ov.c, ov.h, ov.w));
  plan.num_classes = ov.c_valid;
  PlanStep output_step;
  output_step.kind = StepKind::kOutput;
  output_step.name = "output";
  output_step.inputs = {out->second};
  output_step.precision = options.precision;
  output_step.softmax = low.softmax_output;
  plan.steps.push_back(output_step);
  GPULAB_TRY(plan.validate());
  return std::move(low.plan);
}

int fold_input_casts(Plan& plan, const std::function<bool(const PlanStep& conv)>& reads_directly) {
  int folded = 0;
  for (size_t i = 0; i < plan.steps.size();) {
    const PlanStep& cast = plan.steps[i];
    const auto is_16bit = [](DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; };
    if (cast.kind != StepKind::kCast || cast.inputs.size() != 1 || cast.output < 0 ||
        plan.values[cast.output].dtype != DataType::kFloat32 ||
        !is_16bit(plan.values[cast.inputs[0]].dtype)) {
      ++i;
      continue;
    }
    const int from = cast.inputs[0], copy = cast.output;
    std::vector<size_t> readers;
    bool foldable = true;
    for (size_t j = 0; j < plan.steps.size() && foldable; ++j) {
      const PlanStep& s = plan.steps[j];
      for (size_t k = 0; k < s.inputs.size(); ++k) {
        if (s.inputs[k] != copy) continue;
        if (s.kind != StepKind::kConv || k != 0) {
          foldable = false;
          break;
        }
        PlanStep rewired = s;
        rewired.inputs[0] = from;
        if (!reads_directly(rewired)) {
          foldable = false;
          break;
        }
        readers.push_back(j);
      }
    }
    if (!foldable || readers.empty()) {
      ++i;
      continue;
    }
    for (size_t j : readers) plan.steps[j].inputs[0] = from;
    plan.steps.erase(plan.steps.begin() + static_cast<std::ptrdiff_t>(i));
    ++folded;
  }
  return folded;
}

bool fuse_stem_pool(Plan& plan, const std::function<bool(const PlanStep& stem)>& supported) {
  if (plan.steps.size() < 4) return false;
  const PlanStep& in = plan.steps[0];
  const PlanStep& conv = plan.steps[1];
  const PlanStep& pool = plan.steps[2];
  if (in.kind != StepKind::kInput || in.space_to_depth.block < 2 || conv.kind != StepKind::kConv ||
      conv.inputs != std::vector<int>{in.output} || conv.conv.has_residual ||
      conv.conv.activation != Activation::kRelu || pool.kind != StepKind::kMaxPool ||
      pool.inputs != std::vector<int>{conv.output})
    return false;
  // Whether a step from `first` on reads one of `values`.
  const auto read_from = [&plan](size_t first, std::initializer_list<int> values) {
    for (size_t i = first; i < plan.steps.size(); ++i)
      for (int v : plan.steps[i].inputs)
        if (std::find(values.begin(), values.end(), v) != values.end()) return true;
    return false;
  };
  if (read_from(3, {in.output, conv.output})) return false;
  PlanStep stem = conv;
  stem.kind = StepKind::kStem;
  stem.name = conv.name + "+" + pool.name;
  stem.inputs.clear();
  stem.output = pool.output;
  stem.pool = pool.pool;
  stem.space_to_depth = in.space_to_depth;
  stem.fused_values = {in.output, conv.output};
  stem.flops_per_image = conv.flops_per_image + pool.flops_per_image;
  stem.tactic.clear();
  // The pool's float16 output cast by the next step, its only reader, to bfloat16 (a BF16 plan) or
  // quantized to 8 bits (an INT8 or FP8 plan, for its first 8-bit layer and that block's residual):
  // the fused step writes the cast's value itself.
  const PlanStep& cast = plan.steps[3];
  const DataType cast_to = plan.values[cast.output].dtype;
  const bool with_cast = cast.kind == StepKind::kCast && cast.inputs == std::vector<int>{pool.output} &&
                         plan.values[pool.output].dtype == DataType::kFloat16 &&
                         (cast_to == DataType::kBFloat16 || is_quantized_dtype(cast_to)) &&
                         !read_from(4, {pool.output});
  if (with_cast) {
    PlanStep cast_out = stem;
    cast_out.output = cast.output;
    if (supported(cast_out)) {
      plan.steps.erase(plan.steps.begin(), plan.steps.begin() + 4);
      plan.steps.insert(plan.steps.begin(), std::move(cast_out));
      return true;
    }
  }
  if (!supported(stem)) return false;
  plan.steps.erase(plan.steps.begin(), plan.steps.begin() + 3);
  plan.steps.insert(plan.steps.begin(), std::move(stem));
  return true;
}

}  // namespace gpulab
