#include "runtime/tactics.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cutlass_conv.h"
#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/kernel_desc.h"
#include "backends/cuda/wgmma_conv.h"
#include "core/log.h"
#include "runtime/conv_step.h"
#include "runtime/step_problems.h"
#include "runtime/tactic_timing.h"

namespace gpulab {

namespace {

// Candidates tried per layer and graph form, in heuristic order (the first few hold the winner
// in practice; each costs a plan build, which can take a fraction of a second for runtime
// compiled engines).
constexpr int64_t kMaxFusedCandidates = 6;
constexpr int64_t kMaxUnfusedCandidates = 3;
// Layers whose best candidate still takes this long get a wider search, up to this many timed
// candidates per graph form: build time goes where run time is (ResNet-18's stem at batch 256;
// every FP32 layer).
constexpr double kWideSearchMs = 0.25;
constexpr int64_t kMaxWideCandidates = 16;

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
  size_t free_bytes = 0, total_bytes = 0;
  if (!options.max_workspace_bytes) GPULAB_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t ws_limit = tactic_timing::workspace_limit(options.max_workspace_bytes, free_bytes);
  log_info("tactics: cuDNN candidates may use up to {} MiB of workspace{}", ws_limit >> 20,
           options.max_workspace_bytes
               ? ""
               : " (a quarter of the free device memory; --max-workspace-mib sets it)");
  // A workspace limit the user set can change the winner, and so can leaving batch chunks out:
  // both are part of the timing cache's key.
  const std::string key_suffix = fmt::format(
      "{}{}",
      options.max_workspace_bytes ? fmt::format("|ws{}", *options.max_workspace_bytes) : std::string(),
      options.batch_chunks == BatchChunks::kFallback ? ""
      : options.batch_chunks == BatchChunks::kOff    ? "|nochunk"
                                                     : "|chunksearch");
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

  // Median time in ms of `run` on `stream`, or nullopt when it fails to launch or to finish. The
  // first launch warms up. The first timed launch, or the warm-up when `judge_warm_up`, ends the
  // timing when it exceeds `give_up_after_ms`, and is the result (tactic_timing.h); a later slow
  // launch is left to the median.
  // A failure is logged (debug) as "tactics: <what> failed to run: <why>".
  auto time_candidate = [&](const std::function<Status()>& run, double give_up_after_ms, bool judge_warm_up,
                            const std::string& what) -> Result<std::optional<double>> {
    GPULAB_CUDA_TRY(cudaEventRecord(start, stream));
    const Status first = run();
    GPULAB_CUDA_TRY(cudaEventRecord(stop, stream));
    const cudaError_t synced = first.is_ok() ? cudaEventSynchronize(stop) : cudaSuccess;
    if (!first.is_ok() || synced != cudaSuccess) {
      cudaGetLastError();
      log_debug("tactics: {} failed to run: {}", what,
                first.is_ok() ? cudaGetErrorString(synced) : first.message());
      return std::optional<double>();
    }
    float first_ms = 0;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&first_ms, start, stop));
    if (judge_warm_up && first_ms > give_up_after_ms) return std::optional<double>(first_ms);
    std::vector<float> times;
    for (int t = 0, runs = tactic_timing::timed_runs(first_ms); t < runs; ++t) {
      GPULAB_CUDA_TRY(cudaEventRecord(start, stream));
      const Status ok = run();
      GPULAB_CUDA_TRY(cudaEventRecord(stop, stream));
      GPULAB_CUDA_TRY(cudaEventSynchronize(stop));
      if (!ok.is_ok()) {
        log_debug("tactics: {} failed to run: {}", what, ok.message());
        return std::optional<double>();
      }
      float ms = 0;
      GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
      if (t == 0 && ms > give_up_after_ms) return std::optional<double>(ms);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return std::optional<double>(times[times.size() / 2]);
  };
  auto count_tactic = [&](const std::string& tactic) {
    if (conv_kernel_of_tactic(tactic) != ConvKernel::kCudnn) ++report.own_kernel_layers;
    if (parse_chunked_tactic(tactic)) ++report.chunked_layers;
  };

  // cuDNN's candidates for one problem: the fused graph's first, then the convolution-only
  // graph's (followed by gpulab's epilogue kernels, timed with them).
  struct CudnnSearch {
    std::string label;  // "layer1.0.conv1" or "layer1.0.conv1 at batch 256", for the log
    std::vector<std::unique_ptr<cuda::CudnnConv>> forms;
    // Per form: the next candidate index and how many were timed, so that the wide search goes on
    // where the first pass stopped.
    std::vector<int64_t> next, timed;
    int rejected = 0, over_workspace = 0, failed = 0;  // why candidates did not get timed
    double best_ms = tactic_timing::kNoLimit;
    std::string best;  // "" when none ran
  };
  auto make_search = [&](const cuda::ConvProblem& problem, std::string label) {
    CudnnSearch search;
    search.label = std::move(label);
    for (bool fused : {true, false}) {
      auto form = problem;
      form.fused = fused;
      auto conv = cuda::CudnnConv::with_candidates(libs.cudnn(), form);
      if (conv.is_ok()) {
        log_info("tactics: {} ({}): {} cuDNN candidates", search.label, fused ? "fused" : "unfused",
                 (*conv)->candidate_count());
        search.forms.push_back(std::move(conv).value());
      } else {
        log_info("tactics: {} ({}): {}", search.label, fused ? "fused" : "unfused", conv.status().message());
      }
    }
    search.next.assign(search.forms.size(), 0);
    search.timed.assign(search.forms.size(), 0);
    return search;
  };
  Scratch x, w, b, r, y, ws;
  // Times candidates of form `f` until `max_timed` of them ran; `ptrs` hold problem.n images.
  auto time_cudnn = [&](CudnnSearch& search, size_t f, const cuda::ConvProblem& problem,
                        const cuda::ConvPointers& ptrs, int64_t max_timed) -> Status {
    auto& conv = search.forms[f];
    for (; search.next[f] < conv->candidate_count() && search.timed[f] < max_timed; ++search.next[f]) {
      const int64_t i = search.next[f];
      if (const Status built = conv->select(i); !built.is_ok()) {
        ++search.rejected;
        log_debug("tactics: {} candidate {} rejected when built: {}", search.label, i, built.message());
        continue;
      }
      const int64_t ws_bytes = conv->workspace_bytes();
      if (ws_bytes > ws_limit) {
        ++search.over_workspace;
        log_debug("tactics: {} candidate {} {} needs {} MiB of workspace", search.label, i, conv->tactic(i),
                  ws_bytes >> 20);
        continue;
      }
      GPULAB_TRY(ws.ensure(static_cast<size_t>(std::max<int64_t>(ws_bytes, 1)), "tactic timing workspace"));
      auto run = [&] {
        return launch_conv_step(problem, ConvKernel::kCudnn, {}, conv.get(), libs.cudnn(), ptrs,
                                ws.buffer.get(), stream);
      };
      GPULAB_ASSIGN_OR_RETURN(
          const std::optional<double> ms,
          time_candidate(run, tactic_timing::give_up_ms(search.best_ms), false,
                         fmt::format("{} candidate {} {}", search.label, i, conv->tactic(i))));
      if (!ms) {
        ++search.failed;
        continue;
      }
      ++search.timed[f];
      log_debug("tactics: {} candidate {} {} {:.4f} ms", search.label, i, conv->tactic(i), *ms);
      if (*ms < search.best_ms) {
        search.best_ms = *ms;
        search.best = conv->tactic(i);
      }
    }
    return Status::ok();
  };
  // Time up to kMaxFusedCandidates / kMaxUnfusedCandidates candidates that cuDNN builds (those it
  // rejects do not count: FP32 without tensor cores rejected the first nine of forty on the H200),
  // then up to kMaxWideCandidates when the best is still slow.
  auto run_search = [&](CudnnSearch& search, const cuda::ConvProblem& problem,
                        const cuda::ConvPointers& ptrs) -> Status {
    for (size_t f = 0; f < search.forms.size(); ++f)
      GPULAB_TRY(time_cudnn(search, f, problem, ptrs,
                            search.forms[f]->fused() ? kMaxFusedCandidates : kMaxUnfusedCandidates));
    if (search.best_ms > kWideSearchMs) {
      for (size_t f = 0; f < search.forms.size(); ++f)
        GPULAB_TRY(time_cudnn(search, f, problem, ptrs, kMaxWideCandidates));
      int64_t timed = 0;
      for (int64_t t : search.timed) timed += t;
      log_info("tactics: {}: wide search, {} candidates timed", search.label, timed);
    }
    return Status::ok();
  };
  // Times the cuDNN tactic `inner`, timed on `part` (the layer at part.n images), run in chunks of
  // part.n over problem.n images as the runtime would run it (conv_step.h), and makes it `best`
  // when it beats `best_ms`.
  auto time_chunked = [&](const PlanStep& step, const cuda::ConvProblem& problem,
                          const cuda::ConvProblem& part, const std::string& inner,
                          const cuda::ConvPointers& ptrs, double& best_ms, std::string& best) -> Status {
    const int64_t chunk = part.n;
    const std::string tactic = chunked_tactic(chunk, inner);
    const ChunkSplit split = split_batch(problem.n, chunk);
    auto full = prepare_cudnn_conv(libs.cudnn(), part, inner, true);
    Result<std::unique_ptr<cuda::CudnnConv>> tail = std::unique_ptr<cuda::CudnnConv>();
    if (full.is_ok() && split.tail > 0)
      tail = prepare_cudnn_conv(libs.cudnn(), conv_problem(plan, step, split.tail), inner, false);
    if (!full.is_ok() || !tail.is_ok()) {
      log_debug("tactics: {} candidate {}: {}", step.name, tactic,
                (full.is_ok() ? tail.status() : full.status()).message());
      return Status::ok();
    }
    const int64_t ws_bytes = std::max((*full)->workspace_bytes(), *tail ? (*tail)->workspace_bytes() : 0);
    if (ws_bytes > ws_limit) {
      log_debug("tactics: {} candidate {} needs {} MiB of workspace", step.name, tactic, ws_bytes >> 20);
      return Status::ok();
    }
    GPULAB_TRY(ws.ensure(static_cast<size_t>(std::max<int64_t>(ws_bytes, 1)), "tactic timing workspace"));
    auto run = [&] {
      return launch_chunked_conv_step(problem, chunk, **full, tail->get(), libs.cudnn(), ptrs,
                                      ws.buffer.get(), stream);
    };
    GPULAB_ASSIGN_OR_RETURN(const std::optional<double> ms,
                            time_candidate(run, tactic_timing::give_up_ms(best_ms), false,
                                           fmt::format("{} candidate {}", step.name, tactic)));
    if (!ms) return Status::ok();
    log_info("tactics: {}: {} in chunks of {}: {:.4f} ms (best so far {:.4f} ms)", step.name, inner, chunk,
             *ms, best_ms);
    if (*ms < best_ms) {
      best_ms = *ms;
      best = tactic;
    }
    return Status::ok();
  };

  for (auto& step : plan.steps) {
    if (step.kind == StepKind::kGemm) {
      step.tactic = "cublaslt";
      continue;
    }
    if (step.kind == StepKind::kStem) {
      step.tactic = std::string(kFusedStemTactic);
      continue;
    }
    if (step.kind != StepKind::kConv) continue;
    const cuda::ConvProblem problem = conv_problem(plan, step, plan.max_batch);
    if (problem.x_dtype) {
      // A folded cast (fold_input_casts): the depthwise kernel is the one kernel that reads x in
      // another type than y, so there is nothing to time.
      if (const Status s = cuda::validate_depthwise_conv(direct_conv_desc(problem)); !s.is_ok())
        return Status::internal(fmt::format("tactics: {} reads its {} input directly, but {}", step.name,
                                            dtype_name(*problem.x_dtype), s.message()));
      step.tactic = std::string(kDepthwiseTactic);
      ++report.own_kernel_layers;
      continue;
    }
    const std::string key = TimingCache::make_key(cuda::conv_signature(problem) + key_suffix, target);
    if (cache) {
      const TimingEntry* hit = cache->find(key);
      if (hit && check_conv_tactic(hit->tactic).is_ok()) {
        step.tactic = hit->tactic;
        ++report.cached_layers;
        count_tactic(step.tactic);
        continue;
      }
      if (hit)
        log_info("tactics: {}: the timing cache's \"{}\" is not a kernel this gpulab has; timing again",
                 step.name, hit->tactic);
    }
    // gpulab's own candidates: the depthwise kernel where it applies (batch does not matter),
    // CUTLASS's small-channel convolution for FP16 stems, the direct convolution for every float
    // layer.
    const cuda::DirectConvDesc own_desc = direct_conv_desc(problem);
    const bool depthwise_ok = cuda::depthwise_conv_supports(own_desc);
    const bool cutlass_ok = cuda::cutlass_conv_supports(own_desc);
    const bool wgmma_ok = cuda::wgmma_conv_supports(own_desc);
    const bool direct_ok = kernels::is_kernel_float_type(problem.dtype);
    if (!options.time_tactics && depthwise_ok) {
      step.tactic = std::string(kDepthwiseTactic);
      ++report.own_kernel_layers;
      continue;
    }
    CudnnSearch search = make_search(problem, step.name);
    if (search.forms.empty() && !depthwise_ok && !cutlass_ok && !wgmma_ok) {
      log_info("tactics: {}: no cuDNN engine; using the direct convolution", step.name);
      step.tactic = std::string(kDirectTactic);
      ++report.fallback_layers;
      ++report.own_kernel_layers;
      continue;
    }
    if (!options.time_tactics) {
      step.tactic.clear();
      for (auto& conv : search.forms) {
        for (int64_t i = 0; i < conv->candidate_count() && step.tactic.empty(); ++i)
          if (conv->select(i).is_ok() && conv->workspace_bytes() <= ws_limit) step.tactic = conv->tactic(i);
        if (!step.tactic.empty()) break;
      }
      if (step.tactic.empty()) {
        step.tactic = std::string(kDirectTactic);
        ++report.fallback_layers;
        ++report.own_kernel_layers;
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
    GPULAB_TRY(run_search(search, problem, ptrs));
    double best_ms = search.best_ms;
    std::string best = search.best;
    if (best.empty()) {
      log_info(
          "tactics: {}: no cuDNN candidate ran ({} rejected when built, {} over the {} MiB workspace "
          "limit, {} failed to run)",
          step.name, search.rejected, search.over_workspace, ws_limit >> 20, search.failed);
    } else if (search.failed > 0 || search.over_workspace > 0) {
      // Candidates cuDNN built that could not run here may have been the fast ones; -v names each
      // with its reason.
      log_info("tactics: {}: {} cuDNN candidates failed to run and {} needed more than {} MiB of workspace",
               step.name, search.failed, search.over_workspace, ws_limit >> 20);
    }

    // gpulab's own kernels, timed beside cuDNN's candidates. The direct convolution last, so that
    // a slow first launch can end its timing.
    auto time_own = [&](ConvKernel kernel, std::string_view tactic, bool judge_warm_up = false) -> Status {
      auto run = [&] {
        return launch_conv_step(problem, kernel, tactic, nullptr, nullptr, ptrs, nullptr, stream);
      };
      GPULAB_ASSIGN_OR_RETURN(const std::optional<double> ms,
                              time_candidate(run, tactic_timing::give_up_ms(best_ms), judge_warm_up,
                                             fmt::format("{} candidate {}", step.name, tactic)));
      if (!ms) {
        log_info("tactics: {}: {} failed to run", step.name, tactic);
        return Status::ok();
      }
      log_debug("tactics: {} candidate {} {:.4f} ms", step.name, tactic, *ms);
      if (*ms < best_ms) {
        best_ms = *ms;
        best = std::string(tactic);
      }
      return Status::ok();
    };
    if (depthwise_ok) GPULAB_TRY(time_own(ConvKernel::kDepthwise, kDepthwiseTactic));
    if (cutlass_ok)
      for (std::string_view tactic : cuda::cutlass_conv_tactics())
        GPULAB_TRY(time_own(ConvKernel::kCutlass, tactic));
    if (wgmma_ok)
      for (std::string_view tactic : cuda::wgmma_conv_tactics())
        GPULAB_TRY(time_own(ConvKernel::kWgmma3x3, tactic));
    // Batch chunks (tactic_timing.h): cuDNN's best at kChunkImages, launched over the max batch
    // chunk by chunk, where nothing ran over the whole batch (or on every long layer, kSearch).
    if (tactic_timing::try_chunks(options.batch_chunks, plan.max_batch, best_ms)) {
      constexpr int64_t kChunk = tactic_timing::kChunkImages;
      const cuda::ConvProblem part = conv_problem(plan, step, kChunk);
      // A timing cache entry for that problem (a plan built at batch kChunk) is its best tactic of
      // all: a cuDNN one serves here; an own kernel wins there and scales with the batch, so its
      // time at the max batch, measured above, is what chunks of it would take.
      std::string inner;
      const TimingEntry* hit =
          cache ? cache->find(TimingCache::make_key(cuda::conv_signature(part) + key_suffix, target))
                : nullptr;
      if (hit && conv_kernel_of_tactic(hit->tactic) == ConvKernel::kCudnn &&
          !parse_chunked_tactic(hit->tactic)) {
        inner = hit->tactic;
      } else if (!hit) {
        CudnnSearch chunk_search = make_search(part, fmt::format("{} at batch {}", step.name, kChunk));
        GPULAB_TRY(run_search(chunk_search, part, ptrs));
        inner = chunk_search.best;
      }
      if (!inner.empty()) GPULAB_TRY(time_chunked(step, problem, part, inner, ptrs, best_ms, best));
    }
    // The direct convolution (one thread per output) is general but slow: a 1x1 layer at batch
    // 256 can take ~100 ms per launch, so its warm-up alone can end its timing.
    if (direct_ok && !best.empty()) GPULAB_TRY(time_own(ConvKernel::kDirect, kDirectTactic, true));
    if (best.empty()) {
      // Nothing else ran: the direct convolution without timing it (it is the only choice).
      log_info("tactics: {}: using the direct convolution", step.name);
      step.tactic = std::string(kDirectTactic);
      ++report.own_kernel_layers;
      ++report.fallback_layers;
      continue;
    }
    step.tactic = best;
    ++report.timed_layers;
    count_tactic(best);
    if (search.best.empty() && conv_kernel_of_tactic(best) != ConvKernel::kCudnn) ++report.fallback_layers;
    log_info("tactics: {}: {} ({:.4f} ms at batch {})", step.name, best, best_ms, plan.max_batch);
    if (cache) cache->put(key, TimingEntry{best, best_ms});
  }
  log_info(
      "tactics: {} convolution layers on gpulab's own kernels, {} without any cuDNN candidate, {} in "
      "batch chunks",
      report.own_kernel_layers, report.fallback_layers, report.chunked_layers);
  return report;
}

}  // namespace gpulab
