// Lowering: a Graph after run_passes -> a Plan without tactics (the runtime's builder times and
// fills them in). CUDA-free: decides the steps, the NHWC values (the network input's channels
// padded for the tensor cores) and converts the weights once into the kernels' layout and
// precision:
//   Conv  OIHW float32 -> KRSC (K, R, S, C/groups) of the storage dtype, input channels padded
//                         with zeros to match a padded input value
//   Gemm  B -> [out, in] of the storage dtype (transposed when transB = 0), alpha folded into
//         the weight and beta into the bias
// Supported: Conv (fused epilogue), MaxPool, AveragePool, GlobalAveragePool, Relu, Clip, Add of
// same-shaped values, Flatten/Reshape/Identity/Dropout of 1x1 spatial values (views), Gemm.
// Anything else is kUnsupported naming the node.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "graph/graph.h"
#include "plan/plan.h"

namespace gpulab {

// Host float32 -> float32/float16/bfloat16 bytes, round to nearest even.
std::vector<std::byte> convert_floats(std::span<const float> values, DataType dtype);
// The inverse: float32/float16/bfloat16 bytes -> float32 (exact). `bytes` holds whole elements;
// other dtypes give an empty vector.
std::vector<float> floats_from_bytes(std::span<const std::byte> bytes, DataType dtype);
// `value` rounded to the nearest `dtype` (float16/bfloat16, round to nearest even, as
// convert_floats) and widened back to float32; float32 and other dtypes return it unchanged.
float round_to_dtype(float value, DataType dtype);

// Channels the input conversion writes for a model input of `channels`: small channel counts
// are padded (to 8 for FP16/BF16 tensor-core convolutions, to 4 for FP32/TF32).
int64_t padded_input_channels(int64_t channels, Precision precision);

// The precision policy: layers a plan of `precision` computes in another precision unless
// BuildOptions::layer_precision names them (NAME=<plan precision> opts a layer out). BF16 plans
// run in FP32 (float32 weights, bias and output; inputs read as stored) the convolutions whose
// weights BF16's 8-bit significand cannot carry without a systematic error the network
// amplifies: grouped/depthwise convolutions (a handful of weights per output, so their rounding
// errors do not average out) and linear convolutions on feature maps (no activation, output
// larger than 1x1: the projections of linear bottlenecks, which feed the residual stream
// unclipped). On the bundled MobileNetV2 (34 of its 53 convolutions) this cuts the emulated
// rel. L2 error of BF16 logits from 6.3e-2 to 1.3e-2 (random N(0,1) inputs) and from 3.4e-2 to
// 1.7e-2 (photos) for +2.0 MB of weights (+30%) and 34 kCast steps; BF16 weight rounding, not
// activation storage, is what costs accuracy there. tests/unit/plan/precision_models_test.cc
// measures the alternatives. Empty for other precisions (FP16 meets its bound without it).
std::map<std::string, Precision> default_layer_precision(const Graph& graph, Precision precision);

// Lowers `graph` (after run_passes). Convolution layers take their precision from
// options.layer_precision, else default_layer_precision, else options.precision; a layer whose
// dtype differs from the plan's reads kCast copies of its inputs and writes its own dtype
// (readers of the plan's dtype get one shared kCast copy).
Result<Plan> lower_graph(const Graph& graph, const BuildOptions& options);

}  // namespace gpulab
