// How tactic timing (tactics.cc) spends its launches on one candidate, apart from the CUDA code so
// that a unit test checks the rules.
//
// Every candidate gets one warm-up launch, then timed ones. A candidate whose launch already takes
// much longer than the best candidate so far cannot win: that launch is its time and it gets no
// further runs. At batch 1024 a losing cuDNN engine or gpulab's direct convolution can take
// 10-100 ms per launch, so six launches of each loser were most of a plan build.
//
// The rule looks at the first timed launch, not at the warm-up: a warm-up can include loading the
// kernel's module (lazy loading), which can make a kernel that would win look slow once. Only the
// direct convolution, which never wins where its warm-up is slow, is judged on its warm-up. Later
// launches are left to the median, so that one hiccup does not decide.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "gpulab/engine.h"

namespace gpulab::tactic_timing {

// Timed launches after the warm-up; the median counts.
inline constexpr int kTimedRuns = 5;
// Fewer for a candidate whose warm-up launch took longer than kLongMs: its median moves little
// between launches, and each costs what a whole small layer does.
inline constexpr int kLongTimedRuns = 3;
inline constexpr double kLongMs = 10.0;
// The give-up rule: launch > kGiveUpFactor * best + kGiveUpSlackMs. The slack keeps jitter on
// very short kernels from ending their timing.
inline constexpr double kGiveUpFactor = 4.0;
inline constexpr double kGiveUpSlackMs = 1.0;

inline constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// The launch time above which a candidate stops being timed, given the best median so far
// (kNoLimit before any candidate ran).
constexpr double give_up_ms(double best_ms) {
  return best_ms == kNoLimit ? kNoLimit : kGiveUpFactor * best_ms + kGiveUpSlackMs;
}

// Timed launches for a candidate that was not given up, from its warm-up launch's time.
constexpr int timed_runs(double warm_up_ms) {
  return warm_up_ms > kLongMs ? kLongTimedRuns : kTimedRuns;
}

// The workspace a cuDNN candidate may ask for: the limit the user set (BuildOptions::
// max_workspace_bytes), else a quarter of the device memory free when timing starts, at least
// kMinAutoWorkspaceBytes. A fixed 1 GiB (until 524565a) left out the batch-1024 FP32 engines that
// keep transformed inputs in workspace.
inline constexpr int64_t kMinAutoWorkspaceBytes = int64_t{64} << 20;
constexpr int64_t workspace_limit(std::optional<int64_t> set_bytes, uint64_t free_device_bytes) {
  if (set_bytes) return *set_bytes;
  const uint64_t quarter = free_device_bytes / 4;
  return quarter < static_cast<uint64_t>(kMinAutoWorkspaceBytes) ? kMinAutoWorkspaceBytes
                                                                 : static_cast<int64_t>(quarter);
}

// Batch chunks (ChunkedTactic, conv_step.h; BatchChunks, engine.h): in a plan built for more than
// kChunkImages images, a layer also gets cuDNN's candidates timed at kChunkImages, and the best of
// them is timed once more run in chunks over the max batch, when no candidate ran at the max batch
// (kFallback: a workspace limit or a nearly full device) or, with kSearch, when its best launch
// there still takes more than kChunkSearchMs. The search was the default at first (6df71a7), for
// ResNet-18 FP32 at batch 1024, where engines 11/28 took three times batch 256's time per image;
// the H200 then showed (2026-12-05) that the engines that scale had been left out by a 1 GiB
// workspace limit: with the limit raised, no layer chose chunks, and the build took 118 s with the
// search against 77 s without it (each the machine's first FP32 build), so dbe2cfe made kFallback
// the default.
inline constexpr int64_t kChunkImages = 256;
inline constexpr double kChunkSearchMs = 1.0;
constexpr bool try_chunks(BatchChunks mode, int64_t max_batch, double best_ms) {
  if (mode == BatchChunks::kOff || max_batch <= kChunkImages) return false;
  return best_ms == kNoLimit || (mode == BatchChunks::kSearch && best_ms > kChunkSearchMs);
}

}  // namespace gpulab::tactic_timing
