// ContextImpl's run loop: the plan's steps in order on a stream, eagerly or through a CUDA graph
// captured per batch size and pointer pair; run() (host tensors) and profile() (per-step times).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/log.h"
#include "runtime/engine_internal.h"
#include "runtime/step_launch.h"
#include "runtime/view_steps.h"

namespace gpulab {

Status ContextImpl::launch_step(size_t i, int64_t batch, const BatchState& state, const float* input,
                                float* logits, cudaStream_t stream) {
  const Plan& plan = engine_->plan();
  const PlanStep& step = plan.steps[i];
  const StepLaunch l{.plan = plan,
                     .step = step,
                     .batch = batch,
                     .arena = static_cast<char*>(arena_.get()),
                     .value_offsets = offsets_,
                     .weights = engine_->weight_ptrs(),
                     .workspace = workspace_.get(),
                     .workspace_bytes = static_cast<int64_t>(workspace_.bytes()),
                     .stream = stream};
  switch (step.kind) {
    case StepKind::kInput: return enqueue_input(l, input);
    case StepKind::kStem: return enqueue_stem(l, input);
    case StepKind::kConv:
      return enqueue_conv(l, {.conv = state.convs[i].get(),
                              .chunk = state.chunks[i],
                              .tail = state.tails[i].get(),
                              .q8 = state.q8convs[i].get(),
                              .cudnn = libs_.cudnn()});
    case StepKind::kGemm:
      if (is_quantized(step.precision)) return enqueue_q8_layer(l);
      return enqueue_gemm(l, *state.gemms[i], libs_.cublaslt(), kGemmWorkspaceBytes);
    case StepKind::kMaxPool:
    case StepKind::kAveragePool: return enqueue_pool(l);
    case StepKind::kGlobalAveragePool: return enqueue_global_avg_pool(l);
    case StepKind::kAdd:
    case StepKind::kMul: return enqueue_binary(l);
    case StepKind::kActivation:
    case StepKind::kPointwise: return enqueue_unary(l);
    case StepKind::kConcat: return enqueue_concat(l);
    case StepKind::kCast: return enqueue_cast(l);
    case StepKind::kOutput: return enqueue_output(l, logits);
    case StepKind::kCopy: return enqueue_copy(l);
    case StepKind::kEltwise: return enqueue_eltwise(l);
    case StepKind::kLayerNorm: return enqueue_layer_norm(l);
    case StepKind::kLinear:
    case StepKind::kMatMul:
      return enqueue_matmul(l, {.matmul = state.matmuls[i].get(),
                                .launch = state.matmul_launches[i],
                                .handle = libs_.cublaslt(),
                                .workspace_bytes = kGemmWorkspaceBytes});
    case StepKind::kAttention:
      return enqueue_attention(
          l, {.sdpa = state.sdpas[i].get(), .launch = state.sdpa_launches[i], .handle = libs_.cudnn()});
  }
  return Status::internal(
      fmt::format("step {} '{}': unknown step kind {}", i, step.name, static_cast<int>(step.kind)));
}

Status ContextImpl::run_steps(int64_t batch, BatchState& state, const float* input, float* logits,
                              cudaStream_t stream, const std::vector<cudaEvent_t>* step_events) {
  const Plan& plan = engine_->plan();
  GPULAB_TRY(libs_.set_stream(stream));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Status status = launch_step(i, batch, state, input, logits, stream);
    if (!status.is_ok()) return status.with_context(fmt::format("step {} '{}'", i, plan.steps[i].name));
    if (step_events) GPULAB_CUDA_TRY(cudaEventRecord((*step_events)[i], stream));
  }
  return Status::ok();
}

namespace {

// "<n> nodes (<k> kernels, <m> memsets, ...)" of a captured graph, for the debug log: a plan's steps
// against what the libraries launch for them (cuDNN's runtime-fusion engines may launch more than
// one kernel a layer; MobileNetV2's INT8 plan is faster than FP16 layer by layer at batch 1 and
// slower in the graph, bench/results/2026-12-07-deaa762).
std::string graph_node_summary(cudaGraph_t graph) {
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return "node count unknown";
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0 && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return "node count unknown";
  int kernels = 0, memsets = 0, copies = 0, other = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) type = cudaGraphNodeTypeEmpty;
    if (type == cudaGraphNodeTypeKernel)
      ++kernels;
    else if (type == cudaGraphNodeTypeMemset)
      ++memsets;
    else if (type == cudaGraphNodeTypeMemcpy)
      ++copies;
    else
      ++other;
  }
  return fmt::format("{} nodes ({} kernels, {} memsets, {} copies, {} other)", count, kernels, memsets,
                     copies, other);
}

}  // namespace

Status ContextImpl::capture_graph(const EnqueueArgs& args, BatchState& state, cudaStream_t stream) {
  if (state.exec && state.graph_input == args.input_nchw && state.graph_logits == args.logits)
    return Status::ok();
  const auto start = std::chrono::steady_clock::now();
  GPULAB_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = run_steps(args.batch, state, args.input_nchw, args.logits, stream, nullptr);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!captured.is_ok()) {
    if (graph) cudaGraphDestroy(graph);
    return captured.with_context("capturing a CUDA graph");
  }
  GPULAB_CUDA_TRY(end);
  if (state.exec) cudaGraphExecDestroy(state.exec);
  state.exec = nullptr;
  const std::string nodes = graph_node_summary(graph);
  const cudaError_t inst = cudaGraphInstantiate(&state.exec, graph, 0);
  cudaGraphDestroy(graph);
  GPULAB_CUDA_TRY(inst);
  state.graph_input = args.input_nchw;
  state.graph_logits = args.logits;
  log_debug("context: captured and instantiated a CUDA graph for batch {} in {:.1f} ms: {}", args.batch,
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
            nodes);
  return Status::ok();
}

Status ContextImpl::enqueue(const EnqueueArgs& args, cudaStream_t stream) {
  if (!args.input_nchw || !args.logits)
    return Status::invalid_argument("enqueue: input and logits must be device pointers, got null.");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  GPULAB_CUDA_TRY(cudaSetDevice(engine_->device()));
  const auto t1 = Clock::now();
  BatchState* state = nullptr;
  GPULAB_TRY(prepare(args.batch, &state));
  last_stream_ = stream;
  const auto t2 = Clock::now();
  // A slow enqueue says which part was slow (on an H100, 2026-12-06: `prepare`, 3-9 s, the first
  // time a batch size is seen: cuDNN's plans for each convolution).
  const auto report_if_slow = [&](const char* launch) {
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    const auto t3 = Clock::now();
    if (ms(t0, t3) > 20.0)
      log_debug(
          "context: enqueue at batch {} took {:.1f} ms: cudaSetDevice {:.1f}, prepare {:.1f}, {} {:.1f}",
          args.batch, ms(t0, t3), ms(t0, t1), ms(t1, t2), launch, ms(t2, t3));
  };
  // The legacy default stream cannot be captured; run eagerly there.
  if (!args.use_cuda_graph || stream == nullptr) {
    const Status run = run_steps(args.batch, *state, args.input_nchw, args.logits, stream, nullptr);
    report_if_slow("the steps' launches");
    return run;
  }
  GPULAB_TRY(capture_graph(args, *state, stream));
  GPULAB_CUDA_TRY(cudaGraphLaunch(state->exec, stream));
  report_if_slow("capture check and cudaGraphLaunch");
  return Status::ok();
}

Result<Tensor> ContextImpl::run(const Tensor& input, bool use_cuda_graph) {
  const Plan& plan = engine_->plan();
  const auto& s = input.shape();
  if (input.dtype() != DataType::kFloat32 || s.rank() != 4 || s[1] != plan.input_channels ||
      s[2] != plan.input_h || s[3] != plan.input_w)
    return Status::invalid_argument(fmt::format("run: input is {} {}, the plan takes float32 [N,{},{},{}].",
                                                dtype_name(input.dtype()), s.to_string(), plan.input_channels,
                                                plan.input_h, plan.input_w));
  const int64_t batch = s[0];
  if (batch < 1 || batch > plan.max_batch)
    return Status::invalid_argument(
        fmt::format("run: batch {} is outside 1..{} (the plan's max batch).", batch, plan.max_batch));
  GPULAB_CUDA_TRY(cudaSetDevice(engine_->device()));
  // Staging buffers at the plan's max batch, kept for the context's life so that the CUDA graphs
  // captured for them stay valid.
  const size_t out_bytes = static_cast<size_t>(batch * plan.num_classes) * 4;
  if (!run_input_.get()) {
    const size_t max_in =
        static_cast<size_t>(plan.max_batch * plan.input_channels * plan.input_h * plan.input_w) * 4;
    GPULAB_ASSIGN_OR_RETURN(run_input_, cuda::DeviceBuffer::allocate(max_in, "run input"));
    GPULAB_ASSIGN_OR_RETURN(
        run_logits_, cuda::DeviceBuffer::allocate(static_cast<size_t>(plan.max_batch * plan.num_classes) * 4,
                                                  "run logits"));
  }
  GPULAB_CUDA_TRY(cudaMemcpyAsync(run_input_.get(), input.data(), input.size_bytes(), cudaMemcpyHostToDevice,
                                  own_stream_));
  GPULAB_TRY(enqueue({.input_nchw = run_input_.as<float>(),
                      .batch = batch,
                      .logits = run_logits_.as<float>(),
                      .use_cuda_graph = use_cuda_graph},
                     own_stream_));
  Tensor out(DataType::kFloat32, Shape{batch, plan.num_classes});
  GPULAB_CUDA_TRY(
      cudaMemcpyAsync(out.data(), run_logits_.get(), out_bytes, cudaMemcpyDeviceToHost, own_stream_));
  GPULAB_CUDA_TRY(cudaStreamSynchronize(own_stream_));
  return out;
}

Result<std::vector<LayerTime>> ContextImpl::profile(int64_t batch, int iterations) {
  const Plan& plan = engine_->plan();
  if (iterations < 1) return Status::invalid_argument("profile: iterations must be >= 1.");
  GPULAB_CUDA_TRY(cudaSetDevice(engine_->device()));
  BatchState* state = nullptr;
  GPULAB_TRY(prepare(batch, &state));
  const size_t in_count = static_cast<size_t>(batch * plan.input_channels * plan.input_h * plan.input_w);
  std::vector<float> host(in_count);
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : host) v = dist(rng);
  GPULAB_ASSIGN_OR_RETURN(auto d_in, cuda::DeviceBuffer::allocate(in_count * 4, "profile input"));
  GPULAB_ASSIGN_OR_RETURN(auto d_out,
                          cuda::DeviceBuffer::allocate(batch * plan.num_classes * 4, "profile logits"));
  GPULAB_CUDA_TRY(cudaMemcpy(d_in.get(), host.data(), in_count * 4, cudaMemcpyHostToDevice));
  std::vector<cudaEvent_t> events(plan.steps.size() + 1, nullptr);
  for (auto& e : events) GPULAB_CUDA_TRY(cudaEventCreate(&e));
  std::vector<std::vector<float>> times(plan.steps.size());
  const std::vector<cudaEvent_t> after(events.begin() + 1, events.end());
  Status status;
  for (int it = 0; it <= iterations && status.is_ok(); ++it) {  // iteration 0 warms up
    if (cudaEventRecord(events[0], own_stream_) != cudaSuccess) break;
    status = run_steps(batch, *state, d_in.as<float>(), d_out.as<float>(), own_stream_, &after);
    if (!status.is_ok() || cudaStreamSynchronize(own_stream_) != cudaSuccess) break;
    if (it == 0) continue;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events[i], events[i + 1]);
      times[i].push_back(ms);
    }
  }
  for (auto& e : events) cudaEventDestroy(e);
  GPULAB_TRY(status);
  GPULAB_CUDA_TRY(cudaGetLastError());
  std::vector<LayerTime> out;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    auto& t = times[i];
    std::sort(t.begin(), t.end());
    out.push_back({plan.steps[i].name, t.empty() ? 0.0 : t[t.size() / 2]});
  }
  return out;
}

}  // namespace gpulab
