// INT8/FP8 lowering: the pieces lower_graph uses for a plan whose precision is_quantized(). The
// number formats and rounding rules are src/core/quant.h's.
//
// Which steps run in 8 bits: Conv and Gemm layers in the plan's precision (not moved to a float
// precision by BuildOptions::layer_precision) read x and a residual in the 8-bit type; MaxPool
// (exact on quantized numbers, same scale), GlobalAveragePool and views pass the 8-bit type through
// when their output is read in it. Every other step computes in the fallback float type (FP16)
// and reads dequantized copies (kCast steps). A quantized layer whose readers all compute in float
// writes that float type directly, with no requantization.
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "graph/graph.h"

namespace gpulab {

// The graph values an INT8/FP8 plan stores in its 8-bit type: the x (input 0) and residual
// (input 3) of every node for which `quantized_layer` is true, and, walking back through MaxPool
// and GlobalAveragePool nodes whose output is in the set, their input when `has_scale` says it has
// one (else the pool computes in float and its output is quantized); a view (Flatten, Reshape,
// Identity, Dropout) in the set is replaced by the value it views.
std::set<std::string> quantized_values(const Graph& graph,
                                       const std::function<bool(const Node&)>& quantized_layer,
                                       const std::function<bool(const std::string&)>& has_scale);

// The scale of activation `value` in a plan of `precision` (kInt8 or kFp8): the model's own
// (graph.quantization, a folded QuantizeLinear; for FP8 its range 127 * scale / 448), else
// options.activation_amax[value] / 127 (INT8) or / 448 (FP8). kInvalidArgument naming the value
// and what to do when neither exists.
Result<float> activation_scale(const Graph& graph, const BuildOptions& options, Precision precision,
                               const std::string& value);

// A quantized layer's weight laid out [channels, per_channel] (KRSC, or [out, in]) in `dtype`
// (kInt8 or kFp8E4M3): one scale per output channel, the model's own when `explicit_scales` (INT8
// only) reproduce every weight to within a thousandth of a step, else amax / 127 or / 448.
struct QuantizedWeight {
  std::vector<std::byte> bytes;  // int8 or E4M3 bytes
  std::vector<float> scales;     // [channels]
  bool explicit_scales = false;  // the model's scales were used
};
QuantizedWeight quantize_weight(std::span<const float> weights, int64_t channels, DataType dtype,
                                const std::vector<float>* explicit_scales);

}  // namespace gpulab
