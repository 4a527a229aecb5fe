#include "runtime/tactics.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "core/log.h"
#include "runtime/conv_step.h"
#include "runtime/step_problems.h"

namespace gpulab {

namespace {

// Timing: one warm-up launch, then kTimedRuns event-timed launches; the median counts.
constexpr int kTimedRuns = 5;
// Candidates tried per layer and graph form, in heuristic order (the first few hold the winner
// in practice; each costs a plan build, which can take a fraction of a second for runtime
// compiled engines).
constexpr int64_t kMaxFusedCandidates = 6;
constexpr int64_t kMaxUnfusedCandidates = 3;
// A candidate asking for more workspace than this is skipped.
constexpr int64_t kMaxWorkspaceBytes = int64_t{1} << 30;

struct Scratch {
  cuda::DeviceBuffer buffer;
  Status ensure(size_t bytes, const char* what) {
    if (buffer.bytes() >= bytes) return Status::ok();
    buffer.reset();
    GPULAB_ASSIGN_OR_RETURN(buffer, cuda::DeviceBuffer::allocate(bytes, what));
    return Status::ok();
  }
};

// Fills `bytes` with 0x3c: 1.06 in FP16, 0.0115 in FP32/BF16. Never time on zeros.
Status fill(void* p, size_t bytes) {
  GPULAB_CUDA_TRY(cudaMemset(p, 0x3c, bytes));
  return Status::ok();
}

}  // namespace

Result<TacticReport> select_tactics(Plan& plan, const BuildOptions& options, TimingCache* cache) {
  TacticReport report;
  GPULAB_ASSIGN_OR_RETURN(const PlanTarget target, cuda::current_target(options.device));
  cuda::LibraryHandles libs;
  GPULAB_TRY(libs.init());
  cudaStream_t stream = nullptr;
  GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};
  GPULAB_TRY(libs.set_stream(stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  GPULAB_CUDA_TRY(cudaEventCreate(&start));
  GPULAB_CUDA_TRY(cudaEventCreate(&stop));
  struct EventGuard {
    cudaEvent_t a, b;
    ~EventGuard() { cudaEventDestroy(a), cudaEventDestroy(b); }
  } events{start, stop};

  Scratch x, w, b, r, y, ws;
  for (auto& step : plan.steps) {
    if (step.kind == StepKind::kGemm) {
      step.tactic = "cublaslt";
      continue;
    }
    if (step.kind != StepKind::kConv) continue;
    const cuda::ConvProblem problem = conv_problem(plan, step, plan.max_batch);
    const std::string key = TimingCache::make_key(cuda::conv_signature(problem), target);
    if (cache) {
      if (const TimingEntry* hit = cache->find(key)) {
        step.tactic = hit->tactic;
        ++report.cached_layers;
        continue;
      }
    }
    // Candidates of the fused graph first, then of the convolution-only graph (followed by
    // gpulab's epilogue kernels, timed with them).
    std::vector<std::unique_ptr<cuda::CudnnConv>> forms;
    for (bool fused : {true, false}) {
      auto form = problem;
      form.fused = fused;
      auto conv = cuda::CudnnConv::with_candidates(libs.cudnn(), form);
      if (conv.is_ok()) {
        log_info("tactics: {} ({}): {} cuDNN candidates", step.name, fused ? "fused" : "unfused",
                 (*conv)->candidate_count());
        forms.push_back(std::move(conv).value());
      } else {
        log_info("tactics: {} ({}): {}", step.name, fused ? "fused" : "unfused", conv.status().message());
      }
    }
    if (forms.empty()) {
      log_info("tactics: {}: no cuDNN engine; using the direct convolution", step.name);
      step.tactic = "direct";
      ++report.fallback_layers;
      continue;
    }
    if (!options.time_tactics) {
      step.tactic = "direct";
      for (auto& conv : forms) {
        for (int64_t i = 0; i < conv->candidate_count() && step.tactic == "direct"; ++i)
          if (conv->select(i).is_ok() && conv->workspace_bytes() <= kMaxWorkspaceBytes)
            step.tactic = conv->tactic(i);
        if (step.tactic != "direct") break;
      }
      continue;
    }
    const PlanValue& xv = plan.values[step.inputs[0]];
    const PlanValue& yv = plan.values[step.output];
    const size_t x_bytes = static_cast<size_t>(xv.bytes_per_image() * plan.max_batch);
    const size_t y_bytes = static_cast<size_t>(yv.bytes_per_image() * plan.max_batch);
    GPULAB_TRY(x.ensure(x_bytes, "tactic timing input"));
    GPULAB_TRY(y.ensure(y_bytes, "tactic timing output"));
    GPULAB_TRY(r.ensure(y_bytes, "tactic timing residual"));
    GPULAB_TRY(w.ensure(plan.weights[step.weight].bytes.size(), "tactic timing weights"));
    GPULAB_TRY(b.ensure(static_cast<size_t>(yv.c) * 4, "tactic timing bias"));
    GPULAB_TRY(fill(x.buffer.get(), x_bytes));
    GPULAB_TRY(fill(r.buffer.get(), y_bytes));
    GPULAB_CUDA_TRY(cudaMemcpy(w.buffer.get(), plan.weights[step.weight].bytes.data(),
                               plan.weights[step.weight].bytes.size(), cudaMemcpyHostToDevice));
    GPULAB_TRY(fill(b.buffer.get(), static_cast<size_t>(yv.c) * 4));
    const cuda::ConvPointers ptrs{x.buffer.get(), w.buffer.get(), b.buffer.get(), r.buffer.get(),
                                  y.buffer.get()};

    double best_ms = 1e30;
    std::string best;
    int rejected = 0, over_workspace = 0, failed = 0;  // why candidates did not get timed
    for (auto& conv : forms) {
      // Time up to this many candidates that cuDNN builds; those it rejects (FP32 without tensor
      // cores rejected the first nine of forty on the H200) do not count against the limit.
      const int64_t max_timed = conv->fused() ? kMaxFusedCandidates : kMaxUnfusedCandidates;
      int64_t timed = 0;
      for (int64_t i = 0; i < conv->candidate_count() && timed < max_timed; ++i) {
        if (!conv->select(i).is_ok()) {
          ++rejected;
          continue;
        }
        const int64_t ws_bytes = conv->workspace_bytes();
        if (ws_bytes > kMaxWorkspaceBytes) {
          ++over_workspace;
          continue;
        }
        GPULAB_TRY(ws.ensure(static_cast<size_t>(std::max<int64_t>(ws_bytes, 1)), "tactic timing workspace"));
        auto run = [&] {
          return launch_conv_step(problem, conv.get(), libs.cudnn(), ptrs, ws.buffer.get(), stream);
        };
        if (!run().is_ok()) {
          ++failed;
          continue;
        }
        if (cudaStreamSynchronize(stream) != cudaSuccess) {
          cudaGetLastError();
          ++failed;
          continue;
        }
        std::vector<float> times;
        bool ok = true;
        for (int t = 0; t < kTimedRuns && ok; ++t) {
          GPULAB_CUDA_TRY(cudaEventRecord(start, stream));
          ok = run().is_ok();
          GPULAB_CUDA_TRY(cudaEventRecord(stop, stream));
          GPULAB_CUDA_TRY(cudaEventSynchronize(stop));
          float ms = 0;
          GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
          times.push_back(ms);
        }
        if (!ok) continue;
        ++timed;
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        log_debug("tactics: {} candidate {} {} {:.4f} ms", step.name, i, conv->tactic(i), median);
        if (median < best_ms) {
          best_ms = median;
          best = conv->tactic(i);
        }
      }
    }
    if (best.empty()) {
      log_info(
          "tactics: {}: no cuDNN candidate ran ({} rejected when built, {} over the {} MiB workspace "
          "limit, {} failed to run); using the direct convolution",
          step.name, rejected, over_workspace, kMaxWorkspaceBytes >> 20, failed);
      step.tactic = "direct";
      ++report.fallback_layers;
      continue;
    }
    step.tactic = best;
    ++report.timed_layers;
    log_info("tactics: {}: {} ({:.4f} ms at batch {})", step.name, best, best_ms, plan.max_batch);
    if (cache) cache->put(key, TimingEntry{best, best_ms});
  }
  return report;
}

}  // namespace gpulab
