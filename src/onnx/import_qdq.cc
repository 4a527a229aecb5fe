// QuantizeLinear and DequantizeLinear in the QDQ form that onnxruntime's quantizer and NVIDIA's
// Model Optimizer write (import_internal.h; the Importer in onnx_import.cc calls these):
//   x -> QuantizeLinear -> DequantizeLinear -> ...   one kQuantizeDequantize node (float in, float out)
//   int8/uint8 constant -> DequantizeLinear           a float constant, dequantized at import
//   float constant -> QuantizeLinear -> DequantizeLinear   a float constant, quantized and dequantized
// The scales of symmetric int8 weights are recorded (graph.quantization.weight_scales) for INT8
// plans; fold_qdq (passes.h) decides which activation pairs an INT8 plan takes over.
#include <fmt/format.h>

#include <climits>
#include <cmath>

#include "core/quant.h"
#include "onnx/import_internal.h"

namespace gpulab::onnx_import {

Result<QuantizeAttrs> read_quantize_params(const NodeContext& c) {
  QuantizeAttrs a;
  GPULAB_ASSIGN_OR_RETURN(a.axis, c.attrs.get_int("axis", 1));
  if (c.n.input_size() < 2 || c.n.input(1).empty())
    return Status::invalid_model(c.where + ": needs a scale input.");
  GPULAB_ASSIGN_OR_RETURN(const Tensor* scale, constant_input(c, 1, "scale"));
  if (scale->dtype() != DataType::kFloat32 || scale->shape().rank() > 1 || scale->numel() < 1)
    return Status::unsupported(c.where + ": the scale must be a float scalar or 1-D float tensor, not " +
                               std::string(dtype_name(scale->dtype())) + " " + scale->shape().to_string() +
                               ".");
  a.scale.assign(scale->f32().begin(), scale->f32().end());
  for (float s : a.scale)
    if (!(s > 0.0f) || !std::isnormal(s))  // a subnormal scale's reciprocal overflows to infinity
      return Status::invalid_model(
          fmt::format("{}: scale {} is not a positive finite normal number.", c.where, s));
  a.zero_point.assign(a.scale.size(), 0);
  a.qmin = 0;  // no zero point: uint8
  a.qmax = 255;
  if (c.n.input_size() > 2 && !c.n.input(2).empty()) {
    GPULAB_ASSIGN_OR_RETURN(const Tensor* zp, constant_input(c, 2, "zero point"));
    // int32 zero points (of biases) arrive as int64 (convert_tensor).
    if ((zp->dtype() != DataType::kInt8 && zp->dtype() != DataType::kUInt8 &&
         zp->dtype() != DataType::kInt64) ||
        zp->numel() != scale->numel())
      return Status::unsupported(
          fmt::format("{}: the zero point is {} {}; gpulab reads int8, uint8 and int32 zero points, one per "
                      "scale (int16, int4 "
                      "and FP8 Q/DQ are not supported).",
                      c.where, dtype_name(zp->dtype()), zp->shape().to_string()));
    const auto* bytes = reinterpret_cast<const uint8_t*>(zp->data());
    if (zp->dtype() == DataType::kInt64) {
      a.qmin = INT32_MIN;
      a.qmax = INT32_MAX;
      a.zero_point.assign(zp->i64().begin(), zp->i64().end());
    } else {
      const bool is_signed = zp->dtype() == DataType::kInt8;
      a.qmin = is_signed ? -128 : 0;
      a.qmax = is_signed ? 127 : 255;
      for (size_t i = 0; i < a.zero_point.size(); ++i)
        a.zero_point[i] = is_signed ? static_cast<int8_t>(bytes[i]) : bytes[i];
    }
  }
  return a;
}

bool same_quantize_params(const QuantizeAttrs& a, const QuantizeAttrs& b) {
  return a.scale == b.scale && a.zero_point == b.zero_point && a.qmin == b.qmin && a.qmax == b.qmax &&
         (a.scale.size() == 1 || a.axis == b.axis);
}

namespace {

// The index along the quantization axis of each element, or an error when the parameters do not fit.
Result<std::vector<size_t>> channel_of_elements(const Shape& shape, const QuantizeAttrs& a,
                                                const std::string& where) {
  const int64_t rank = static_cast<int64_t>(shape.rank());
  std::vector<size_t> out(static_cast<size_t>(shape.numel()), 0);
  if (a.scale.size() == 1) return out;
  const int64_t axis = a.axis < 0 ? a.axis + rank : a.axis;
  if (axis < 0 || axis >= rank || shape[static_cast<size_t>(axis)] != static_cast<int64_t>(a.scale.size()))
    return Status::invalid_model(
        fmt::format("{}: {} scales along axis {} of {}.", where, a.scale.size(), a.axis, shape.to_string()));
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= shape[static_cast<size_t>(d)];
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<size_t>((static_cast<int64_t>(i) / inner) % static_cast<int64_t>(a.scale.size()));
  return out;
}

}  // namespace

Result<Tensor> dequantize_constant(const Tensor& q, const QuantizeAttrs& a, const std::string& where) {
  // int32 constants (biases at x_scale * w_scale) arrive as int64 (convert_tensor).
  if (q.dtype() != DataType::kInt8 && q.dtype() != DataType::kUInt8 && q.dtype() != DataType::kInt64)
    return Status::unsupported(
        fmt::format("{}: dequantizes a {} constant; gpulab reads int8, uint8 and int32 ones.", where,
                    dtype_name(q.dtype())));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<size_t> channel, channel_of_elements(q.shape(), a, where));
  Tensor out(DataType::kFloat32, q.shape());
  const auto* bytes = reinterpret_cast<const uint8_t*>(q.data());
  auto f = out.f32();
  for (size_t i = 0; i < f.size(); ++i) {
    const int64_t v = q.dtype() == DataType::kInt64  ? q.i64()[i]
                      : q.dtype() == DataType::kInt8 ? static_cast<int8_t>(bytes[i])
                                                     : bytes[i];
    f[i] = static_cast<float>(v - a.zero_point[channel[i]]) * a.scale[channel[i]];
  }
  return out;
}

Result<Tensor> fake_quantize_constant(const Tensor& x, const QuantizeAttrs& a, const std::string& where) {
  if (x.dtype() != DataType::kFloat32)
    return Status::unsupported(
        fmt::format("{}: quantizes a {} constant; gpulab reads float ones.", where, dtype_name(x.dtype())));
  GPULAB_ASSIGN_OR_RETURN(const std::vector<size_t> channel, channel_of_elements(x.shape(), a, where));
  Tensor out(DataType::kFloat32, x.shape());
  const auto in = x.f32();
  auto f = out.f32();
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = fake_quantize(in[i], a.scale[channel[i]], static_cast<float>(a.zero_point[channel[i]]),
                         static_cast<float>(a.qmin), static_cast<float>(a.qmax));
  return out;
}

std::optional<std::vector<float>> int8_weight_scales(const QuantizeAttrs& a, const Shape& shape) {
  if (a.qmin != -128 || a.qmax != 127 || shape.rank() < 1) return std::nullopt;
  for (int64_t zp : a.zero_point)
    if (zp != 0) return std::nullopt;
  if (a.scale.size() == 1) return std::vector<float>(static_cast<size_t>(shape[0]), a.scale[0]);
  const int64_t axis = a.axis < 0 ? a.axis + static_cast<int64_t>(shape.rank()) : a.axis;
  if (axis != 0) return std::nullopt;  // per channel, but not per output channel
  return a.scale;
}

}  // namespace gpulab::onnx_import
