// How tactic timing (tactics.cc) spends its launches on one candidate, apart from the CUDA code so
// that a unit test checks the rules.
//
// Every candidate gets one warm-up launch, which is timed too. A candidate whose warm-up launch
// already takes much longer than the best candidate so far cannot win: that launch is its time
// and it gets no further runs. At batch 1024 a losing cuDNN engine or gpulab's direct convolution
// can take 10-100 ms per launch, so six launches of each loser were most of a plan build.
#pragma once

#include <limits>

namespace gpulab::tactic_timing {

// Timed launches after the warm-up; the median counts.
inline constexpr int kTimedRuns = 5;
// Fewer for a candidate whose warm-up launch took longer than kLongMs: its median moves little
// between launches, and each costs what a whole small layer does.
inline constexpr int kLongTimedRuns = 3;
inline constexpr double kLongMs = 10.0;
// The give-up rule: warm-up launch > kGiveUpFactor * best + kGiveUpSlackMs. The slack keeps a
// first launch's one-time costs (loading the kernel's module) from ending a fast kernel's timing.
inline constexpr double kGiveUpFactor = 4.0;
inline constexpr double kGiveUpSlackMs = 1.0;

inline constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// The warm-up time above which a candidate stops being timed, given the best median so far
// (kNoLimit before any candidate ran).
constexpr double give_up_ms(double best_ms) {
  return best_ms == kNoLimit ? kNoLimit : kGiveUpFactor * best_ms + kGiveUpSlackMs;
}

// Timed launches for a candidate that was not given up, from its warm-up launch's time.
constexpr int timed_runs(double warm_up_ms) {
  return warm_up_ms > kLongMs ? kLongTimedRuns : kTimedRuns;
}

}  // namespace gpulab::tactic_timing
