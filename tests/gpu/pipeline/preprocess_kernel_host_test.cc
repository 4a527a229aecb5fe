// The GPU preprocessing kernel's per-pixel code (kernels/preprocess.cu), compiled for the host
// through preprocess_pixel_on_host(), against the CPU presets: the algorithm is checked on any
// machine with the CUDA build, GPU or not (the launch itself: pipeline_gpu_test).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cuda/kernels/preprocess.h"
#include "image/preprocess.h"
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

}  // namespace
}  // namespace gpulab
