#include "image/preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "image_test_support.h"

namespace gpulab {
namespace {

using testing::gradient_image;
using testing::image_golden_dir;
using testing::read_raw;

// The metadata_props of /work/shared/models/mobilenet_v2_1.0_224.onnx, verbatim.
std::map<std::string, std::string> mobilenet_metadata() {
  return {
      {"preprocess.mean", "128,128,128"},
      {"preprocess.std", "128,128,128"},
      {"preprocess.pixel_range", "0-255"},
      {"preprocess.resize", "center_crop_0.875_then_resize_224"},
      {"preprocess.interpolation",
       "bilinear, no antialias; TF-Slim eval = tf.image.central_crop(0.875) then TF1 "
       "tf.image.resize_bilinear(align_corners=False, half_pixel_centers=False): src = dst * in/out"},
      {"preprocess.layout", "RGB"},
      {"preprocess.input", "NCHW float32: (pixel - mean) / std"},
      {"output", "logits (pre-softmax), 1000 classes, index i = ImageNet-1k class i"},
      {"source", "github.com/google-coral/test_data mobilenet_v2_1.0_224_quant.tflite"},
      {"tflite.input_quantization", "uint8 scale=0.0078125 zero_point=128"},
  };
}

// Compares two normalized CHW tensors in the 0..1 pixel domain (|a - b| * std[c]).
void expect_close_in_pixel_domain(const std::vector<float>& actual, const std::vector<float>& expected,
                                  const PreprocessSpec& spec, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const size_t plane = actual.size() / 3;
  double sum = 0, max = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = std::abs(double{actual[i]} - expected[i]) * spec.std[i / plane];
    sum += d;
    max = std::max(max, d);
  }
  const double mean = sum / static_cast<double>(actual.size());
  std::printf("%-45s mean |diff| %.3g levels, max %.3g levels (x255)\n", what.c_str(), mean * 255, max * 255);
  EXPECT_LE(mean, 1.0 / 255) << what;
  EXPECT_LE(max, 8.0 / 255) << what;  // catches a misplaced crop or wrong filter, which differ by far more
}

void check_preset_against_goldens(const PreprocessSpec& spec, const char* golden_key) {
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_GE(manifest["photos"].size(), 2u);  // the synthetic ones at least
  for (const auto& photo : manifest["photos"]) {
    const std::string source = photo["source"];
    auto image = decode_image(source);
    ASSERT_TRUE(image.is_ok()) << image.status().to_string();
    std::vector<float> out(static_cast<size_t>(spec.image_numel()));
    ASSERT_TRUE(preprocess(*image, spec, out).is_ok());
    const auto golden = read_raw<float>(image_golden_dir() / photo[golden_key].get<std::string>());
    expect_close_in_pixel_domain(out, golden, spec,
                                 std::string(golden_key) + " " + photo["name"].get<std::string>());
  }
}

TEST(Preprocess, TorchvisionMatchesTorchvisionOnPhotos) {
  check_preset_against_goldens(PreprocessSpec::torchvision_imagenet(), "torchvision");
}

TEST(Preprocess, TfSlimMatchesNumpyTfSlimOnPhotos) {
  check_preset_against_goldens(PreprocessSpec::tf_slim_inception(), "tfslim");
}

TEST(Preprocess, SharedModelMetadataSelectsTfSlim) {
  auto spec = preprocess_from_metadata(mobilenet_metadata());
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preset, PreprocessSpec::Preset::kTfSlim);
  EXPECT_EQ(spec->output_size, 224);
  EXPECT_FLOAT_EQ(spec->central_fraction, 0.875f);
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(spec->mean[c] * 255, 128.f);
    EXPECT_FLOAT_EQ(spec->std[c] * 255, 128.f);
  }
  EXPECT_NE(spec->describe().find("tf-slim"), std::string::npos);
}

// The expected-output file of the shared model records sum and sum of squares of each input tensor:
// an end-to-end check of decode + metadata-driven preprocessing.
TEST(Preprocess, SharedModelInputChecksums) {
  const auto shared = testing::shared_dir();
  if (!shared) GTEST_SKIP() << "no shared data folder (set GPULAB_SHARED_DIR)";
  std::ifstream in(*shared / "models" / "mobilenet_v2_expected.json");
  if (!in) GTEST_SKIP() << "no mobilenet_v2_expected.json in " << *shared;
  const auto expected = nlohmann::json::parse(in);
  auto spec = preprocess_from_metadata(mobilenet_metadata());
  ASSERT_TRUE(spec.is_ok());
  int checked = 0;
  for (const auto& entry : expected["images"]) {
    std::string file = entry["file"];  // "shared/images/cat.bmp"
    if (!file.starts_with("shared/images/")) continue;
    const auto path = *shared / "images" / file.substr(14);
    auto image = decode_image(path);
    ASSERT_TRUE(image.is_ok()) << image.status().to_string();
    std::vector<float> x(static_cast<size_t>(spec->image_numel()));
    ASSERT_TRUE(preprocess(*image, *spec, x).is_ok());
    double sum = 0, sumsq = 0;
    for (float v : x) sum += v, sumsq += double{v} * v;
    const double want_sum = entry["input_sum"], want_sumsq = entry["input_sumsq"];
    std::printf("%-20s input sum %.3f (expected %.3f), sumsq %.3f (expected %.3f)\n", path.filename().c_str(),
                sum, want_sum, sumsq, want_sumsq);
    // Exact decoders (BMP) agree to float rounding; JPEG decoders may differ by a level here and there.
    const double tol = path.extension() == ".bmp" ? 0.05 : 2e-4 * static_cast<double>(x.size());
    EXPECT_NEAR(sum, want_sum, tol) << path;
    EXPECT_NEAR(sumsq, want_sumsq, tol) << path;
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(Preprocess, MetadataForTorchvisionInZeroToOneUnits) {
  auto spec = preprocess_from_metadata({{"preprocess.resize", "resize_256_then_center_crop_224"},
                                        {"preprocess.pixel_range", "0-1"},
                                        {"preprocess.mean", "0.485, 0.456, 0.406"},
                                        {"preprocess.std", "0.229,0.224,0.225"},
                                        {"preprocess.interpolation", "bilinear"}});
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preset, PreprocessSpec::Preset::kTorchvision);
  EXPECT_EQ(spec->resize_shorter, 256);
  EXPECT_EQ(spec->output_size, 224);
  EXPECT_FLOAT_EQ(spec->mean[1], 0.456f);
  EXPECT_FLOAT_EQ(spec->std[2], 0.225f);
}

TEST(Preprocess, MetadataErrorsNameTheKeyAndValue) {
  auto base = mobilenet_metadata();
  {
    auto m = base;
    m.erase("preprocess.resize");
    auto r = preprocess_from_metadata(m);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
  {
    auto m = base;
    m["preprocess.resize"] = "letterbox_224";
    auto r = preprocess_from_metadata(m);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(r.status().message().find("letterbox_224"), std::string::npos) << r.status().message();
  }
  {
    auto m = base;
    m["preprocess.mean"] = "128,128";
    auto r = preprocess_from_metadata(m);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
    EXPECT_NE(r.status().message().find("preprocess.mean"), std::string::npos);
  }
  {
    auto m = base;
    m["preprocess.std"] = "128,0,128";
    EXPECT_EQ(preprocess_from_metadata(m).status().code(), StatusCode::kInvalidArgument);
  }
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"preprocess.layout", "BGR"},
                                                        {"preprocess.interpolation", "bicubic"},
                                                        {"preprocess.pixel_range", "-1-1"},
                                                        {"preprocess.channel_order", "RGB"}}) {
    auto m = base;
    m[key] = value;
    auto r = preprocess_from_metadata(m);
    ASSERT_FALSE(r.is_ok()) << key;
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

TEST(Preprocess, PresetNames) {
  EXPECT_EQ(preprocess_from_name("torchvision")->preset, PreprocessSpec::Preset::kTorchvision);
  EXPECT_EQ(preprocess_from_name("tf-slim")->preset, PreprocessSpec::Preset::kTfSlim);
  EXPECT_EQ(preprocess_from_name("caffe").status().code(), StatusCode::kInvalidArgument);
}

TEST(Preprocess, TfSlimNormalizesToMinusOneToOne) {
  Image white = gradient_image(300, 200);
  std::fill(white.rgb.begin(), white.rgb.end(), uint8_t{255});
  std::vector<float> out(3 * 224 * 224);
  ASSERT_TRUE(preprocess(white, PreprocessSpec::tf_slim_inception(), out).is_ok());
  for (float v : out) ASSERT_FLOAT_EQ(v, 1.f);
  std::fill(white.rgb.begin(), white.rgb.end(), uint8_t{0});
  ASSERT_TRUE(preprocess(white, PreprocessSpec::tf_slim_inception(), out).is_ok());
  for (float v : out) ASSERT_FLOAT_EQ(v, -1.f);
}

TEST(Preprocess, ResizeCropIsWhatPreprocessNormalizes) {
  const Image image = gradient_image(333, 257);
  for (const auto& spec : {PreprocessSpec::torchvision_imagenet(), PreprocessSpec::tf_slim_inception()}) {
    auto crop = resize_crop(image, spec);
    ASSERT_TRUE(crop.is_ok()) << crop.status().to_string();
    ASSERT_EQ(crop->width, 224);
    ASSERT_EQ(crop->height, 224);
    std::vector<float> out(static_cast<size_t>(spec.image_numel()));
    ASSERT_TRUE(preprocess(image, spec, out).is_ok());
    const bool exact = spec.preset == PreprocessSpec::Preset::kTorchvision;
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 224; y += 7) {
        for (int x = 0; x < 224; x += 5) {
          const float pixel = (out[(c * 224 + y) * 224 + x] * spec.std[c] + spec.mean[c]) * 255.f;
          ASSERT_NEAR(pixel, crop->at(x, y, c), exact ? 1e-3 : 0.5 + 1e-3) << c << "," << y << "," << x;
        }
      }
    }
  }
}

TEST(Preprocess, MakeBatchStacksPreprocessedImages) {
  const std::vector<Image> images = {gradient_image(300, 400), gradient_image(260, 260)};
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto batch = make_batch(images, spec);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  EXPECT_EQ(batch->shape(), (Shape{2, 3, 224, 224}));
  std::vector<float> second(static_cast<size_t>(spec.image_numel()));
  ASSERT_TRUE(preprocess(images[1], spec, second).is_ok());
  const auto all = batch->f32();
  EXPECT_TRUE(std::equal(second.begin(), second.end(), all.begin() + spec.image_numel()));
  EXPECT_EQ(make_batch({}, spec).status().code(), StatusCode::kInvalidArgument);
}

TEST(Preprocess, BadArgumentsAreRejected) {
  const Image image = gradient_image(64, 64);
  std::vector<float> small(100);
  const Status st = preprocess(image, PreprocessSpec::torchvision_imagenet(), small);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("150528"), std::string::npos) << st.message();
  Image broken = image;
  broken.rgb.resize(10);
  std::vector<float> out(3 * 224 * 224);
  EXPECT_EQ(preprocess(broken, PreprocessSpec::torchvision_imagenet(), out).code(),
            StatusCode::kInvalidArgument);
  PreprocessSpec bad = PreprocessSpec::tf_slim_inception();
  bad.central_fraction = 0.f;
  EXPECT_EQ(preprocess(image, bad, out).code(), StatusCode::kInvalidArgument);
  // A 1x60000 strip would be resized to 256x15360000: refused, not allocated.
  const Image strip = gradient_image(1, 60000);
  const Status tall = preprocess(strip, PreprocessSpec::torchvision_imagenet(), out);
  EXPECT_EQ(tall.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tall.message().find("aspect ratio"), std::string::npos) << tall.message();
}

// torchvision pads with zeros when the crop is larger than the resized image.
TEST(Preprocess, TorchvisionCropLargerThanImagePadsWithZeros) {
  PreprocessSpec spec = PreprocessSpec::torchvision_imagenet();
  spec.resize_shorter = 200;
  spec.output_size = 224;
  Image gray = gradient_image(200, 200);
  std::fill(gray.rgb.begin(), gray.rgb.end(), uint8_t{100});
  auto crop = resize_crop(gray, spec);
  ASSERT_TRUE(crop.is_ok());
  EXPECT_EQ(crop->at(0, 0, 0), 0);
  EXPECT_EQ(crop->at(11, 11, 1), 0);  // (224 - 200) / 2 = 12 columns/rows of padding
  EXPECT_EQ(crop->at(12, 12, 1), 100);
  EXPECT_EQ(crop->at(211, 211, 2), 100);
  EXPECT_EQ(crop->at(212, 212, 2), 0);
}

TEST(Preprocess, PilResizeKeepsConstantImagesAndIdentity) {
  Image image = gradient_image(97, 61);
  auto same = resize_bilinear_pil(image, 97, 61);
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ(same->rgb, image.rgb);
  std::fill(image.rgb.begin(), image.rgb.end(), uint8_t{77});
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{13, 9}, {300, 200}, {97, 5}}) {
    auto r = resize_bilinear_pil(image, w, h);
    ASSERT_TRUE(r.is_ok());
    for (uint8_t v : r->rgb) ASSERT_EQ(v, 77);
  }
  EXPECT_EQ(resize_bilinear_pil(image, 0, 5).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulab
