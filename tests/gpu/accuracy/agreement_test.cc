// FP16 and BF16 plans of the bundled MobileNetV2 against the FP32 plan on the 1,000 labelled
// photos of the shared ImageNet sample set (one per class): top-1 agreement with FP32 must be at
// least 99.5% (issue 3); top-1/top-5 against the labels are reported for each precision, as an
// agreement figure between precisions, not an ImageNet accuracy claim.
//
// The data set is found at $GPULAB_DATASET_DIR, else <shared>/datasets/imagenet-sample-256.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "core/math.h"
#include "gpulab/engine.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "runtime/runtime.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

struct Scores {
  std::vector<int64_t> top1;
  int64_t correct1 = 0, correct5 = 0;
};

TEST(AccuracyGpu, HalfPrecisionsAgreeWithFp32OnSampleSet) {
  std::string reason;
  if (!cuda_device_available(&reason)) GTEST_SKIP() << "no GPU: " << reason;
  const auto dir = testing::sample_dataset_dir();
  if (!dir || !fs::exists(*dir / "labels.tsv"))
    GTEST_SKIP() << "ImageNet sample set not found (set GPULAB_DATASET_DIR or provide ../shared)";

  auto graph = load_onnx(testing::source_dir() / "models/mobilenet_v2_1.0_224.onnx");
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  ASSERT_TRUE(run_passes(*graph, PassOptions{}).is_ok());
  auto spec = preprocess_from_metadata(graph->metadata);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  auto items = load_labelled_folder(*dir);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  const int64_t n = static_cast<int64_t>(items->size());
  ASSERT_GE(n, 1000);

  // Decode and preprocess once, on all cores.
  const int64_t per_image = spec->image_numel();
  Tensor inputs(DataType::kFloat32, Shape{n, 3, spec->output_size, spec->output_size});
  std::vector<Status> errors(n);
  std::vector<std::thread> workers;
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) {
        auto img = decode_image((*items)[i].path);
        if (!img.is_ok()) {
          errors[i] = img.status();
          continue;
        }
        errors[i] = preprocess(*img, *spec, inputs.f32().subspan(i * per_image, per_image));
      }
    });
  }
  for (auto& w : workers) w.join();
  for (const Status& s : errors) ASSERT_TRUE(s.is_ok()) << s.to_string();

  constexpr int64_t kBatch = 100;
  std::map<Precision, Scores> scores;
  for (Precision p : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
    BuildOptions options{.precision = p, .max_batch = kBatch, .time_tactics = false};
    auto engine = build_engine_from_graph(*graph, options, /*apply_passes=*/false);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    auto context = (*engine)->create_context();
    ASSERT_TRUE(context.is_ok()) << context.status().to_string();
    Scores& s = scores[p];
    for (int64_t start = 0; start < n; start += kBatch) {
      const int64_t b = std::min(kBatch, n - start);
      std::span<const std::byte> bytes(inputs.data() + start * per_image * 4, b * per_image * 4);
      auto batch =
          Tensor::from_bytes(DataType::kFloat32, Shape{b, 3, spec->output_size, spec->output_size}, bytes);
      ASSERT_TRUE(batch.is_ok());
      auto logits = (*context)->run(*batch, /*use_cuda_graph=*/true);
      ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
      const int64_t classes = logits->shape()[1];
      for (int64_t i = 0; i < b; ++i) {
        const auto row = logits->f32().subspan(i * classes, classes);
        const std::vector<int64_t> top5 = top_k(row, 5);
        const int64_t label = (*items)[start + i].label;
        s.top1.push_back(top5[0]);
        s.correct1 += top5[0] == label;
        s.correct5 += std::find(top5.begin(), top5.end(), label) != top5.end();
      }
    }
  }

  const Scores& ref = scores[Precision::kFp32];
  std::printf("MobileNetV2 (bundled, real weights) on %lld sample photos:\n", static_cast<long long>(n));
  std::printf("precision  top-1    top-5    top-1 agreement with fp32\n");
  for (const auto& [p, s] : scores) {
    int64_t agree = 0;
    for (int64_t i = 0; i < n; ++i) agree += s.top1[i] == ref.top1[i];
    const double agreement = 100.0 * agree / n;
    std::printf("%-9s  %5.1f%%   %5.1f%%   %6.2f%%\n", std::string(precision_name(p)).c_str(),
                100.0 * s.correct1 / n, 100.0 * s.correct5 / n, agreement);
    ::testing::Test::RecordProperty(std::string(precision_name(p)) + "_top1_agreement",
                                    std::to_string(agreement));
    if (p != Precision::kFp32) {
      EXPECT_GE(agreement, 99.5) << precision_name(p);
    }
  }
  // FP32 on the GPU is the reference computation; the independent numpy executor reported top-1
  // 86.6% / top-5 97.5% on the original (un-resized) photos of the same set.
  EXPECT_GT(100.0 * ref.correct1 / n, 80.0);
}

}  // namespace
}  // namespace gpulab
