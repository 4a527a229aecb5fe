#include "image/decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zlib.h>

#include "core/file_io.h"
#include "image_test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using testing::image_golden_dir;
using testing::read_raw;

struct PixelDiff {
  double mean_abs = 0;
  int max_abs = 0;
};

PixelDiff diff(const Image& image, const std::vector<uint8_t>& expected) {
  PixelDiff d;
  if (image.rgb.size() != expected.size() || expected.empty()) return {1e9, 255};
  double sum = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const int a = std::abs(int{image.rgb[i]} - int{expected[i]});
    sum += a;
    d.max_abs = std::max(d.max_abs, a);
  }
  d.mean_abs = sum / static_cast<double>(expected.size());
  return d;
}

bool is_jpeg_name(const std::string& file) {
  return file.ends_with(".jpg") || file == "jpeg_named.png";
}

std::vector<std::byte> to_bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

TEST(DecodeImage, MatchesPilOnGeneratedImages) {
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_GE(manifest["images"].size(), 15u);
  for (const auto& entry : manifest["images"]) {
    const std::string file = entry["file"];
    SCOPED_TRACE(file);
    auto image = decode_image(image_golden_dir() / file);
    ASSERT_TRUE(image.is_ok()) << image.status().to_string();
    EXPECT_EQ(image->width, entry["width"].get<int>());
    EXPECT_EQ(image->height, entry["height"].get<int>());
    EXPECT_EQ(image->channels, 3);
    const PixelDiff d = diff(*image, read_raw<uint8_t>(image_golden_dir() / entry["ref"].get<std::string>()));
    std::printf("decode %-18s vs PIL: mean |diff| %.4f levels, max %d\n", file.c_str(), d.mean_abs,
                d.max_abs);
    if (is_jpeg_name(file)) {
      // PIL may link another libjpeg build: IDCT/upsampling rounding may differ by a level.
      EXPECT_LE(d.mean_abs, 1.0);
    } else {
      EXPECT_EQ(d.max_abs, 0) << "lossless formats must decode exactly as PIL does";
    }
  }
}

TEST(DecodeImage, MatchesPilOnPhotos) {
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_GE(manifest["photos"].size(), 2u);  // the synthetic ones at least
  if (manifest["photos"].size() == 2)
    std::printf("shared photos were not available to the golden generator\n");
  for (const auto& photo : manifest["photos"]) {
    const std::string source = photo["source"];
    SCOPED_TRACE(source);
    auto image = decode_image(source);
    ASSERT_TRUE(image.is_ok()) << image.status().to_string();
    EXPECT_EQ(image->width, photo["width"].get<int>());
    EXPECT_EQ(image->height, photo["height"].get<int>());
    const PixelDiff d = diff(*image, read_raw<uint8_t>(image_golden_dir() / photo["ref"].get<std::string>()));
    std::printf("decode %-40s vs PIL: mean |diff| %.4f levels, max %d\n", source.c_str(), d.mean_abs,
                d.max_abs);
    EXPECT_LE(d.mean_abs, 1.0);
    if (!source.ends_with(".jpg")) {
      EXPECT_EQ(d.max_abs, 0);
    }
  }
}

TEST(DecodeImage, BrokenFilesGiveCodeAndMessageNamingTheFile) {
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_GE(manifest["bad"].size(), 5u);
  for (const auto& entry : manifest["bad"]) {
    const std::string file = entry["file"];
    SCOPED_TRACE(file);
    auto image = decode_image(image_golden_dir() / file);
    ASSERT_FALSE(image.is_ok());
    const Status& st = image.status();
    EXPECT_EQ(status_code_name(st.code()), entry["code"].get<std::string>()) << st.to_string();
    EXPECT_NE(st.message().find(file), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(entry["contains"].get<std::string>()), std::string::npos) << st.message();
  }
}

TEST(DecodeImage, MissingFileIsNotFound) {
  auto image = decode_image("/nonexistent/dir/cat.jpg");
  ASSERT_FALSE(image.is_ok());
  EXPECT_EQ(image.status().code(), StatusCode::kNotFound);
  EXPECT_NE(image.status().message().find("/nonexistent/dir/cat.jpg"), std::string::npos);
}

TEST(DecodeImage, FormatComesFromMagicBytes) {
  EXPECT_EQ(detect_image_format(to_bytes("\xFF\xD8\xFF\xE0")), ImageFormat::kJpeg);
  EXPECT_EQ(detect_image_format(to_bytes("\x89PNG\r\n\x1a\n")), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format(to_bytes("BM")), ImageFormat::kBmp);
  EXPECT_EQ(detect_image_format(to_bytes("P6\n")), ImageFormat::kPpm);
  EXPECT_EQ(detect_image_format(to_bytes("P3\n")), ImageFormat::kUnknown);  // ASCII PPM: not supported
  EXPECT_EQ(detect_image_format(to_bytes("GIF89a")), ImageFormat::kUnknown);
  EXPECT_EQ(detect_image_format({}), ImageFormat::kUnknown);
  EXPECT_EQ(image_format_name(ImageFormat::kPng), "png");
}

TEST(DecodeImage, EmptyAndUnknownBytes) {
  auto empty = decode_image_bytes({}, "mem.jpg");
  ASSERT_FALSE(empty.is_ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(empty.status().message().find("mem.jpg"), std::string::npos);
  auto gif = decode_image_bytes(to_bytes("GIF89a....."), "anim.gif");
  ASSERT_FALSE(gif.is_ok());
  EXPECT_EQ(gif.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(gif.status().message().find("47 49 46 38"), std::string::npos) << gif.status().message();
}

TEST(DecodeImage, DimensionLimits) {
  EXPECT_TRUE(check_image_dimensions(1, 1, "x").is_ok());
  EXPECT_TRUE(check_image_dimensions(65535, 4096, "x").is_ok());
  EXPECT_EQ(check_image_dimensions(0, 10, "x").code(), StatusCode::kInvalidFile);
  EXPECT_EQ(check_image_dimensions(10, -1, "x").code(), StatusCode::kInvalidFile);
  EXPECT_EQ(check_image_dimensions(65536, 1, "x").code(), StatusCode::kInvalidFile);
  EXPECT_EQ(check_image_dimensions(20000, 20000, "x").code(), StatusCode::kInvalidFile);  // > 2^28 pixels
}

void put_be32(std::string& s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xFF));
}

// A PNG signature and an IHDR chunk with a correct CRC, and nothing after it.
std::string png_header(uint32_t width, uint32_t height) {
  std::string body = "IHDR";
  put_be32(body, width);
  put_be32(body, height);
  body += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB
  std::string png = "\x89PNG\r\n\x1a\n";
  put_be32(png, 13);
  png += body;
  put_be32(png, static_cast<uint32_t>(
                    crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
  return png;
}

TEST(DecodeImage, HugeOrZeroDimensionsAreRefusedBeforeAllocating) {
  for (const auto& [w, h] : std::vector<std::pair<uint32_t, uint32_t>>{{70000, 10}, {30000, 30000}}) {
    auto png = decode_image_bytes(to_bytes(png_header(w, h)), "huge.png");
    ASSERT_FALSE(png.is_ok());
    EXPECT_EQ(png.status().code(), StatusCode::kInvalidFile) << png.status().to_string();
  }
  auto zero = decode_image_bytes(to_bytes(png_header(0, 10)), "zero.png");
  ASSERT_FALSE(zero.is_ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidFile);

  auto ppm = decode_image_bytes(to_bytes("P6\n100000 10\n255\n"), "huge.ppm");
  ASSERT_FALSE(ppm.is_ok());
  EXPECT_NE(ppm.status().message().find("exceed"), std::string::npos) << ppm.status().message();

  std::string bmp(54, '\0');
  bmp[0] = 'B', bmp[1] = 'M', bmp[10] = 54, bmp[14] = 40, bmp[28] = 24;
  const uint32_t width = 70000;
  std::memcpy(&bmp[18], &width, 4);  // little-endian host
  bmp[22] = 1;
  auto b = decode_image_bytes(to_bytes(bmp), "huge.bmp");
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidFile);
}

// A few bytes whose header promises 65535 x 4096 pixels (768 MiB of RGB, within the per-side and
// total limits; a JPEG 65500 x 4096): refused by the decode budget before the pixels are allocated.
TEST(DecodeImage, AHeaderPromisingFarMorePixelsThanTheFileCanHoldIsRefused) {
  // The header and an IDAT chunk: libpng reads up to the image data before the pixels are asked for.
  std::string idat = "IDAT";
  const Bytef nothing[1] = {0};
  Bytef deflated[64];
  uLongf deflated_size = sizeof deflated;
  ASSERT_EQ(compress(deflated, &deflated_size, nothing, 1), Z_OK);
  idat.append(reinterpret_cast<const char*>(deflated), deflated_size);
  std::string bomb = png_header(65535, 4096);
  put_be32(bomb, static_cast<uint32_t>(deflated_size));
  bomb += idat;
  put_be32(bomb, static_cast<uint32_t>(
                     crc32(0, reinterpret_cast<const Bytef*>(idat.data()), static_cast<uInt>(idat.size()))));
  auto png = decode_image_bytes(to_bytes(bomb), "bomb.png");
  ASSERT_FALSE(png.is_ok());
  EXPECT_EQ(png.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(png.status().message().find("decompression bomb"), std::string::npos) << png.status().message();

  EXPECT_TRUE(check_decode_budget(2000, 2000, 1, "x").is_ok());  // 12 MB: under the 16 MiB floor
  EXPECT_EQ(check_decode_budget(4000, 3000, 1000, "x").code(), StatusCode::kInvalidFile);  // 36 MB
  EXPECT_TRUE(check_decode_budget(4000, 3000, 40'000, "x").is_ok());   // 36 MB from 40 kB: 900x
  EXPECT_TRUE(check_decode_budget(8000, 8000, 200'000, "x").is_ok());  // 192 MB from 200 kB: 960x
  EXPECT_EQ(check_decode_budget(8000, 8000, 100'000, "x").code(), StatusCode::kInvalidFile);  // 1920x
  EXPECT_EQ(check_decode_budget(65536, 1, 1 << 30, "x").code(), StatusCode::kInvalidFile);    // a side

  // A real JPEG whose frame header (SOF0) is edited to 65500 x 4096 (libjpeg's largest width).
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_FALSE(manifest["images"].empty());
  auto bytes = read_file_bytes(image_golden_dir() / "baseline.jpg");
  ASSERT_TRUE(bytes.is_ok());
  std::vector<std::byte> jpeg = *bytes;
  bool patched = false;
  for (size_t i = 0; i + 9 < jpeg.size() && !patched; ++i) {
    if (jpeg[i] == std::byte{0xFF} && jpeg[i + 1] == std::byte{0xC0}) {  // SOF0: len(2) P(1) Y(2) X(2)
      jpeg[i + 5] = std::byte{0x10}, jpeg[i + 6] = std::byte{0x00};      // 4096 lines
      jpeg[i + 7] = std::byte{0xFF}, jpeg[i + 8] = std::byte{0xDC};      // 65500 columns
      patched = true;
    }
  }
  ASSERT_TRUE(patched);
  auto big = decode_image_bytes(jpeg, "bomb.jpg");
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("decompression bomb"), std::string::npos) << big.status().message();
}

// Inputs the fuzzers found (tests/fuzz/regressions/<target>, see its README): each is refused as
// an invalid or unsupported file, and within the resource bounds (the fuzz CI stage checks those).
TEST(DecodeImage, FuzzRegressionsAreRefusedCleanly) {
  int files = 0;
  for (const char* target : {"image", "jpeg", "png", "bmp", "ppm"}) {
    const fs::path dir = fs::path(GPULAB_SOURCE_DIR) / "tests/fuzz/regressions" / target;
    if (!fs::exists(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      auto image = decode_image(entry.path());
      ++files;
      ASSERT_FALSE(image.is_ok()) << entry.path();
      EXPECT_TRUE(image.status().code() == StatusCode::kInvalidFile ||
                  image.status().code() == StatusCode::kUnsupported)
          << entry.path() << ": " << image.status().to_string();
    }
  }
  EXPECT_GE(files, 1);
}

TEST(DecodeImage, PpmGrayAndComments) {
  std::string pgm = "P5\n# a comment\n2 2\n255\n";
  pgm += std::string("\x00\x40\x80\xff", 4);
  auto image = decode_image_bytes(to_bytes(pgm), "g.pgm");
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  ASSERT_EQ(image->width, 2);
  EXPECT_EQ(image->at(1, 0, 0), 0x40);
  EXPECT_EQ(image->at(1, 0, 2), 0x40);
  EXPECT_EQ(image->at(1, 1, 1), 0xff);
}

// Every prefix and many random single-byte corruptions of valid files: an error or an image,
// never a crash (run under ASan/UBSan in the asan preset).
TEST(DecodeImage, TruncatedAndCorruptedBytesNeverCrash) {
  GPULAB_REQUIRE_IMAGE_MANIFEST(manifest);
  ASSERT_FALSE(manifest["images"].empty());
  std::mt19937 rng(1234);
  for (const char* file : {"baseline.jpg", "progressive.jpg", "rgb8.png", "palette.png", "bottom_up24.bmp",
                           "top_down32.bmp", "binary.ppm"}) {
    SCOPED_TRACE(file);
    auto bytes = read_file_bytes(image_golden_dir() / file);
    ASSERT_TRUE(bytes.is_ok());
    const std::vector<std::byte>& full = *bytes;
    int errors = 0, tried = 0;
    const size_t step = std::max<size_t>(1, full.size() / 300);
    for (size_t n = 0; n < full.size(); n += step) {
      auto r = decode_image_bytes(std::span(full).first(n), file);
      ++tried;
      if (!r.is_ok()) {
        ++errors;
        EXPECT_NE(r.status().code(), StatusCode::kInternal) << r.status().to_string();
      }
    }
    EXPECT_EQ(errors, tried) << "every strict prefix of a file is truncated";
    for (int i = 0; i < 200; ++i) {
      std::vector<std::byte> mutated = full;
      for (int k = 0; k < 4; ++k) {
        mutated[rng() % mutated.size()] = static_cast<std::byte>(rng() & 0xFF);
      }
      auto r = decode_image_bytes(mutated, file);
      if (r.is_ok()) {
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
      }
    }
  }
}

}  // namespace
}  // namespace gpulab
