// The library problem descriptions of a plan step at a given batch size (shared by the tactic
// timing and the execution context).
#pragma once

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/direct_conv.h"
#include "backends/cuda/kernels/kernel_desc.h"
#include "plan/plan.h"

namespace gpulab {

inline cuda::ConvProblem conv_problem(const Plan& plan, const PlanStep& step, int64_t batch) {
  const PlanValue& x = plan.values[step.inputs[0]];
  const PlanValue& y = plan.values[step.output];
  cuda::ConvProblem p;
  p.n = batch;
  p.c = x.c;
  p.h = x.h;
  p.w = x.w;
  p.k = y.c;
  p.out_h = y.h;
  p.out_w = y.w;
  p.attrs = step.conv;
  p.has_bias = step.bias >= 0;
  p.dtype = y.dtype;
  p.bias_float32 =
      p.has_bias && plan.weights[step.bias].dtype == DataType::kFloat32 && y.dtype != DataType::kFloat32;
  p.precision = step.precision;
  if (x.dtype != y.dtype) p.x_dtype = x.dtype;  // a cast folded into the step (fold_input_casts)
  return p;
}

inline cuda::DirectConvDesc direct_conv_desc(const cuda::ConvProblem& p) {
  cuda::DirectConvDesc d;
  d.n = p.n;
  d.c = p.c;
  d.h = p.h;
  d.w = p.w;
  d.k = p.k;
  d.out_h = p.out_h;
  d.out_w = p.out_w;
  d.attrs = p.attrs;
  d.dtype = p.dtype;
  d.bias_float32 = p.bias_float32;
  d.x_dtype = p.x_dtype;
  return d;
}

inline cuda::GemmProblem gemm_problem(const Plan& plan, const PlanStep& step, int64_t batch) {
  cuda::GemmProblem g;
  g.rows = batch;
  const PlanValue& x = plan.values[step.inputs[0]];
  g.in_features = x.h * x.w * x.c;  // more than one pixel: a flattened NHWC value (lower_gemm)
  g.out_features = plan.values[step.output].c;
  g.has_bias = step.bias >= 0;
  g.dtype = plan.values[step.output].dtype;
  g.precision = step.precision;
  return g;
}

// The fused stem kernel's description of a kStem step (or of the step fuse_stem_pool proposes).
inline kernels::FusedStemDesc fused_stem_desc(const Plan& plan, const PlanStep& step, int64_t batch) {
  const PlanValue& conv = plan.values[step.fused_values[1]];
  const PlanValue& y = plan.values[step.output];
  kernels::FusedStemDesc d;
  d.n = batch;
  d.c = plan.input_channels;
  d.h = plan.input_h;
  d.w = plan.input_w;
  d.pad_top = step.space_to_depth.pad_top;
  d.pad_left = step.space_to_depth.pad_left;
  d.conv_h = conv.h;
  d.conv_w = conv.w;
  d.pool = step.pool;
  d.out_h = y.h;
  d.out_w = y.w;
  d.activation = step.conv.activation;
  d.dtype = conv.dtype;
  d.out_dtype = y.dtype;
  if (is_quantized_dtype(y.dtype)) d.out_scale = y.scale;
  d.bias_float32 = step.bias >= 0 && plan.weights[step.bias].dtype == DataType::kFloat32;
  return d;
}

// Ok when the fused stem kernel computes `step` (a kStem step): what kernels::validate() checks,
// plus the convolution's form (4x4, stride 1, no padding over block-2 space-to-depth pixels, no
// groups) and its weights' layout ([64, 4, 4, 16] float16, a float16 or float32 bias of 64).
inline Status check_fused_stem(const Plan& plan, const PlanStep& step) {
  const ConvAttrs& a = step.conv;
  const PlanWeight* w = step.weight >= 0 ? &plan.weights[step.weight] : nullptr;
  const PlanWeight* b = step.bias >= 0 ? &plan.weights[step.bias] : nullptr;
  const Shape want{kernels::kStemOutChannels, kernels::kStemTaps, kernels::kStemTaps,
                   kernels::kStemS2dChannels};
  if (step.space_to_depth.block != kernels::kStemBlock || a.kernel != Hw{4, 4} || a.stride != Hw{1, 1} ||
      a.dilation != Hw{1, 1} || a.groups != 1 || a.pads != Pads{} || a.has_residual)
    return Status::unsupported(step.name + ": not a 4x4/1 convolution over block-2 space-to-depth pixels");
  if (!w || w->dtype != DataType::kFloat16 || w->shape.dims != want.dims)
    return Status::unsupported(step.name + ": weights are not float16 [64, 4, 4, 16]");
  if (b && (b->shape.numel() != kernels::kStemOutChannels ||
            (b->dtype != DataType::kFloat16 && b->dtype != DataType::kFloat32)))
    return Status::unsupported(step.name + ": bias is not 64 float16 or float32 values");
  return kernels::validate(fused_stem_desc(plan, step, plan.max_batch));
}

}  // namespace gpulab
