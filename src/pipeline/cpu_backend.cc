// The CPU backend: preprocessing on the decode threads into float NCHW slots, inference by a
// HostBatchRunner on the inference thread, top-k and softmax on the host.
#include <cstring>

#include <fmt/format.h>

#include "core/math.h"
#include "pipeline/pipeline.h"

namespace gpulab {
namespace {

class CpuBackend final : public BatchBackend {
 public:
  CpuBackend(std::unique_ptr<HostBatchRunner> runner, PreprocessSpec spec)
      : runner_(std::move(runner)), spec_(spec) {}

  std::string name() const override { return "cpu"; }
  int input_size() const override { return spec_.output_size; }

  Status allocate_slots(int count, int64_t batch, int /*top_k*/) override {
    const int64_t s = spec_.output_size;
    slots_.clear();
    for (int i = 0; i < count; ++i) slots_.emplace_back(DataType::kFloat32, Shape{batch, 3, s, s});
    batch_ = batch;
    if (runner_->sets_up_per_batch_size()) GPULAB_TRY(runner_->run(slots_.front()).status());  // zeros
    return Status::ok();
  }

  Status stage(int slot, int64_t position, const Image& image, const DecodeInfo& info,
               StageScratch* scratch) override {
    std::span<float> out = image_span(slot, position);
    if (spec_.preset == PreprocessSpec::Preset::kTfSlim) return preprocess(image, spec_, out);
    const size_t s = static_cast<size_t>(spec_.output_size);
    scratch->crop_hwc.resize(s * s * 3);
    GPULAB_TRY(resize_crop_into(image, info.source_width, info.source_height, spec_, scratch->crop_hwc,
                                &scratch->resize));
    return normalize_into(scratch->crop_hwc, spec_, out);
  }

  void stage_blank(int slot, int64_t position) override {
    std::span<float> out = image_span(slot, position);
    std::fill(out.begin(), out.end(), 0.0f);
  }

  Status submit(int slot, int64_t count) override {
    const Tensor& staged = slots_[static_cast<size_t>(slot)];
    Result<Tensor> logits = Status::internal("not run");
    // A runner that sets up per batch size runs the full slot: rows past `count` hold stale images,
    // and finish() reads only the first `count`.
    const bool full = count == batch_ || runner_->sets_up_per_batch_size();
    if (full) {
      logits = runner_->run(staged);
    } else {
      // The last batch of a run: a tensor of its own size (once per run, not per batch).
      const int64_t s = spec_.output_size;
      Tensor part(DataType::kFloat32, Shape{count, 3, s, s});
      std::memcpy(part.data(), staged.data(), part.size_bytes());
      logits = runner_->run(part);
    }
    GPULAB_TRY(logits.status());
    const Shape& shape = logits->shape();
    const int64_t rows = full ? batch_ : count;
    if (logits->dtype() != DataType::kFloat32 || shape.rank() != 2 || shape[0] != rows)
      return Status::unsupported(
          fmt::format("pipeline: the model's output is {} {}, not float32 [{}, classes]; the pipeline needs "
                      "a classifier.",
                      dtype_name(logits->dtype()), shape.to_string(), rows));
    output_ = std::move(logits).value();
    return Status::ok();
  }

  Status finish(int /*slot*/, int64_t count, int k, std::span<Prediction> out) override {
    const int64_t classes = output_.shape()[1];
    const bool probabilities = runner_->outputs_probabilities();
    for (int64_t i = 0; i < count; ++i) {
      std::span<const float> row =
          output_.f32().subspan(static_cast<size_t>(i * classes), static_cast<size_t>(classes));
      const std::vector<float> probs = probabilities ? std::vector<float>() : softmax(row);
      const std::vector<int64_t> best = top_k(row, k);
      for (int j = 0; j < k; ++j) {
        Prediction& p = out[static_cast<size_t>(i * k + j)];
        if (j < static_cast<int>(best.size())) {
          const int64_t index = best[static_cast<size_t>(j)];
          p = {.index = index,
               .score = row[static_cast<size_t>(index)],
               .probability =
                   probabilities ? row[static_cast<size_t>(index)] : probs[static_cast<size_t>(index)]};
        } else {
          p = {.index = -1, .score = 0, .probability = 0};
        }
      }
    }
    return Status::ok();
  }

 private:
  std::span<float> image_span(int slot, int64_t position) {
    const size_t numel = static_cast<size_t>(spec_.image_numel());
    return slots_[static_cast<size_t>(slot)].f32().subspan(static_cast<size_t>(position) * numel, numel);
  }

  std::unique_ptr<HostBatchRunner> runner_;
  PreprocessSpec spec_;
  std::vector<Tensor> slots_;
  int64_t batch_ = 0;
  Tensor output_;
};

}  // namespace

std::unique_ptr<BatchBackend> make_cpu_backend(std::unique_ptr<HostBatchRunner> runner, PreprocessSpec spec) {
  return std::make_unique<CpuBackend>(std::move(runner), spec);
}

}  // namespace gpulab
