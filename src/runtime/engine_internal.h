// The classes behind include/gpulab/engine.h, shared by the runtime's files (not installed):
//   engine.cc       EngineImpl: plan checks, weights on the device, EngineInfo; the build and load
//                   entry points;
//   context.cc      ContextImpl's set-up: arena, workspace, per-batch cuDNN/cuBLASLt objects;
//   context_run.cc  ContextImpl's run loop: the steps in order (step_launch.h), CUDA graphs,
//                   run() and profile().
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_q8_conv.h"
#include "backends/cuda/device.h"
#include "gpulab/engine.h"
#include "plan/memory_plan.h"
#include "plan/plan.h"
#include "runtime/view_steps.h"

namespace gpulab {

// cuBLASLt's workspace cap (NVIDIA recommends 32 MiB on Hopper).
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;
// Alignment of each weight in the weight buffer and of each value in the arena.
inline constexpr int64_t kDeviceAlignment = 256;

class EngineImpl final : public Engine {
 public:
  // Checks that the plan fits this GPU and this build (its target, its conv tactics), uploads the
  // weights and plans the arena.
  static Result<std::shared_ptr<EngineImpl>> create(Plan plan, int device);

  Status save(const std::string& plan_path) const override { return save_plan(plan_, plan_path); }
  const EngineInfo& info() const override { return info_; }
  Result<std::unique_ptr<ExecutionContext>> create_context() override;

  const Plan& plan() const { return plan_; }
  int device() const { return device_; }
  const void* weight(int index) const { return index < 0 ? nullptr : weight_ptrs_[index]; }
  const std::vector<void*>& weight_ptrs() const { return weight_ptrs_; }
  const MemoryPlan& memory() const { return memory_; }
  void set_tactic_search_times(double build_s, double timing_s) {
    info_.tactic_build_s = build_s;
    info_.tactic_timing_s = timing_s;
  }

 private:
  EngineImpl() = default;
  Status upload_weights();
  void fill_info();

  Plan plan_;
  int device_ = 0;
  cuda::DeviceBuffer weights_;
  std::vector<void*> weight_ptrs_;
  MemoryPlan memory_;
  EngineInfo info_;
};

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
    // INT8/FP8 conv steps of a cudnn-q8 tactic; null: the direct 8-bit kernel runs them.
    std::vector<std::unique_ptr<cuda::CudnnQ8Conv>> q8convs;
    // kLinear, kMatMul and kAttention steps (view_steps.h): the library objects and how to launch them.
    std::vector<std::unique_ptr<cuda::CublasLtMatmul>> matmuls;
    std::vector<MatmulLaunch> matmul_launches;
    std::vector<std::unique_ptr<cuda::CudnnSdpa>> sdpas;  // null: gpulab's attention kernel
    std::vector<SdpaLaunch> sdpa_launches;
    cudaGraphExec_t exec = nullptr;
    const float* graph_input = nullptr;
    float* graph_logits = nullptr;
  };

  // The per-batch objects of `batch`, built on first use (context.cc).
  Status prepare(int64_t batch, BatchState** out);
  // The cuDNN plans of conv step `i` at `batch` into `state`; raises `need_ws` to their workspace.
  void prepare_conv(size_t i, int64_t batch, BatchState& state, int64_t& need_ws);
  // The cuDNN plan of an INT8/FP8 conv step whose tactic is cudnn-q8, at `batch`; raises `need_ws`.
  void prepare_q8_conv(size_t i, int64_t batch, BatchState& state, int64_t& need_ws);
  // The cuBLASLt matmul of a kLinear/kMatMul step, or the cuDNN SDPA of a kAttention step (when
  // cuDNN takes it), at `batch` into `state`; raises `need_ws`.
  Status prepare_view_step(size_t i, int64_t batch, BatchState& state, int64_t& need_ws);
  // Queues every step; `step_events` (when not null) gets an event recorded after each step.
  Status run_steps(int64_t batch, BatchState& state, const float* input, float* logits, cudaStream_t stream,
                   const std::vector<cudaEvent_t>* step_events);
  // Queues step `i` (one of step_launch.h's functions, by kind).
  Status launch_step(size_t i, int64_t batch, const BatchState& state, const float* input, float* logits,
                     cudaStream_t stream);
  // Captures the steps into state's CUDA graph when it is missing or was captured for other
  // pointers.
  Status capture_graph(const EnqueueArgs& args, BatchState& state, cudaStream_t stream);
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

}  // namespace gpulab
