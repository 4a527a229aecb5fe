// Image decoding: JPEG (libjpeg-turbo), PNG (libpng), BMP and binary PPM/PGM, to 8-bit RGB.
//
// The format comes from the file's magic bytes, never its extension. Every decoder produces the
// same thing PIL's Image.open(p).convert("RGB") does, which is what torchvision users feed their
// models:
//   - JPEG: baseline, progressive, grayscale (replicated to 3 channels), CMYK/YCCK (Adobe
//     inverted CMYK, converted with PIL's integer formula). Accurate integer IDCT and fancy
//     upsampling (libjpeg's defaults, as PIL uses). EXIF orientation is ignored, as in PIL.
//     A truncated file ("Premature end of JPEG file") is an error, as are corrupt entropy data
//     and tables; harmless libjpeg warnings (extraneous bytes between markers, odd JFIF/Adobe
//     headers) are tolerated, as PIL tolerates them.
//   - PNG: 1/2/4/8/16-bit gray, gray+alpha, RGB, RGBA and palette, interlaced or not. Alpha is
//     dropped (not composited), as PIL's convert("RGB") does; 16-bit samples keep their high byte.
//     (PIL clamps 16-bit *grayscale* to 0..255 instead of scaling it; gpulab scales, on purpose.)
//     Gamma and colour-profile chunks are ignored, as in PIL. Any CRC error is an error.
//   - BMP: uncompressed 24- and 32-bit (BI_RGB, or BI_BITFIELDS with the standard masks),
//     bottom-up and top-down, and 8-bit palette.
//   - PPM/PGM: binary P6/P5 with maxval 255.
//
// Bad input (empty, truncated, corrupt, unknown format, zero or huge dimensions) returns a Status
// (kInvalidFile, kUnsupported, kNotFound, kIoError) whose message names the file; nothing crashes.
// All functions are thread-safe (no shared state) and allocate the output image.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

// A decoded image: always 8-bit RGB, interleaved, row-major HWC (rgb[(y*width + x)*3 + c],
// c = 0 R, 1 G, 2 B), rows packed without padding. channels is 3 for every decoded image.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;
  std::vector<uint8_t> rgb;

  size_t size_bytes() const { return rgb.size(); }
  bool empty() const { return rgb.empty(); }
  // Pixel (x, y), channel c; no bounds check.
  uint8_t at(int x, int y, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * channels + c]; }
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kBmp, kPpm };

// "jpeg", "png", "bmp", "ppm", "unknown".
std::string_view image_format_name(ImageFormat format);

// The format whose magic bytes start `bytes`; kUnknown when none does.
ImageFormat detect_image_format(std::span<const std::byte> bytes);

// Decode refuses images larger than this per side or in total (a decompression bomb or corrupt
// header); 2^28 pixels are 768 MiB of RGB.
inline constexpr int64_t kMaxImageSide = 65535;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// kInvalidFile when width or height is zero/negative or beyond the limits above.
Status check_image_dimensions(int64_t width, int64_t height, std::string_view source_name);

// Decoders allocate an image's pixels only when its RGB bytes are at most
// max(kDecodeFloorBytes, kMaxDecodeExpansion x the file's size): any image up to 16 MiB of RGB
// (5.6 megapixels) decodes whatever its compression; a larger one needs a file of at least 1/1024
// of that (deflate's best ratio is 1032:1, photographs compress 5-20:1). So a file of a few
// hundred bytes whose header promises a billion pixels is refused before anything is allocated,
// decoding peaks at a bounded multiple of this budget (docs/fuzzing.md), and so does its time:
// libjpeg decodes every declared pixel of a truncated file before it reports the truncation.
inline constexpr int64_t kDecodeFloorBytes = int64_t{16} << 20;
inline constexpr int64_t kMaxDecodeExpansion = 1024;

// kInvalidFile when a width x height RGB image is beyond the budget for a file of `file_bytes`.
Status check_decode_budget(int64_t width, int64_t height, size_t file_bytes, std::string_view source_name);

// Reads and decodes a file. Missing file: kNotFound.
Result<Image> decode_image(const std::filesystem::path& path);

// Decodes bytes already in memory; `source_name` (a path or "<stdin>") only appears in messages.
Result<Image> decode_image_bytes(std::span<const std::byte> bytes, std::string_view source_name);

// Options of decode_image_into().
struct DecodeOptions {
  // JPEG only: decode at the smallest of the DCT scaling factors 1/2, 1/4, 1/8 (or 1) whose
  // scaled shorter side is still at least this many pixels. The scaling happens inside the
  // inverse DCT (the factors libjpeg-turbo runs with SIMD code), so a 4000x3000 photo needed at
  // 256 pixels is decoded to 1000x750 (the entropy decoding still reads the whole file). The pixels differ
  // from a full decode followed by a resize (the DCT's filter is not PIL's). 0: always full size, as
  // decode_image() does. Other formats ignore it.
  int min_shorter_side = 0;
};

// What decode_image_into() decoded.
struct DecodeInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int source_width = 0;  // the file's dimensions, before any DCT scaling
  int source_height = 0;
  int scale_num = 1;  // the DCT scaling factor applied: scale_num / scale_denom (1/1: none)
  int scale_denom = 1;
};

// As decode_image_bytes(), into `out`, whose pixel buffer is reused when its capacity suffices
// (JPEG, the common case: a decode loop reaches a steady state without allocating). On error the
// Status names the file and `out` holds no valid image. Thread-safe for distinct `out`s.
Result<DecodeInfo> decode_image_into(std::span<const std::byte> bytes, std::string_view source_name,
                                     const DecodeOptions& options, Image* out);

}  // namespace gpulab
