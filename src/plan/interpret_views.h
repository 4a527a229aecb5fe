// Internal to the plan interpreter (interpret.h): the steps that read and write through TensorViews
// (kCopy, kLinear, kMatMul, kAttention, kLayerNorm, kEltwise), on float buffers per value, each
// computed in double from the stored inputs and written once (the interpreter rounds the value to
// its type after the step, as for every other step).
#pragma once

#include <functional>
#include <vector>

#include "gpulab/status.h"
#include "plan/plan.h"

namespace gpulab {

struct ViewStepContext {
  const Plan& plan;
  int64_t batch = 1;
  std::vector<std::vector<float>>& values;  // one float buffer per plan value, batch-major
  // A weight as the step reads it (the interpreter's rounding rules applied).
  std::function<Result<std::vector<float>>(const PlanStep& step, int weight)> weight;
};

// Runs one view step; its output value is allocated (zeros) when no step wrote it before, so that
// several kCopy steps can fill one value.
Status interpret_view_step(const PlanStep& step, ViewStepContext& ctx);

// Calls fn(begin, end) on contiguous parts of [0, count), on up to hardware_concurrency threads
// (one when the work is small); fn writes disjoint outputs. Returns when every part is done.
void parallel_rows(int64_t count, const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace gpulab
