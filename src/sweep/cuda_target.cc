// The CUDA engine behind the sweep (see cuda_target.h).
#include "sweep/cuda_target.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "backends/cuda/cuda_check.h"
#include "core/elapsed.h"
#include "core/log.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "measure/bandwidth.h"
#include "measure/engine_bench.h"
#include "onnx/onnx_import.h"

namespace gpulab::sweep {
namespace {

using Clock = std::chrono::steady_clock;

// Index of the largest value of each row of [rows, classes] logits.
std::vector<int64_t> top1(const Tensor& logits) {
  const auto rows = logits.shape()[0], classes = logits.shape()[1];
  const std::span<const float> v = logits.f32();
  std::vector<int64_t> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = v.subspan(static_cast<size_t>(r * classes), static_cast<size_t>(classes));
    out[static_cast<size_t>(r)] = std::max_element(row.begin(), row.end()) - row.begin();
  }
  return out;
}

class CudaTarget final : public SweepTarget {
 public:
  explicit CudaTarget(CudaTargetOptions options) : options_(std::move(options)) {
    if (cudaDeviceGetLimit(&stack_limit_, cudaLimitStackSize) != cudaSuccess) stack_limit_ = 0;
  }

  TargetInfo info() const override {
    cudaDeviceProp prop{};
    std::string name = "CUDA device";
    if (cudaGetDeviceProperties(&prop, options_.device) == cudaSuccess) {
      name = fmt::format("{} (sm_{}{})", prop.name, prop.major, prop.minor);
    }
    return {.kind = "cuda", .description = name, .device = options_.device};
  }

  // Every call makes this target's GPU current first: with several GPUs (MultiGpuTarget) each
  // target is called from threads of its own.
  Status use_device() const {
    GPULAB_CUDA_TRY(cudaSetDevice(options_.device));
    return Status::ok();
  }

  void set_before_measure(std::function<void()> fn) override { before_measure_ = std::move(fn); }

  Result<PlanFacts> prepare_plan(Precision precision, int64_t batch) override {
    GPULAB_TRY(use_device());
    const auto start = Clock::now();
    if (engine_ && precision_ == precision && engine_->info().max_batch >= batch) {
      return facts("reuse", seconds_since(start));
    }
    release();
    BuildOptions build = build_options(precision, batch);
    int64_t& last_timed = last_timed_[precision];
    if (build.time_tactics && build.tactic_batch == 0)
      build.tactic_batch = sweep_tactic_batch(batch, last_timed, options_.timed_tactics_max_batch,
                                              options_.timed_tactics_ratio);
    GPULAB_ASSIGN_OR_RETURN(engine_, Engine::build_from_onnx(options_.model_path, build));
    precision_ = precision;
    if (build.time_tactics && build.tactic_batch == 0) last_timed = batch;
    tactics_ = !build.time_tactics ? "heuristic"
               : build.tactic_batch > 0 && build.tactic_batch < batch
                   ? fmt::format("timed at {}", build.tactic_batch)
                   : std::string(kTimedTactics);
    log_memory(fmt::format("the {} plan build at batch {}", precision_name(precision), batch));
    return facts("build", seconds_since(start));
  }

  Status prepare_context(int64_t batch) override {
    if (!engine_) return Status::internal("sweep: prepare_context before prepare_plan");
    GPULAB_TRY(use_device());
    GPULAB_ASSIGN_OR_RETURN(streams_,
                            measure::EngineStreams::create(*engine_, 1, batch, options_.include_transfers));
    return Status::ok();
  }

  Result<measure::BenchResult> measure(const measure::BenchOptions& options) override {
    if (!streams_) return Status::internal("sweep: measure before prepare_context");
    GPULAB_TRY(use_device());
    measure::BenchHooks hooks = streams_->hooks(options);
    hooks.before_measure = before_measure_;
    GPULAB_ASSIGN_OR_RETURN(measure::BenchResult result, measure::run_bench_loop(options, hooks));
    result.precision = std::string(precision_name(engine_->info().precision));
    measure::fill_cuda_environment(engine_->info(), result.environment);
    return result;
  }

  void release() override {
    (void)use_device();
    streams_.reset();
    engine_.reset();
    // Work still queued holds memory until it ends; the next reading must see it freed.
    cudaDeviceSynchronize();
    restore_stack_limit();
  }

  std::optional<int64_t> device_memory_used_bytes() override {
    if (!use_device().is_ok()) return std::nullopt;
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
    return static_cast<int64_t>(total - free);
  }

  Result<measure::Ceilings> ceilings(Precision precision) override {
    auto c = measure::measure_ceilings(options_.device, std::string(precision_name(precision)));
    log_memory(fmt::format("the {} ceilings", precision_name(precision)));
    return c;
  }

  Result<double> h2d_gb_s() override {
    measure::BandwidthOptions o{.cuda_device = options_.device,
                                .sizes_bytes = {std::uint64_t{256} << 20},
                                .repeats = 10,
                                .warmup = 2,
                                .kinds = {measure::CopyKind::kHostToDevice},
                                .host_memory = {measure::HostMemory::kPinned}};
    GPULAB_ASSIGN_OR_RETURN(const measure::BandwidthReport report, measure::run_bandwidth_test(o));
    if (report.points.empty()) return Status::internal("sweep: the H2D bandwidth test returned no point");
    return report.points.front().gb_s;
  }

  Result<AgreementResult> agreement(Precision precision, const std::filesystem::path& dataset_dir,
                                    int64_t max_images) override {
    const auto start = Clock::now();
    GPULAB_TRY(load_gate(dataset_dir, max_images));
    if (reference_top1_.empty()) {
      GPULAB_ASSIGN_OR_RETURN(reference_top1_, classify_all(Precision::kFp32));
    }
    GPULAB_ASSIGN_OR_RETURN(const std::vector<int64_t> top1s, classify_all(precision));
    AgreementResult a{.images = static_cast<int64_t>(top1s.size())};
    int64_t same = 0, correct = 0, labelled = 0;
    for (size_t i = 0; i < top1s.size(); ++i) {
      same += top1s[i] == reference_top1_[i];
      if (gate_images_[i].label >= 0) {
        ++labelled;
        correct += top1s[i] == gate_images_[i].label;
      }
    }
    a.agreement = static_cast<double>(same) / static_cast<double>(top1s.size());
    if (labelled > 0) a.top1_accuracy = static_cast<double>(correct) / static_cast<double>(labelled);
    a.seconds = seconds_since(start);
    log_memory(fmt::format("the {} accuracy gate", precision_name(precision)));
    return a;
  }

 private:
  // A kernel that needs more local memory per thread than the stack limit raises the limit, and
  // the driver keeps local memory for that much on every thread the GPU can hold (gigabytes for a
  // few tens of KiB) after the kernel ends. Some library kernels timed at plan build do; setting
  // the limit back to the process's starting value gives that memory back before the next point.
  void restore_stack_limit() {
    size_t now = 0;
    if (stack_limit_ == 0 || cudaDeviceGetLimit(&now, cudaLimitStackSize) != cudaSuccess ||
        now <= stack_limit_)
      return;
    const auto before = device_memory_used_bytes();
    if (cudaDeviceSetLimit(cudaLimitStackSize, stack_limit_) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    const auto after = device_memory_used_bytes();
    log_info(
        "sweep: the per-thread stack limit had grown from {} to {} bytes; set back ({} -> {} MiB in use)",
        stack_limit_, now, before.value_or(0) >> 20, after.value_or(0) >> 20);
  }

  BuildOptions build_options(Precision precision, int64_t max_batch) const {
    BuildOptions build = options_.build;
    build.precision = precision;
    build.max_batch = max_batch;
    build.device = options_.device;
    if (auto it = options_.bias_correction.find(precision); it != options_.bias_correction.end())
      build.bias_correction = it->second;
    return build;
  }

  void log_memory(std::string_view after) {
    size_t stack = 0;
    cudaDeviceGetLimit(&stack, cudaLimitStackSize);
    log_debug("sweep: {} MiB of device memory in use after {} (stack limit {} bytes per thread)",
              device_memory_used_bytes().value_or(-1) >> 20, after, stack);
  }

  Result<PlanFacts> facts(std::string source, double seconds) const {
    const EngineInfo& info = engine_->info();
    PlanFacts f{
        .max_batch = info.max_batch, .source = std::move(source), .tactics = tactics_, .seconds = seconds};
    if (f.source == "build") {
      f.tactic_build_s = info.tactic_build_s;
      f.tactic_timing_s = info.tactic_timing_s;
    }
    for (const LayerInfo& l : info.layers) {
      f.flops_per_image += l.flops_per_image;
      f.bytes_per_image += static_cast<double>(l.bytes_per_image);
      f.param_bytes += l.param_bytes;
    }
    if (info.input_shape.rank() == 4) {
      f.input_bytes_per_image = info.input_shape[1] * info.input_shape[2] * info.input_shape[3] *
                                static_cast<int64_t>(sizeof(float));
    }
    return f;
  }

  // Decodes and preprocesses the gate's images once (the model's preprocessing from its metadata,
  // as `classify` does), in batches of accuracy_batch, one batch per thread at a time over the
  // host's cores. The input size comes from the model file: no engine is built for it.
  Status load_gate(const std::filesystem::path& dir, int64_t max_images) {
    if (!gate_batches_.empty()) return Status::ok();
    GPULAB_ASSIGN_OR_RETURN(gate_images_, load_gate_images(dir, max_images));
    std::erase_if(gate_images_, [&](const LabelledImage& i) {
      std::error_code ec;
      return options_.gate_exclude.contains(std::filesystem::weakly_canonical(i.path, ec));
    });
    if (gate_images_.empty())
      return Status::invalid_argument(fmt::format(
          "sweep: every image of the accuracy gate's folder '{}' was calibrated on; give the gate another "
          "folder (--dataset), or calibrate on fewer of its images (--calibration-images) or elsewhere "
          "(--calibration-data)",
          dir.string()));
    GPULAB_ASSIGN_OR_RETURN(const Graph graph, load_onnx(options_.model_path));
    const auto input = graph.inputs.empty() ? graph.values.end() : graph.values.find(graph.inputs[0]);
    if (input == graph.values.end() || input->second.shape.rank() != 4 || input->second.shape[2] < 1)
      return Status::unsupported("sweep: the accuracy gate needs a model with one [N, C, H, W] input");
    auto spec = preprocess_from_metadata(graph.metadata);
    PreprocessSpec preprocess = spec.is_ok() ? *spec : PreprocessSpec::torchvision_imagenet();
    preprocess.output_size = static_cast<int>(input->second.shape[2]);
    const size_t per_batch = static_cast<size_t>(options_.accuracy_batch);
    const size_t batches = (gate_images_.size() + per_batch - 1) / per_batch;
    if (batches == 0) return Status::invalid_argument("sweep: the accuracy gate's folder has no images");
    std::vector<Result<Tensor>> made(batches, Status::internal("sweep: a gate batch was not made"));
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t b = next++; b < batches; b = next++) {
        made[b] = [&]() -> Result<Tensor> {
          std::vector<Image> images;
          for (size_t j = b * per_batch; j < std::min(gate_images_.size(), (b + 1) * per_batch); ++j) {
            GPULAB_ASSIGN_OR_RETURN(Image image, decode_image(gate_images_[j].path));
            images.push_back(std::move(image));
          }
          return make_batch(images, preprocess);
        }();
      }
    };
    std::vector<std::thread> threads;
    const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, batches);
    for (size_t t = 1; t < workers; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    for (Result<Tensor>& batch : made) {
      GPULAB_TRY(batch.status());
      gate_batches_.push_back(std::move(batch).value());
    }
    return Status::ok();
  }

  // Top-1 of every gate image through a plan of `precision` at batch accuracy_batch, its tactics
  // timed (or read from the timing cache) as the sweep's own plans are. The FP32 reference on
  // cuDNN's heuristic choices instead made the H100's first (FP16) gate, which builds it, 109 s
  // (2026-12-06 at 8fdabf2), against 81-95 s with it timed (2026-12-05): a heuristic FP32 engine
  // can be far slower than the timed one.
  Result<std::vector<int64_t>> classify_all(Precision precision) {
    release();
    const BuildOptions build = build_options(precision, options_.accuracy_batch);
    GPULAB_ASSIGN_OR_RETURN(auto engine, Engine::build_from_onnx(options_.model_path, build));
    GPULAB_ASSIGN_OR_RETURN(auto context, engine->create_context());
    std::vector<int64_t> out;
    for (const Tensor& batch : gate_batches_) {
      GPULAB_ASSIGN_OR_RETURN(const Tensor logits, context->run(batch));
      for (int64_t t : top1(logits)) out.push_back(t);
    }
    return out;
  }

  CudaTargetOptions options_;
  std::shared_ptr<Engine> engine_;
  Precision precision_ = Precision::kFp32;
  std::string tactics_;
  std::map<Precision, int64_t> last_timed_;  // per precision, the last batch whose plan timed its tactics
  std::unique_ptr<measure::EngineStreams> streams_;
  std::function<void()> before_measure_;
  std::vector<LabelledImage> gate_images_;
  std::vector<Tensor> gate_batches_;
  std::vector<int64_t> reference_top1_;
  size_t stack_limit_ = 0;  // cudaLimitStackSize when the target was made
};

}  // namespace

Result<std::unique_ptr<SweepTarget>> make_cuda_target(const CudaTargetOptions& options) {
  GPULAB_TRY(measure::use_cuda_device(options.device, "sweep"));
  return std::unique_ptr<SweepTarget>(new CudaTarget(options));
}

}  // namespace gpulab::sweep
