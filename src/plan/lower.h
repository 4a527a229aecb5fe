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

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "graph/graph.h"
#include "plan/plan.h"

namespace gpulab {

// Host float32 -> float32/float16/bfloat16 bytes, round to nearest even. int8 and fp8e4m3 take
// quantized numbers (no scale): int8 rounds to nearest even and saturates to [-128, 127], fp8e4m3
// converts as float_to_e4m3 (src/core/quant.h).
std::vector<std::byte> convert_floats(std::span<const float> values, DataType dtype);
// The inverse: float32/float16/bfloat16/int8/fp8e4m3 bytes -> float32 (exact; 8-bit types give
// their quantized numbers, not multiplied by a scale). `bytes` holds whole elements; other dtypes
// give an empty vector.
std::vector<float> floats_from_bytes(std::span<const std::byte> bytes, DataType dtype);
// `value` rounded to the nearest `dtype` (float16/bfloat16, round to nearest even, as
// convert_floats) and widened back to float32; float32 and other dtypes return it unchanged.
float round_to_dtype(float value, DataType dtype);

// Channels the input conversion writes for a model input of `channels`: small channel counts
// are padded (to 8 for FP16/BF16 tensor-core convolutions, to 4 for FP32/TF32).
int64_t padded_input_channels(int64_t channels, Precision precision);

// The stem convolution a plan runs over a space-to-depth input (see SpaceToDepth in plan.h):
// when options.stem_space_to_depth is set and the network input feeds exactly one convolution
// with the same stride b = 2..4 in both axes, no groups or dilation, a kernel of at least b x b
// and b^2 * C <= 16 channels after the rearrangement. ResNet's 7x7/2 stem over RGB becomes a
// 4x4/1 convolution over 12 channels (16 stored in FP16/BF16), MobileNetV2's 3x3/2 a 2x2/1 one.
struct StemRewrite {
  std::string node;  // the convolution's name
  SpaceToDepth layout;
  int64_t h = 0, w = 0, c_valid = 0;  // the input value: s2d pixels, data channels (b^2 C)
};
std::optional<StemRewrite> stem_space_to_depth(const Graph& graph, const BuildOptions& options);

// Replaces a lowered plan's first three steps, kInput with a space-to-depth layout -> kConv over
// it (no residual, ReLU) -> kMaxPool of that convolution, by one kStem step, when nothing else
// reads the image or the convolution output and `supported(stem)` accepts the step it would
// make (the runtime asks its kernel). The kStem step keeps the three steps' attributes and the
// convolution's weights; its name is "<conv>+<pool>". The two intermediate values stay in
// plan.values (fused_values) but are no longer written. A kCast of the pool's float16 output to
// bfloat16 right after it, the pool's only reader (a BF16 plan's FP16 stem), joins the step: it
// writes the bfloat16 value itself (offered first; without the cast when `supported` refuses).
// Returns whether it rewrote the plan.
bool fuse_stem_pool(Plan& plan, const std::function<bool(const PlanStep& stem)>& supported);

// Removes kCast steps that turn a float16/bfloat16 value into float32 for convolutions alone,
// when `reads_directly` accepts each of them reading the 16-bit value itself (inputs[0] rewired;
// the runtime asks its depthwise kernel, which converts x as it loads it). Float16/bfloat16 to
// float32 is exact, so the plan computes the same values without writing and reading the float32
// copy; the copy stays in plan.values, unwritten (no memory). In the BF16 policy's MobileNetV2,
// each depthwise layer in TF32 reads its BF16 expansion this way. A cast with another reader (a
// residual, a pooling step) stays. Returns the number of casts removed.
int fold_input_casts(Plan& plan, const std::function<bool(const PlanStep& conv)>& reads_directly);

// The precision policy: layers a plan of `precision` computes in another precision unless
// BuildOptions::layer_precision names them (NAME=<plan precision> opts a layer out). BF16 plans
// run in TF32 (float32 weights, bias and output; tensor cores with 10-bit inputs) the
// convolutions whose weights BF16's 8-bit significand cannot carry without a systematic error
// the network amplifies: grouped/depthwise convolutions (a handful of weights per output, so
// their rounding errors do not average out), the projections of linear bottlenecks (no
// activation, reading a depthwise convolution, feeding the residual stream unclipped) and the
// stem (its error reaches every later layer): in TF32 (the plan's input is then float32 too), or,
// where a max pool alone reads it and its weights and bias fit FP16's range, in FP16, which keeps
// TF32's 11 significant bits and has the fused stem kernel (ResNets). With the float32 biases every BF16
// layer keeps (lower_graph), this leaves half of the bundled MobileNetV2's FLOPs in BF16 and, emulated on the
// 1,000 sample photos, moved top-1 agreement with FP32 from 98.2% (all BF16) to 99.8% (with the stem in TF32,
// before 2026-12-06); the rule without the stem and float32 biases reached 99.4% on the H200.
// Networks without depthwise convolutions keep only the stem out of BF16.
// tests/unit/plan/precision_models_test.cc measures alternatives. INT8/FP8 plans run that pooled
// stem in FP16 too (the fused stem; its 8-bit form ran as three slow steps); nothing else moves.
// Empty for FP16, FP32 and TF32 plans.
std::map<std::string, Precision> default_layer_precision(const Graph& graph, Precision precision);

// Lowers `graph` (after run_passes). Convolution layers take their precision from
// options.layer_precision, else default_layer_precision, else options.precision; a layer whose
// dtype differs from the plan's reads kCast copies of its inputs and writes its own dtype
// (readers of the plan's dtype get one shared kCast copy).
Result<Plan> lower_graph(const Graph& graph, const BuildOptions& options);

}  // namespace gpulab
