// The GPU backend of the pipeline (pipeline_cuda.h).
//
// Per staging slot, one pinned host buffer: [descriptors: batch x PreprocessImage][pixels]. The
// decode threads pack their decoded images into the pixels area (an atomic offset; an image that
// would overflow the shared part is resized and cropped on the CPU into its reserved share).
// submit() on slot s, with d = the submission count mod 2:
//   copy stream:    wait raw_free[d]; H2D descriptors and the used pixel bytes into raw[d];
//                   record uploaded[d]                                   (h2d events around it)
//   compute stream: wait uploaded[d]; preprocess raw[d] -> input (float NCHW); record raw_free[d];
//                   record preprocessed[s]; engine enqueue (CUDA graph) -> logits; record
//                   modelled[s]; top-k; softmax + gather (logit models); D2H top-k into the slot's
//                   pinned results; record done[s]
// finish() waits for done[s] alone (no device-wide synchronization). The upload of batch b + 1
// overlaps the preprocessing and inference of batch b.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/preprocess.h"
#include "core/elapsed.h"
#include "pipeline/pipeline_cuda.h"

namespace gpulab {
namespace {

using kernels::PreprocessImage;

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  Status allocate(size_t bytes, const char* what) {
    const cudaError_t err = cudaHostAlloc(&ptr_, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      return Status::out_of_memory(
          fmt::format("pipeline: cannot allocate {} bytes of pinned host memory for the {} "
                      "({}). Lower --batch or --queue-depth.",
                      bytes, what, cudaGetErrorString(err)));
    }
    bytes_ = bytes;
    return Status::ok();
  }
  std::byte* get() const { return static_cast<std::byte*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Status create(bool timing) {
    GPULAB_CUDA_TRY(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
    return Status::ok();
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// One staging slot: pinned descriptors + pixels, the packing state, the results of its batch.
struct Slot {
  PinnedBuffer host;
  std::atomic<int64_t> used{0};       // pixel bytes packed so far
  std::atomic<int64_t> pool_left{0};  // bytes beyond the reserved crops still free
  PinnedBuffer results;               // indices (int32), scores, probabilities: batch x top_k each
  Event h2d_start, h2d_end, gpu_start, preprocessed, modelled, done;
  int64_t h2d_bytes = 0;
  int top_k = 0;
};

class GpuBackend final : public BatchBackend {
 public:
  explicit GpuBackend(const GpuBackendOptions& o) : options_(o), spec_(o.spec) {}

  ~GpuBackend() override {
    if (copy_) {
      cudaStreamSynchronize(copy_);
      cudaStreamDestroy(copy_);
    }
    if (compute_) {
      cudaStreamSynchronize(compute_);
      cudaStreamDestroy(compute_);
    }
  }

  Status init() {
    GPULAB_ASSIGN_OR_RETURN(context_, options_.engine->create_context());
    GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    const EngineInfo& info = options_.engine->info();
    classes_ = info.num_classes;
    probabilities_ = info.outputs_probabilities;
    crop_bytes_ = static_cast<int64_t>(spec_.output_size) * spec_.output_size * 3;
    const int64_t side = min_decode_side(spec_);
    per_image_bytes_ = std::max(
        options_.pixel_bytes_per_image > 0 ? options_.pixel_bytes_per_image : 6 * side * side, crop_bytes_);
    for (int c = 0; c < 3; ++c) {
      norm_.scale[c] = static_cast<float>(1.0 / (255.0 * spec_.std[c]));
      norm_.bias[c] = static_cast<float>(-static_cast<double>(spec_.mean[c]) / spec_.std[c]);
    }
    return Status::ok();
  }

  std::string name() const override { return "gpu"; }
  int input_size() const override { return spec_.output_size; }
  int max_in_flight() const override { return 2; }

  Status allocate_slots(int count, int64_t batch, int top_k) override {
    if (top_k > kernels::kMaxTopK)
      return Status::invalid_argument(fmt::format(
          "pipeline: top-k {} is more than the GPU's top-k kernel keeps ({}).", top_k, kernels::kMaxTopK));
    top_k_ = top_k;
    if (batch > options_.engine->info().max_batch)
      return Status::invalid_argument(
          fmt::format("pipeline: batch {} exceeds the plan's max batch {}; lower --batch.", batch,
                      options_.engine->info().max_batch));
    batch_ = batch;
    desc_bytes_ = static_cast<size_t>(batch) * sizeof(PreprocessImage);
    desc_bytes_ = (desc_bytes_ + 255) / 256 * 256;
    pixel_capacity_ = batch * per_image_bytes_;
    const size_t slot_bytes = desc_bytes_ + static_cast<size_t>(pixel_capacity_);
    slots_ = std::vector<Slot>(static_cast<size_t>(count));
    for (Slot& s : slots_) {
      GPULAB_TRY(s.host.allocate(slot_bytes, "staging slot"));
      GPULAB_TRY(s.results.allocate(static_cast<size_t>(batch) * kernels::kMaxTopK * 12, "top-k results"));
      for (Event* e : {&s.h2d_start, &s.h2d_end, &s.gpu_start, &s.preprocessed, &s.modelled, &s.done})
        GPULAB_TRY(e->create(true));
      reset_packing(s);
    }
    for (int d = 0; d < 2; ++d) {
      GPULAB_ASSIGN_OR_RETURN(raw_[d], cuda::DeviceBuffer::allocate(slot_bytes, "pipeline upload buffer"));
      GPULAB_TRY(raw_free_[d].create(false));
      GPULAB_TRY(uploaded_[d].create(false));
      GPULAB_CUDA_TRY(cudaEventRecord(raw_free_[d].get(), compute_));
    }
    const int64_t s = spec_.output_size;
    GPULAB_ASSIGN_OR_RETURN(input_, cuda::DeviceBuffer::allocate(static_cast<size_t>(batch * 3 * s * s) * 4,
                                                                 "pipeline model input"));
    GPULAB_ASSIGN_OR_RETURN(
        logits_, cuda::DeviceBuffer::allocate(static_cast<size_t>(batch * classes_) * 4, "pipeline logits"));
    GPULAB_ASSIGN_OR_RETURN(
        probs_, cuda::DeviceBuffer::allocate(static_cast<size_t>(batch * classes_) * 4, "pipeline softmax"));
    GPULAB_ASSIGN_OR_RETURN(top_, cuda::DeviceBuffer::allocate(
                                      static_cast<size_t>(batch) * kernels::kMaxTopK * 12, "pipeline top-k"));
    // One run of the model at the slots' batch now: the context prepares its cuDNN plans and
    // captures its graph for that size here (3-9 s for MobileNetV2 at batch 256 on an H100), not
    // in pass 1's first batch, where it stalled every decode thread behind a full ring.
    GPULAB_CUDA_TRY(cudaMemsetAsync(input_.get(), 0, input_.bytes(), compute_));
    GPULAB_TRY(context_->enqueue({.input_nchw = input_.as<float>(),
                                  .batch = batch_,
                                  .logits = logits_.as<float>(),
                                  .use_cuda_graph = options_.use_cuda_graph},
                                 compute_));
    GPULAB_CUDA_TRY(cudaStreamSynchronize(compute_));
    return Status::ok();
  }

  Status stage(int slot, int64_t position, const Image& image, const DecodeInfo& info,
               StageScratch* scratch) override {
    Slot& s = slots_[static_cast<size_t>(slot)];
    PreprocessImage& d = descriptors(s)[position];
    d = PreprocessImage{};
    const int64_t bytes = static_cast<int64_t>(image.rgb.size());
    // A share of crop_bytes_ per image is always there; beyond it, the shared pool.
    bool fits = bytes <= crop_bytes_;
    if (!fits) {
      int64_t left = s.pool_left.load();
      const int64_t extra = bytes - crop_bytes_;
      while (left >= extra && !s.pool_left.compare_exchange_weak(left, left - extra)) {
      }
      fits = left >= extra;
    }
    if (fits) {
      // torchvision: the file's geometry, resampled from the pixels we have (a DCT-scaled decode
      // included); TF-Slim: the central crop of the pixels we have, as preprocess() takes it.
      const bool tf_slim = spec_.preset == PreprocessSpec::Preset::kTfSlim;
      GPULAB_ASSIGN_OR_RETURN(const CropGeometry g,
                              crop_geometry(tf_slim ? image.width : info.source_width,
                                            tf_slim ? image.height : info.source_height, spec_));
      d.offset = s.used.fetch_add(bytes);
      std::memcpy(pixels(s) + d.offset, image.rgb.data(), static_cast<size_t>(bytes));
      d.width = image.width;
      d.height = image.height;
      d.resized_width = g.resized_width;
      d.resized_height = g.resized_height;
      d.crop_x = g.crop_x;
      d.crop_y = g.crop_y;
    } else {
      scratch->crop_hwc.resize(static_cast<size_t>(crop_bytes_));
      GPULAB_TRY(resize_crop_into(image, info.source_width, info.source_height, spec_, scratch->crop_hwc,
                                  &scratch->resize));
      d.offset = s.used.fetch_add(crop_bytes_);
      std::memcpy(pixels(s) + d.offset, scratch->crop_hwc.data(), static_cast<size_t>(crop_bytes_));
      d.width = d.height = d.resized_width = d.resized_height = spec_.output_size;
      d.precropped = 1;
    }
    d.valid = 1;
    return Status::ok();
  }

  void stage_blank(int slot, int64_t position) override {
    PreprocessImage& d = descriptors(slots_[static_cast<size_t>(slot)])[position];
    d = PreprocessImage{};
    d.valid = 0;
  }

  Status submit(int slot, int64_t count) override {
    const auto submit_start = std::chrono::steady_clock::now();
    Slot& s = slots_[static_cast<size_t>(slot)];
    const int d = static_cast<int>(submitted_++ % 2);
    void* raw = raw_[d].get();
    const int64_t used = s.used.load();
    GPULAB_CUDA_TRY(cudaStreamWaitEvent(copy_, raw_free_[d].get(), 0));
    GPULAB_CUDA_TRY(cudaEventRecord(s.h2d_start.get(), copy_));
    GPULAB_CUDA_TRY(cudaMemcpyAsync(raw, s.host.get(), static_cast<size_t>(count) * sizeof(PreprocessImage),
                                    cudaMemcpyHostToDevice, copy_));
    GPULAB_CUDA_TRY(cudaMemcpyAsync(static_cast<std::byte*>(raw) + desc_bytes_, pixels(s),
                                    static_cast<size_t>(used), cudaMemcpyHostToDevice, copy_));
    GPULAB_CUDA_TRY(cudaEventRecord(s.h2d_end.get(), copy_));
    GPULAB_CUDA_TRY(cudaEventRecord(uploaded_[d].get(), copy_));
    s.h2d_bytes = static_cast<int64_t>(count * sizeof(PreprocessImage)) + used;

    GPULAB_CUDA_TRY(cudaStreamWaitEvent(compute_, uploaded_[d].get(), 0));
    GPULAB_CUDA_TRY(cudaEventRecord(s.gpu_start.get(), compute_));
    const kernels::PreprocessBatchDesc desc{.n = count,
                                            .size = spec_.output_size,
                                            .mode = spec_.preset == PreprocessSpec::Preset::kTfSlim
                                                        ? kernels::PreprocessMode::kTfSlim
                                                        : kernels::PreprocessMode::kTorchvision,
                                            .scale = {norm_.scale[0], norm_.scale[1], norm_.scale[2]},
                                            .bias = {norm_.bias[0], norm_.bias[1], norm_.bias[2]}};
    GPULAB_TRY(kernels::launch_preprocess_batch(
        desc, static_cast<const PreprocessImage*>(raw),
        reinterpret_cast<const uint8_t*>(static_cast<std::byte*>(raw) + desc_bytes_), input_.as<float>(),
        compute_));
    GPULAB_CUDA_TRY(cudaEventRecord(raw_free_[d].get(), compute_));
    GPULAB_CUDA_TRY(cudaEventRecord(s.preprocessed.get(), compute_));
    const auto enqueue_start = std::chrono::steady_clock::now();
    // The model always runs the slot's full batch: a last, partial batch of another size would make
    // the context prepare cuDNN plans and capture a graph for that size at the end of the run (on an
    // H100 the capture alone took 70 ms for MobileNetV2's last 112 images; the runs' RSS rose 17-24%
    // from pass 1 to the end while the heap stayed flat, which that late set-up may explain). Rows
    // past `count` hold stale inputs; their logits are never read.
    GPULAB_TRY(context_->enqueue({.input_nchw = input_.as<float>(),
                                  .batch = batch_,
                                  .logits = logits_.as<float>(),
                                  .use_cuda_graph = options_.use_cuda_graph},
                                 compute_));
    account_.host_enqueue_s += seconds_since(enqueue_start);
    GPULAB_CUDA_TRY(cudaEventRecord(s.modelled.get(), compute_));
    const int k = static_cast<int>(std::min<int64_t>(top_k_, classes_));
    s.top_k = k;
    int32_t* indices = top_.as<int32_t>();
    float* scores = reinterpret_cast<float*>(indices + batch_ * kernels::kMaxTopK);
    float* probs = scores + batch_ * kernels::kMaxTopK;
    GPULAB_TRY(
        kernels::launch_topk({.rows = count, .cols = classes_, .k = k, .index_dtype = DataType::kInt32},
                             logits_.get(), indices, scores, compute_));
    if (!probabilities_) {
      GPULAB_TRY(
          kernels::launch_softmax({.rows = count, .cols = classes_}, logits_.get(), probs_.get(), compute_));
      GPULAB_TRY(
          kernels::launch_gather_rows(probs_.as<float>(), count, classes_, indices, k, probs, compute_));
    }
    std::byte* host = s.results.get();
    const size_t n = static_cast<size_t>(count * k);
    GPULAB_CUDA_TRY(cudaMemcpyAsync(host, indices, n * 4, cudaMemcpyDeviceToHost, compute_));
    GPULAB_CUDA_TRY(cudaMemcpyAsync(host + n * 4, scores, n * 4, cudaMemcpyDeviceToHost, compute_));
    if (!probabilities_)
      GPULAB_CUDA_TRY(cudaMemcpyAsync(host + n * 8, probs, n * 4, cudaMemcpyDeviceToHost, compute_));
    GPULAB_CUDA_TRY(cudaEventRecord(s.done.get(), compute_));
    account_.host_submit_s += seconds_since(submit_start);
    return Status::ok();
  }

  Status finish(int slot, int64_t count, int k, std::span<Prediction> out) override {
    Slot& s = slots_[static_cast<size_t>(slot)];
    const auto wait_start = std::chrono::steady_clock::now();
    GPULAB_CUDA_TRY(cudaEventSynchronize(s.done.get()));
    account_.host_wait_s += seconds_since(wait_start);
    float h2d_ms = 0, gpu_ms = 0, preprocess_ms = 0, model_ms = 0, output_ms = 0;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&h2d_ms, s.h2d_start.get(), s.h2d_end.get()));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&gpu_ms, s.gpu_start.get(), s.done.get()));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&preprocess_ms, s.gpu_start.get(), s.preprocessed.get()));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&model_ms, s.preprocessed.get(), s.modelled.get()));
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&output_ms, s.modelled.get(), s.done.get()));
    account_.present = true;
    account_.h2d_bytes += s.h2d_bytes;
    account_.h2d_s += h2d_ms * 1e-3;
    account_.gpu_busy_s += gpu_ms * 1e-3;
    account_.preprocess_s += preprocess_ms * 1e-3;
    account_.model_s += model_ms * 1e-3;
    account_.output_s += output_ms * 1e-3;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      account_.device_used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
      account_.device_used_peak_bytes = std::max(account_.device_used_peak_bytes, account_.device_used_bytes);
    }
    const size_t n = static_cast<size_t>(count * s.top_k);
    const auto* indices = reinterpret_cast<const int32_t*>(s.results.get());
    const auto* scores = reinterpret_cast<const float*>(s.results.get() + n * 4);
    const auto* probs = reinterpret_cast<const float*>(s.results.get() + n * 8);
    for (int64_t i = 0; i < count; ++i) {
      for (int j = 0; j < k; ++j) {
        Prediction& p = out[static_cast<size_t>(i * k + j)];
        if (j >= s.top_k) {
          p = {.index = -1, .score = 0, .probability = 0};
          continue;
        }
        const size_t at = static_cast<size_t>(i * s.top_k + j);
        p = {.index = indices[at],
             .score = scores[at],
             .probability = probabilities_ ? scores[at] : probs[at]};
      }
    }
    reset_packing(s);
    return Status::ok();
  }

  DeviceAccount device_account() override { return account_; }

  Result<double> compute_only_ips(int64_t batch) override {
    batch = std::min(batch, batch_);
    if (batch < 1) return 0.0;
    Event start, stop;
    GPULAB_TRY(start.create(true));
    GPULAB_TRY(stop.create(true));
    const EnqueueArgs args{.input_nchw = input_.as<float>(),
                           .batch = batch,
                           .logits = logits_.as<float>(),
                           .use_cuda_graph = options_.use_cuda_graph};
    for (int i = 0; i < 3; ++i) GPULAB_TRY(context_->enqueue(args, compute_));  // warm-up (graph capture)
    constexpr int kIterations = 20;
    GPULAB_CUDA_TRY(cudaEventRecord(start.get(), compute_));
    for (int i = 0; i < kIterations; ++i) GPULAB_TRY(context_->enqueue(args, compute_));
    GPULAB_CUDA_TRY(cudaEventRecord(stop.get(), compute_));
    GPULAB_CUDA_TRY(cudaEventSynchronize(stop.get()));
    float ms = 0;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms > 0 ? static_cast<double>(batch) * kIterations / (ms * 1e-3) : 0.0;
  }

 private:
  struct Norm {
    float scale[3], bias[3];
  };

  PreprocessImage* descriptors(Slot& s) const { return reinterpret_cast<PreprocessImage*>(s.host.get()); }
  std::byte* pixels(Slot& s) const { return s.host.get() + desc_bytes_; }
  void reset_packing(Slot& s) const {
    s.used = 0;
    s.pool_left = pixel_capacity_ - batch_ * crop_bytes_;
  }

  GpuBackendOptions options_;
  PreprocessSpec spec_;
  std::unique_ptr<ExecutionContext> context_;
  cudaStream_t copy_ = nullptr, compute_ = nullptr;
  int64_t classes_ = 0;
  bool probabilities_ = false;
  int64_t crop_bytes_ = 0, per_image_bytes_ = 0, pixel_capacity_ = 0, batch_ = 0;
  size_t desc_bytes_ = 0;
  int top_k_ = 5;
  Norm norm_{};
  std::vector<Slot> slots_;
  cuda::DeviceBuffer raw_[2];
  Event raw_free_[2], uploaded_[2];
  cuda::DeviceBuffer input_, logits_, probs_, top_;
  int64_t submitted_ = 0;
  DeviceAccount account_;
};

}  // namespace

Result<std::unique_ptr<BatchBackend>> make_gpu_backend(const GpuBackendOptions& options) {
  std::string reason;
  if (!cuda_device_available(&reason))
    return Status::unavailable("pipeline: no usable GPU (" + reason + ").");
  if (!options.engine) return Status::invalid_argument("make_gpu_backend: no engine.");
  const Shape& in = options.engine->info().input_shape;
  if (in.rank() != 4 || in[1] != 3 || in[2] != options.spec.output_size || in[3] != options.spec.output_size)
    return Status::invalid_argument(
        fmt::format("pipeline: the engine's input is {}, the preprocessing makes {}x{} RGB.", in.to_string(),
                    options.spec.output_size, options.spec.output_size));
  auto backend = std::make_unique<GpuBackend>(options);
  GPULAB_TRY(backend->init());
  return std::unique_ptr<BatchBackend>(std::move(backend));
}

}  // namespace gpulab
