// A plain CPU interpreter of plans, with the storage of FP16/BF16 plans and the arithmetic of
// INT8/FP8 plans emulated.
//
// Runs every step of a Plan on host float NHWC buffers exactly as the plan describes it (values,
// channel padding, KRSC weights, views, kCast steps), so that comparing it with the reference
// backend checks a lowering without a GPU, and so that the numerical error of a reduced-precision
// plan can be reproduced and located on the CPU.
//
// Emulation model (what the CUDA runtime stores, see src/runtime/step_launch.cc):
//   - a weight is read in its PlanWeight::dtype (bfloat16 weights are exactly the GPU's);
//   - a step computes in float64 from its stored inputs (the GPU accumulates in float32; the
//     difference is far below float16/bfloat16 rounding), applies its whole fused epilogue (bias,
//     residual, activation) and rounds the result once, to nearest even, to the dtype of the
//     value it writes: the fused cuDNN convolution, cuBLASLt GEMM and the pooling, elementwise
//     and conversion kernels each store once. The unfused cuDNN fallback stores the bare
//     convolution before its epilogue kernels, i.e. rounds up to three times; that is not
//     emulated.
//   - INT8/FP8 steps follow src/core/quant.h to the bit: an 8-bit value holds its quantized
//     numbers (integers, or E4M3 values), a quantized convolution or Gemm sums their products
//     exactly in int32 (INT8) or in float32 (FP8, in a fixed order of its own) and applies the
//     written-down epilogue, casts quantize and dequantize, a max pool compares quantized numbers
//     and a global average pool sums them. The GPU's INT8 results match bit for bit where its
//     epilogue follows quant.h step by step, within one unit of the output scale otherwise.
// Options add rounding to an FP32 plan as if it had been lowered in a lower precision, with
// single steps exempted, which is how per-layer sensitivity is measured.
//
// CPU only, allocates its buffers; thread-safe (no shared state). Convolutions run through
// interpret_kernels.h's vectorized loops, images on InterpretOptions::num_threads threads: on the
// project's 2-core machine about 0.1-0.3 s per MobileNetV2 image and thread (INT8 is the fastest).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "plan/plan.h"

namespace gpulab {

struct InterpretOptions {
  // nullopt: the plan's own dtypes only. kFloat16/kBFloat16: in addition, every float32 value is
  // rounded to this type when written and every float32 weight when read (but for convolution
  // biases under kBFloat16, which lower_graph keeps in float32), as if the plan had been lowered
  // in that precision; exemptions below. Other dtypes are refused.
  std::optional<DataType> storage_dtype;
  // Step names (PlanStep::name) whose output value keeps float32 under storage_dtype.
  std::set<std::string> float32_outputs;
  // Step names whose weight and bias keep float32 under storage_dtype.
  std::set<std::string> float32_weights;
  // When not null, receives every value as it was stored (float, NHWC per image, batch-major,
  // indexed like Plan::values; empty for values no step wrote), for per-layer error analysis. An
  // int8/fp8e4m3 value is given as real numbers: its quantized numbers times its scale.
  std::vector<std::vector<float>>* values = nullptr;
  // When set, every kConv and kGemm step calls it with its values before the activation: the
  // bias and any residual added (a quantized layer's real values acc * multiplier + bias +
  // residual * scale), NHWC over the whole batch with `channels` innermost. It may change them;
  // the activation and the rounding to the stored type then apply. Bias correction
  // (src/quant/bias_correction.h) measures and shifts channel means here. With it set the batch
  // is interpreted on one thread, so that each call sees every image.
  std::function<void(const PlanStep& step, std::span<float> values, int64_t channels)> pre_activation;
  // Threads, each interpreting a contiguous part of the batch (the results do not depend on it).
  int num_threads = 1;
};

// input_nchw: float [batch, input_channels, input_h, input_w]; returns the logits
// [batch, num_classes]. kInvalidArgument for a wrong input size or batch < 1 or an unsupported
// storage_dtype; kInvalidFile when the plan does not validate; kUnsupported for a weight dtype
// other than float32/float16/bfloat16.
Result<std::vector<float>> interpret_plan(const Plan& plan, std::span<const float> input_nchw, int64_t batch,
                                          const InterpretOptions& options = {});

}  // namespace gpulab
