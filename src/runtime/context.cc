// ContextImpl's set-up: the activation arena and workspace, and for each batch size the cuDNN
// plans and cuBLASLt objects its steps launch with. The run loop is in context_run.cc.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "core/log.h"
#include "runtime/conv_step.h"
#include "runtime/engine_internal.h"
#include "runtime/step_launch.h"
#include "runtime/step_problems.h"

namespace gpulab {

ContextImpl::~ContextImpl() {
  drop_graphs();
  if (own_stream_) cudaStreamDestroy(own_stream_);
}

void ContextImpl::drop_graphs() {
  for (auto& [batch, state] : batches_) {
    if (state.exec) cudaGraphExecDestroy(state.exec);
    state.exec = nullptr;
  }
}

Status ContextImpl::init() {
  GPULAB_TRY(libs_.init());
  const auto& mem = engine_->memory();
  offsets_ = mem.offsets;
  GPULAB_ASSIGN_OR_RETURN(
      arena_, cuda::DeviceBuffer::allocate(std::max<int64_t>(mem.arena_bytes, 1), "activation arena"));
  GPULAB_ASSIGN_OR_RETURN(workspace_, cuda::DeviceBuffer::allocate(kGemmWorkspaceBytes, "workspace"));
  GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
  return Status::ok();
}

// gpulab's own kernels ("direct", "depthwise", "cutlass:...") run at every batch size, without a
// cuDNN plan. A chunked tactic was timed at its chunk size and runs the full chunks; the remainder,
// or a batch no larger than a chunk, gets a plan of its own size. Any other cuDNN tactic was timed
// at the plan's max batch (or --tactic-batch) and runs its engine configuration at every batch where
// that builds (prepare_cudnn_conv). When no plan builds, the step falls back to the direct
// convolution (state.convs[i] stays null).
void ContextImpl::prepare_conv(size_t i, int64_t batch, BatchState& state, int64_t& need_ws) {
  const Plan& plan = engine_->plan();
  const PlanStep& step = plan.steps[i];
  if (conv_kernel_of_tactic(step.tactic) != ConvKernel::kCudnn) return;
  const auto chunked = parse_chunked_tactic(step.tactic);
  const std::string_view tactic = chunked ? chunked->inner : std::string_view(step.tactic);
  const ChunkSplit split = chunked ? split_batch(batch, chunked->chunk) : ChunkSplit{0, batch};
  std::unique_ptr<cuda::CudnnConv> full, rest;
  Status failed;
  if (split.full > 0) {
    auto conv = prepare_cudnn_conv(libs_.cudnn(), conv_problem(plan, step, chunked->chunk), tactic);
    if (conv.is_ok())
      full = std::move(conv).value();
    else
      failed = conv.status();
  }
  if (failed.is_ok() && split.tail > 0) {
    auto conv = prepare_cudnn_conv(libs_.cudnn(), conv_problem(plan, step, split.tail), tactic);
    if (conv.is_ok())
      rest = std::move(conv).value();
    else
      failed = conv.status();
  }
  if (!failed.is_ok()) {
    log_info("context: {} at batch {}: {}; using the direct convolution", step.name, batch, failed.message());
    return;
  }
  for (const auto* conv : {full.get(), rest.get()})
    if (conv) need_ws = std::max(need_ws, conv->workspace_bytes());
  if (full) {
    state.chunks[i] = chunked->chunk;
    state.convs[i] = std::move(full);
    state.tails[i] = std::move(rest);
  } else {
    state.convs[i] = std::move(rest);
  }
}

// The configuration the tactic names, built for `batch`; where it does not build (cuDNN's engines
// need not cover every batch size), the step runs the direct 8-bit kernel, which computes the same
// bytes (state.q8convs[i] stays null).
void ContextImpl::prepare_q8_conv(size_t i, int64_t batch, BatchState& state, int64_t& need_ws) {
  const Plan& plan = engine_->plan();
  const PlanStep& step = plan.steps[i];
  const std::string_view tactic = q8_tactic_for_batch(step.tactic, batch);
  if (!is_q8_cudnn_tactic(tactic)) return;  // a small batch that runs the step's small-batch tile
  auto conv = cuda::CudnnQ8Conv::with_tactic(libs_.cudnn(), q8_layer_desc(plan, step, batch), step.bias >= 0,
                                             plan_floats(plan, step.weight_scale), tactic);
  if (!conv.is_ok()) {
    log_info("context: {} at batch {}: {}; using {}", step.name, batch, conv.status().message(),
             kQ8DirectTactic);
    return;
  }
  need_ws = std::max(need_ws, (*conv)->workspace_bytes());
  state.q8convs[i] = std::move(conv).value();
}

Status ContextImpl::prepare_view_step(size_t i, int64_t batch, BatchState& state, int64_t& need_ws) {
  const Plan& plan = engine_->plan();
  const PlanStep& step = plan.steps[i];
  if (step.kind == StepKind::kAttention) {
    auto launch = sdpa_launch(plan, step, batch);
    if (launch.is_ok()) {
      auto sdpa = cuda::CudnnSdpa::create(libs_.cudnn(), launch->problem);
      if (sdpa.is_ok()) {
        need_ws = std::max(need_ws, (*sdpa)->workspace_bytes());
        state.sdpas[i] = std::move(sdpa).value();
        state.sdpa_launches[i] = *launch;
        return Status::ok();
      }
      launch = sdpa.status();
    }
    log_info("context: {} at batch {}: {}; using gpulab's attention kernel", step.name, batch,
             launch.status().message());
    return Status::ok();
  }
  GPULAB_ASSIGN_OR_RETURN(state.matmul_launches[i], matmul_launch(plan, step, batch));
  GPULAB_ASSIGN_OR_RETURN(
      state.matmuls[i],
      prepare_matmul_plan(libs_.cublaslt(), step, state.matmul_launches[i], kGemmWorkspaceBytes));
  return Status::ok();
}

Status ContextImpl::prepare(int64_t batch, BatchState** out) {
  const Plan& plan = engine_->plan();
  if (batch < 1 || batch > plan.max_batch)
    return Status::invalid_argument(
        fmt::format("enqueue: batch {} is outside 1..{} (the plan's max batch). Rebuild "
                    "the plan with a larger --max-batch.",
                    batch, plan.max_batch));
  auto it = batches_.find(batch);
  if (it != batches_.end()) {
    *out = &it->second;
    return Status::ok();
  }
  BatchState state;
  state.convs.resize(plan.steps.size());
  state.chunks.assign(plan.steps.size(), 0);
  state.tails.resize(plan.steps.size());
  state.gemms.resize(plan.steps.size());
  state.q8convs.resize(plan.steps.size());
  state.matmuls.resize(plan.steps.size());
  state.matmul_launches.resize(plan.steps.size());
  state.sdpas.resize(plan.steps.size());
  state.sdpa_launches.resize(plan.steps.size());
  int64_t need_ws = kGemmWorkspaceBytes;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    if (step.kind == StepKind::kConv && is_q8_cudnn_tactic(step.tactic)) {
      prepare_q8_conv(i, batch, state, need_ws);
    } else if (step.kind == StepKind::kConv) {
      prepare_conv(i, batch, state, need_ws);
    } else if (step.kind == StepKind::kGemm && !is_quantized(step.precision)) {  // INT8/FP8: gpulab's kernel
      GPULAB_ASSIGN_OR_RETURN(
          state.gemms[i],
          cuda::CublasLtGemm::create(libs_.cublaslt(), gemm_problem(plan, step, batch), kGemmWorkspaceBytes));
    } else if (step.kind == StepKind::kLinear || step.kind == StepKind::kMatMul ||
               step.kind == StepKind::kAttention) {
      GPULAB_TRY(prepare_view_step(i, batch, state, need_ws));
    }
  }
  if (need_ws > static_cast<int64_t>(workspace_.bytes())) {
    // Work queued earlier may still read the old workspace, and captured graphs point at it:
    // wait for this context's last stream (not the whole device: another context may be
    // capturing a graph) and drop the graphs (they are captured again on use).
    if (last_stream_) GPULAB_CUDA_TRY(cudaStreamSynchronize(last_stream_));
    drop_graphs();
    workspace_.reset();
    GPULAB_ASSIGN_OR_RETURN(workspace_, cuda::DeviceBuffer::allocate(need_ws, "workspace"));
  }
  auto [pos, inserted] = batches_.emplace(batch, std::move(state));
  (void)inserted;
  *out = &pos->second;
  return Status::ok();
}

}  // namespace gpulab
