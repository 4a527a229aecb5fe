// Engine (weights on the device, shared) and ExecutionContext (per stream: arena, workspace,
// library handles, per-batch cuDNN/cuBLASLt objects and CUDA graphs).
#include "gpulab/engine.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <random>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/kernels.h"
#include "core/log.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"
#include "plan/memory_plan.h"
#include "plan/plan.h"
#include "plan/timing_cache.h"
#include "runtime/conv_step.h"
#include "runtime/runtime.h"
#include "runtime/step_problems.h"
#include "runtime/tactics.h"

namespace gpulab {

namespace {

// cuBLASLt's workspace cap (NVIDIA recommends 32 MiB on Hopper).
constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;
constexpr int64_t kAlignment = 256;

class EngineImpl;

class ContextImpl final : public ExecutionContext {
 public:
  explicit ContextImpl(std::shared_ptr<EngineImpl> engine) : engine_(std::move(engine)) {}
  ~ContextImpl() override;
  Status init();

  Status enqueue(const EnqueueArgs& args, cudaStream_t stream) override;
  Result<Tensor> run(const Tensor& input_nchw, bool use_cuda_graph) override;
  Result<std::vector<LayerTime>> profile(int64_t batch, int iterations) override;

 private:
  struct BatchState {
    std::vector<std::unique_ptr<cuda::CudnnConv>> convs;  // per step; null: direct convolution
    // Chunked steps (ChunkedTactic) at a batch larger than their chunk: the chunk size, with convs
    // prepared at that size and tails at the remainder (null when there is none). 0: one launch.
    std::vector<int64_t> chunks;
    std::vector<std::unique_ptr<cuda::CudnnConv>> tails;
    std::vector<std::unique_ptr<cuda::CublasLtGemm>> gemms;  // per step
    cudaGraphExec_t exec = nullptr;
    const float* graph_input = nullptr;
    float* graph_logits = nullptr;
  };

  Status prepare(int64_t batch, BatchState** out);
  // Queues every step; `step_events` (when not null) gets an event recorded after each step.
  Status run_steps(int64_t batch, BatchState& state, const float* input, float* logits, cudaStream_t stream,
                   const std::vector<cudaEvent_t>* step_events);
  void* value_ptr(int v) const { return static_cast<char*>(arena_.get()) + offsets_[v]; }
  void drop_graphs();

  std::shared_ptr<EngineImpl> engine_;
  cuda::LibraryHandles libs_;
  cuda::DeviceBuffer arena_;
  cuda::DeviceBuffer workspace_;
  cuda::DeviceBuffer run_input_, run_logits_;  // run()'s staging
  std::vector<int64_t> offsets_;
  std::map<int64_t, BatchState> batches_;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t last_stream_ = nullptr;  // the stream of the last enqueue
};

class EngineImpl final : public Engine {
 public:
  static Result<std::shared_ptr<EngineImpl>> create(Plan plan, int device) {
    GPULAB_ASSIGN_OR_RETURN(const PlanTarget target, cuda::current_target(device));
    GPULAB_TRY(check_plan_target(plan.target, target));
    for (const PlanStep& step : plan.steps) {
      if (step.kind != StepKind::kConv) continue;
      if (const Status s = check_conv_tactic(step.tactic); !s.is_ok())
        return Status::unsupported(
            fmt::format("plan: step {}: {} Rebuild the plan with `gpulab build`.", step.name, s.message()));
      const DataType x = plan.values[step.inputs[0]].dtype, y = plan.values[step.output].dtype;
      if (x != y && step.tactic != kDepthwiseTactic)
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

  Status save(const std::string& plan_path) const override { return save_plan(plan_, plan_path); }
  const EngineInfo& info() const override { return info_; }
  Result<std::unique_ptr<ExecutionContext>> create_context() override {
    GPULAB_CUDA_TRY(cudaSetDevice(device_));
    auto ctx = std::make_unique<ContextImpl>(std::static_pointer_cast<EngineImpl>(shared_from_this()));
    GPULAB_TRY(ctx->init());
    return std::unique_ptr<ExecutionContext>(std::move(ctx));
  }

  const Plan& plan() const { return plan_; }
  int device() const { return device_; }
  const void* weight(int index) const { return index < 0 ? nullptr : weight_ptrs_[index]; }
  const MemoryPlan& memory() const { return memory_; }

 private:
  EngineImpl() = default;

  Status upload_weights() {
    size_t total = 0;
    std::vector<size_t> offsets;
    for (const auto& w : plan_.weights) {
      total = (total + kAlignment - 1) / kAlignment * kAlignment;
      offsets.push_back(total);
      total += w.bytes.size();
    }
    GPULAB_ASSIGN_OR_RETURN(weights_,
                            cuda::DeviceBuffer::allocate(std::max<size_t>(total, 1), "plan weights"));
    for (size_t i = 0; i < plan_.weights.size(); ++i) {
      void* p = static_cast<char*>(weights_.get()) + offsets[i];
      weight_ptrs_.push_back(p);
      if (!plan_.weights[i].bytes.empty())
        GPULAB_CUDA_TRY(cudaMemcpy(p, plan_.weights[i].bytes.data(), plan_.weights[i].bytes.size(),
                                   cudaMemcpyHostToDevice));
    }
    const auto requests = value_lifetimes(plan_, plan_.max_batch);
    memory_ = plan_memory(requests, kAlignment);
    return Status::ok();
  }

  void fill_info() {
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

  Plan plan_;
  int device_ = 0;
  cuda::DeviceBuffer weights_;
  std::vector<void*> weight_ptrs_;
  MemoryPlan memory_;
  EngineInfo info_;
};

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
  int64_t need_ws = kGemmWorkspaceBytes;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    if (step.kind == StepKind::kConv) {
      // gpulab's own kernels ("direct", "depthwise", "cutlass:...") run at every batch size, without a
      // cuDNN plan.
      if (conv_kernel_of_tactic(step.tactic) != ConvKernel::kCudnn) continue;
      // A chunked tactic was timed at its chunk size and runs the full chunks; the remainder, or a
      // batch no larger than a chunk, gets a plan of its own size. Any other cuDNN tactic was timed
      // at the plan's max batch.
      const auto chunked = parse_chunked_tactic(step.tactic);
      const std::string_view tactic = chunked ? chunked->inner : std::string_view(step.tactic);
      const int64_t timed_batch = chunked ? chunked->chunk : plan.max_batch;
      const ChunkSplit split = chunked ? split_batch(batch, chunked->chunk) : ChunkSplit{0, batch};
      std::unique_ptr<cuda::CudnnConv> full, rest;
      Status failed;
      if (split.full > 0) {
        auto conv = prepare_cudnn_conv(libs_.cudnn(), conv_problem(plan, step, chunked->chunk), tactic, true);
        if (conv.is_ok())
          full = std::move(conv).value();
        else
          failed = conv.status();
      }
      if (failed.is_ok() && split.tail > 0) {
        auto conv = prepare_cudnn_conv(libs_.cudnn(), conv_problem(plan, step, split.tail), tactic,
                                       split.tail == timed_batch);
        if (conv.is_ok())
          rest = std::move(conv).value();
        else
          failed = conv.status();
      }
      if (!failed.is_ok()) {
        log_info("context: {} at batch {}: {}; using the direct convolution", step.name, batch,
                 failed.message());
        continue;
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
    } else if (step.kind == StepKind::kGemm) {
      GPULAB_ASSIGN_OR_RETURN(
          state.gemms[i],
          cuda::CublasLtGemm::create(libs_.cublaslt(), gemm_problem(plan, step, batch), kGemmWorkspaceBytes));
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

Status ContextImpl::run_steps(int64_t batch, BatchState& state, const float* input, float* logits,
                              cudaStream_t stream, const std::vector<cudaEvent_t>* step_events) {
  const Plan& plan = engine_->plan();
  GPULAB_TRY(libs_.set_stream(stream));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& step = plan.steps[i];
    Status status;
    switch (step.kind) {
      case StepKind::kInput: {
        const PlanValue& y = plan.values[step.output];
        const SpaceToDepth& sd = step.space_to_depth;
        if (sd == SpaceToDepth{}) {
          kernels::NchwToNhwcDesc d{batch, plan.input_channels, plan.input_h, plan.input_w, y.c, y.dtype};
          status = kernels::launch_nchw_to_nhwc(d, input, value_ptr(step.output), stream);
        } else {
          kernels::SpaceToDepthDesc d{batch,      plan.input_channels, plan.input_h, plan.input_w, sd.block,
                                      sd.pad_top, sd.pad_left,         y.h,          y.w,          y.c,
                                      y.dtype};
          status = kernels::launch_nchw_to_space_to_depth(d, input, value_ptr(step.output), stream);
        }
        break;
      }
      case StepKind::kStem:
        status = kernels::launch_fused_stem(fused_stem_desc(plan, step, batch), input,
                                            engine_->weight(step.weight), engine_->weight(step.bias),
                                            value_ptr(step.output), stream);
        break;
      case StepKind::kConv: {
        const cuda::ConvPointers ptrs{
            value_ptr(step.inputs[0]), engine_->weight(step.weight), engine_->weight(step.bias),
            step.conv.has_residual ? value_ptr(step.inputs[1]) : nullptr, value_ptr(step.output)};
        const cuda::CudnnConv* conv = state.convs[i].get();
        const cuda::ConvProblem problem = conv_problem(plan, step, batch);
        status = state.chunks[i] > 0
                     ? launch_chunked_conv_step(problem, state.chunks[i], *conv, state.tails[i].get(),
                                                libs_.cudnn(), ptrs, workspace_.get(), stream)
                     : launch_conv_step(problem, conv_kernel_for(step.tactic, conv), step.tactic, conv,
                                        libs_.cudnn(), ptrs, workspace_.get(), stream);
        break;
      }
      case StepKind::kGemm:
        status =
            state.gemms[i]->launch(libs_.cublaslt(), value_ptr(step.inputs[0]), engine_->weight(step.weight),
                                   engine_->weight(step.bias), value_ptr(step.output), workspace_.get(),
                                   kGemmWorkspaceBytes, stream);
        break;
      case StepKind::kMaxPool:
      case StepKind::kAveragePool: {
        const PlanValue& x = plan.values[step.inputs[0]];
        const PlanValue& y = plan.values[step.output];
        kernels::PoolDesc d;
        d.kind = step.kind == StepKind::kMaxPool ? kernels::PoolKind::kMax : kernels::PoolKind::kAverage;
        d.n = batch;
        d.h = x.h;
        d.w = x.w;
        d.c = x.c;
        d.kernel = step.pool.kernel;
        d.stride = step.pool.stride;
        d.dilation = step.pool.dilation;
        d.pads = step.pool.pads;
        d.ceil_mode = step.pool.ceil_mode;
        d.count_include_pad = step.pool.count_include_pad;
        d.dtype = x.dtype;
        d = kernels::with_output_size(d);
        if (d.out_h != y.h || d.out_w != y.w) {
          status = Status::internal(fmt::format("{}: pooled size {}x{} differs from the plan's {}x{}",
                                                step.name, d.out_h, d.out_w, y.h, y.w));
          break;
        }
        status = kernels::launch_pool(d, value_ptr(step.inputs[0]), value_ptr(step.output), stream);
        break;
      }
      case StepKind::kGlobalAveragePool: {
        const PlanValue& x = plan.values[step.inputs[0]];
        kernels::GlobalAvgPoolDesc d{batch, x.h, x.w, x.c, x.dtype};
        status =
            kernels::launch_global_avg_pool(d, value_ptr(step.inputs[0]), value_ptr(step.output), stream);
        break;
      }
      case StepKind::kAdd:
      case StepKind::kMul: {
        const PlanValue& y = plan.values[step.output];
        kernels::BinaryDesc d;
        d.op = step.kind == StepKind::kAdd ? kernels::BinaryOp::kAdd : kernels::BinaryOp::kMul;
        d.n = batch;
        d.hw = y.h * y.w;
        d.c = y.c;
        d.b_broadcast = broadcasts_channels(plan, step) ? kernels::Broadcast::kPerImageChannel
                                                        : kernels::Broadcast::kNone;
        d.activation = step.activation;
        d.clip_min = step.clip_min;
        d.clip_max = step.clip_max;
        d.dtype = y.dtype;
        status = kernels::launch_binary(d, value_ptr(step.inputs[0]), value_ptr(step.inputs[1]),
                                        value_ptr(step.output), stream);
        break;
      }
      case StepKind::kActivation:
      case StepKind::kPointwise: {
        const PlanValue& y = plan.values[step.output];
        kernels::UnaryDesc d;
        if (step.kind == StepKind::kActivation) {
          d.op = step.activation == Activation::kClip ? kernels::UnaryOp::kClip : kernels::UnaryOp::kRelu;
        } else {
          d.op = step.pointwise == PointwiseFn::kSigmoid       ? kernels::UnaryOp::kSigmoid
                 : step.pointwise == PointwiseFn::kHardSigmoid ? kernels::UnaryOp::kHardSigmoid
                                                               : kernels::UnaryOp::kHardSwish;
        }
        d.count = batch * y.h * y.w * y.c;
        d.alpha = step.alpha;
        d.beta = step.beta;
        d.clip_min = step.clip_min;
        d.clip_max = step.clip_max;
        d.dtype = y.dtype;
        status = kernels::launch_unary(d, value_ptr(step.inputs[0]), value_ptr(step.output), stream);
        break;
      }
      case StepKind::kConcat: {
        // One strided copy per input (its valid channels) into its slice of each output pixel's
        // channels.
        const PlanValue& y = plan.values[step.output];
        const size_t element = dtype_size(y.dtype);
        size_t first = 0;
        for (int in : step.inputs) {
          const PlanValue& x = plan.values[in];
          const size_t row = static_cast<size_t>(x.c_valid) * element;  // without x's channel padding
          const cudaError_t copied = cudaMemcpy2DAsync(
              static_cast<char*>(value_ptr(step.output)) + first, static_cast<size_t>(y.c) * element,
              value_ptr(in), static_cast<size_t>(x.c) * element, row, static_cast<size_t>(batch * y.h * y.w),
              cudaMemcpyDeviceToDevice, stream);
          if (copied != cudaSuccess) {
            status = Status::device_error(
                fmt::format("{}: cudaMemcpy2DAsync: {}", step.name, cudaGetErrorString(copied)));
            break;
          }
          first += row;
        }
        break;
      }
      case StepKind::kCast: {
        const PlanValue& x = plan.values[step.inputs[0]];
        const PlanValue& y = plan.values[step.output];
        const int64_t per_image = x.h * x.w * x.c;
        if (y.dtype == DataType::kFloat32) {  // NHWC -> NCHW with h = w = 1 is a plain cast
          kernels::NhwcToNchwF32Desc d{batch, 1, 1, per_image, per_image, x.dtype};
          status =
              kernels::launch_nhwc_to_nchw_f32(d, value_ptr(step.inputs[0]), value_ptr(step.output), stream);
        } else if (x.dtype == DataType::kFloat32) {
          // [batch, 1, per_image, 1] NCHW is [batch, per_image, 1, 1] NHWC: an elementwise cast
          // through the staged conversion kernel (one channel, vector loads).
          kernels::NchwToNhwcDesc d{batch, 1, per_image, 1, 1, y.dtype};
          status = kernels::launch_nchw_to_nhwc(d, value_ptr(step.inputs[0]), value_ptr(step.output), stream);
        } else {
          status = Status::internal(
              fmt::format("{}: cast {} -> {}", step.name, dtype_name(x.dtype), dtype_name(y.dtype)));
        }
        break;
      }
      case StepKind::kOutput: {
        const PlanValue& x = plan.values[step.inputs[0]];
        kernels::NhwcToNchwF32Desc d{batch, 1, 1, plan.num_classes, x.c, x.dtype};
        status = kernels::launch_nhwc_to_nchw_f32(d, value_ptr(step.inputs[0]), logits, stream);
        if (status.is_ok() && step.softmax)  // in place, over the float32 logits
          status =
              kernels::launch_softmax(kernels::SoftmaxDesc{batch, plan.num_classes}, logits, logits, stream);
        break;
      }
    }
    if (!status.is_ok()) return status.with_context(fmt::format("step {} '{}'", i, step.name));
    if (step_events) GPULAB_CUDA_TRY(cudaEventRecord((*step_events)[i], stream));
  }
  return Status::ok();
}

Status ContextImpl::enqueue(const EnqueueArgs& args, cudaStream_t stream) {
  if (!args.input_nchw || !args.logits)
    return Status::invalid_argument("enqueue: input and logits must be device pointers, got null.");
  GPULAB_CUDA_TRY(cudaSetDevice(engine_->device()));
  BatchState* state = nullptr;
  GPULAB_TRY(prepare(args.batch, &state));
  last_stream_ = stream;
  // The legacy default stream cannot be captured; run eagerly there.
  if (!args.use_cuda_graph || stream == nullptr)
    return run_steps(args.batch, *state, args.input_nchw, args.logits, stream, nullptr);
  if (!state->exec || state->graph_input != args.input_nchw || state->graph_logits != args.logits) {
    GPULAB_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status captured = run_steps(args.batch, *state, args.input_nchw, args.logits, stream, nullptr);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!captured.is_ok()) {
      if (graph) cudaGraphDestroy(graph);
      return captured.with_context("capturing a CUDA graph");
    }
    GPULAB_CUDA_TRY(end);
    if (state->exec) cudaGraphExecDestroy(state->exec);
    state->exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&state->exec, graph, 0);
    cudaGraphDestroy(graph);
    GPULAB_CUDA_TRY(inst);
    state->graph_input = args.input_nchw;
    state->graph_logits = args.logits;
  }
  GPULAB_CUDA_TRY(cudaGraphLaunch(state->exec, stream));
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

}  // namespace

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
  return std::shared_ptr<Engine>(std::move(engine));
}

bool cuda_device_available(std::string* reason) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (reason) *reason = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  return true;
}

Result<std::shared_ptr<Engine>> build_or_load_engine(const std::string& plan_path,
                                                     const std::string& model_path,
                                                     const BuildOptions& options) {
  if (!plan_path.empty()) return Engine::load(plan_path, options.device);
  if (model_path.empty()) return Status::invalid_argument("engine: give a plan file or a model file.");
  return Engine::build_from_onnx(model_path, options);
}

}  // namespace gpulab
