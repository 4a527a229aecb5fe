// The CUDA engine as the sweep's target. The header needs no CUDA headers; the definition exists
// only in builds with the CUDA runtime (GPULAB_WITH_CUDA).
#pragma once

#include <memory>
#include <string>

#include "gpulab/engine.h"
#include "sweep/sweep.h"

namespace gpulab::sweep {

struct CudaTargetOptions {
  std::string model_path;
  BuildOptions build;  // precision, max_batch and device are set per point
  int device = 0;
  int accuracy_batch = 64;  // images per inference of the accuracy gate
  bool include_transfers = false;
  // Plans for larger batches take the tactics timed at this batch (BuildOptions::tactic_batch,
  // checked at their own batch) instead of timing every candidate: timing at tens of thousands of
  // images takes minutes per plan (a FP32 ResNet-18 plan at batch 1024 took 77 s on the H200), and
  // cuDNN's heuristic first choice, used here before, ran FP32 ResNet-18 at 500 img/s on an H100
  // (bench/results/2026-12-05-eb666af). 0: time at every batch.
  int64_t timed_tactics_max_batch = 1024;
};

// Each point builds the plan for its precision and batch (kept when the next point of the same
// precision fits in it), creates one ExecutionContext with its buffers, and measures with
// run_bench_loop; release() destroys both, so device memory returns to its level before the
// point. cudaMalloc, cuBLAS and cuDNN allocation failures are kOutOfMemory and leave the CUDA
// context usable; a sticky error (an illegal address) is a failed point, and every later point
// then fails too: --resume in a new process continues from the JSON.
// kUnavailable when no GPU is usable.
Result<std::unique_ptr<SweepTarget>> make_cuda_target(const CudaTargetOptions& options);

}  // namespace gpulab::sweep
