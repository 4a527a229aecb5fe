// EngineImpl (the plan's weights on the device, shared by its contexts) and the entry points
// that build or load one. The contexts are in context.cc and context_run.cc.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/depthwise_conv.h"
#include "core/log.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"
#include "plan/timing_cache.h"
#include "runtime/conv_step.h"
#include "runtime/engine_internal.h"
#include "runtime/runtime.h"
#include "runtime/step_problems.h"
#include "runtime/tactics.h"

namespace gpulab {

Result<std::shared_ptr<EngineImpl>> EngineImpl::create(Plan plan, int device) {
  GPULAB_ASSIGN_OR_RETURN(const PlanTarget target, cuda::current_target(device));
  GPULAB_TRY(check_plan_target(plan.target, target));
  for (const PlanStep& step : plan.steps) {
    if (step.kind != StepKind::kConv) continue;
    if (const Status s = check_conv_tactic(step.tactic); !s.is_ok())
      return Status::unsupported(
          fmt::format("plan: step {}: {} Rebuild the plan with `gpulab build`.", step.name, s.message()));
    if (is_quantized(step.precision) != is_q8_tactic(step.tactic))
      return Status::unsupported(
          fmt::format("plan: step {} is {} with tactic \"{}\"; INT8/FP8 convolutions, and only they, run "
                      "\"{}\", \"{}\" (with a tile suffix), \"{}:<tile>\", \"{}:<tile>\", \"{}\" or "
                      "\"{}:<engine>\". The file is corrupt or was not written by gpulab; rebuild it with "
                      "`gpulab build`.",
                      step.name, precision_name(step.precision), step.tactic, kQ8DirectTactic, kQ8MmaTactic,
                      kQ8WgmmaTactic, kQ8CutlassTactic, kQ8SmallKTactic, kQ8CudnnTactic));
    const DataType x = plan.values[step.inputs[0]].dtype, y = plan.values[step.output].dtype;
    if (x != y && step.tactic != kDepthwiseTactic && !is_q8_tactic(step.tactic))
      return Status::unsupported(fmt::format(
          "plan: step {} reads {} into a {} convolution, which only the \"{}\" tactic does, not \"{}\". "
          "The file is corrupt or was not written by gpulab; rebuild it with `gpulab build`.",
          step.name, dtype_name(x), dtype_name(y), kDepthwiseTactic, step.tactic));
  }
  auto e = std::shared_ptr<EngineImpl>(new EngineImpl());
  e->device_ = device;
  e->plan_ = std::move(plan);
  GPULAB_TRY(e->upload_weights());
  e->fill_info();
  return e;
}

Result<std::unique_ptr<ExecutionContext>> EngineImpl::create_context() {
  GPULAB_CUDA_TRY(cudaSetDevice(device_));
  auto ctx = std::make_unique<ContextImpl>(std::static_pointer_cast<EngineImpl>(shared_from_this()));
  GPULAB_TRY(ctx->init());
  return std::unique_ptr<ExecutionContext>(std::move(ctx));
}

Status EngineImpl::upload_weights() {
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const auto& w : plan_.weights) {
    total = (total + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    offsets.push_back(total);
    total += w.bytes.size();
  }
  GPULAB_ASSIGN_OR_RETURN(weights_, cuda::DeviceBuffer::allocate(std::max<size_t>(total, 1), "plan weights"));
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    void* p = static_cast<char*>(weights_.get()) + offsets[i];
    weight_ptrs_.push_back(p);
    if (!plan_.weights[i].bytes.empty())
      GPULAB_CUDA_TRY(cudaMemcpy(p, plan_.weights[i].bytes.data(), plan_.weights[i].bytes.size(),
                                 cudaMemcpyHostToDevice));
  }
  const auto requests = value_lifetimes(plan_, plan_.max_batch);
  memory_ = plan_memory(requests, kDeviceAlignment);
  return Status::ok();
}

void EngineImpl::fill_info() {
  info_.gpu_name = plan_.target.gpu_name;
  info_.compute_capability = plan_.target.compute_capability;
  info_.precision = plan_.precision;
  info_.max_batch = plan_.max_batch;
  info_.input_shape = Shape{Shape::kBatch, plan_.input_channels, plan_.input_h, plan_.input_w};
  info_.num_classes = plan_.num_classes;
  info_.outputs_probabilities = plan_.steps.back().softmax;
  info_.metadata = plan_.metadata;
  info_.weights_bytes = plan_.weights_bytes();
  info_.arena_bytes = memory_.arena_bytes;
  info_.workspace_bytes = 0;  // known once a context prepared a batch size
  for (const auto& s : plan_.steps) {
    LayerInfo l;
    l.name = s.name;
    l.kind = std::string(step_kind_name(s.kind));
    l.tactic = s.tactic.empty() ? "kernel" : s.tactic;
    l.precision = s.precision;
    l.flops_per_image = s.flops_per_image;
    for (int v : s.inputs) l.bytes_per_image += plan_.values[v].bytes_per_image();
    if (s.output >= 0) l.bytes_per_image += plan_.values[s.output].bytes_per_image();
    if (s.kind == StepKind::kInput || s.kind == StepKind::kStem)
      l.bytes_per_image += plan_.input_channels * plan_.input_h * plan_.input_w * 4;
    if (s.kind == StepKind::kOutput) l.bytes_per_image += plan_.num_classes * 4;
    if (s.weight >= 0) l.param_bytes += static_cast<int64_t>(plan_.weights[s.weight].bytes.size());
    if (s.bias >= 0) l.param_bytes += static_cast<int64_t>(plan_.weights[s.bias].bytes.size());
    info_.layers.push_back(std::move(l));
  }
}

Result<std::shared_ptr<Engine>> Engine::build_from_onnx(const std::string& onnx_path,
                                                        const BuildOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(Graph graph, load_onnx(onnx_path));
  GPULAB_TRY(run_passes(graph));
  return build_engine_from_graph(graph, options, /*apply_passes=*/false);
}

Result<std::shared_ptr<Engine>> Engine::load(const std::string& plan_path, int device) {
  GPULAB_ASSIGN_OR_RETURN(Plan plan, load_plan(plan_path));
  auto engine = EngineImpl::create(std::move(plan), device);
  if (!engine.is_ok()) return engine.status().with_context("'" + plan_path + "'");
  return std::shared_ptr<Engine>(std::move(engine).value());
}

Result<std::shared_ptr<Engine>> build_engine_from_graph(const Graph& graph, const BuildOptions& options,
                                                        bool apply_passes) {
  Result<Plan> lowered = Status::internal("not lowered");
  if (apply_passes) {
    Graph copy = graph;
    GPULAB_TRY(run_passes(copy));
    lowered = lower_graph(copy, options);
  } else {
    lowered = lower_graph(graph, options);
  }
  GPULAB_TRY(lowered.status());
  Plan plan = std::move(lowered).value();
  GPULAB_ASSIGN_OR_RETURN(plan.target, cuda::current_target(options.device));
  GPULAB_TRY(check_precision_supported(plan, plan.target));
  if (options.fuse_stem && plan.target.compute_capability >= 80) {
    const bool fused = fuse_stem_pool(plan, [&](const PlanStep& stem) {
      const Status ok = check_fused_stem(plan, stem);
      if (!ok.is_ok()) log_info("build: the stem stays three steps: {}", ok.message());
      return ok.is_ok();
    });
    if (fused)
      log_info("build: {} runs as one fused kernel (space-to-depth, convolution, ReLU, max pool)",
               plan.steps.front().name);
  }
  if (options.fold_input_casts) {
    const int folded = fold_input_casts(plan, [&](const PlanStep& conv) {
      return cuda::depthwise_conv_supports(direct_conv_desc(conv_problem(plan, conv, plan.max_batch)));
    });
    if (folded > 0)
      log_info("build: {} float32 casts folded into the depthwise convolutions that read them", folded);
  }
  TimingCache cache;
  if (!options.timing_cache_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(cache, TimingCache::load(options.timing_cache_path));
  }
  GPULAB_ASSIGN_OR_RETURN(const TacticReport report, select_tactics(plan, options, &cache));
  log_info(
      "build: {} layers timed, {} from the timing cache, {} on gpulab's own kernels ({} with no cuDNN "
      "engine)",
      report.timed_layers, report.cached_layers, report.own_kernel_layers, report.fallback_layers);
  if (!options.timing_cache_path.empty()) GPULAB_TRY(cache.save(options.timing_cache_path));
  GPULAB_ASSIGN_OR_RETURN(auto engine, EngineImpl::create(std::move(plan), options.device));
  engine->set_tactic_search_times(report.candidate_build_s, report.timing_s);
  return std::shared_ptr<Engine>(std::move(engine));
}

bool cuda_device_available(std::string* reason) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (reason) *reason = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    // The runtime says "driver version is insufficient" when there is no driver at all.
    if (reason && err == cudaErrorInsufficientDriver) {
      if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
        dlclose(driver);
      } else {
        *reason = "no NVIDIA driver (libcuda.so.1 not found)";
      }
    }
    cudaGetLastError();
    return false;
  }
  return true;
}

}  // namespace gpulab
