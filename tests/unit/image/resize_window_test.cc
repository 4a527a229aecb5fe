// resize_crop_into() (the pipeline's preprocessing: PIL's passes restricted to the crop window,
// geometry from the file's size) and decode_image_into() (buffer reuse, DCT scaling), against the
// whole-image functions they must agree with.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "image/decode.h"
#include "image/preprocess.h"
#include "image_test_support.h"

namespace gpulab {
namespace {

// gradient_image() with a higher-frequency pattern in B, so that every filter tap matters.
Image pattern_image(int width, int height) {
  Image image = testing::gradient_image(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      image.rgb[(static_cast<size_t>(y) * width + x) * 3 + 2] =
          static_cast<uint8_t>((x * 37 + y * 11 + (x ^ y)) % 256);
  return image;
}

// Low frequencies only, where a scaled IDCT and a resize agree closely.
Image smooth_image(int width, int height) {
  Image image = pattern_image(width, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      image.rgb[(static_cast<size_t>(y) * width + x) * 3 + 2] =
          static_cast<uint8_t>(128 + 100 * std::sin(x / 40.0) * std::cos(y / 30.0));
  return image;
}

std::vector<std::byte> encode_jpeg(const Image& image, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, image.rgb.data(), image.width, 0, image.height, TJPF_RGB, &out, &size,
                             TJSAMP_420, quality, 0);
  std::vector<std::byte> bytes;
  if (rc == 0) bytes.assign(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

TEST(ResizeCropInto, EqualsResizeCropAndPreprocessForTorchvision) {
  ResizeScratch scratch;
  std::vector<uint8_t> crop(224 * 224 * 3);
  std::vector<float> fast(3 * 224 * 224), slow(3 * 224 * 224);
  const std::vector<std::pair<int, int>> sizes = {{333, 257},  {256, 341}, {341, 256}, {1024, 768},
                                                  {257, 1000}, {97, 61},   {224, 224}, {256, 256},
                                                  {600, 257},  {255, 300}};
  for (const auto& [w, h] : sizes) {
    const Image image = pattern_image(w, h);
    for (PreprocessSpec spec :
         {PreprocessSpec::torchvision_imagenet(), PreprocessSpec::tf_slim_inception()}) {
      SCOPED_TRACE(::testing::Message() << w << "x" << h << " " << spec.describe());
      auto expected = resize_crop(image, spec);
      ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
      ASSERT_TRUE(resize_crop_into(image, w, h, spec, crop, &scratch).is_ok());
      ASSERT_EQ(crop, expected->rgb);
      if (spec.preset != PreprocessSpec::Preset::kTorchvision) continue;
      ASSERT_TRUE(normalize_into(crop, spec, fast).is_ok());
      ASSERT_TRUE(preprocess(image, spec, slow).is_ok());
      ASSERT_EQ(fast, slow);
    }
  }
}

// A crop larger than the resized image: zero padding, as torchvision pads.
TEST(ResizeCropInto, PadsLikeResizeCrop) {
  PreprocessSpec spec = PreprocessSpec::torchvision_imagenet();
  spec.resize_shorter = 180;
  const Image image = pattern_image(300, 200);
  std::vector<uint8_t> crop(224 * 224 * 3, 7);
  ResizeScratch scratch;
  ASSERT_TRUE(resize_crop_into(image, 300, 200, spec, crop, &scratch).is_ok());
  auto expected = resize_crop(image, spec);
  ASSERT_TRUE(expected.is_ok());
  EXPECT_EQ(crop, expected->rgb);
}

// With a reduced decode, the geometry is the file's: a 512x384 image standing for a 1024x768 file
// gives the crop of the 1024x768 file's resize, computed from the smaller pixels, which is exactly
// PIL resizing the 512x384 image to 341x256.
TEST(ResizeCropInto, GeometryComesFromTheSourceSize) {
  const auto spec = PreprocessSpec::torchvision_imagenet();
  const Image half = pattern_image(512, 384);
  std::vector<uint8_t> crop(224 * 224 * 3);
  ResizeScratch scratch;
  ASSERT_TRUE(resize_crop_into(half, 1024, 768, spec, crop, &scratch).is_ok());
  auto resized = resize_bilinear_pil(half, 341, 256);
  ASSERT_TRUE(resized.is_ok());
  for (int y = 0; y < 224; ++y)
    for (int x = 0; x < 224; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(crop[(static_cast<size_t>(y) * 224 + x) * 3 + c], resized->at(x + 58, y + 16, c))
            << x << "," << y;
}

TEST(ResizeCropInto, RejectsBadBuffersAndSizes) {
  const Image image = pattern_image(300, 300);
  ResizeScratch scratch;
  std::vector<uint8_t> small(100);
  EXPECT_EQ(resize_crop_into(image, 300, 300, PreprocessSpec::torchvision_imagenet(), small, &scratch).code(),
            StatusCode::kInvalidArgument);
  std::vector<uint8_t> crop(224 * 224 * 3);
  EXPECT_EQ(resize_crop_into(image, 0, 300, PreprocessSpec::torchvision_imagenet(), crop, &scratch).code(),
            StatusCode::kInvalidArgument);
  std::vector<float> out(5);
  EXPECT_EQ(normalize_into(crop, PreprocessSpec::torchvision_imagenet(), out).code(),
            StatusCode::kInvalidArgument);
}

TEST(DecodeInto, FullSizeEqualsDecodeImageAndReusesTheBuffer) {
  const std::vector<std::byte> jpeg = encode_jpeg(pattern_image(640, 480), 90);
  ASSERT_FALSE(jpeg.empty());
  auto expected = decode_image_bytes(jpeg, "a.jpg");
  ASSERT_TRUE(expected.is_ok());
  Image image;
  auto info = decode_image_into(jpeg, "a.jpg", {}, &image);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(image.rgb, expected->rgb);
  EXPECT_EQ(info->format, ImageFormat::kJpeg);
  EXPECT_EQ(info->source_width, 640);
  EXPECT_EQ(info->scale_num, 1);
  EXPECT_EQ(info->scale_denom, 1);
  const uint8_t* buffer = image.rgb.data();
  ASSERT_TRUE(decode_image_into(jpeg, "a.jpg", {}, &image).is_ok());
  EXPECT_EQ(image.rgb.data(), buffer) << "a second decode of the same size reallocated";
}

TEST(DecodeInto, DctScalingPicksTheSmallestSizeNotBelowTheMinimum) {
  const std::vector<std::byte> jpeg = encode_jpeg(smooth_image(1024, 768), 90);
  Image image;
  // 768 / 2 = 384 >= 256 > 768 / 4 = 192 (3/8 would give 288, but only 1/2, 1/4, 1/8 are used).
  auto info = decode_image_into(jpeg, "big.jpg", {.min_shorter_side = 256}, &image);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(image.width, 512);
  EXPECT_EQ(image.height, 384);
  EXPECT_EQ(info->source_width, 1024);
  EXPECT_EQ(info->source_height, 768);
  EXPECT_EQ(info->scale_num, 1);
  EXPECT_EQ(info->scale_denom, 2);
  // The scaled decode is a low-pass version of the image: close to the full decode resized.
  auto full = decode_image_bytes(jpeg, "big.jpg");
  ASSERT_TRUE(full.is_ok());
  auto resized = resize_bilinear_pil(*full, 512, 384);
  ASSERT_TRUE(resized.is_ok());
  double total = 0;
  for (size_t i = 0; i < image.rgb.size(); ++i) total += std::abs(int(image.rgb[i]) - int(resized->rgb[i]));
  EXPECT_LT(total / static_cast<double>(image.rgb.size()), 2.0);
  // Small enough already: no scaling. Larger than the image: none either.
  ASSERT_TRUE(decode_image_into(jpeg, "big.jpg", {.min_shorter_side = 385}, &image).is_ok());
  EXPECT_EQ(image.width, 1024);
  ASSERT_TRUE(decode_image_into(jpeg, "big.jpg", {.min_shorter_side = 5000}, &image).is_ok());
  EXPECT_EQ(image.width, 1024);
  // 768 / 8 = 96 >= 90.
  ASSERT_TRUE(decode_image_into(jpeg, "big.jpg", {.min_shorter_side = 90}, &image).is_ok());
  EXPECT_EQ(image.width, 128);
}

TEST(DecodeInto, ErrorsNameTheFileAndLeaveNoImage) {
  std::vector<std::byte> jpeg = encode_jpeg(pattern_image(64, 64), 90);
  jpeg.resize(jpeg.size() / 2);
  Image image = pattern_image(10, 10);
  auto info = decode_image_into(jpeg, "cut.jpg", {.min_shorter_side = 32}, &image);
  ASSERT_FALSE(info.is_ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(info.status().message().find("cut.jpg"), std::string::npos);
  EXPECT_TRUE(image.empty());
  // The thread's decompressor still works after the error.
  const std::vector<std::byte> good = encode_jpeg(pattern_image(64, 64), 90);
  EXPECT_TRUE(decode_image_into(good, "good.jpg", {}, &image).is_ok());
  const std::vector<std::byte> junk = {std::byte{1}, std::byte{2}, std::byte{3}};
  EXPECT_EQ(decode_image_into(junk, "junk.bin", {}, &image).status().code(), StatusCode::kUnsupported);
}

// TurboJPEG 2.1 can leave a decompressor unable to read the next, valid file after an error
// ("Bogus DQT index"); each thread's decompressor is replaced after any error, so a good file
// decodes whatever came before it on the thread.
TEST(DecodeInto, GoodJpegDecodesAfterAnyCorruptOne) {
  const std::vector<std::byte> good = encode_jpeg(pattern_image(96, 64), 90);
  auto expected = decode_image_bytes(good, "good.jpg");
  ASSERT_TRUE(expected.is_ok());
  Image image;
  for (size_t pos = 2; pos < std::min<size_t>(good.size(), 700); pos += 3) {
    std::vector<std::byte> bad = good;
    bad[pos] ^= std::byte{0x5a};
    (void)decode_image_into(bad, "bad.jpg", {.min_shorter_side = pos % 2 ? 32 : 0}, &image);
    auto again = decode_image_into(good, "good.jpg", {}, &image);
    ASSERT_TRUE(again.is_ok()) << "after corrupting byte " << pos << ": " << again.status().to_string();
    ASSERT_EQ(image.rgb, expected->rgb) << "after corrupting byte " << pos;
  }
}

}  // namespace
}  // namespace gpulab
