// The GPU preprocessing kernel's per-pixel code (kernels/preprocess.cu), compiled for the host
// through preprocess_pixel_on_host(), against the CPU presets: the algorithm is checked on any
// machine with the CUDA build, GPU or not (the launch itself: pipeline_gpu_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/kernels/preprocess.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "test_support.h"
#include "unit/image/image_test_support.h"

namespace gpulab {
namespace {

struct Case {
  int width, height;                // the pixels
  int source_width, source_height;  // the file's size (a DCT-scaled decode is smaller)
};

kernels::PreprocessImage describe(const Image& image, const Case& c, const PreprocessSpec& spec) {
  const bool tf = spec.preset == PreprocessSpec::Preset::kTfSlim;
  auto g = crop_geometry(tf ? c.width : c.source_width, tf ? c.height : c.source_height, spec);
  EXPECT_TRUE(g.is_ok());
  kernels::PreprocessImage d;
  d.width = image.width;
  d.height = image.height;
  d.resized_width = g->resized_width;
  d.resized_height = g->resized_height;
  d.crop_x = g->crop_x;
  d.crop_y = g->crop_y;
  return d;
}

TEST(PreprocessKernelOnHost, TorchvisionWithinOneLevelOfTheCpuPreset) {
  const PreprocessSpec spec = PreprocessSpec::torchvision_imagenet();
  const std::vector<Case> cases = {{333, 257, 333, 257}, {1024, 768, 1024, 768}, {512, 384, 1024, 768},
                                   {256, 341, 256, 341}, {97, 61, 97, 61},       {300, 900, 300, 900},
                                   {224, 224, 224, 224}, {2000, 300, 2000, 300}};
  ResizeScratch scratch;
  std::vector<uint8_t> crop(224 * 224 * 3);
  for (const Case& c : cases) {
    const Image image = testing::gradient_image(c.width, c.height);
    ASSERT_TRUE(resize_crop_into(image, c.source_width, c.source_height, spec, crop, &scratch).is_ok());
    const kernels::PreprocessImage d = describe(image, c, spec);
    int worst = 0, differing = 0;
    for (int y = 0; y < 224; ++y) {
      for (int x = 0; x < 224; ++x) {
        float v[3];
        kernels::preprocess_pixel_on_host(d, image.rgb.data(), kernels::PreprocessMode::kTorchvision, 224, y,
                                          x, v);
        for (int ch = 0; ch < 3; ++ch) {
          const int diff =
              static_cast<int>(std::abs(v[ch] - crop[(static_cast<size_t>(y) * 224 + x) * 3 + ch]));
          worst = std::max(worst, diff);
          differing += diff > 0;
        }
      }
    }
    EXPECT_LE(worst, 1) << c.width << "x" << c.height;
    RecordProperty(std::to_string(c.width) + "x" + std::to_string(c.height) + "_differing", differing);
  }
}

TEST(PreprocessKernelOnHost, TfSlimEqualsPreprocess) {
  const PreprocessSpec spec = PreprocessSpec::tf_slim_inception();
  std::vector<float> expected(static_cast<size_t>(spec.image_numel()));
  for (const Case& c : std::vector<Case>{{333, 257, 333, 257},
                                         {512, 384, 512, 384},
                                         {97, 61, 97, 61},
                                         {512, 600, 512, 600},
                                         {512, 929, 512, 929},
                                         {300, 901, 300, 901}}) {
    const Image image = testing::gradient_image(c.width, c.height);
    ASSERT_TRUE(preprocess(image, spec, expected).is_ok());
    const kernels::PreprocessImage d = describe(image, c, spec);
    const size_t plane = 224 * 224;
    for (int y = 0; y < 224; ++y) {
      for (int x = 0; x < 224; ++x) {
        float v[3];
        kernels::preprocess_pixel_on_host(d, image.rgb.data(), kernels::PreprocessMode::kTfSlim, 224, y, x,
                                          v);
        for (int ch = 0; ch < 3; ++ch) {
          const float scale = static_cast<float>(1.0 / (255.0 * spec.std[ch]));
          const float bias = static_cast<float>(-static_cast<double>(spec.mean[ch]) / spec.std[ch]);
          ASSERT_FLOAT_EQ(v[ch] * scale + bias, expected[ch * plane + static_cast<size_t>(y) * 224 + x])
              << c.width << "x" << c.height << " (" << x << "," << y << ")";
        }
      }
    }
  }
}

TEST(PreprocessKernelOnHost, FailedAndPrecroppedImages) {
  const Image crop = testing::gradient_image(224, 224);
  kernels::PreprocessImage d;
  d.width = d.height = d.resized_width = d.resized_height = 224;
  d.precropped = 1;
  float v[3];
  kernels::preprocess_pixel_on_host(d, crop.rgb.data(), kernels::PreprocessMode::kTorchvision, 224, 10, 20,
                                    v);
  for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(v[ch], crop.at(20, 10, ch));
  d.valid = 0;
  kernels::preprocess_pixel_on_host(d, crop.rgb.data(), kernels::PreprocessMode::kTorchvision, 224, 10, 20,
                                    v);
  for (int ch = 0; ch < 3; ++ch) EXPECT_EQ(v[ch], 0.f);
}

// Every photo of the ImageNet sample set (testing::sample_dataset_dir(); skipped without it),
// decoded at full size: the kernel's code within one 8-bit level of the torchvision preset and
// within float rounding of TF-Slim's, on the photos issue 29 names. Photos are spread over the
// host's cores.
TEST(PreprocessKernelOnHost, EverySamplePhotoMatchesBothPresets) {
  const auto photos = testing::sample_photo_dir();
  if (!photos) GTEST_SKIP() << testing::kNoSampleSet;
  auto files = list_images(std::vector<std::string>{photos->string()});
  ASSERT_TRUE(files.is_ok()) << files.status().to_string();
  ASSERT_FALSE(files->empty());
  const PreprocessSpec tv = PreprocessSpec::torchvision_imagenet();
  const PreprocessSpec tf = PreprocessSpec::tf_slim_inception();
  struct Outcome {
    std::string error;
    int tv_worst = 0;
    float tf_worst = 0;
  };
  std::vector<Outcome> outcomes(files->size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    ResizeScratch scratch;
    std::vector<uint8_t> crop(224 * 224 * 3);
    std::vector<float> expected(static_cast<size_t>(tf.image_numel()));
    for (size_t i = next++; i < files->size(); i = next++) {
      Outcome& o = outcomes[i];
      auto image = decode_image((*files)[i]);
      if (!image.is_ok()) {
        o.error = image.status().to_string();
        continue;
      }
      const Case c{image->width, image->height, image->width, image->height};
      if (!resize_crop_into(*image, c.width, c.height, tv, crop, &scratch).is_ok() ||
          !preprocess(*image, tf, expected).is_ok()) {
        o.error = "the CPU preset failed";
        continue;
      }
      const kernels::PreprocessImage dtv = describe(*image, c, tv), dtf = describe(*image, c, tf);
      for (int y = 0; y < 224; ++y) {
        for (int x = 0; x < 224; ++x) {
          float v[3], w[3];
          kernels::preprocess_pixel_on_host(dtv, image->rgb.data(), kernels::PreprocessMode::kTorchvision,
                                            224, y, x, v);
          kernels::preprocess_pixel_on_host(dtf, image->rgb.data(), kernels::PreprocessMode::kTfSlim, 224, y,
                                            x, w);
          const size_t p = static_cast<size_t>(y) * 224 + x;
          for (int ch = 0; ch < 3; ++ch) {
            o.tv_worst = std::max(o.tv_worst, static_cast<int>(std::abs(v[ch] - crop[p * 3 + ch])));
            const float scale = static_cast<float>(1.0 / (255.0 * tf.std[ch]));
            const float bias = static_cast<float>(-static_cast<double>(tf.mean[ch]) / tf.std[ch]);
            o.tf_worst = std::max(o.tf_worst, std::abs(w[ch] * scale + bias - expected[ch * 224 * 224 + p]));
          }
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  int64_t failed = 0;
  for (size_t i = 0; i < files->size(); ++i) {
    const Outcome& o = outcomes[i];
    EXPECT_TRUE(o.error.empty()) << (*files)[i] << ": " << o.error;
    EXPECT_LE(o.tv_worst, 1) << (*files)[i] << " (torchvision)";
    EXPECT_LE(o.tf_worst, 1e-5f) << (*files)[i] << " (tf-slim)";
    failed += !o.error.empty() || o.tv_worst > 1 || o.tf_worst > 1e-5f;
  }
  EXPECT_EQ(failed, 0) << "of " << files->size() << " photos";
}

}  // namespace
}  // namespace gpulab
