// One function per plan step kind: queues that step's kernels (or copies) on a stream for one
// batch size. Each reads the step's fields and the shapes of its values from the plan, and the
// device pointers from StepLaunch. None allocates or synchronizes, so a run of them can be
// captured in a CUDA graph (ContextImpl::run_steps, context.cc).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <span>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_q8_conv.h"
#include "backends/cuda/kernels/kernel_desc.h"
#include "backends/cuda/kernels/quant_desc.h"
#include "gpulab/status.h"
#include "plan/plan.h"

namespace gpulab {

// Where one step's tensors live, for one batch size on one stream.
struct StepLaunch {
  const Plan& plan;
  const PlanStep& step;
  int64_t batch = 0;
  char* arena = nullptr;                   // the context's activation arena
  std::span<const int64_t> value_offsets;  // byte offset of each plan value in the arena
  std::span<void* const> weights;          // device pointer of each plan weight
  void* workspace = nullptr;               // shared by cuDNN, cuBLASLt and 8-bit split-K sums
  int64_t workspace_bytes = 0;             // at least kGemmWorkspaceBytes (32 MiB)
  cudaStream_t stream = nullptr;

  void* value(int v) const { return arena + value_offsets[static_cast<size_t>(v)]; }
  const void* weight(int w) const { return w < 0 ? nullptr : weights[static_cast<size_t>(w)]; }
};

// What ExecutionContext::prepare built for a conv step at this batch size.
struct PreparedConv {
  const cuda::CudnnConv* conv = nullptr;  // null: one of gpulab's own kernels (or the fallback)
  int64_t chunk = 0;                      // > 0: a chunked tactic, `conv` prepared at this many images
  const cuda::CudnnConv* tail = nullptr;  // the chunked tactic's remainder, or null
  const cuda::CudnnQ8Conv* q8 = nullptr;  // an INT8/FP8 step's cudnn-q8 plan, or null
  cudnnHandle_t cudnn = nullptr;          // bound to the launch's stream
};

// kInput: the float32 NCHW image into the first value (NHWC, or space-to-depth rearranged).
Status enqueue_input(const StepLaunch& l, const float* input_nchw);
// kStem: space-to-depth, convolution, ReLU and max pool in one kernel.
Status enqueue_stem(const StepLaunch& l, const float* input_nchw);
Status enqueue_conv(const StepLaunch& l, const PreparedConv& prepared);
// kGemm: `gemm` prepared at this batch size, its workspace the context's gemm workspace.
Status enqueue_gemm(const StepLaunch& l, const cuda::CublasLtGemm& gemm, cublasLtHandle_t handle,
                    int64_t workspace_bytes);
// kMaxPool and kAveragePool; internal error when the pooled size differs from the plan's.
Status enqueue_pool(const StepLaunch& l);
Status enqueue_global_avg_pool(const StepLaunch& l);
// kAdd and kMul, b broadcast per image and channel where broadcasts_channels says so.
Status enqueue_binary(const StepLaunch& l);
// kActivation and kPointwise.
Status enqueue_unary(const StepLaunch& l);
// The elementwise kernel of a pointwise function (kIdentity has none).
Result<kernels::UnaryOp> unary_op_of(PointwiseFn fn);
Status enqueue_concat(const StepLaunch& l);
// kCast between float32 and the plan's storage type (one side is float32).
Status enqueue_cast(const StepLaunch& l);
// kOutput: float32 logits [batch, classes] (NCHW), softmax applied in place when the step says so.
Status enqueue_output(const StepLaunch& l, float* logits);

// The 8-bit forms (step_launch_quant.cc), which the functions above call when a value they read or
// write is int8 or fp8e4m3: the quantizing input conversion, casts that quantize or dequantize, an
// INT8/FP8 kConv or kGemm (gpulab's own kernels, or cuDNN's for a cudnn-q8 tactic), and the pools.
Status enqueue_quantized_input(const StepLaunch& l, const float* input_nchw);
Status enqueue_quantized_cast(const StepLaunch& l);
// The kernel descriptor of an INT8/FP8 kConv or kGemm at `batch` (a Gemm as a 1x1 convolution over
// the flattened NHWC features).
kernels::Q8ConvDesc q8_layer_desc(const Plan& plan, const PlanStep& step, int64_t batch);
// The float32 values of plan weight `w` in host memory (a step's weight scales); empty for -1.
std::span<const float> plan_floats(const Plan& plan, int w);
// `cudnn_q8` (with `cudnn`, bound to l.stream): the step's cudnn-q8 plan at l.batch; a cudnn-q8 step
// without one runs the direct kernel.
Status enqueue_q8_layer(const StepLaunch& l, const cuda::CudnnQ8Conv* cudnn_q8 = nullptr,
                        cudnnHandle_t cudnn = nullptr);
Status enqueue_q8_max_pool(const StepLaunch& l, const kernels::PoolDesc& desc);
Status enqueue_q8_global_avg_pool(const StepLaunch& l);

}  // namespace gpulab
