#include "plan/lower_quant.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/quant.h"
#include "plan/lower.h"

namespace gpulab {

std::set<std::string> quantized_values(const Graph& graph,
                                       const std::function<bool(const Node&)>& quantized_layer,
                                       const std::function<bool(const std::string&)>& has_scale) {
  std::set<std::string> out;
  for (auto it = graph.nodes.rbegin(); it != graph.nodes.rend(); ++it) {
    const Node& node = *it;
    const bool output_quantized = !node.outputs.empty() && out.contains(node.outputs[0]);
    switch (node.op) {
      case OpType::kConv:
      case OpType::kGemm:
        if (!quantized_layer(node)) break;
        out.insert(node.input(0));
        if (node.op == OpType::kConv && node.has_input(3)) out.insert(node.input(3));
        break;
      case OpType::kMaxPool:
      case OpType::kGlobalAveragePool:
        if (output_quantized && has_scale(node.input(0))) out.insert(node.input(0));
        break;
      case OpType::kFlatten:
      case OpType::kReshape:
      case OpType::kIdentity:
      case OpType::kDropout:
        // A view has no plan value of its own: the value it views is the one stored.
        if (output_quantized) {
          out.erase(node.outputs[0]);
          out.insert(node.input(0));
        }
        break;
      default: break;
    }
  }
  return out;
}

Result<float> activation_scale(const Graph& graph, const BuildOptions& options, Precision precision,
                               const std::string& value) {
  const bool fp8 = precision == Precision::kFp8;
  const float qmax = fp8 ? kFp8E4M3Max : kInt8QuantMax;
  if (auto it = graph.quantization.activation_scales.find(value);
      it != graph.quantization.activation_scales.end())
    return fp8 ? symmetric_scale(it->second * kInt8QuantMax, qmax) : it->second;
  if (auto it = options.activation_amax.find(value); it != options.activation_amax.end())
    return symmetric_scale(it->second, qmax);
  return Status::invalid_argument(fmt::format(
      "plan: activation '{}' has no calibrated range, which a {} plan needs to store it in 8 bits. Calibrate "
      "on images of this model (`gpulab build --calibration-data DIR`), or give a calibration cache made for "
      "this model (--calibration-cache).",
      value, precision_name(precision)));
}

namespace {

// The model's scales, when they reproduce every weight: |w / s - round(w / s)| <= 1e-3 of a step.
bool scales_reproduce(std::span<const float> weights, int64_t channels, const std::vector<float>& scales) {
  if (channels < 1 || static_cast<int64_t>(scales.size()) != channels) return false;
  const int64_t per = static_cast<int64_t>(weights.size()) / channels;
  for (int64_t k = 0; k < channels; ++k) {
    const float s = scales[static_cast<size_t>(k)];
    if (!(s > 0.0f) || !std::isfinite(s)) return false;
    for (int64_t i = 0; i < per; ++i) {
      const double q = weights[static_cast<size_t>(k * per + i)] / static_cast<double>(s);
      if (std::abs(q - std::nearbyint(q)) > 1e-3 || q < kInt8ActivationMin - 0.5 || q > kInt8Max + 0.5)
        return false;
    }
  }
  return true;
}

}  // namespace

QuantizedWeight quantize_weight(std::span<const float> weights, int64_t channels, DataType dtype,
                                const std::vector<float>* explicit_scales) {
  const bool fp8 = dtype == DataType::kFp8E4M3;
  QuantizedWeight out;
  QuantizedWeights q;
  if (!fp8 && explicit_scales && scales_reproduce(weights, channels, *explicit_scales)) {
    // The model's grid: q = round(w / s), which reaches -128 where the model's weights do.
    q.scales = *explicit_scales;
    q.values.resize(weights.size());
    const int64_t per = static_cast<int64_t>(weights.size()) / channels;
    for (int64_t k = 0; k < channels; ++k)
      for (int64_t i = 0; i < per; ++i) {
        const size_t at = static_cast<size_t>(k * per + i);
        q.values[at] = static_cast<float>(std::nearbyint(weights[at] / static_cast<double>(q.scales[k])));
      }
    out.explicit_scales = true;
  } else {
    q = quantize_per_channel(weights, channels, fp8);
  }
  out.bytes = convert_floats(q.values, dtype);
  out.scales = std::move(q.scales);
  return out;
}

}  // namespace gpulab
