#include "runtime/step_launch.h"

#include <fmt/format.h>

#include "backends/cuda/kernels/kernels.h"
#include "runtime/conv_step.h"
#include "runtime/step_problems.h"

namespace gpulab {

Status enqueue_input(const StepLaunch& l, const float* input_nchw) {
  const Plan& plan = l.plan;
  const PlanStep& step = l.step;
  const PlanValue& y = plan.values[step.output];
  if (is_quantized_dtype(y.dtype)) return enqueue_quantized_input(l, input_nchw);
  const SpaceToDepth& sd = step.space_to_depth;
  if (sd == SpaceToDepth{}) {
    kernels::NchwToNhwcDesc d{l.batch, plan.input_channels, plan.input_h, plan.input_w, y.c, y.dtype};
    return kernels::launch_nchw_to_nhwc(d, input_nchw, l.value(step.output), l.stream);
  }
  kernels::SpaceToDepthDesc d{l.batch,    plan.input_channels, plan.input_h, plan.input_w, sd.block,
                              sd.pad_top, sd.pad_left,         y.h,          y.w,          y.c,
                              y.dtype};
  return kernels::launch_nchw_to_space_to_depth(d, input_nchw, l.value(step.output), l.stream);
}

Status enqueue_stem(const StepLaunch& l, const float* input_nchw) {
  const PlanStep& step = l.step;
  return kernels::launch_fused_stem(fused_stem_desc(l.plan, step, l.batch), input_nchw, l.weight(step.weight),
                                    l.weight(step.bias), l.value(step.output), l.stream);
}

Status enqueue_conv(const StepLaunch& l, const PreparedConv& prepared) {
  const PlanStep& step = l.step;
  if (is_quantized(step.precision)) return enqueue_q8_layer(l, prepared.q8, prepared.cudnn);
  const cuda::ConvPointers ptrs{l.value(step.inputs[0]), l.weight(step.weight), l.weight(step.bias),
                                step.conv.has_residual ? l.value(step.inputs[1]) : nullptr,
                                l.value(step.output)};
  const cuda::ConvProblem problem = conv_problem(l.plan, step, l.batch);
  if (prepared.chunk > 0)
    return launch_chunked_conv_step(problem, prepared.chunk, *prepared.conv, prepared.tail, prepared.cudnn,
                                    ptrs, l.workspace, l.stream);
  return launch_conv_step(problem, conv_kernel_for(step.tactic, prepared.conv), step.tactic, prepared.conv,
                          prepared.cudnn, ptrs, l.workspace, l.stream);
}

Status enqueue_gemm(const StepLaunch& l, const cuda::CublasLtGemm& gemm, cublasLtHandle_t handle,
                    int64_t workspace_bytes) {
  const PlanStep& step = l.step;
  return gemm.launch(handle, l.value(step.inputs[0]), l.weight(step.weight), l.weight(step.bias),
                     l.value(step.output), l.workspace, workspace_bytes, l.stream);
}

Status enqueue_pool(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& x = l.plan.values[step.inputs[0]];
  const PlanValue& y = l.plan.values[step.output];
  kernels::PoolDesc d;
  d.kind = step.kind == StepKind::kMaxPool ? kernels::PoolKind::kMax : kernels::PoolKind::kAverage;
  d.n = l.batch;
  d.h = x.h;
  d.w = x.w;
  d.c = x.c;
  d.kernel = step.pool.kernel;
  d.stride = step.pool.stride;
  d.dilation = step.pool.dilation;
  d.pads = step.pool.pads;
  d.ceil_mode = step.pool.ceil_mode;
  d.count_include_pad = step.pool.count_include_pad;
  d.dtype = x.dtype;
  d = kernels::with_output_size(d);
  if (d.out_h != y.h || d.out_w != y.w)
    return Status::internal(fmt::format("{}: pooled size {}x{} differs from the plan's {}x{}", step.name,
                                        d.out_h, d.out_w, y.h, y.w));
  if (is_quantized_dtype(x.dtype)) return enqueue_q8_max_pool(l, d);
  return kernels::launch_pool(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
}

Status enqueue_global_avg_pool(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& x = l.plan.values[step.inputs[0]];
  if (is_quantized_dtype(x.dtype)) return enqueue_q8_global_avg_pool(l);
  kernels::GlobalAvgPoolDesc d{l.batch, x.h, x.w, x.c, x.dtype};
  return kernels::launch_global_avg_pool(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
}

Status enqueue_binary(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[step.output];
  kernels::BinaryDesc d;
  d.op = step.kind == StepKind::kAdd ? kernels::BinaryOp::kAdd : kernels::BinaryOp::kMul;
  d.n = l.batch;
  d.hw = y.h * y.w;
  d.c = y.c;
  d.b_broadcast =
      broadcasts_channels(l.plan, step) ? kernels::Broadcast::kPerImageChannel : kernels::Broadcast::kNone;
  d.activation = step.activation;
  d.clip_min = step.clip_min;
  d.clip_max = step.clip_max;
  d.dtype = y.dtype;
  return kernels::launch_binary(d, l.value(step.inputs[0]), l.value(step.inputs[1]), l.value(step.output),
                                l.stream);
}

Result<kernels::UnaryOp> unary_op_of(PointwiseFn fn) {
  switch (fn) {
    case PointwiseFn::kSigmoid: return kernels::UnaryOp::kSigmoid;
    case PointwiseFn::kHardSigmoid: return kernels::UnaryOp::kHardSigmoid;
    case PointwiseFn::kHardSwish: return kernels::UnaryOp::kHardSwish;
    case PointwiseFn::kGelu: return kernels::UnaryOp::kGelu;
    case PointwiseFn::kGeluTanh: return kernels::UnaryOp::kGeluTanh;
    case PointwiseFn::kTanh: return kernels::UnaryOp::kTanh;
    case PointwiseFn::kErf: return kernels::UnaryOp::kErf;
    case PointwiseFn::kSqrt: return kernels::UnaryOp::kSqrt;
    case PointwiseFn::kExp: return kernels::UnaryOp::kExp;
    case PointwiseFn::kNeg: return kernels::UnaryOp::kNeg;
    case PointwiseFn::kFakeQuantize: return kernels::UnaryOp::kFakeQuantize;
    case PointwiseFn::kIdentity: break;
  }
  return Status::internal("a pointwise step with no function (identity)");
}

Status enqueue_unary(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[step.output];
  kernels::UnaryDesc d;
  if (step.kind == StepKind::kActivation) {
    d.op = step.activation == Activation::kClip ? kernels::UnaryOp::kClip : kernels::UnaryOp::kRelu;
  } else {
    GPULAB_ASSIGN_OR_RETURN(d.op, unary_op_of(step.pointwise));
  }
  d.count = l.batch * y.h * y.w * y.c;
  d.alpha = step.alpha;
  d.beta = step.beta;
  d.clip_min = step.clip_min;
  d.clip_max = step.clip_max;
  d.dtype = y.dtype;
  return kernels::launch_unary(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
}

// One strided copy per input (its valid channels) into its slice of each output pixel's channels.
Status enqueue_concat(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[step.output];
  const size_t element = dtype_size(y.dtype);
  size_t first = 0;
  for (int in : step.inputs) {
    const PlanValue& x = l.plan.values[in];
    const size_t row = static_cast<size_t>(x.c_valid) * element;  // without x's channel padding
    const cudaError_t copied =
        cudaMemcpy2DAsync(static_cast<char*>(l.value(step.output)) + first,
                          static_cast<size_t>(y.c) * element, l.value(in), static_cast<size_t>(x.c) * element,
                          row, static_cast<size_t>(l.batch * y.h * y.w), cudaMemcpyDeviceToDevice, l.stream);
    if (copied != cudaSuccess)
      return Status::device_error(
          fmt::format("{}: cudaMemcpy2DAsync: {}", step.name, cudaGetErrorString(copied)));
    first += row;
  }
  return Status::ok();
}

Status enqueue_cast(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& x = l.plan.values[step.inputs[0]];
  const PlanValue& y = l.plan.values[step.output];
  if (is_quantized_dtype(x.dtype) || is_quantized_dtype(y.dtype)) return enqueue_quantized_cast(l);
  const int64_t per_image = x.h * x.w * x.c;
  if (y.dtype == DataType::kFloat32) {  // NHWC -> NCHW with h = w = 1 is a plain cast
    kernels::NhwcToNchwF32Desc d{l.batch, 1, 1, per_image, per_image, x.dtype};
    return kernels::launch_nhwc_to_nchw_f32(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
  }
  if (x.dtype == DataType::kFloat32) {
    // [batch, 1, per_image, 1] NCHW is [batch, per_image, 1, 1] NHWC: an elementwise cast
    // through the staged conversion kernel (one channel, vector loads).
    kernels::NchwToNhwcDesc d{l.batch, 1, per_image, 1, 1, y.dtype};
    return kernels::launch_nchw_to_nhwc(d, l.value(step.inputs[0]), l.value(step.output), l.stream);
  }
  // Between 16-bit float types (an FP16 layer's value in a BF16 plan): elementwise.
  return kernels::launch_float_cast({.count = l.batch * per_image, .from = x.dtype, .to = y.dtype},
                                    l.value(step.inputs[0]), l.value(step.output), l.stream);
}

Status enqueue_output(const StepLaunch& l, float* logits) {
  const Plan& plan = l.plan;
  const PlanStep& step = l.step;
  const PlanValue& x = plan.values[step.inputs[0]];
  kernels::NhwcToNchwF32Desc d{l.batch, 1, 1, plan.num_classes, x.c, x.dtype};
  GPULAB_TRY(kernels::launch_nhwc_to_nchw_f32(d, l.value(step.inputs[0]), logits, l.stream));
  if (!step.softmax) return Status::ok();
  // In place, over the float32 logits.
  return kernels::launch_softmax(kernels::SoftmaxDesc{l.batch, plan.num_classes}, logits, logits, l.stream);
}

}  // namespace gpulab
