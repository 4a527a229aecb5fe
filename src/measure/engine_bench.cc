// The GPU half of `gpulab bench` and `gpulab sweep` (see engine_bench.h). Built into the measure
// library only with CUDA (src/measure/CMakeLists.txt).
//
// Each iteration on a stream records four events: [e0] H2D copy [e1] engine enqueue [e2] D2H copy
// [e3]; H2D = e0..e1, GPU compute = e1..e2, D2H = e2..e3. Without --include-transfers the copies
// are skipped (the input stays on the device from one upload at set-up). Each stream keeps
// measure::kMaxInFlightPerStream sets of events, used in turn, because the bench loop queues the
// next iteration before waiting for the previous one. Input and output buffers are shared by the
// iterations of one stream: the stream serializes them.
#include "measure/engine_bench.h"
#include "core/elapsed.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <fmt/format.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/kernels.h"
#include "core/log.h"
#include "gpulab/engine.h"

namespace gpulab::measure {
namespace {

constexpr int kEventsPerIteration = 4;

// One stream's context, buffers and events. Frees what it holds; errors while freeing are
// ignored (nothing useful can be done with them at tear-down).
struct StreamState {
  std::unique_ptr<ExecutionContext> context;
  cudaStream_t stream = nullptr;
  float* d_input = nullptr;
  float* d_logits = nullptr;
  float* h_input = nullptr;   // pinned
  float* h_logits = nullptr;  // pinned
  std::array<std::array<cudaEvent_t, kEventsPerIteration>, kMaxInFlightPerStream> events{};
  std::deque<int> in_flight;  // event-set slots, oldest first
  int next_slot = 0;

  StreamState() = default;
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;
  ~StreamState() {
    if (stream) cudaStreamSynchronize(stream);
    for (auto& set : events) {
      for (cudaEvent_t e : set) {
        if (e) cudaEventDestroy(e);
      }
    }
    if (d_input) cudaFree(d_input);
    if (d_logits) cudaFree(d_logits);
    if (h_input) cudaFreeHost(h_input);
    if (h_logits) cudaFreeHost(h_logits);
    context.reset();
    if (stream) cudaStreamDestroy(stream);
  }
};

// The bench input (fill_bench_input's sequence) written on the device in interleaved lanes
// (bench_input_lanes) instead of on one host core through a pageable copy: an H100 sweep's points
// near 40,000 images took 18-26 s each that way (a 3-4 s window and build included) and 3-8 s since
// (bench/results/2026-12-06-9553f1d and -ef9bcb0).
Status write_bench_input(float* d_input, int64_t elems, cudaStream_t stream) {
  constexpr int64_t kLanes = int64_t{1} << 17;
  const BenchInputLanes lanes = bench_input_lanes(std::min(elems, kLanes));
  if (lanes.starts.empty()) return Status::ok();
  GPULAB_ASSIGN_OR_RETURN(
      cuda::DeviceBuffer starts,
      cuda::DeviceBuffer::allocate(lanes.starts.size() * sizeof(uint32_t), "bench input lanes"));
  GPULAB_CUDA_TRY(cudaMemcpyAsync(starts.get(), lanes.starts.data(), lanes.starts.size() * sizeof(uint32_t),
                                  cudaMemcpyHostToDevice, stream));
  GPULAB_TRY(kernels::launch_lcg_lanes(d_input, elems, starts.as<uint32_t>(),
                                       static_cast<int64_t>(lanes.starts.size()), lanes.mul, lanes.add,
                                       stream));
  // `starts` is freed on return: the kernel must be done with it.
  GPULAB_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::ok();
}

// Pinned host copies of the input and logits only when iterations copy them (`transfers`).
Status setup_stream(StreamState& s, Engine& engine, int64_t input_elems, int64_t logit_elems,
                    bool transfers) {
  GPULAB_ASSIGN_OR_RETURN(s.context, engine.create_context());
  GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  const auto in_bytes = static_cast<size_t>(input_elems) * sizeof(float);
  const auto out_bytes = static_cast<size_t>(logit_elems) * sizeof(float);
  GPULAB_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&s.d_input), in_bytes));
  GPULAB_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&s.d_logits), out_bytes));
  // A fixed pseudo-random input in [-1, 1): real-looking data, the same every run.
  GPULAB_TRY(write_bench_input(s.d_input, input_elems, s.stream));
  if (transfers) {
    GPULAB_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&s.h_input), in_bytes));
    GPULAB_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&s.h_logits), out_bytes));
    fill_bench_input(std::span<float>(s.h_input, static_cast<size_t>(input_elems)));
  }
  for (auto& set : s.events) {
    for (cudaEvent_t& e : set) GPULAB_CUDA_TRY(cudaEventCreate(&e));
  }
  return Status::ok();
}

std::optional<int> cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return std::nullopt;
  return v;
}
std::optional<int> cuda_driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return std::nullopt;
  return v;
}

// Times `iterations` runs of `body` on `stream` between two events, after `warmup` runs.
template <typename Body>
Result<double> time_ms(cudaStream_t stream, int warmup, int iterations, Body body) {
  for (int i = 0; i < warmup; ++i) GPULAB_TRY(body());
  cudaEvent_t start = nullptr, stop = nullptr;
  GPULAB_CUDA_TRY(cudaEventCreate(&start));
  std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> start_guard(start, cudaEventDestroy);
  GPULAB_CUDA_TRY(cudaEventCreate(&stop));
  std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> stop_guard(stop, cudaEventDestroy);
  GPULAB_CUDA_TRY(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i) GPULAB_TRY(body());
  GPULAB_CUDA_TRY(cudaEventRecord(stop, stream));
  GPULAB_CUDA_TRY(cudaEventSynchronize(stop));
  float ms = 0;
  GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
  return static_cast<double>(ms);
}

struct DeviceMemory {
  void* ptr = nullptr;
  ~DeviceMemory() {
    if (ptr) cudaFree(ptr);
  }
};

// Device-to-device copy of 512 MiB: bytes read + written per second.
Result<double> measure_copy_gb_s(cudaStream_t stream) {
  constexpr size_t kBytes = size_t{512} << 20;
  DeviceMemory a, b;
  GPULAB_CUDA_TRY(cudaMalloc(&a.ptr, kBytes));
  GPULAB_CUDA_TRY(cudaMalloc(&b.ptr, kBytes));
  GPULAB_CUDA_TRY(cudaMemsetAsync(a.ptr, 0x3c, kBytes, stream));
  constexpr int kIterations = 20;
  auto copy = [&]() -> Status {
    GPULAB_CUDA_TRY(cudaMemcpyAsync(b.ptr, a.ptr, kBytes, cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  };
  GPULAB_ASSIGN_OR_RETURN(const double ms, time_ms(stream, 2, kIterations, copy));
  return 2.0 * static_cast<double>(kBytes) * kIterations / (ms * 1e-3) / 1e9;
}

// Dense square GEMM (8192^3, the size of the host README's ceilings) through cuBLASLt with the
// precision's element and compute types: FP32 accumulation for the float types; INT8 operands with
// int32 sums and output, FP8 (E4M3) operands with FP32 accumulation and a BF16 output, both in the
// "TN" form cuBLASLt's 8-bit kernels require (A transposed). Before 2026-12-06 the 8-bit
// precisions fell through to the FP32 GEMM, and an INT8 profile's roofline read 51 TFLOP/s on an
// H200 (bench/results/2026-12-06-5b3cf93).
Result<double> measure_gemm_tflops(cudaStream_t stream, const std::string& precision) {
  constexpr int64_t kN = 8192;
  cudaDataType_t ab_type = CUDA_R_32F, cd_type = CUDA_R_32F, scale_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  size_t ab_elem = 4, cd_elem = 4;
  bool transpose_a = false;
  if (precision == "tf32") {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else if (precision == "fp16") {
    ab_type = cd_type = CUDA_R_16F;
    ab_elem = cd_elem = 2;
  } else if (precision == "bf16") {
    ab_type = cd_type = CUDA_R_16BF;
    ab_elem = cd_elem = 2;
  } else if (precision == "int8") {
    ab_type = CUDA_R_8I;
    cd_type = scale_type = CUDA_R_32I;
    compute = CUBLAS_COMPUTE_32I;
    ab_elem = 1;
    transpose_a = true;
  } else if (precision == "fp8") {
    ab_type = CUDA_R_8F_E4M3;
    cd_type = CUDA_R_16BF;
    ab_elem = 1;
    cd_elem = 2;
    transpose_a = true;
  }
  const size_t ab_bytes = static_cast<size_t>(kN * kN) * ab_elem;
  const size_t cd_bytes = static_cast<size_t>(kN * kN) * cd_elem;
  constexpr size_t kWorkspaceBytes = size_t{64} << 20;
  DeviceMemory a, b, c, workspace;
  GPULAB_CUDA_TRY(cudaMalloc(&a.ptr, ab_bytes));
  GPULAB_CUDA_TRY(cudaMalloc(&b.ptr, ab_bytes));
  GPULAB_CUDA_TRY(cudaMalloc(&c.ptr, cd_bytes));
  GPULAB_CUDA_TRY(cudaMalloc(&workspace.ptr, kWorkspaceBytes));
  // Non-zero operands (0x3c bytes: about 1.05 in FP16, 0.0115 in FP32/BF16): all-zero data
  // draws less power and would overstate the rate.
  GPULAB_CUDA_TRY(cudaMemsetAsync(a.ptr, 0x3c, ab_bytes, stream));
  GPULAB_CUDA_TRY(cudaMemsetAsync(b.ptr, 0x3c, ab_bytes, stream));

  cublasLtHandle_t lt = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtCreate(&lt));
  std::unique_ptr<cublasLtContext, decltype(&cublasLtDestroy)> lt_guard(lt, cublasLtDestroy);
  cublasLtMatmulDesc_t op = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtMatmulDescCreate(&op, compute, scale_type));
  std::unique_ptr<cublasLtMatmulDescOpaque_t, decltype(&cublasLtMatmulDescDestroy)> op_guard(
      op, cublasLtMatmulDescDestroy);
  if (transpose_a) {
    const cublasOperation_t t = CUBLAS_OP_T;
    GPULAB_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  }
  cublasLtMatrixLayout_t layout = nullptr, out_layout = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&layout, ab_type, kN, kN, kN));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, decltype(&cublasLtMatrixLayoutDestroy)> layout_guard(
      layout, cublasLtMatrixLayoutDestroy);
  GPULAB_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&out_layout, cd_type, kN, kN, kN));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, decltype(&cublasLtMatrixLayoutDestroy)> out_layout_guard(
      out_layout, cublasLtMatrixLayoutDestroy);
  cublasLtMatmulPreference_t pref = nullptr;
  GPULAB_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> pref_guard(
      pref, cublasLtMatmulPreferenceDestroy);
  GPULAB_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  GPULAB_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt, op, layout, layout, out_layout, out_layout, pref, 1,
                                                   &heuristic, &found));
  if (found == 0) {
    return Status::unsupported(fmt::format(
        "bench --ceilings: cuBLASLt has no {} GEMM algorithm for {}^3 on this GPU.", precision, kN));
  }
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const int32_t alpha_i = 1, beta_i = 0;
  const void* alpha = scale_type == CUDA_R_32I ? static_cast<const void*>(&alpha_i) : &alpha_f;
  const void* beta = scale_type == CUDA_R_32I ? static_cast<const void*>(&beta_i) : &beta_f;
  constexpr int kIterations = 10;
  auto gemm = [&]() -> Status {
    GPULAB_CUBLAS_TRY(cublasLtMatmul(lt, op, alpha, a.ptr, layout, b.ptr, layout, beta, c.ptr, out_layout,
                                     c.ptr, out_layout, &heuristic.algo, workspace.ptr, kWorkspaceBytes,
                                     stream));
    return Status::ok();
  };
  GPULAB_ASSIGN_OR_RETURN(const double ms, time_ms(stream, 2, kIterations, gemm));
  return 2.0 * static_cast<double>(kN * kN * kN) * kIterations / (ms * 1e-3) / 1e12;
}

}  // namespace

Status use_cuda_device(int device, std::string_view command) {
  std::string reason;
  if (!cuda_device_available(&reason)) {
    return Status::unavailable(
        fmt::format("{}: no usable GPU ({}). Run `gpulab doctor` to see why; `gpulab classify --device "
                    "cpu` runs on the CPU.",
                    command, reason));
  }
  int count = 0;
  GPULAB_CUDA_TRY(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return Status::invalid_argument(
        fmt::format("--device: {} but this machine has {} CUDA device{} (0..{}). Pick one that nvidia-smi "
                    "lists.",
                    device, count, count == 1 ? "" : "s", count - 1));
  }
  GPULAB_CUDA_TRY(cudaSetDevice(device));
  return Status::ok();
}

Result<Ceilings> measure_ceilings(int device, const std::string& precision) {
  GPULAB_TRY(use_cuda_device(device, "bench"));
  cudaStream_t stream = nullptr;
  GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> guard(stream, cudaStreamDestroy);
  Ceilings c;
  GPULAB_ASSIGN_OR_RETURN(c.memory_gb_s, measure_copy_gb_s(stream));
  GPULAB_ASSIGN_OR_RETURN(c.tflops, measure_gemm_tflops(stream, precision));
  c.source = fmt::format("measured: device copy 512 MiB, cuBLASLt {} GEMM 8192^3", precision);
  return c;
}

// ---- EngineStreams --------------------------------------------------------------------------------

struct EngineStreams::Stream : StreamState {};

Result<std::unique_ptr<EngineStreams>> EngineStreams::create(Engine& engine, int streams, int64_t batch,
                                                             bool transfers) {
  const EngineInfo& info = engine.info();
  if (batch > info.max_batch) {
    return Status::invalid_argument(
        fmt::format("--batch: {} is above the plan's max batch {}. Rebuild with `gpulab build --max-batch "
                    "{}` or lower --batch.",
                    batch, info.max_batch, batch));
  }
  if (info.input_shape.rank() != 4) {
    return Status::internal(
        fmt::format("bench: the engine's input has rank {}, expected NCHW.", info.input_shape.rank()));
  }
  std::unique_ptr<EngineStreams> out(new EngineStreams());
  const int64_t per_image = info.input_shape[1] * info.input_shape[2] * info.input_shape[3];
  out->per_image_elems_ = per_image;
  out->classes_ = info.num_classes;
  out->batch_ = batch;
  out->transfers_ = transfers;
  for (int i = 0; i < streams; ++i) {
    out->streams_.push_back(std::make_unique<Stream>());
    GPULAB_TRY(
        setup_stream(*out->streams_.back(), engine, batch * per_image, batch * info.num_classes, transfers)
            .with_context(fmt::format("bench: setting up stream {}", i)));
  }
  return out;
}

EngineStreams::~EngineStreams() = default;

BenchHooks EngineStreams::hooks(const BenchOptions& options) {
  BenchHooks hooks;
  if (options.batch > batch_) {
    hooks.enqueue = [this, options](int) {
      return Status::internal(
          fmt::format("bench: batch {} above the {} the streams were made for", options.batch, batch_));
    };
    return hooks;
  }
  const int64_t input_elems = per_image_elems_ * options.batch;
  const int64_t logit_elems = classes_ * options.batch;
  hooks.enqueue = [this, options, input_elems, logit_elems](int index) -> Status {
    Stream& s = *streams_[static_cast<size_t>(index)];
    const int slot = s.next_slot;
    s.next_slot = (s.next_slot + 1) % kMaxInFlightPerStream;
    auto& ev = s.events[static_cast<size_t>(slot)];
    GPULAB_CUDA_TRY(cudaEventRecord(ev[0], s.stream));
    if (options.include_transfers) {
      GPULAB_CUDA_TRY(cudaMemcpyAsync(s.d_input, s.h_input, static_cast<size_t>(input_elems) * sizeof(float),
                                      cudaMemcpyHostToDevice, s.stream));
    }
    GPULAB_CUDA_TRY(cudaEventRecord(ev[1], s.stream));
    GPULAB_TRY(s.context->enqueue({.input_nchw = s.d_input,
                                   .batch = options.batch,
                                   .logits = s.d_logits,
                                   .use_cuda_graph = options.cuda_graph},
                                  s.stream));
    GPULAB_CUDA_TRY(cudaEventRecord(ev[2], s.stream));
    if (options.include_transfers) {
      GPULAB_CUDA_TRY(cudaMemcpyAsync(s.h_logits, s.d_logits,
                                      static_cast<size_t>(logit_elems) * sizeof(float),
                                      cudaMemcpyDeviceToHost, s.stream));
    }
    GPULAB_CUDA_TRY(cudaEventRecord(ev[3], s.stream));
    s.in_flight.push_back(slot);
    return Status::ok();
  };
  hooks.wait = [this](int index) -> Result<DeviceTimes> {
    Stream& s = *streams_[static_cast<size_t>(index)];
    if (s.in_flight.empty()) return Status::internal("bench: wait without an outstanding iteration");
    const auto& ev = s.events[static_cast<size_t>(s.in_flight.front())];
    s.in_flight.pop_front();
    GPULAB_CUDA_TRY(cudaEventSynchronize(ev[3]));
    float h2d = 0, compute = 0, d2h = 0;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&h2d, ev[0], ev[1]));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&compute, ev[1], ev[2]));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&d2h, ev[2], ev[3]));
    return DeviceTimes{.h2d_ms = h2d, .compute_ms = compute, .d2h_ms = d2h};
  };
  return hooks;
}

Result<BenchOutput> EngineStreams::first_output(int64_t batch) {
  Stream& s = *streams_.front();
  GPULAB_CUDA_TRY(cudaStreamSynchronize(s.stream));
  BenchOutput out{.batch = batch, .classes = classes_};
  out.logits.resize(static_cast<size_t>(batch * classes_));
  GPULAB_CUDA_TRY(
      cudaMemcpy(out.logits.data(), s.d_logits, out.logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

Result<std::vector<LayerTime>> EngineStreams::profile(int64_t batch, int iterations) {
  return streams_.front()->context->profile(batch, iterations);
}

void fill_cuda_environment(const EngineInfo& info, BenchEnvironment& env) {
  env.gpu_name = info.gpu_name;
  env.compute_capability = info.compute_capability;
  env.cuda_runtime_version = cuda_runtime_version();
  env.cuda_driver_version = cuda_driver_version();
  env.cudnn_version = static_cast<int>(cudnnGetVersion());
  env.cublas_version = static_cast<int>(cublasLtGetVersion());
}

// ---- gpulab bench --------------------------------------------------------------------------------

namespace {

// The engine of the run: loaded from the plan file, or built from the model for the bench's
// batch; `plan_seconds` is how long that took.
Result<std::shared_ptr<Engine>> load_or_build_engine(const BenchOptions& options,
                                                     const EngineBenchRequest& request,
                                                     double& plan_seconds) {
  std::shared_ptr<Engine> engine;
  const auto plan_start = std::chrono::steady_clock::now();
  if (!request.plan_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(engine, Engine::load(request.plan_path, options.device));
  } else {
    GPULAB_ASSIGN_OR_RETURN(const Precision precision, parse_precision(request.precision));
    BuildOptions build = request.build;
    build.precision = precision;
    build.max_batch = options.batch;
    build.device = options.device;
    GPULAB_ASSIGN_OR_RETURN(engine, Engine::build_from_onnx(request.model_path, build));
  }
  plan_seconds = seconds_since(plan_start);
  return engine;
}

// Per-layer times (ExecutionContext::profile) joined with the plan's layer facts.
Result<std::vector<LayerProfileRow>> profile_layers(EngineStreams& streams, const BenchOptions& options,
                                                    const EngineInfo& info,
                                                    const std::optional<Ceilings>& ceilings) {
  GPULAB_ASSIGN_OR_RETURN(const std::vector<LayerTime> times,
                          streams.profile(options.batch, options.profile_iterations));
  std::vector<LayerTiming> layers;
  for (const LayerTime& t : times) {
    LayerTiming l{.name = t.name, .gpu_ms = t.gpu_ms};
    for (const LayerInfo& li : info.layers) {
      if (li.name != t.name) continue;
      l.kind = li.kind;
      l.tactic = li.tactic;
      l.precision = std::string(precision_name(li.precision));
      l.flops = li.flops_per_image * static_cast<double>(options.batch);
      l.bytes = static_cast<double>(li.bytes_per_image * options.batch + li.param_bytes);
      break;
    }
    layers.push_back(std::move(l));
  }
  return make_profile(layers, ceilings);
}

}  // namespace

Result<BenchResult> run_engine_bench(const BenchOptions& options, const EngineBenchRequest& request) {
  GPULAB_TRY(validate(options));
  GPULAB_TRY(use_cuda_device(options.device, "bench"));
  double plan_seconds = 0;
  GPULAB_ASSIGN_OR_RETURN(const std::shared_ptr<Engine> engine,
                          load_or_build_engine(options, request, plan_seconds));
  const EngineInfo& info = engine->info();
  GPULAB_ASSIGN_OR_RETURN(auto streams, EngineStreams::create(*engine, options.streams, options.batch,
                                                              options.include_transfers));

  std::optional<GpuState> start_state, end_state;
  if (request.read_gpu_state) start_state = request.read_gpu_state(options.device);
  GPULAB_ASSIGN_OR_RETURN(BenchResult result, run_bench_loop(options, streams->hooks(options)));
  if (!options.output_path.empty()) {
    GPULAB_ASSIGN_OR_RETURN(result.output, streams->first_output(options.batch));
  }
  result.plan_source = request.plan_path.empty() ? "build" : "load";
  result.plan_seconds = plan_seconds;
  if (request.read_gpu_state) end_state = request.read_gpu_state(options.device);

  result.precision = std::string(precision_name(info.precision));
  fill_cuda_environment(info, result.environment);
  result.environment.start = start_state;
  result.environment.end = end_state;
  if (request.measure_ceilings) {
    // A ceiling that cannot be measured (no cuBLASLt algorithm for the precision on this GPU) leaves
    // the profile without its roofline rather than failing the run.
    auto ceilings = measure_ceilings(options.device, result.precision);
    if (ceilings.is_ok()) {
      result.ceilings = std::move(ceilings).value();
    } else {
      (void)cudaGetLastError();
      log_warning("bench: no roofline: {}", ceilings.status().message());
    }
  }
  if (options.profile) {
    GPULAB_ASSIGN_OR_RETURN(result.profile, profile_layers(*streams, options, info, result.ceilings));
  }
  return result;
}

// ---- gpulab bench --gpus --------------------------------------------------------------------------

namespace {

// One GPU's engine and streams, made and destroyed with that GPU current.
struct GpuEngine {
  GpuPlacement place;
  std::shared_ptr<Engine> engine;
  std::unique_ptr<EngineStreams> streams;
  ~GpuEngine() {
    if (cudaSetDevice(place.device) == cudaSuccess) {
      streams.reset();
      engine.reset();
    }
  }
};

Status prepare_gpu(GpuEngine& g, const BenchOptions& options, const EngineBenchRequest& request) {
  GPULAB_TRY(use_cuda_device(g.place.device, "bench --gpus"));
  BenchOptions on_gpu = options;
  on_gpu.device = g.place.device;
  double plan_seconds = 0;
  GPULAB_ASSIGN_OR_RETURN(g.engine, load_or_build_engine(on_gpu, request, plan_seconds));
  GPULAB_ASSIGN_OR_RETURN(
      g.streams, EngineStreams::create(*g.engine, options.streams, options.batch, options.include_transfers));
  return Status::ok();
}

}  // namespace

Result<MultiBenchResult> run_engine_bench_multi(const MultiBenchOptions& options,
                                                const EngineBenchRequest& request,
                                                const std::vector<GpuPlacement>& gpus) {
  GPULAB_TRY(validate(options.bench));
  std::vector<std::unique_ptr<GpuEngine>> engines;
  for (const GpuPlacement& p : gpus) {
    engines.push_back(std::make_unique<GpuEngine>());
    engines.back()->place = p;
  }
  // Every GPU builds (times its tactics) at once, on a thread of its own.
  std::vector<Status> built(engines.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < engines.size(); ++i) {
    threads.emplace_back([&, i] { built[i] = prepare_gpu(*engines[i], options.bench, request); });
  }
  for (auto& t : threads) t.join();
  std::vector<GpuBenchInput> inputs;
  for (size_t i = 0; i < engines.size(); ++i) {
    GpuEngine& g = *engines[i];
    GPULAB_TRY(built[i].with_context(fmt::format("GPU {}", g.place.device)));
    inputs.push_back({.device = static_cast<uint32_t>(g.place.device),
                      .name = g.engine->info().gpu_name,
                      .hooks = g.streams->hooks(options.bench),
                      .cpus = g.place.cpus,
                      .numa_node = g.place.numa_node,
                      .on_thread_start = [device = g.place.device]() -> Status {
                        GPULAB_CUDA_TRY(cudaSetDevice(device));
                        return Status::ok();
                      }});
  }
  GPULAB_ASSIGN_OR_RETURN(MultiBenchResult result, run_multi_bench(options, inputs));
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineInfo& info = engines[i]->engine->info();
    result.gpus[i].bench.precision = std::string(precision_name(info.precision));
    fill_cuda_environment(info, result.gpus[i].bench.environment);
  }
  return result;
}

}  // namespace gpulab::measure
