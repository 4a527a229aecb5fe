// The library problem descriptions of a plan step at a given batch size (shared by the tactic
// timing and the execution context).
#pragma once

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/direct_conv.h"
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
  return d;
}

inline cuda::GemmProblem gemm_problem(const Plan& plan, const PlanStep& step, int64_t batch) {
  cuda::GemmProblem g;
  g.rows = batch;
  g.in_features = plan.values[step.inputs[0]].c;
  g.out_features = plan.values[step.output].c;
  g.has_bias = step.bias >= 0;
  g.dtype = plan.values[step.output].dtype;
  g.precision = step.precision;
  return g;
}

}  // namespace gpulab
