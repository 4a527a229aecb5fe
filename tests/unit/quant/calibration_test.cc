// Calibration and the accuracy gate on a small residual network (tests/residual_net.h) and
// generated 8x8 PPM photos: the statistics cover every value, the cache keeps the ranges for its
// model only, the gate scores and falls back, and the folder checks give their messages.
#include "quant/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/file_io.h"
#include "plan/lower.h"
#include "quant/accuracy.h"
#include "residual_net.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

// A fresh folder with `count` random 8x8 PPM images img_000.ppm ... and a labels.tsv.
fs::path make_photos(const std::string& name, int count) {
  const fs::path dir =
      fs::temp_directory_path() / ("gpulab-quant-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937 rng(static_cast<uint32_t>(count));
  std::ofstream labels(dir / "labels.tsv");
  labels << "file\tindex\n";
  for (int i = 0; i < count; ++i) {
    const std::string file = "img_" + std::to_string(1000 + i).substr(1) + ".ppm";
    std::ofstream out(dir / file, std::ios::binary);
    out << "P6\n8 8\n255\n";
    for (int p = 0; p < 8 * 8 * 3; ++p) out.put(static_cast<char>(rng() & 0xff));
    labels << file << "\t" << i % 10 << "\n";
  }
  return dir;
}

PreprocessSpec tiny_spec() {
  PreprocessSpec spec = PreprocessSpec::torchvision_imagenet();
  spec.output_size = 8;
  spec.resize_shorter = 8;
  return spec;
}

TEST(Calibration, StatisticsCoverEveryValue) {
  const Graph graph = testing::residual_net();
  const fs::path dir = make_photos("stats", 6);
  auto images = calibration_images(dir);
  ASSERT_TRUE(images.is_ok()) << images.status().to_string();
  ASSERT_EQ(images->size(), 6u);
  int64_t calls = 0;
  auto stats = collect_statistics(graph, *images, tiny_spec(),
                                  {.num_threads = 2, .progress = [&](int64_t, int64_t total) {
                                     ++calls;
                                     EXPECT_EQ(total, 6);
                                   }});
  ASSERT_TRUE(stats.is_ok()) << stats.status().to_string();
  EXPECT_EQ(stats->images, 6);
  EXPECT_GE(calls, 1);
  for (const char* name : {"input", "a", "b", "c", "d", "e", "logits"}) {
    ASSERT_TRUE(stats->tensors.contains(name)) << name;
    EXPECT_EQ(stats->tensors.at(name).count() % 6, 0) << name;
  }
  // The input's statistics hold the 3 image channels only (no channel padding): 6 x 3 x 64.
  EXPECT_EQ(stats->tensors.at("input").count(), 6 * 3 * 64);
  EXPECT_LE(stats->tensors.at("b").amax(), 6.0f) << "b is clipped to [0, 6]";
  const CalibrationCache minmax = calibrate(*stats, Calibrator::kMinMax, 99.99);
  const CalibrationCache entropy = calibrate(*stats, Calibrator::kEntropy, 99.99);
  for (const auto& [name, amax] : minmax.amax) {
    EXPECT_GT(amax, 0.0f) << name;
    EXPECT_LE(entropy.amax.at(name), amax) << name;
  }
  // The ranges build an INT8 plan.
  BuildOptions options{.precision = Precision::kInt8, .max_batch = 2};
  options.activation_amax = entropy.amax;
  EXPECT_TRUE(lower_graph(graph, options).is_ok());
  fs::remove_all(dir);
}

TEST(Calibration, CacheIsReusedOnlyForItsModel) {
  const fs::path dir = make_photos("cache", 1);
  CalibrationCache cache;
  cache.model = "residual.onnx";
  cache.model_hash = "0123456789abcdef";
  cache.calibrator = Calibrator::kPercentile;
  cache.percentile = 99.9;
  cache.images = 12;
  cache.amax = {{"input", 2.5f}, {"a", 0.0f}};
  const fs::path path = dir / "cache.json";
  ASSERT_TRUE(save_calibration_cache(cache, path).is_ok());
  auto back = load_calibration_cache(path, "0123456789abcdef");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->amax, cache.amax);
  EXPECT_EQ(back->calibrator, Calibrator::kPercentile);
  EXPECT_EQ(back->percentile, 99.9);
  EXPECT_EQ(back->images, 12);
  auto other = load_calibration_cache(path, "fedcba9876543210");
  ASSERT_FALSE(other.is_ok());
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("was made for another model"), std::string::npos)
      << other.status().message();
  ASSERT_TRUE(
      write_file_atomic(dir / "bad.json", std::string_view("{\"schema\": \"gpulab.bench\"}")).is_ok());
  EXPECT_EQ(load_calibration_cache(dir / "bad.json", "x").status().code(), StatusCode::kInvalidFile);
  // A range beyond float's is refused, not converted.
  std::string text = *read_file_text(path);
  const size_t at = text.find("2.5");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 3, "1e300");
  ASSERT_TRUE(write_file_atomic(dir / "huge.json", std::string_view(text)).is_ok());
  const auto huge = load_calibration_cache(dir / "huge.json", "0123456789abcdef");
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(huge.status().message().find("tensor 'input' has amax"), std::string::npos)
      << huge.status().message();
  // Integer fields holding floats beyond int64's range are refused by name, never converted.
  for (const auto& [field, replacement] :
       {std::pair<std::string, std::string>{"\"images\": 12", "\"images\": 1e300"},
        {"\"schema_version\": 2", "\"schema_version\": 1e30"},
        {"\"images\": 12", "\"images\": \"12\""}}) {
    std::string edited = *read_file_text(path);
    const size_t where = edited.find(field);
    ASSERT_NE(where, std::string::npos) << field << " in " << edited;
    edited.replace(where, field.size(), replacement);
    ASSERT_TRUE(write_file_atomic(dir / "edited.json", std::string_view(edited)).is_ok());
    const auto r = load_calibration_cache(dir / "edited.json", "0123456789abcdef");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile) << replacement;
    EXPECT_NE(r.status().message().find("Delete it to calibrate again"), std::string::npos)
        << r.status().message();
  }
  ASSERT_TRUE(
      write_file_atomic(dir / "truncated.json", std::string_view("{\"schema\": \"gpulab.calib")).is_ok());
  EXPECT_EQ(load_calibration_cache(dir / "truncated.json", "x").status().code(), StatusCode::kInvalidFile);
  EXPECT_EQ(load_calibration_cache(dir / "missing.json", "x").status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(Calibration, FoldersWithoutImagesAreRefused) {
  const auto missing = calibration_images("/nonexistent/calibration");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no such folder"), std::string::npos);
  const fs::path empty = fs::temp_directory_path() / ("gpulab-quant-empty-" + std::to_string(::getpid()));
  fs::create_directories(empty);
  const auto none = calibration_images(empty);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no images"), std::string::npos) << none.status().message();
  fs::remove_all(empty);
}

TEST(Calibration, SpreadSubsetCoversTheList) {
  EXPECT_EQ(spread_subset(10, 5), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(spread_subset(3, 5), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(spread_subset(1000, 200).back(), 995);
  EXPECT_TRUE(spread_subset(0, 5).empty());
}

// The fallback's search finds the smallest passing prefix for every threshold, asks each k once,
// and takes far fewer plans than one per layer on a long ranking.
TEST(AccuracyGate, FallbackSearchFindsTheSmallestPassingPrefix) {
  for (size_t n : {1u, 3u, 4u, 5u, 17u, 52u})
    for (size_t threshold = 1; threshold <= n + 1; ++threshold) {
      std::vector<size_t> asked;
      auto chosen = smallest_passing_prefix(n, kLinearFallbackSteps, [&](size_t k) -> Result<bool> {
        asked.push_back(k);
        return k >= threshold;
      });
      ASSERT_TRUE(chosen.is_ok());
      EXPECT_EQ(*chosen, std::min(threshold, n)) << "n " << n << ", threshold " << threshold;
      std::vector<size_t> unique = asked;
      std::sort(unique.begin(), unique.end());
      EXPECT_EQ(std::adjacent_find(unique.begin(), unique.end()), unique.end()) << "a k asked twice";
      for (size_t k : asked) EXPECT_TRUE(k >= 1 && k <= n) << k;
      if (n == 52) {
        EXPECT_LE(asked.size(), 15u) << "threshold " << threshold;
      }
    }
  auto failed = smallest_passing_prefix(10, kLinearFallbackSteps, [](size_t k) -> Result<bool> {
    if (k == 3) return Status::internal("interpreting plan 3 failed");
    return false;
  });
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "interpreting plan 3 failed");
}

// Noise per FLOP, not noise alone: a small layer that adds a tenth of a large one's noise moves
// first; by SQNR alone the order would be big, mid, small.
TEST(AccuracyGate, FallbackOrderIsNoisePerFlop) {
  const std::vector<LayerReport> layers{
      {.name = "big", .flops_share = 0.5, .alone_logits_sqnr_db = 20},     // noise 1e-2: 0.02 per FLOP
      {.name = "small", .flops_share = 0.01, .alone_logits_sqnr_db = 30},  // 1e-3: 0.1
      {.name = "mid", .flops_share = 0.1, .alone_logits_sqnr_db = 25},     // 3.2e-3: 0.032
      {.name = "exact", .flops_share = 0.2, .alone_logits_sqnr_db = 300},  // as good as unquantized
  };
  EXPECT_EQ(fallback_order(layers), (std::vector<std::string>{"small", "mid", "big", "exact"}));
  EXPECT_TRUE(fallback_order({}).empty());
}

TEST(AccuracyGate, ScoresFallsBackAndLocalises) {
  const Graph graph = testing::residual_net();
  const fs::path dir = make_photos("gate", 24);
  auto items = load_labelled_folder(dir);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  auto set = load_labelled_set(*items, tiny_spec(), {});
  ASSERT_TRUE(set.is_ok()) << set.status().to_string();
  auto fp32 = fp32_reference(graph, *set, {.num_threads = 2});
  ASSERT_TRUE(fp32.is_ok()) << fp32.status().to_string();
  EXPECT_EQ(score(*fp32, *set, *fp32).agreement, 1.0);

  auto fp16 = measure_agreement(graph, *set, *fp32, {.precision = Precision::kFp16});
  ASSERT_TRUE(fp16.is_ok()) << fp16.status().to_string();
  EXPECT_GE(fp16->final.agreement, 0.95);
  EXPECT_LT(fp16->final.logits_rel_l2, 1e-2);

  auto images = calibration_images(dir);
  ASSERT_TRUE(images.is_ok());
  auto stats = collect_statistics(graph, *images, tiny_spec());
  ASSERT_TRUE(stats.is_ok());
  AccuracyOptions options{.precision = Precision::kInt8,
                          .activation_amax = calibrate(*stats, Calibrator::kMinMax, 99.99).amax,
                          .gate = 1.0,
                          .fallback = true,
                          .per_layer = true,
                          .per_layer_images = 8};
  auto int8 = measure_agreement(graph, *set, *fp32, options);
  ASSERT_TRUE(int8.is_ok()) << int8.status().to_string();
  EXPECT_EQ(int8->plain_quantized_flops_share, 1.0);
  EXPECT_LT(int8->plain.logits_rel_l2, 0.1);
  // Every Conv/Gemm layer is localised, worst first.
  ASSERT_EQ(int8->layers.size(), 4u);
  EXPECT_EQ(int8->per_layer_images, 8);
  for (size_t i = 1; i < int8->layers.size(); ++i)
    EXPECT_LE(int8->layers[i - 1].alone_logits_sqnr_db, int8->layers[i].alone_logits_sqnr_db);
  // A gate of 100% is met after moving layers, or by moving them all.
  EXPECT_TRUE(int8->gate_met || int8->fallback_layers.size() == 4u);
  if (!int8->fallback_layers.empty()) {
    EXPECT_EQ(int8->fallback_layers[0], int8->layers[0].name) << "the worst layer moves first";
    EXPECT_LT(int8->final_quantized_flops_share, 1.0);
    EXPECT_NEAR(int8->final_quantized_flops_share + int8->fallback_flops_share, 1.0, 1e-9);
    EXPECT_EQ(int8->layer_precision.at(int8->fallback_layers[0]), Precision::kFp16);
  }
  EXPECT_GE(int8->final.agreement, int8->plain.agreement);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpulab
