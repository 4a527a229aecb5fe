// The CUDA engine as the sweep's target. The header needs no CUDA headers; the definition exists
// only in builds with the CUDA runtime (GPULAB_WITH_CUDA).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "sweep/sweep.h"

namespace gpulab::sweep {

struct CudaTargetOptions {
  std::string model_path;
  // Precision, max_batch and device are set per point; INT8/FP8 plans take the calibrated
  // activation_amax from here, and their precision's entry of bias_correction below.
  BuildOptions build;
  std::map<Precision, std::map<std::string, std::vector<float>>> bias_correction;
  // Images the accuracy gate leaves out (those calibrated on, when the gate's folder is the
  // calibration folder): the gate scores 8-bit plans on images their ranges were not measured on.
  // Compared as std::filesystem::weakly_canonical paths.
  std::set<std::filesystem::path> gate_exclude;
  int device = 0;
  int accuracy_batch = 64;  // images per inference of the accuracy gate
  bool include_transfers = false;
  // Plans for larger batches take the tactics timed at this batch (BuildOptions::tactic_batch,
  // checked at their own batch) instead of timing every candidate: timing at tens of thousands of
  // images takes minutes per plan (a FP32 ResNet-18 plan at batch 1024 took 77 s on the H200), and
  // cuDNN's heuristic first choice, used here before, ran FP32 ResNet-18 at 500 img/s on an H100
  // (bench/results/2026-12-05-eb666af). 0: time at every batch.
  int64_t timed_tactics_max_batch = 1024;
  // Up to that batch, a plan times its own tactics only when its batch is at least this many times
  // the last batch timed for its precision; the plans between take that batch's tactics (checked
  // at their own). Timed builds at batch 2-512 were most of a ResNet-18 sweep's 1,243 s on an H100
  // (bench/results/2026-12-06-9553f1d); with 4 the grow phase times 1, 4, 16, 64, 256 and 1024.
  // 1: time at every batch.
  int64_t timed_tactics_ratio = 4;
};

// The batch whose timed tactics the plan for `batch` takes (BuildOptions::tactic_batch), or 0 when
// it times its own: `last_timed` is the last batch timed for the plan's precision (0: none yet).
constexpr int64_t sweep_tactic_batch(int64_t batch, int64_t last_timed, int64_t up_to, int64_t ratio) {
  if (up_to <= 0) return 0;
  if (batch > up_to) return up_to;
  if (ratio <= 1 || last_timed <= 0 || batch <= last_timed || batch >= last_timed * ratio) return 0;
  return last_timed;
}

// Each point builds the plan for its precision and batch (kept when the next point of the same
// precision fits in it), creates one ExecutionContext with its buffers, and measures with
// run_bench_loop; release() destroys both, so device memory returns to its level before the
// point. cudaMalloc, cuBLAS and cuDNN allocation failures are kOutOfMemory and leave the CUDA
// context usable; a sticky error (an illegal address) is a failed point, and every later point
// then fails too: --resume in a new process continues from the JSON.
// kUnavailable when no GPU is usable.
Result<std::unique_ptr<SweepTarget>> make_cuda_target(const CudaTargetOptions& options);

}  // namespace gpulab::sweep
