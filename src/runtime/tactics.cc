#include "runtime/tactics.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_prebuild.h"
#include "backends/cuda/cudnn_q8_conv.h"
#include "backends/cuda/cutlass_conv.h"
#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/kernel_desc.h"
#include "backends/cuda/kernels/quant_kernels.h"
#include "backends/cuda/wgmma_conv.h"
#include "core/elapsed.h"
#include "core/log.h"
#include "plan/lower.h"
#include "runtime/conv_step.h"
#include "runtime/step_launch.h"
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
// ... and at most this many timed in all, both forms together. In the H200 sweep of ResNet-18 at
// 5b3cf93 (189 searches: its FP16 plans and the accuracy gate's FP32 and FP16 plans; 2,011
// candidates timed; the `-v` log is in that record) every winner was among the first 12 timed, and
// the 203 candidates after the 16th carried 36% of all the timed kernel time: a wide search could
// time 32 (bench/tactic_search_log.py). A first ResNet-18 FP16 build at max batch 1024 on the H100
// (d62b738, cap 16) took 30.6 s, 23.3 of them building 230 cuDNN candidate plans: every layer
// searched wide, and every winner was among the first 7 timed. 12 keeps the H200's latest winner.
constexpr int64_t kMaxTimedPerSearch = 12;
// cudnn-q8 configurations built, checked and timed per 8-bit layer, in heuristic order. The probe
// (bench/kernels/cudnn_q8_probe, bench/results/2026-12-07-b555e06) saw 9 candidates for the fused INT8
// graph of each ResNet-18 layer it tried on an H100, 8 of which built; the fastest was the third.
constexpr int64_t kMaxQ8CudnnCandidates = 8;
// An 8-bit layer gets a small-batch tactic (conv_step.h) only where it takes at most this share of
// the chosen tactic's time at kQ8SmallBatch images: a smaller gain is within timing noise.
constexpr double kQ8SmallBatchGain = 0.9;
// The workspace small-batch timing gives split-K: a context's is at least kGemmWorkspaceBytes (32 MiB,
// engine_internal.h).
constexpr int64_t kQ8SplitKWorkspaceBytes = int64_t{32} << 20;

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

// What timing needs on the device for one build: library handles bound to a stream of its own,
// two events, scratch buffers grown on demand, and the workspace limit of cuDNN candidates.
class TimingRig {
 public:
  explicit TimingRig(int64_t ws_limit) : ws_limit(ws_limit) {}
  ~TimingRig() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream) cudaStreamDestroy(stream);
  }
  TimingRig(const TimingRig&) = delete;
  TimingRig& operator=(const TimingRig&) = delete;

  Status init() {
    GPULAB_TRY(libs.init());
    GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    GPULAB_TRY(libs.set_stream(stream));
    GPULAB_CUDA_TRY(cudaEventCreate(&start_));
    GPULAB_CUDA_TRY(cudaEventCreate(&stop_));
    int device = 0;
    GPULAB_CUDA_TRY(cudaGetDevice(&device));
    prebuild = std::make_unique<cuda::CudnnPrebuild>(device);
    return Status::ok();
  }

  // Median time in ms of `run` on `stream`, or nullopt when it fails to launch or to finish. The
  // first launch warms up. The first timed launch, or the warm-up when `judge_warm_up`, ends the
  // timing when it exceeds `give_up_after_ms`, and is the result (tactic_timing.h); a later slow
  // launch is left to the median.
  // A failure is logged (debug) as "tactics: <what> failed to run: <why>". Counted in timing_s.
  Result<std::optional<double>> time(const std::function<Status()>& run, double give_up_after_ms,
                                     bool judge_warm_up, const std::string& what) {
    const auto started = std::chrono::steady_clock::now();
    auto result = time_runs(run, give_up_after_ms, judge_warm_up, what);
    timing_s += seconds_since(started);
    ++timing_runs;
    return result;
  }

  // What `build` returns (cuDNN making a candidate list, or building a plan when `plan`), its wall
  // time counted in candidate_build_s (and in *seconds when given), a plan in candidates_built.
  template <typename F>
  auto building(F&& build, bool plan, double* seconds = nullptr) {
    const auto started = std::chrono::steady_clock::now();
    auto result = build();
    const double s = seconds_since(started);
    candidate_build_s += s;
    candidates_built += plan;
    if (seconds) *seconds = s;
    return result;
  }

  // Builds the configurations `builds` make on the prebuild workers, all at once, and waits
  // (cudnn_prebuild.h): the search's own builds of them, one by one, then find cuDNN's kernels
  // compiled. Counted as building; logged (debug) for `label`. Nothing without workers, or for
  // fewer than two builds, which gain nothing.
  void prebuild_all(std::vector<std::function<Status(cudnnHandle_t)>> builds, std::string_view label) {
    if (!prebuild->enabled() || builds.size() < 2) return;
    double s = 0;
    const std::vector<std::string> failed = building(
        [&] {
          for (auto& build : builds) prebuild->submit(std::move(build));
          return prebuild->wait();
        },
        false, &s);
    prebuild_s += s;
    prebuilt += static_cast<int64_t>(builds.size());
    log_debug("tactics: {}: {} cuDNN configurations prebuilt on {} threads in {:.3f} s{}", label,
              builds.size(), prebuild->threads(), s,
              failed.empty() ? std::string()
                             : fmt::format(" ({} failed, the first: {})", failed.size(), failed.front()));
  }

  const int64_t ws_limit;
  cuda::LibraryHandles libs;
  cudaStream_t stream = nullptr;
  Scratch x, w, b, r, y, ws;  // a layer's input, weight, bias, residual, output; cuDNN's workspace
  Scratch y2, scale;          // 8-bit layers: the second kernel's output, the weight scales
  Scratch differ;             // 8-bit layers: q8_difference_on_device's count
  // Where a build's tactic search spends its time: cuDNN making candidate lists and building (and
  // runtime-compiling) candidate plans, and time() measuring candidates, wall seconds.
  double candidate_build_s = 0, timing_s = 0;
  int64_t candidates_built = 0, timing_runs = 0;
  // Of candidate_build_s: the parallel prebuilds (prebuild_all), and how many configurations they built.
  double prebuild_s = 0;
  int64_t prebuilt = 0;
  std::unique_ptr<cuda::CudnnPrebuild> prebuild;  // made in init()

 private:
  Result<std::optional<double>> time_runs(const std::function<Status()>& run, double give_up_after_ms,
                                          bool judge_warm_up, const std::string& what) {
    GPULAB_CUDA_TRY(cudaEventRecord(start_, stream));
    const Status first = run();
    GPULAB_CUDA_TRY(cudaEventRecord(stop_, stream));
    const cudaError_t synced = first.is_ok() ? cudaEventSynchronize(stop_) : cudaSuccess;
    if (!first.is_ok() || synced != cudaSuccess) {
      cudaGetLastError();
      log_debug("tactics: {} failed to run: {}", what,
                first.is_ok() ? cudaGetErrorString(synced) : first.message());
      return std::optional<double>();
    }
    float first_ms = 0;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&first_ms, start_, stop_));
    if (judge_warm_up && first_ms > give_up_after_ms) return std::optional<double>(first_ms);
    std::vector<float> times;
    for (int t = 0, runs = tactic_timing::timed_runs(first_ms); t < runs; ++t) {
      GPULAB_CUDA_TRY(cudaEventRecord(start_, stream));
      const Status ok = run();
      GPULAB_CUDA_TRY(cudaEventRecord(stop_, stream));
      GPULAB_CUDA_TRY(cudaEventSynchronize(stop_));
      if (!ok.is_ok()) {
        log_debug("tactics: {} failed to run: {}", what, ok.message());
        return std::optional<double>();
      }
      float ms = 0;
      GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, start_, stop_));
      if (t == 0 && ms > give_up_after_ms) return std::optional<double>(ms);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return std::optional<double>(times[times.size() / 2]);
  }

  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// `bytes` into `s` (grown as needed; at least 16 bytes, so that an empty tensor has an address).
Status upload(Scratch& s, std::span<const std::byte> bytes, const char* what) {
  GPULAB_TRY(s.ensure(std::max<size_t>(bytes.size(), 16), what));
  if (!bytes.empty())
    GPULAB_CUDA_TRY(cudaMemcpy(s.buffer.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return Status::ok();
}

// `rig`'s stream finished, then `to.size()` bytes of device memory at `from` into `to`.
Status fetch_output(TimingRig& rig, const void* from, std::vector<std::byte>& to) {
  GPULAB_CUDA_TRY(cudaStreamSynchronize(rig.stream));
  GPULAB_CUDA_TRY(cudaMemcpy(to.data(), from, to.size(), cudaMemcpyDeviceToHost));
  return Status::ok();
}

// What q8_difference reports for `far` of `total` outputs off the rule, `widest` apart at most (INT8:
// output units; FP8: E4M3 steps), or "" when none is off.
std::string q8_refusal(size_t far, size_t total, size_t widest, bool fp8) {
  if (far == 0) return "";
  return fp8 ? fmt::format("{} of {} outputs more than one E4M3 step apart (up to {} steps)", far, total,
                           widest)
             : fmt::format("{} of {} output bytes differ (by up to {})", far, total, widest);
}

// The outputs of the direct and the tensor-core kernel for the same input, `y_dtype` elements:
// INT8 layers must give the same bytes (exact sums, the same epilogue); FP8 layers one E4M3 step
// apart at most (8-bit y), or a relative L2 below 1e-3 (float y), since the tensor cores sum in
// another order. Returns what differs, or "" when they agree.
std::string q8_difference(const std::vector<std::byte>& direct, const std::vector<std::byte>& mma, bool fp8,
                          DataType y_dtype) {
  if (direct.size() != mma.size()) return "output sizes differ";
  if (direct == mma) return "";  // the common case, at memcmp's speed
  if (fp8 && !is_quantized_dtype(y_dtype)) {
    const ErrorStats e = compare(floats_from_bytes(mma, y_dtype), floats_from_bytes(direct, y_dtype));
    return e.non_finite > 0 || e.rel_l2 > 1e-3 ? fmt::format("relative L2 {:.3g} between them", e.rel_l2)
                                               : "";
  }
  // The gap between two codes: INT8 as signed values, FP8 in E4M3 steps (sign-magnitude ranks).
  const auto value = [fp8](std::byte b) {
    const auto v = static_cast<uint8_t>(b);
    if (!fp8) return int{static_cast<int8_t>(v)};
    return (v & 0x80) ? -(v & 0x7f) : (v & 0x7f);
  };
  size_t far = 0, widest = 0;
  for (size_t i = 0; i < direct.size(); ++i) {
    const auto apart = static_cast<size_t>(std::abs(value(direct[i]) - value(mma[i])));
    far += apart > (fp8 ? 1u : 0u);
    widest = std::max(widest, apart);
  }
  return q8_refusal(far, direct.size(), widest, fp8);
}

// q8_difference of `bytes` bytes of y_dtype outputs at `want` and `got` (device memory, written on
// rig.stream): counted on the device (kernels::launch_count_q8_differences), but for FP8 layers
// with float outputs, which are compared on the host.
Result<std::string> q8_difference_on_device(TimingRig& rig, const void* want, const void* got, size_t bytes,
                                            bool fp8, DataType y_dtype) {
  if (fp8 && !is_quantized_dtype(y_dtype)) {
    std::vector<std::byte> host_want(bytes), host_got(bytes);
    GPULAB_TRY(fetch_output(rig, want, host_want));
    GPULAB_TRY(fetch_output(rig, got, host_got));
    return q8_difference(host_want, host_got, fp8, y_dtype);
  }
  GPULAB_TRY(rig.differ.ensure(sizeof(kernels::Q8Differences), "8-bit output comparison"));
  auto* differ = rig.differ.buffer.as<kernels::Q8Differences>();
  GPULAB_CUDA_TRY(cudaMemsetAsync(differ, 0, sizeof(kernels::Q8Differences), rig.stream));
  GPULAB_TRY(
      kernels::launch_count_q8_differences(want, got, static_cast<int64_t>(bytes), fp8, differ, rig.stream));
  kernels::Q8Differences found;
  GPULAB_CUDA_TRY(cudaMemcpyAsync(&found, differ, sizeof(found), cudaMemcpyDeviceToHost, rig.stream));
  GPULAB_CUDA_TRY(cudaStreamSynchronize(rig.stream));
  return q8_refusal(found.far, bytes, found.widest, fp8);
}

// The fastest candidate so far.
struct Best {
  double ms = tactic_timing::kNoLimit;
  std::string tactic;  // "" when none ran

  void offer(double candidate_ms, std::string_view candidate) {
    if (candidate_ms < ms) {
      ms = candidate_ms;
      tactic = std::string(candidate);
    }
  }
};

// What the selection of every conv step shares during one build.
struct SelectionContext {
  const Plan& plan;
  const BuildOptions& options;
  TimingCache* cache;  // may be null
  const PlanTarget& target;
  const std::string& key_suffix;  // timing_key_suffix(options)
  TimingRig& rig;
  // The batch tactics are timed (and looked up in the timing cache) at: the plan's max batch, or
  // BuildOptions::tactic_batch when that is smaller.
  int64_t batch;
};

// The workspace a cuDNN candidate may use (tactic_timing::workspace_limit), logged.
Result<int64_t> workspace_limit_for(const BuildOptions& options) {
  size_t free_bytes = 0, total_bytes = 0;
  if (!options.max_workspace_bytes) GPULAB_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t ws_limit = tactic_timing::workspace_limit(options.max_workspace_bytes, free_bytes);
  log_info("tactics: cuDNN candidates may use up to {} MiB of workspace{}", ws_limit >> 20,
           options.max_workspace_bytes
               ? ""
               : " (a quarter of the free device memory; --max-workspace-mib sets it)");
  return ws_limit;
}

// A workspace limit the user set can change the winner, and so can leaving batch chunks out:
// both are part of the timing cache's key.
std::string timing_key_suffix(const BuildOptions& options) {
  return fmt::format(
      "{}{}",
      options.max_workspace_bytes ? fmt::format("|ws{}", *options.max_workspace_bytes) : std::string(),
      options.batch_chunks == BatchChunks::kFallback ? ""
      : options.batch_chunks == BatchChunks::kOff    ? "|nochunk"
                                                     : "|chunksearch");
}

void count_tactic(TacticReport& report, const std::string& tactic) {
  if (conv_kernel_of_tactic(tactic) != ConvKernel::kCudnn) ++report.own_kernel_layers;
  if (parse_chunked_tactic(tactic)) ++report.chunked_layers;
}

// The step runs on the direct convolution because nothing else can (not timed).
void use_direct_fallback(PlanStep& step, TacticReport& report) {
  step.tactic = std::string(kDirectTactic);
  ++report.fallback_layers;
  ++report.own_kernel_layers;
}

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

CudnnSearch make_search(TimingRig& rig, const cuda::ConvProblem& problem, std::string label) {
  CudnnSearch search;
  search.label = std::move(label);
  for (bool fused : {true, false}) {
    auto form = problem;
    form.fused = fused;
    auto conv = rig.building([&] { return cuda::CudnnConv::with_candidates(rig.libs.cudnn(), form); }, false);
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
  // The candidates the first pass (run_search) builds unless cuDNN rejects some, built at once.
  std::vector<std::function<Status(cudnnHandle_t)>> builds;
  for (const auto& form : search.forms) {
    const int64_t first =
        std::min(form->candidate_count(), form->fused() ? kMaxFusedCandidates : kMaxUnfusedCandidates);
    for (int64_t i = 0; i < first; ++i)
      if (std::string tactic = form->tactic(i); !tactic.ends_with('?'))
        builds.emplace_back([&problem, tactic = std::move(tactic)](cudnnHandle_t h) {
          return cuda::CudnnConv::with_tactic(h, problem, tactic).status();
        });
  }
  rig.prebuild_all(std::move(builds), search.label);
  return search;
}

int64_t timed_in_all(const CudnnSearch& search) {
  int64_t timed = 0;
  for (int64_t t : search.timed) timed += t;
  return timed;
}

// Times candidates of form `f` until `max_timed` of them ran, or kMaxTimedPerSearch of both forms;
// `ptrs` hold problem.n images.
Status time_cudnn(TimingRig& rig, CudnnSearch& search, size_t f, const cuda::ConvProblem& problem,
                  const cuda::ConvPointers& ptrs, int64_t max_timed) {
  auto& conv = search.forms[f];
  for (; search.next[f] < conv->candidate_count() && search.timed[f] < max_timed &&
         timed_in_all(search) < kMaxTimedPerSearch;
       ++search.next[f]) {
    const int64_t i = search.next[f];
    double build_s = 0;
    const Status built = rig.building([&] { return conv->select(i); }, true, &build_s);
    if (!built.is_ok()) {
      ++search.rejected;
      log_debug("tactics: {} candidate {} rejected when built: {}", search.label, i, built.message());
      continue;
    }
    const int64_t ws_bytes = conv->workspace_bytes();
    if (ws_bytes > rig.ws_limit) {
      ++search.over_workspace;
      log_debug("tactics: {} candidate {} {} needs {} MiB of workspace", search.label, i, conv->tactic(i),
                ws_bytes >> 20);
      continue;
    }
    GPULAB_TRY(rig.ws.ensure(static_cast<size_t>(std::max<int64_t>(ws_bytes, 1)), "tactic timing workspace"));
    auto run = [&] {
      return launch_conv_step(problem, ConvKernel::kCudnn, {}, conv.get(), rig.libs.cudnn(), ptrs,
                              rig.ws.buffer.get(), rig.stream);
    };
    GPULAB_ASSIGN_OR_RETURN(const std::optional<double> ms,
                            rig.time(run, tactic_timing::give_up_ms(search.best_ms), false,
                                     fmt::format("{} candidate {} {}", search.label, i, conv->tactic(i))));
    if (!ms) {
      ++search.failed;
      continue;
    }
    ++search.timed[f];
    log_debug("tactics: {} candidate {} {} {:.4f} ms (built in {:.3f} s)", search.label, i, conv->tactic(i),
              *ms, build_s);
    if (*ms < search.best_ms) {
      search.best_ms = *ms;
      search.best = conv->tactic(i);
    }
  }
  return Status::ok();
}

// Time up to kMaxFusedCandidates / kMaxUnfusedCandidates candidates that cuDNN builds (those it
// rejects do not count: FP32 without tensor cores rejected the first nine of forty on the H200),
// then up to kMaxWideCandidates per form (kMaxTimedPerSearch in all) when the best is still slow.
Status run_search(TimingRig& rig, CudnnSearch& search, const cuda::ConvProblem& problem,
                  const cuda::ConvPointers& ptrs) {
  for (size_t f = 0; f < search.forms.size(); ++f)
    GPULAB_TRY(time_cudnn(rig, search, f, problem, ptrs,
                          search.forms[f]->fused() ? kMaxFusedCandidates : kMaxUnfusedCandidates));
  if (search.best_ms > kWideSearchMs) {
    for (size_t f = 0; f < search.forms.size(); ++f)
      GPULAB_TRY(time_cudnn(rig, search, f, problem, ptrs, kMaxWideCandidates));
    log_info("tactics: {}: wide search, {} candidates timed", search.label, timed_in_all(search));
  }
  return Status::ok();
}

// The cuDNN plans that run `inner` in chunks of part.n images over `total` images as the runtime
// would (conv_step.h): the full chunks on `inner` itself (timed at part.n), the remainder on a plan
// of its own size. An error when either does not build or they need more workspace than allowed.
struct ChunkedPlans {
  std::unique_ptr<cuda::CudnnConv> full, tail;  // tail null when part.n divides total
  int64_t ws_bytes = 0;
};
Result<ChunkedPlans> prepare_chunked(const SelectionContext& c, const PlanStep& step,
                                     const cuda::ConvProblem& part, int64_t total, const std::string& inner) {
  ChunkedPlans plans;
  GPULAB_ASSIGN_OR_RETURN(plans.full, prepare_cudnn_conv(c.rig.libs.cudnn(), part, inner));
  if (const ChunkSplit split = split_batch(total, part.n); split.tail > 0) {
    GPULAB_ASSIGN_OR_RETURN(
        plans.tail, prepare_cudnn_conv(c.rig.libs.cudnn(), conv_problem(c.plan, step, split.tail), inner));
  }
  plans.ws_bytes = std::max(plans.full->workspace_bytes(), plans.tail ? plans.tail->workspace_bytes() : 0);
  if (plans.ws_bytes > c.rig.ws_limit)
    return Status::unsupported(
        fmt::format("in chunks of {} it needs {} MiB of workspace, over the {} MiB limit", part.n,
                    plans.ws_bytes >> 20, c.rig.ws_limit >> 20));
  return plans;
}

// Times the cuDNN tactic `inner`, timed on `part` (the layer at part.n images), run in chunks of
// part.n over problem.n images as the runtime would run it (conv_step.h), and offers it to `best`.
Status time_chunked(const SelectionContext& c, const PlanStep& step, const cuda::ConvProblem& problem,
                    const cuda::ConvProblem& part, const std::string& inner, const cuda::ConvPointers& ptrs,
                    Best& best) {
  TimingRig& rig = c.rig;
  const int64_t chunk = part.n;
  const std::string tactic = chunked_tactic(chunk, inner);
  auto plans = prepare_chunked(c, step, part, problem.n, inner);
  if (!plans.is_ok()) {
    log_debug("tactics: {} candidate {}: {}", step.name, tactic, plans.status().message());
    return Status::ok();
  }
  GPULAB_TRY(
      rig.ws.ensure(static_cast<size_t>(std::max<int64_t>(plans->ws_bytes, 1)), "tactic timing workspace"));
  auto run = [&] {
    return launch_chunked_conv_step(problem, chunk, *plans->full, plans->tail.get(), rig.libs.cudnn(), ptrs,
                                    rig.ws.buffer.get(), rig.stream);
  };
  GPULAB_ASSIGN_OR_RETURN(const std::optional<double> ms,
                          rig.time(run, tactic_timing::give_up_ms(best.ms), false,
                                   fmt::format("{} candidate {}", step.name, tactic)));
  if (!ms) return Status::ok();
  log_info("tactics: {}: {} in chunks of {}: {:.4f} ms (best so far {:.4f} ms)", step.name, inner, chunk, *ms,
           best.ms);
  best.offer(*ms, tactic);
  return Status::ok();
}

// One of gpulab's own kernels, timed beside cuDNN's candidates and offered to `best`.
Status time_own(TimingRig& rig, const PlanStep& step, const cuda::ConvProblem& problem,
                const cuda::ConvPointers& ptrs, ConvKernel kernel, std::string_view tactic,
                bool judge_warm_up, Best& best) {
  auto run = [&] {
    return launch_conv_step(problem, kernel, tactic, nullptr, nullptr, ptrs, nullptr, rig.stream);
  };
  GPULAB_ASSIGN_OR_RETURN(const std::optional<double> ms,
                          rig.time(run, tactic_timing::give_up_ms(best.ms), judge_warm_up,
                                   fmt::format("{} candidate {}", step.name, tactic)));
  if (!ms) {
    log_info("tactics: {}: {} failed to run", step.name, tactic);
    return Status::ok();
  }
  log_debug("tactics: {} candidate {} {:.4f} ms", step.name, tactic, *ms);
  best.offer(*ms, tactic);
  return Status::ok();
}

// The step's input, weight, bias and residual at the plan's max batch in the rig's scratch
// buffers (never zeros), and the pointers a launch takes.
Result<cuda::ConvPointers> stage_timing_buffers(const Plan& plan, const PlanStep& step, int64_t batch,
                                                TimingRig& rig) {
  const PlanValue& xv = plan.values[step.inputs[0]];
  const PlanValue& yv = plan.values[step.output];
  const size_t x_bytes = static_cast<size_t>(xv.bytes_per_image() * batch);
  const size_t y_bytes = static_cast<size_t>(yv.bytes_per_image() * batch);
  const auto& weight = plan.weights[step.weight].bytes;
  GPULAB_TRY(rig.x.ensure(x_bytes, "tactic timing input"));
  GPULAB_TRY(rig.y.ensure(y_bytes, "tactic timing output"));
  GPULAB_TRY(rig.r.ensure(y_bytes, "tactic timing residual"));
  GPULAB_TRY(rig.w.ensure(weight.size(), "tactic timing weights"));
  GPULAB_TRY(rig.b.ensure(static_cast<size_t>(yv.c) * 4, "tactic timing bias"));
  GPULAB_TRY(fill(rig.x.buffer.get(), x_bytes));
  GPULAB_TRY(fill(rig.r.buffer.get(), y_bytes));
  GPULAB_CUDA_TRY(cudaMemcpy(rig.w.buffer.get(), weight.data(), weight.size(), cudaMemcpyHostToDevice));
  GPULAB_TRY(fill(rig.b.buffer.get(), static_cast<size_t>(yv.c) * 4));
  return cuda::ConvPointers{rig.x.buffer.get(), rig.w.buffer.get(), rig.b.buffer.get(), rig.r.buffer.get(),
                            rig.y.buffer.get()};
}

// Says why cuDNN's best may be missing or not the fastest there is.
void log_search_outcome(const PlanStep& step, const CudnnSearch& search, int64_t ws_limit) {
  if (search.best.empty()) {
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
}

// Batch chunks (tactic_timing.h): cuDNN's best at kChunkImages, launched over the max batch
// chunk by chunk, where nothing ran over the whole batch (or on every long layer, kSearch).
Status time_batch_chunks(const SelectionContext& c, const PlanStep& step, const cuda::ConvProblem& problem,
                         const cuda::ConvPointers& ptrs, Best& best) {
  if (!tactic_timing::try_chunks(c.options.batch_chunks, c.batch, best.ms)) return Status::ok();
  constexpr int64_t kChunk = tactic_timing::kChunkImages;
  const cuda::ConvProblem part = conv_problem(c.plan, step, kChunk);
  // A timing cache entry for that problem (a plan built at batch kChunk) is its best tactic of
  // all: a cuDNN one serves here; an own kernel wins there and scales with the batch, so its
  // time at the max batch, measured before, is what chunks of it would take.
  std::string inner;
  const TimingEntry* hit =
      c.cache ? c.cache->find(TimingCache::make_key(cuda::conv_signature(part) + c.key_suffix, c.target))
              : nullptr;
  if (hit && conv_kernel_of_tactic(hit->tactic) == ConvKernel::kCudnn && !parse_chunked_tactic(hit->tactic)) {
    inner = hit->tactic;
  } else if (!hit) {
    CudnnSearch chunk_search = make_search(c.rig, part, fmt::format("{} at batch {}", step.name, kChunk));
    GPULAB_TRY(run_search(c.rig, chunk_search, part, ptrs));
    inner = chunk_search.best;
  }
  if (!inner.empty()) GPULAB_TRY(time_chunked(c, step, problem, part, inner, ptrs, best));
  return Status::ok();
}

// Which of gpulab's own convolutions apply to a problem.
struct OwnKernels {
  bool depthwise = false;  // the depthwise kernel (batch does not matter)
  bool cutlass = false;    // CUTLASS's small-channel convolution, for FP16 stems
  bool wgmma = false;      // the wgmma 3x3 convolution (sm_90)
  bool direct = false;     // the direct convolution, every float layer
};

OwnKernels own_kernels_for(const cuda::ConvProblem& problem) {
  const cuda::DirectConvDesc desc = direct_conv_desc(problem);
  return {.depthwise = cuda::depthwise_conv_supports(desc),
          .cutlass = cuda::cutlass_conv_supports(desc),
          .wgmma = cuda::wgmma_conv_supports(desc),
          .direct = kernels::is_kernel_float_type(problem.dtype)};
}

// Every candidate of one conv step at the plan's max batch: cuDNN's (search), gpulab's own,
// cuDNN's in batch chunks, and the direct convolution last, so that a slow first launch can end
// its timing. The fastest; its tactic is "" when nothing ran.
Result<Best> time_candidates(const SelectionContext& c, const PlanStep& step,
                             const cuda::ConvProblem& problem, const OwnKernels& own, CudnnSearch& search) {
  TimingRig& rig = c.rig;
  GPULAB_ASSIGN_OR_RETURN(const cuda::ConvPointers ptrs, stage_timing_buffers(c.plan, step, c.batch, rig));
  GPULAB_TRY(run_search(rig, search, problem, ptrs));
  Best best{.ms = search.best_ms, .tactic = search.best};
  log_search_outcome(step, search, rig.ws_limit);
  if (own.depthwise)
    GPULAB_TRY(time_own(rig, step, problem, ptrs, ConvKernel::kDepthwise, kDepthwiseTactic, false, best));
  if (own.cutlass)
    for (std::string_view tactic : cuda::cutlass_conv_tactics())
      GPULAB_TRY(time_own(rig, step, problem, ptrs, ConvKernel::kCutlass, tactic, false, best));
  if (own.wgmma)
    for (std::string_view tactic : cuda::wgmma_conv_tactics())
      GPULAB_TRY(time_own(rig, step, problem, ptrs, ConvKernel::kWgmma3x3, tactic, false, best));
  GPULAB_TRY(time_batch_chunks(c, step, problem, ptrs, best));
  // The direct convolution (one thread per output) is general but slow: a 1x1 layer at batch
  // 256 can take ~100 ms per launch, so its warm-up alone can end its timing.
  if (own.direct && !best.tactic.empty())
    GPULAB_TRY(time_own(rig, step, problem, ptrs, ConvKernel::kDirect, kDirectTactic, true, best));
  return best;
}

// Without timing: cuDNN's first candidate that builds within the workspace limit, or "".
std::string first_buildable(CudnnSearch& search, int64_t ws_limit) {
  for (auto& conv : search.forms) {
    for (int64_t i = 0; i < conv->candidate_count(); ++i)
      if (conv->select(i).is_ok() && conv->workspace_bytes() <= ws_limit) return conv->tactic(i);
  }
  return {};
}

// The timing cache's tactic for `key` into the step, when it has one this gpulab can run.
bool take_cached(const SelectionContext& c, const std::string& key, PlanStep& step, TacticReport& report) {
  if (!c.cache) return false;
  const TimingEntry* hit = c.cache->find(key);
  if (hit && check_conv_tactic(hit->tactic).is_ok()) {
    step.tactic = hit->tactic;
    ++report.cached_layers;
    count_tactic(report, step.tactic);
    return true;
  }
  if (hit)
    log_info("tactics: {}: the timing cache's \"{}\" is not a kernel this gpulab has; timing again",
             step.name, hit->tactic);
  return false;
}

// The tactic of one conv step: the depthwise kernel for a folded cast, else the timing cache's,
// else (without time_tactics) the first that builds, else the fastest of all candidates.
Status choose_conv_tactic(const SelectionContext& c, PlanStep& step, TacticReport& report) {
  const cuda::ConvProblem problem = conv_problem(c.plan, step, c.batch);
  if (problem.x_dtype) {
    // A folded cast (fold_input_casts): the depthwise kernel is the one kernel that reads x in
    // another type than y, so there is nothing to time.
    if (const Status s = cuda::validate_depthwise_conv(direct_conv_desc(problem)); !s.is_ok())
      return Status::internal(fmt::format("tactics: {} reads its {} input directly, but {}", step.name,
                                          dtype_name(*problem.x_dtype), s.message()));
    step.tactic = std::string(kDepthwiseTactic);
    ++report.own_kernel_layers;
    return Status::ok();
  }
  const std::string key = TimingCache::make_key(cuda::conv_signature(problem) + c.key_suffix, c.target);
  if (take_cached(c, key, step, report)) return Status::ok();
  const OwnKernels own = own_kernels_for(problem);
  if (!c.options.time_tactics && own.depthwise) {
    step.tactic = std::string(kDepthwiseTactic);
    ++report.own_kernel_layers;
    return Status::ok();
  }
  CudnnSearch search = make_search(c.rig, problem, step.name);
  if (search.forms.empty() && !own.depthwise && !own.cutlass && !own.wgmma) {
    log_info("tactics: {}: no cuDNN engine; using the direct convolution", step.name);
    use_direct_fallback(step, report);
    return Status::ok();
  }
  if (!c.options.time_tactics) {
    step.tactic = first_buildable(search, c.rig.ws_limit);
    if (step.tactic.empty()) use_direct_fallback(step, report);
    return Status::ok();
  }
  GPULAB_ASSIGN_OR_RETURN(const Best best, time_candidates(c, step, problem, own, search));
  if (best.tactic.empty()) {
    // Nothing else ran: the direct convolution without timing it (it is the only choice).
    log_info("tactics: {}: using the direct convolution", step.name);
    use_direct_fallback(step, report);
    return Status::ok();
  }
  step.tactic = best.tactic;
  ++report.timed_layers;
  count_tactic(report, best.tactic);
  if (search.best.empty() && conv_kernel_of_tactic(best.tactic) != ConvKernel::kCudnn)
    ++report.fallback_layers;
  log_info("tactics: {}: {} ({:.4f} ms at batch {})", step.name, best.tactic, best.ms, c.batch);
  if (c.cache) c.cache->put(key, TimingEntry{best.tactic, best.ms});
  return Status::ok();
}

// OK when `tactic`, chosen at a smaller batch (BuildOptions::tactic_batch), runs `full` (the plan's
// max batch): cuDNN's engine configuration builds for it within the workspace limit, or the own
// kernel accepts it. A chunked tactic runs its chunks at the size it was chosen at, and its
// remainder on a plan of its own (conv_step.h).
Status check_runs_at_max_batch(const SelectionContext& c, const std::string& tactic,
                               const cuda::ConvProblem& full) {
  const cuda::DirectConvDesc desc = direct_conv_desc(full);
  switch (conv_kernel_of_tactic(tactic)) {
    case ConvKernel::kDirect:
    case ConvKernel::kQ8Direct:
    case ConvKernel::kQ8Mma:
    case ConvKernel::kQ8Cudnn: return Status::ok();
    case ConvKernel::kDepthwise: return cuda::validate_depthwise_conv(desc);
    case ConvKernel::kCutlass:
      return cuda::cutlass_conv_supports(desc) ? Status::ok()
                                               : Status::unsupported("the CUTLASS convolution refuses it");
    case ConvKernel::kWgmma3x3:
      return cuda::wgmma_conv_supports(desc) ? Status::ok()
                                             : Status::unsupported("the wgmma convolution refuses it");
    case ConvKernel::kCudnn: break;
  }
  if (tactic.empty() || parse_chunked_tactic(tactic)) return Status::ok();
  GPULAB_ASSIGN_OR_RETURN(const auto conv, cuda::CudnnConv::with_tactic(c.rig.libs.cudnn(), full, tactic));
  if (conv->workspace_bytes() > c.rig.ws_limit)
    return Status::unsupported(fmt::format("it needs {} MiB of workspace, over the {} MiB limit",
                                           conv->workspace_bytes() >> 20, c.rig.ws_limit >> 20));
  return Status::ok();
}

// The tactic of one conv step, chosen at c.batch; when that is smaller than the plan's max batch,
// checked there. Where a cuDNN tactic does not run there (mostly its workspace: it grows with the
// batch, while the memory left shrinks), the same tactic in chunks of c.batch images, as it was
// timed (unless batch chunks are off); else cuDNN's first candidate that builds for the max batch
// (else the direct convolution).
// The first candidate is a poor stand-in in FP32: falling back to it is the likely reason ResNet-18
// FP32 ran 5.7x slower at batch 12288 than at 8192 on an H100 (docs/performance.md, the sweep of
// 2026-12-06).
Status select_conv_tactic(const SelectionContext& c, PlanStep& step, TacticReport& report) {
  GPULAB_TRY(choose_conv_tactic(c, step, report));
  if (c.batch >= c.plan.max_batch) return Status::ok();
  const cuda::ConvProblem full = conv_problem(c.plan, step, c.plan.max_batch);
  const Status runs = check_runs_at_max_batch(c, step.tactic, full);
  if (runs.is_ok()) return Status::ok();
  if (conv_kernel_of_tactic(step.tactic) == ConvKernel::kCudnn &&
      c.options.batch_chunks != BatchChunks::kOff) {
    const auto chunked =
        prepare_chunked(c, step, conv_problem(c.plan, step, c.batch), c.plan.max_batch, step.tactic);
    if (chunked.is_ok()) {
      log_info(
          "tactics: {}: {} (chosen at batch {}) does not run at batch {}: {}; running it in chunks of {}",
          step.name, step.tactic, c.batch, c.plan.max_batch, runs.message(), c.batch);
      step.tactic = chunked_tactic(c.batch, step.tactic);
      ++report.chunked_layers;
      return Status::ok();
    }
    log_info("tactics: {}: {} does not run in chunks of {} either: {}", step.name, step.tactic, c.batch,
             chunked.status().message());
  }
  log_info(
      "tactics: {}: {} (chosen at batch {}) does not run at batch {}: {}; taking cuDNN's first candidate",
      step.name, step.tactic, c.batch, c.plan.max_batch, runs.message());
  CudnnSearch search = make_search(c.rig, full, step.name);
  step.tactic = first_buildable(search, c.rig.ws_limit);
  if (step.tactic.empty()) use_direct_fallback(step, report);
  return Status::ok();
}

// GPULAB_SKIP_Q8_TACTICS: a comma-separated list of 8-bit tactic names or name prefixes that
// tactic selection does not try ("cutlass-q8,wgmma-q8:64x128"), for a tile that fails on some GPU
// or to compare plans without it. Empty when unset.
std::string q8_tactics_to_skip() {
  const char* env = std::getenv("GPULAB_SKIP_Q8_TACTICS");
  return env ? std::string(env) : std::string();
}

// An INT8/FP8 convolution or Gemm: what choose_q8_tactic decides.
bool is_q8_layer(const PlanStep& step) {
  return (step.kind == StepKind::kGemm || step.kind == StepKind::kConv) && is_quantized(step.precision);
}

// GPULAB_SKIP_Q8_TACTICS's item that leaves out small-batch tactics (conv_step.h, "|upto"), to
// compare plans with and without them.
constexpr std::string_view kQ8SmallBatchItem = "small-batch";

// The names GPULAB_SKIP_Q8_TACTICS may start with: the tiles, cudnn-q8 (every cuDNN configuration,
// or one: "cudnn-q8:4;"), and small-batch.
std::vector<std::string_view> q8_tactic_names() {
  std::vector<std::string_view> names(kernels::q8_mma_tactics().begin(), kernels::q8_mma_tactics().end());
  names.push_back(kQ8CudnnTactic);
  names.push_back(kQ8SmallBatchItem);
  return names;
}

// "cudnn-q8:<engine id>;" of a cudnn-q8 tactic: what its configurations share.
std::string cudnn_q8_engine_of(std::string_view tactic) {
  return std::string(tactic.substr(0, tactic.find(';') + 1));
}

// `conv`'s selected configuration run once on `ptrs` (the rig's buffers; its output at ptrs.y)
// against `want`, the direct kernel's output (`bytes`, on the device): "" where they agree
// (q8_difference), else what differs or why it did not run.
Result<std::string> cudnn_q8_differs(TimingRig& rig, const cuda::CudnnQ8Conv& conv,
                                     const cuda::Q8ConvPointers& ptrs, const void* want, size_t bytes,
                                     bool fp8, DataType y_dtype) {
  if (const Status ran = conv.launch(rig.libs.cudnn(), ptrs, rig.ws.buffer.get()); !ran.is_ok()) {
    (void)cudaGetLastError();
    return std::string(ran.message());
  }
  return q8_difference_on_device(rig, want, ptrs.y, bytes, fp8, y_dtype);
}

// What cudnn-q8 did in one build, for its summary line.
struct CudnnQ8Tally {
  int layers_tried = 0, layers_taken = 0, refused = 0;
  std::string first_refusal;                 // "<layer>: <tactic> (<what differs>)"
  std::vector<std::string> refused_engines;  // "cudnn-q8:<engine id>;" of refused INT8 configurations
};

// What one 8-bit layer's tactic search has found so far.
struct Q8Search {
  std::optional<double> best;  // ms of `chosen`
  std::string chosen;
  std::string timings;  // "; <tactic> <ms>" for the log
  // One timed tactic (nullopt: it failed to run): logged, and chosen when it is the fastest so far.
  void add(std::string_view tactic, std::optional<double> ms) {
    timings += fmt::format("; {} {}", tactic, ms ? fmt::format("{:.4f} ms", *ms) : std::string("failed"));
    if (ms && (!best || *ms < *best)) {
      best = ms;
      chosen = std::string(tactic);
    }
  }
};

// The 8-bit tactics chosen in this build, by layer shape (q8_shape_key, conv_step.h): ResNet-18's and
// MobileNetV2's repeated blocks give many layers one shape, and a tactic's time depends on the
// shape, not on the weights, so a later layer of a timed shape takes the earlier one's tactic once
// it computes the direct kernel's bytes on the layer's own weights (choose_q8_tactic). The search
// timed every one of them before: with cudnn-q8's configurations, 129.6 s of ResNet-18's INT8
// build at max batch 1024 on an H100 (bench/results/2026-12-07-2a1a736).
// The timing cache keeps these choices too (key "q8 <q8_shape_key>" with the build's suffix and
// target), so that a later build of the model, or a sweep's next point at the same timing batch,
// checks the cached tactic on each layer instead of building and timing every candidate again (a
// second ResNet-18 INT8 build rebuilt 129 cuDNN configurations, 32.2 s on an H100,
// bench/results/2026-12-07-0e4d727). The cache stores no time for them (time_ms 0).
struct Q8ShapeMemo {
  std::map<std::string, std::string> tactic;  // q8_shape_key -> the step's whole tactic
  int reused = 0;
  int from_cache = 0;
};

// The cudnn-q8 configurations of an 8-bit conv step at the timing batch (`timed`; `ptrs` are the
// rig's buffers holding its weights, bias, input and residual, and the output), up to
// kMaxQ8CudnnCandidates of them in heuristic order, skipping those `skip` names: each built, run
// once, and kept only where its whole output agrees with `direct`, the direct kernel's output for
// the same input (`direct_bytes` on the device; q8_difference, as for the tiles, counted on the
// device); those timed against `search`. cuDNN does not
// promise quant.h's rounding, so a refusal is possible
// (on an H100 every configuration of ResNet-18's INT8 layers was off on about 1 output per million,
// bench/results/2026-12-07-62b74db, under the rule of separate roundings that quant.h had then;
// cuDNN computes the fused multiply-adds quant.h now names): it is logged as info and counted in
// `tally`. In INT8 the sums are exact and only the epilogue can differ, which an engine's
// configurations (its knobs are tile shapes) share: once one configuration of an engine is refused,
// no configuration of that engine is built again in this build, on this layer or a later one. An
// agreement on one layer's timing batch does not prove an engine follows the rule, and contexts
// build the chosen configuration for other batch sizes without a check; an engine seen off the
// rule once is not trusted. (On an H100, bench/results/2026-12-07-2a1a736, engine 2 was refused on
// 4 of ResNet-18's layers, 1-3 bytes in 51-103 million, and had been taken on two others; engines 4
// and 7 followed the rule on every layer and kernel-test case.)
Status search_cudnn_q8(const SelectionContext& c, const PlanStep& step, const kernels::Q8ConvDesc& timed,
                       const cuda::Q8ConvPointers& ptrs, std::string_view skip, const void* direct,
                       size_t direct_bytes, Q8Search& search, CudnnQ8Tally& tally) {
  TimingRig& rig = c.rig;
  const bool fp8 = timed.x_dtype == DataType::kFp8E4M3;
  auto conv = rig.building(
      [&] {
        return cuda::CudnnQ8Conv::with_candidates(rig.libs.cudnn(), timed, step.bias >= 0,
                                                  plan_floats(c.plan, step.weight_scale));
      },
      false);
  if (!conv.is_ok()) {
    log_debug("tactics: {}: {}: {}", step.name, kQ8CudnnTactic, conv.status().message());
    return Status::ok();
  }
  ++tally.layers_tried;
  std::vector<std::string>& refused_engines = tally.refused_engines;
  const int64_t count = std::min((*conv)->candidate_count(), kMaxQ8CudnnCandidates);
  const auto worth_building = [&](const std::string& tactic) {
    return !tactic.ends_with('?') && !tactic_in_list(skip, tactic) &&
           std::ranges::find(refused_engines, cudnn_q8_engine_of(tactic)) == refused_engines.end();
  };
  {
    const std::span<const float> w_scale = plan_floats(c.plan, step.weight_scale);
    const bool has_bias = step.bias >= 0;
    std::vector<std::function<Status(cudnnHandle_t)>> builds;
    for (int64_t i = 0; i < count; ++i)
      if (std::string tactic = (*conv)->tactic(i); worth_building(tactic))
        builds.emplace_back([&timed, has_bias, w_scale, tactic = std::move(tactic)](cudnnHandle_t h) {
          return cuda::CudnnQ8Conv::with_tactic(h, timed, has_bias, w_scale, tactic).status();
        });
    rig.prebuild_all(std::move(builds), step.name);
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::string tactic = (*conv)->tactic(i);
    if (tactic.ends_with('?')) {  // cuDNN could not name it, so no plan could rebuild it
      log_debug("tactics: {}: cudnn-q8 candidate {} has no engine configuration to name", step.name, i);
      continue;
    }
    if (tactic_in_list(skip, tactic)) {
      log_debug("tactics: {}: {} skipped (GPULAB_SKIP_Q8_TACTICS)", step.name, tactic);
      continue;
    }
    if (std::ranges::find(refused_engines, cudnn_q8_engine_of(tactic)) != refused_engines.end()) {
      log_debug("tactics: {}: {} not tried: a configuration of its engine was refused in this build",
                step.name, tactic);
      continue;
    }
    double build_s = 0;
    const Status built = rig.building([&] { return (*conv)->select(i); }, true, &build_s);
    log_debug("tactics: {}: {} built in {:.3f} s", step.name, tactic, build_s);
    if (!built.is_ok()) {
      log_debug("tactics: {}: {} rejected when built: {}", step.name, tactic, built.message());
      continue;
    }
    const int64_t ws_bytes = (*conv)->workspace_bytes();
    if (ws_bytes > rig.ws_limit) {
      log_debug("tactics: {}: {} needs {} MiB of workspace", step.name, tactic, ws_bytes >> 20);
      continue;
    }
    GPULAB_TRY(rig.ws.ensure(static_cast<size_t>(std::max<int64_t>(ws_bytes, 1)), "tactic timing workspace"));
    const auto run = [&] { return (*conv)->launch(rig.libs.cudnn(), ptrs, rig.ws.buffer.get()); };
    GPULAB_ASSIGN_OR_RETURN(const std::string differs,
                            cudnn_q8_differs(rig, **conv, ptrs, direct, direct_bytes, fp8, timed.y_dtype));
    if (!differs.empty()) {
      log_info("tactics: {}: {} does not compute the direct 8-bit kernel's output ({}); not using it",
               step.name, tactic, differs);
      if (tally.refused++ == 0) tally.first_refusal = fmt::format("{}: {} ({})", step.name, tactic, differs);
      if (!fp8) refused_engines.push_back(cudnn_q8_engine_of(tactic));
      continue;
    }
    GPULAB_ASSIGN_OR_RETURN(
        const auto ms, rig.time(run, tactic_timing::give_up_ms(search.best.value_or(tactic_timing::kNoLimit)),
                                false, fmt::format("{} {}", step.name, tactic)));
    search.add(tactic, ms);
  }
  return Status::ok();
}

// The summary line of cudnn-q8 in a build.
void log_cudnn_q8_tally(const CudnnQ8Tally& t) {
  if (t.layers_tried == 0) return;
  log_info(
      "tactics: {}: offered {} 8-bit layers, took {}; {} configurations refused for not computing the direct "
      "kernel's output{}",
      kQ8CudnnTactic, t.layers_tried, t.layers_taken, t.refused,
      t.refused ? fmt::format(" (the first: {})", t.first_refusal) : std::string());
}

// The tactic of an INT8/FP8 kConv or kGemm (conv_step.h). One of kernels::q8_mma_tactics() (the
// tensor-core kernels' thread-block tiles, mma.sync, wgmma and CUTLASS's, and dp4a-q8:1x1) where
// kernels::validate_q8_mma accepts the layer at the plan's max batch, and only a tile that has computed what
// the direct kernel computes, on the layer's own weights and a seeded random input of up to 4 images
// (q8_difference says how close); with time_tactics, the fastest such tile, if it beats the direct kernel at
// the timing batch; without, the first tile that agrees. Else the direct kernel (direct-q8), which runs every
// 8-bit layer. Tiles named in `skip` (GPULAB_SKIP_Q8_TACTICS, read once per build) are not tried.
// With time_tactics, a layer of a shape `memo` holds takes that tactic instead of a search where
// it computes the direct kernel's bytes on this layer's weights (a cuDNN configuration on the whole
// timing batch, as the search checks it; a tile on the check batch); the choice of a searched layer
// goes into `memo`.
Status choose_q8_tactic(const SelectionContext& c, PlanStep& step, std::string_view skip, int& on_mma,
                        CudnnQ8Tally& cudnn, Q8ShapeMemo& memo) {
  step.tactic = std::string(kQ8DirectTactic);
  if (const Status s = kernels::validate_q8_mma(q8_layer_desc(c.plan, step, c.plan.max_batch)); !s.is_ok()) {
    log_debug("tactics: {}: {} ({})", step.name, kQ8DirectTactic, s.message());
    return Status::ok();
  }
  TimingRig& rig = c.rig;
  const Plan& plan = c.plan;
  const auto host_bytes = [&plan](int w) -> std::span<const std::byte> {
    if (w < 0) return {};
    return plan.weights[static_cast<size_t>(w)].bytes;
  };
  GPULAB_TRY(upload(rig.w, host_bytes(step.weight), "8-bit weights"));
  GPULAB_TRY(upload(rig.scale, host_bytes(step.weight_scale), "weight scales"));
  GPULAB_TRY(upload(rig.b, host_bytes(step.bias), "bias"));
  const float* w_scale = static_cast<const float*>(rig.scale.buffer.get());
  const float* bias = step.bias >= 0 ? static_cast<const float*>(rig.b.buffer.get()) : nullptr;
  // Inputs and outputs for the timing batch (the larger of the two uses).
  const kernels::Q8ConvDesc timed = q8_layer_desc(plan, step, c.batch);
  const bool fp8 = timed.x_dtype == DataType::kFp8E4M3;
  const int64_t x_bytes = timed.n * timed.h * timed.w * timed.c;
  const int64_t outputs = timed.n * timed.out_h * timed.out_w * timed.k;
  GPULAB_TRY(rig.x.ensure(static_cast<size_t>(std::max<int64_t>(x_bytes, 16)), "8-bit input"));
  GPULAB_TRY(kernels::launch_random_q8(rig.x.buffer.get(), x_bytes, fp8, 11, rig.stream));
  if (timed.has_residual) {
    GPULAB_TRY(rig.r.ensure(static_cast<size_t>(std::max<int64_t>(outputs, 16)), "8-bit residual"));
    GPULAB_TRY(kernels::launch_random_q8(rig.r.buffer.get(), outputs, fp8, 12, rig.stream));
  }
  const size_t y_bytes = static_cast<size_t>(outputs) * dtype_size(timed.y_dtype);
  GPULAB_TRY(rig.y.ensure(y_bytes, "8-bit output"));
  GPULAB_TRY(rig.y2.ensure(y_bytes, "8-bit output"));
  const void* residual = timed.has_residual ? rig.r.buffer.get() : nullptr;
  // Where a cuDNN configuration reads and writes, at any batch: the rig's buffers, output in y2.
  const cuda::Q8ConvPointers cudnn_ptrs{rig.x.buffer.get(), rig.w.buffer.get(), bias, residual,
                                        rig.y2.buffer.get()};
  // `tactic` empty: the direct kernel.
  const auto run = [&](const kernels::Q8ConvDesc& d, std::string_view tactic, void* y) {
    return tactic.empty() ? kernels::launch_q8_conv(d, rig.x.buffer.get(), rig.w.buffer.get(), w_scale, bias,
                                                    residual, y, rig.stream)
                          : kernels::launch_q8_mma_conv(tactic, d, rig.x.buffer.get(), rig.w.buffer.get(),
                                                        w_scale, bias, residual, y, rig.stream);
  };

  // Agreement on the first images of the same input, tile by tile.
  const kernels::Q8ConvDesc check = q8_layer_desc(plan, step, std::min<int64_t>(c.batch, 4));
  const size_t check_bytes =
      static_cast<size_t>(check.n * check.out_h * check.out_w * check.k) * dtype_size(check.y_dtype);
  std::vector<std::byte> direct(check_bytes), mma(check_bytes);
  if (const Status ran = run(check, {}, rig.y.buffer.get()); !ran.is_ok()) {
    (void)cudaGetLastError();
    log_warning(
        "tactics: {}: the direct 8-bit kernel failed ({}); keeping it, as nothing else runs this layer",
        step.name, ran.message());
    return Status::ok();
  }
  GPULAB_TRY(fetch_output(rig, rig.y.buffer.get(), direct));

  // The direct kernel's output for the whole timing batch, which a cuDNN configuration must
  // reproduce: in rig.y (y_bytes), which nothing else writes until the comparisons are done.
  const auto direct_timed_output = [&]() -> Result<const void*> {
    GPULAB_TRY(run(timed, {}, rig.y.buffer.get()));
    return static_cast<const void*>(rig.y.buffer.get());
  };
  // cudnn-q8 is timed only (it has no "first that agrees" without timing), for conv layers whose
  // graph it can express.
  const bool try_cudnn = c.options.time_tactics && step.kind == StepKind::kConv &&
                         cuda::cudnn_q8_conv_supports(timed).is_ok() && !tactic_in_list(skip, kQ8CudnnTactic);

  // An earlier layer's choice for this shape: "" where `tactic` gives the direct kernel's bytes here.
  const auto differs_here = [&](std::string_view tactic) -> Result<std::string> {
    if (tactic == kQ8DirectTactic) return std::string();
    if (is_q8_cudnn_tactic(tactic)) {
      // An engine refused since (search_cudnn_q8) is not trusted on this layer either.
      if (std::ranges::find(cudnn.refused_engines, cudnn_q8_engine_of(tactic)) != cudnn.refused_engines.end())
        return std::string("its engine was refused on a later layer");
      auto conv = rig.building(
          [&] {
            return cuda::CudnnQ8Conv::with_tactic(rig.libs.cudnn(), timed, step.bias >= 0,
                                                  plan_floats(plan, step.weight_scale), tactic);
          },
          true);
      if (!conv.is_ok()) return std::string(conv.status().message());
      if ((*conv)->workspace_bytes() > rig.ws_limit) return std::string("its workspace is over the limit");
      GPULAB_TRY(rig.ws.ensure(static_cast<size_t>(std::max<int64_t>((*conv)->workspace_bytes(), 1)),
                               "tactic timing workspace"));
      GPULAB_ASSIGN_OR_RETURN(const void* want, direct_timed_output());
      return cudnn_q8_differs(rig, **conv, cudnn_ptrs, want, y_bytes, fp8, timed.y_dtype);
    }
    Status ran = run(check, tactic, rig.y2.buffer.get());
    if (ran.is_ok()) ran = fetch_output(rig, rig.y2.buffer.get(), mma);
    if (!ran.is_ok()) {
      (void)cudaGetLastError();
      return std::string(ran.message());
    }
    return q8_difference(direct, mma, fp8, check.y_dtype);
  };
  const std::string shape = q8_shape_key(timed, step.kind == StepKind::kGemm, step.bias >= 0);
  const std::string cache_key = TimingCache::make_key("q8 " + shape + c.key_suffix, c.target);
  // The timing cache serves 8-bit layers only while GPULAB_SKIP_Q8_TACTICS narrows nothing: a cached
  // choice may be one it skips, and a narrowed search's choice is not the layer's best.
  TimingCache* const q8_cache = skip.empty() ? c.cache : nullptr;
  // An earlier layer's choice for this shape, else the timing cache's where it names an 8-bit tactic.
  std::string earlier;
  bool cached = false;
  if (const auto known = memo.tactic.find(shape); known != memo.tactic.end()) {
    earlier = known->second;
  } else if (const TimingEntry* hit = q8_cache ? q8_cache->find(cache_key) : nullptr;
             hit && is_q8_tactic(hit->tactic)) {
    earlier = hit->tactic;
    cached = true;
  }
  if (c.options.time_tactics && !earlier.empty()) {
    const Q8BatchTactics parts = split_q8_tactic(earlier);
    GPULAB_ASSIGN_OR_RETURN(std::string differs, differs_here(parts.main));
    if (differs.empty() && parts.small_limit > 0) {
      GPULAB_ASSIGN_OR_RETURN(differs, differs_here(parts.small));
    }
    const char* whose = cached ? "the timing cache's" : "an earlier layer's";
    if (differs.empty()) {
      step.tactic = earlier;
      on_mma += parts.main != kQ8DirectTactic;
      cudnn.layers_tried += try_cudnn;  // counted as the search would have
      cudnn.layers_taken += is_q8_cudnn_tactic(parts.main);
      ++(cached ? memo.from_cache : memo.reused);
      memo.tactic[shape] = earlier;
      log_info("tactics: {}: {} ({}, same shape; the direct kernel's bytes on this layer's weights)",
               step.name, step.tactic, whose);
      return Status::ok();
    }
    log_info(
        "tactics: {}: {}, {} for this shape, does not compute the direct kernel's bytes here ({}); searching",
        step.name, earlier, whose, differs);
  }
  // The choice of a timed search, for the later layers of this shape and the timing cache.
  struct Remember {
    bool timed;
    Q8ShapeMemo& memo;
    TimingCache* cache;
    const std::string& key;
    const std::string& cache_key;
    const PlanStep& step;
    ~Remember() {
      if (!timed) return;
      memo.tactic[key] = step.tactic;
      if (cache) cache->put(cache_key, TimingEntry{step.tactic, 0});
    }
  } remember{c.options.time_tactics, memo, q8_cache, shape, cache_key, step};

  std::vector<std::string_view> agreeing;
  for (const std::string_view tactic : kernels::q8_mma_tactics()) {
    if (tactic_in_list(skip, tactic)) {
      log_debug("tactics: {}: {} skipped (GPULAB_SKIP_Q8_TACTICS)", step.name, tactic);
      continue;
    }
    Status ran = run(check, tactic, rig.y2.buffer.get());
    if (ran.is_ok()) ran = fetch_output(rig, rig.y2.buffer.get(), mma);
    // Unsupported: a tactic that does not run this layer (kernels::q8_mma_tactic_supports: the
    // output type, the 3x3c64 kernel's one shape) or not on this GPU (FP8 below sm_89).
    if (ran.code() == StatusCode::kUnsupported) {
      log_debug("tactics: {}: {}: {}", step.name, tactic, ran.message());
      continue;
    }
    const std::string differs = ran.is_ok() ? q8_difference(direct, mma, fp8, check.y_dtype) : ran.message();
    if (!differs.empty()) {
      (void)cudaGetLastError();
      log_warning(
          "tactics: {}: the 8-bit kernel {} does not agree with the direct one ({}); not using "
          "it",
          step.name, tactic, differs);
      continue;
    }
    agreeing.push_back(tactic);
  }
  if (agreeing.empty() && !try_cudnn) return Status::ok();
  Q8Search search;
  if (!agreeing.empty()) search.chosen = agreeing.front();
  if (c.options.time_tactics) {
    using tactic_timing::kNoLimit;
    for (const std::string_view tactic : agreeing) {
      GPULAB_ASSIGN_OR_RETURN(const auto ms,
                              rig.time([&] { return run(timed, tactic, rig.y2.buffer.get()); },
                                       tactic_timing::give_up_ms(search.best.value_or(kNoLimit)), false,
                                       fmt::format("{} {}", step.name, tactic)));
      search.add(tactic, ms);
    }
    if (try_cudnn) {
      GPULAB_ASSIGN_OR_RETURN(const void* direct_timed, direct_timed_output());
      GPULAB_TRY(search_cudnn_q8(c, step, timed, cudnn_ptrs, skip, direct_timed, y_bytes, search, cudnn));
    }
    // The direct kernel is given up on as soon as one launch is slower than the best tile's median.
    GPULAB_ASSIGN_OR_RETURN(const auto direct_ms,
                            rig.time([&] { return run(timed, {}, rig.y.buffer.get()); },
                                     search.best.value_or(kNoLimit), true, step.name + " direct-q8"));
    if (!search.best || (direct_ms && *direct_ms < *search.best)) {
      log_info("tactics: {}: {} ({:.4f} ms{}) at batch {}", step.name, kQ8DirectTactic,
               direct_ms.value_or(-1.0), search.timings, c.batch);
      return Status::ok();
    }
    log_info("tactics: {}: {} ({:.4f} ms at batch {}{}; {} {})", step.name, search.chosen, *search.best,
             c.batch, search.timings, kQ8DirectTactic,
             direct_ms ? fmt::format("{:.4f} ms or more", *direct_ms) : std::string("failed"));
  }
  step.tactic = search.chosen;
  ++on_mma;
  cudnn.layers_taken += is_q8_cudnn_tactic(step.tactic);
  if (!c.options.time_tactics || c.batch <= kQ8SmallBatch || tactic_in_list(skip, kQ8SmallBatchItem))
    return Status::ok();
  // A second tactic for small batches (conv_step.h, "|upto"): the agreeing tiles and the direct
  // kernel timed at kQ8SmallBatch images, with the workspace a context gives split-K, against the
  // chosen tactic there. A cuDNN configuration chosen at the timing batch is built at
  // kQ8SmallBatch images as a context builds it: MobileNetV2's INT8 plan, with 23 of its 35 layers
  // on cuDNN and no small-batch tactic for them, was 0.71x its FP16 plan at batch 1 on an H100 and
  // level at 32 (bench/results/2026-12-07-d9cedc6).
  const kernels::Q8ConvDesc small = q8_layer_desc(plan, step, kQ8SmallBatch);
  std::unique_ptr<cuda::CudnnQ8Conv> small_cudnn;
  if (is_q8_cudnn_tactic(search.chosen)) {
    auto conv = rig.building(
        [&] {
          return cuda::CudnnQ8Conv::with_tactic(rig.libs.cudnn(), small, step.bias >= 0,
                                                plan_floats(plan, step.weight_scale), search.chosen);
        },
        true);
    if (!conv.is_ok() || (*conv)->workspace_bytes() > rig.ws_limit) {
      log_debug("tactics: {}: {} at batch {}: {}", step.name, search.chosen, kQ8SmallBatch,
                conv.is_ok() ? std::string("its workspace is over the limit") : conv.status().message());
      return Status::ok();  // a context would run direct-q8 there; nothing to compare with
    }
    small_cudnn = std::move(conv).value();
  }
  const int64_t small_ws =
      std::max(kQ8SplitKWorkspaceBytes, small_cudnn ? small_cudnn->workspace_bytes() : int64_t{0});
  GPULAB_TRY(rig.ws.ensure(static_cast<size_t>(small_ws), "tactic timing workspace"));
  const auto run_small = [&](std::string_view tactic) {
    if (tactic == kQ8DirectTactic) return run(small, {}, rig.y.buffer.get());
    if (small_cudnn && tactic == search.chosen)
      return small_cudnn->launch(rig.libs.cudnn(), cudnn_ptrs, rig.ws.buffer.get());
    return kernels::launch_q8_mma_conv(tactic, small, rig.x.buffer.get(), rig.w.buffer.get(), w_scale, bias,
                                       residual, rig.y2.buffer.get(), rig.stream, rig.ws.buffer.get(),
                                       kQ8SplitKWorkspaceBytes);
  };
  std::vector<std::string_view> candidates = agreeing;
  if (small_cudnn) candidates.insert(candidates.begin(), search.chosen);
  candidates.push_back(kQ8DirectTactic);
  Q8Search at_small;
  std::optional<double> chosen_ms;
  for (const std::string_view tactic : candidates) {
    GPULAB_ASSIGN_OR_RETURN(
        const auto ms, rig.time([&] { return run_small(tactic); },
                                tactic_timing::give_up_ms(at_small.best.value_or(tactic_timing::kNoLimit)),
                                tactic == kQ8DirectTactic,
                                fmt::format("{} {} at batch {}", step.name, tactic, kQ8SmallBatch)));
    if (tactic == search.chosen) chosen_ms = ms;
    at_small.add(tactic, ms);
  }
  if (chosen_ms && at_small.best && at_small.chosen != search.chosen &&
      *at_small.best < kQ8SmallBatchGain * *chosen_ms) {
    step.tactic = q8_tactic_with_small_batch(search.chosen, kQ8SmallBatch, at_small.chosen);
    log_info("tactics: {}: {} at batches up to {} ({:.4f} ms at {}{})", step.name, at_small.chosen,
             kQ8SmallBatch, *at_small.best, kQ8SmallBatch, at_small.timings);
  }
  return Status::ok();
}

}  // namespace

Result<TacticReport> select_tactics(Plan& plan, const BuildOptions& options, TimingCache* cache) {
  TacticReport report;
  GPULAB_ASSIGN_OR_RETURN(const PlanTarget target, cuda::current_target(options.device));
  GPULAB_ASSIGN_OR_RETURN(const int64_t ws_limit, workspace_limit_for(options));
  const std::string key_suffix = timing_key_suffix(options);
  TimingRig rig(ws_limit);
  GPULAB_TRY(rig.init());
  const SelectionContext context{
      .plan = plan,
      .options = options,
      .cache = cache,
      .target = target,
      .key_suffix = key_suffix,
      .rig = rig,
      .batch = options.tactic_batch > 0 ? std::min(options.tactic_batch, plan.max_batch) : plan.max_batch};
  if (context.batch < plan.max_batch)
    log_info("tactics: chosen at batch {} for a plan of max batch {} (--tactic-batch)", context.batch,
             plan.max_batch);
  int q8_layers = 0, q8_mma = 0;
  CudnnQ8Tally cudnn_q8;
  Q8ShapeMemo q8_memo;
  const std::string skip = q8_tactics_to_skip();
  if (!skip.empty() && std::ranges::any_of(plan.steps, is_q8_layer)) {
    const std::vector<std::string_view> names = q8_tactic_names();
    for (const std::string_view item : unmatched_list_items(skip, names))
      log_warning("GPULAB_SKIP_Q8_TACTICS: '{}' names no 8-bit tactic ({}); it skips nothing", item,
                  fmt::join(names, ", "));
    log_info("tactics: 8-bit tactics named in GPULAB_SKIP_Q8_TACTICS ('{}') are not tried", skip);
  }
  const auto search_start = std::chrono::steady_clock::now();
  for (auto& step : plan.steps) {
    if (is_q8_layer(step)) {
      ++q8_layers;
      const auto layer_start = std::chrono::steady_clock::now();
      GPULAB_TRY(choose_q8_tactic(context, step, skip, q8_mma, cudnn_q8, q8_memo));
      log_debug("tactics: {}: {} chosen in {:.2f} s", step.name, step.tactic, seconds_since(layer_start));
    } else if (step.kind == StepKind::kGemm || step.kind == StepKind::kLinear ||
               step.kind == StepKind::kMatMul) {
      step.tactic = "cublaslt";
    } else if (step.kind == StepKind::kAttention) {
      // cuDNN's fused SDPA where a context can build it at its batch size (FP16/BF16), else gpulab's
      // attention kernel (view_steps.h); decided per batch size, not timed.
      step.tactic = "cudnn-sdpa-or-kernel";
    } else if (step.kind == StepKind::kStem) {
      step.tactic = std::string(kFusedStemTactic);
    } else if (step.kind == StepKind::kConv) {
      GPULAB_TRY(select_conv_tactic(context, step, report));
    }
  }
  log_info(
      "tactics: {} convolution layers on gpulab's own kernels, {} without any cuDNN candidate, {} in "
      "batch chunks",
      report.own_kernel_layers, report.fallback_layers, report.chunked_layers);
  report.candidate_build_s = rig.candidate_build_s;
  report.timing_s = rig.timing_s;
  report.candidates_built = rig.candidates_built;
  report.timing_runs = rig.timing_runs;
  // Where the search's time went: cuDNN's plans, timing, and the rest (8-bit layers: the reference
  // outputs of the direct kernel, their comparisons, random inputs).
  if (report.timed_layers > 0 || (q8_layers > 0 && options.time_tactics)) {
    const double search_s = seconds_since(search_start);
    log_info(
        "tactics: {:.1f} s in all: {:.1f} s building {} cuDNN candidate plans (and their lists{}), {:.1f} s "
        "timing {} candidates, {:.1f} s on the rest",
        search_s, report.candidate_build_s, report.candidates_built,
        rig.prebuilt ? fmt::format("; {:.1f} s of it prebuilding {} on {} threads", rig.prebuild_s,
                                   rig.prebuilt, rig.prebuild->threads())
                     : std::string(),
        report.timing_s, report.timing_runs,
        std::max(0.0, search_s - report.candidate_build_s - report.timing_s));
  }
  log_cudnn_q8_tally(cudnn_q8);
  if (q8_memo.reused > 0)
    log_info(
        "tactics: {} 8-bit layers took the tactic of an earlier layer of their shape, checked on their own "
        "weights",
        q8_memo.reused);
  if (q8_memo.from_cache > 0)
    log_info(
        "tactics: {} 8-bit layers took the timing cache's tactic for their shape, checked on their own "
        "weights",
        q8_memo.from_cache);
  if (q8_layers > 0)
    log_info(
        "tactics: {} INT8/FP8 layers on the tensor-core kernels, {} or cuDNN ({}, {}, {}, {}), {} on the "
        "direct one ({})",
        q8_mma, kQ8SmallKTactic, kQ8MmaTactic, kQ8WgmmaTactic, kQ8CutlassTactic, kQ8CudnnTactic,
        q8_layers - q8_mma, kQ8DirectTactic);
  return report;
}

}  // namespace gpulab
