// The steps of INT8/FP8 plans that read or write 8-bit values (step_launch.h's functions call
// these when a value is int8 or fp8e4m3): kernels/quant_kernels.h, with the scales the plan's
// values carry.
#include <fmt/format.h>

#include "backends/cuda/kernels/quant_kernels.h"
#include "runtime/conv_step.h"
#include "runtime/step_launch.h"

namespace gpulab {

Status enqueue_quantized_input(const StepLaunch& l, const float* input_nchw) {
  const Plan& plan = l.plan;
  const PlanStep& step = l.step;
  const PlanValue& y = plan.values[step.output];
  const SpaceToDepth& sd = step.space_to_depth;
  kernels::QuantizeInputDesc d;
  d.layout = kernels::SpaceToDepthDesc{
      l.batch, plan.input_channels, plan.input_h, plan.input_w, sd.block, sd.pad_top, sd.pad_left, y.h, y.w,
      y.c,     DataType::kFloat32};
  d.dtype = y.dtype;
  d.scale = y.scale;
  return kernels::launch_quantize_input(d, input_nchw, l.value(step.output), l.stream);
}

Status enqueue_quantized_cast(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& x = l.plan.values[step.inputs[0]];
  const PlanValue& y = l.plan.values[step.output];
  const kernels::QuantCastDesc d{.count = l.batch * x.h * x.w * x.c,
                                 .from = x.dtype,
                                 .to = y.dtype,
                                 .scale = is_quantized_dtype(x.dtype) ? x.scale : y.scale};
  return kernels::launch_quant_cast(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
}

kernels::Q8ConvDesc q8_layer_desc(const Plan& plan, const PlanStep& step, int64_t batch) {
  const PlanValue& x = plan.values[step.inputs[0]];
  const PlanValue& y = plan.values[step.output];
  kernels::Q8ConvDesc d;
  d.n = batch;
  d.x_dtype = x.dtype;
  d.x_scale = x.scale;
  d.y_dtype = y.dtype;
  d.y_scale = is_quantized_dtype(y.dtype) ? y.scale : 1.0f;
  d.k = y.c;
  if (step.kind == StepKind::kGemm) {  // a 1x1 convolution over the flattened NHWC features
    d.c = x.h * x.w * x.c;
    d.h = d.w = d.out_h = d.out_w = 1;
  } else {
    const ConvAttrs& a = step.conv;
    d.h = x.h;
    d.w = x.w;
    d.c = x.c;
    d.r = a.kernel.h;
    d.s = a.kernel.w;
    d.out_h = y.h;
    d.out_w = y.w;
    d.stride = a.stride;
    d.dilation = a.dilation;
    d.pads = a.pads;
    d.groups = a.groups;
    d.has_residual = a.has_residual;
    if (a.has_residual) d.residual_scale = plan.values[step.inputs[1]].scale;
    d.activation = a.activation;
    d.clip_min = a.clip_min;
    d.clip_max = a.clip_max;
  }
  return d;
}

std::span<const float> plan_floats(const Plan& plan, int w) {
  if (w < 0) return {};
  const auto& bytes = plan.weights[static_cast<size_t>(w)].bytes;
  return {reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float)};
}

Status enqueue_q8_layer(const StepLaunch& l, const cuda::CudnnQ8Conv* cudnn_q8, cudnnHandle_t cudnn) {
  const PlanStep& step = l.step;
  const kernels::Q8ConvDesc d = q8_layer_desc(l.plan, step, l.batch);
  const void* residual = d.has_residual ? l.value(step.inputs[1]) : nullptr;
  const auto* w_scale = static_cast<const float*>(l.weight(step.weight_scale));
  const auto* bias = static_cast<const float*>(l.weight(step.bias));
  const std::string_view tactic = q8_tactic_for_batch(step.tactic, l.batch);
  if (cudnn_q8 && is_q8_cudnn_tactic(tactic))
    return cudnn_q8->launch(
        cudnn, {l.value(step.inputs[0]), l.weight(step.weight), bias, residual, l.value(step.output)},
        l.workspace);
  if (is_q8_mma_tactic(tactic))
    return kernels::launch_q8_mma_conv(tactic, d, l.value(step.inputs[0]), l.weight(step.weight), w_scale,
                                       bias, residual, l.value(step.output), l.stream, l.workspace,
                                       l.workspace_bytes);
  return kernels::launch_q8_conv(d, l.value(step.inputs[0]), l.weight(step.weight), w_scale, bias, residual,
                                 l.value(step.output), l.stream);
}

Status enqueue_q8_max_pool(const StepLaunch& l, const kernels::PoolDesc& desc) {
  return kernels::launch_q8_max_pool(desc, l.value(l.step.inputs[0]), l.value(l.step.output), l.stream);
}

Status enqueue_q8_global_avg_pool(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& x = l.plan.values[step.inputs[0]];
  const PlanValue& y = l.plan.values[step.output];
  const kernels::Q8GlobalPoolDesc d{.n = l.batch,
                                    .h = x.h,
                                    .w = x.w,
                                    .c = x.c,
                                    .x_dtype = x.dtype,
                                    .x_scale = x.scale,
                                    .y_dtype = y.dtype,
                                    .y_scale = is_quantized_dtype(y.dtype) ? y.scale : 1.0f};
  return kernels::launch_q8_global_avg_pool(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
}

}  // namespace gpulab
