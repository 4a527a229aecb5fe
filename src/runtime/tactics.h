// Tactic selection at plan build: for each convolution of a lowered plan, time cuDNN's candidate
// engine configurations and gpulab's own convolutions (the depthwise kernel where groups == c ==
// k, the direct convolution always) at the plan's max batch on this GPU and keep the fastest (or
// take it from the timing cache). Without time_tactics: "depthwise" where it applies, else cuDNN's
// first buildable candidate, else "direct". Allocates device memory for the duration of the call;
// synchronizes.
#pragma once

#include "gpulab/engine.h"
#include "plan/plan.h"
#include "plan/timing_cache.h"

namespace gpulab {

struct TacticReport {
  int timed_layers = 0;       // layers whose candidates were timed
  int cached_layers = 0;      // layers whose tactic came from the timing cache
  int fallback_layers = 0;    // layers where no cuDNN candidate ran (an own kernel runs them)
  int own_kernel_layers = 0;  // layers whose tactic is an own kernel ("direct", "depthwise"), cached too
  int chunked_layers = 0;     // timed layers whose winner runs in batch chunks ("chunk<n>:cudnn...")
  // Where the search's time went (wall seconds): cuDNN's candidate lists and plan builds (runtime
  // compilation included), and timing candidates on the GPU (own kernels' too).
  double candidate_build_s = 0, timing_s = 0;
  int64_t candidates_built = 0, timing_runs = 0;
};

// Fills PlanStep::tactic of every kConv step ("cudnn:...", "cudnn-unfused:...", "depthwise" or
// "direct"; see conv_step.h) and kGemm step ("cublaslt"). `cache` may be null; timed winners
// (own kernels too) are put in it.
Result<TacticReport> select_tactics(Plan& plan, const BuildOptions& options, TimingCache* cache);

}  // namespace gpulab
