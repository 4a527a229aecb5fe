// Tactic selection at plan build: for each convolution of a lowered plan, time cuDNN's candidate
// engine configurations at the plan's max batch on this GPU and keep the fastest (or take it from
// the timing cache). Allocates device memory for the duration of the call; synchronizes.
#pragma once

#include "gpulab/engine.h"
#include "plan/plan.h"
#include "plan/timing_cache.h"

namespace gpulab {

struct TacticReport {
  int timed_layers = 0;     // layers whose candidates were timed
  int cached_layers = 0;    // layers whose tactic came from the timing cache
  int fallback_layers = 0;  // layers left to the direct-convolution fallback
};

// Fills PlanStep::tactic of every kConv step ("cudnn:..." or "direct") and kGemm step
// ("cublaslt"). `cache` may be null.
Result<TacticReport> select_tactics(Plan& plan, const BuildOptions& options, TimingCache* cache);

}  // namespace gpulab
