// A plain CPU interpreter of plans, with the storage of FP16/BF16 plans emulated.
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
// Options add rounding to an FP32 plan as if it had been lowered in a lower precision, with
// single steps exempted, which is how per-layer sensitivity is measured.
//
// CPU only, single-threaded, allocates its buffers; thread-safe (no shared state). Seconds per
// image for an ImageNet-size model.
#pragma once

#include <cstdint>
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
  // indexed like Plan::values; empty for values no step wrote), for per-layer error analysis.
  std::vector<std::vector<float>>* values = nullptr;
};

// input_nchw: float [batch, input_channels, input_h, input_w]; returns the logits
// [batch, num_classes]. kInvalidArgument for a wrong input size or batch < 1 or an unsupported
// storage_dtype; kInvalidFile when the plan does not validate; kUnsupported for a weight dtype
// other than float32/float16/bfloat16.
Result<std::vector<float>> interpret_plan(const Plan& plan, std::span<const float> input_nchw, int64_t batch,
                                          const InterpretOptions& options = {});

}  // namespace gpulab
