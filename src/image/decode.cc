#include "image/decode.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <string>

#include <fmt/format.h>

#include "core/file_io.h"
#include "image/decode_internal.h"

namespace gpulab {
namespace {

bool starts_with(std::span<const std::byte> bytes, std::span<const uint8_t> magic) {
  if (bytes.size() < magic.size()) return false;
  return std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

bool is_space(std::byte b) {
  const auto c = static_cast<char>(b);
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

std::string_view image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kPng: return "png";
    case ImageFormat::kBmp: return "bmp";
    case ImageFormat::kPpm: return "ppm";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat detect_image_format(std::span<const std::byte> bytes) {
  static constexpr std::array<uint8_t, 3> kJpeg = {0xFF, 0xD8, 0xFF};
  static constexpr std::array<uint8_t, 8> kPng = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  static constexpr std::array<uint8_t, 2> kBmp = {'B', 'M'};
  if (starts_with(bytes, kJpeg)) return ImageFormat::kJpeg;
  if (starts_with(bytes, kPng)) return ImageFormat::kPng;
  if (starts_with(bytes, kBmp)) return ImageFormat::kBmp;
  if (bytes.size() >= 3 && static_cast<char>(bytes[0]) == 'P' &&
      (static_cast<char>(bytes[1]) == '6' || static_cast<char>(bytes[1]) == '5') && is_space(bytes[2])) {
    return ImageFormat::kPpm;
  }
  return ImageFormat::kUnknown;
}

Status check_image_dimensions(int64_t width, int64_t height, std::string_view source_name) {
  if (width <= 0 || height <= 0) {
    return Status::invalid_file(
        fmt::format("image '{}': invalid dimensions {}x{} (width x height). "
                    "The file is corrupt.",
                    source_name, width, height));
  }
  if (width > kMaxImageSide || height > kMaxImageSide || width * height > kMaxImagePixels) {
    return Status::invalid_file(fmt::format(
        "image '{}': dimensions {}x{} exceed the decoder's limit ({} pixels per side, {} pixels in "
        "total). Downscale the image before using it.",
        source_name, width, height, kMaxImageSide, kMaxImagePixels));
  }
  return Status::ok();
}

Status check_decode_budget(int64_t width, int64_t height, size_t file_bytes, std::string_view source_name) {
  GPULAB_TRY(check_image_dimensions(width, height, source_name));
  const int64_t rgb_bytes = width * height * 3;  // at most 3 * kMaxImagePixels
  const int64_t budget = std::max<int64_t>(
      kDecodeFloorBytes,
      static_cast<int64_t>(std::min<size_t>(file_bytes, size_t{1} << 40)) * kMaxDecodeExpansion);
  if (rgb_bytes > budget) {
    return Status::invalid_file(fmt::format(
        "image '{}': its header promises {}x{} pixels ({} bytes of RGB) from a file of {} bytes, more than "
        "{}x expansion. The file is corrupt or a decompression bomb; re-encode the image.",
        source_name, width, height, rgb_bytes, file_bytes, kMaxDecodeExpansion));
  }
  return Status::ok();
}

Result<Image> decode_image_bytes(std::span<const std::byte> bytes, std::string_view source_name) {
  if (bytes.empty()) {
    return Status::invalid_file(
        fmt::format("image '{}': the file is empty (0 bytes). "
                    "Check that it was copied completely.",
                    source_name));
  }
  switch (detect_image_format(bytes)) {
    case ImageFormat::kJpeg: return image_detail::decode_jpeg(bytes, source_name);
    case ImageFormat::kPng: return image_detail::decode_png(bytes, source_name);
    case ImageFormat::kBmp: return image_detail::decode_bmp(bytes, source_name);
    case ImageFormat::kPpm: return image_detail::decode_ppm(bytes, source_name);
    case ImageFormat::kUnknown: break;
  }
  std::string head;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    head += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned>(bytes[i]));
  }
  return Status::unsupported(fmt::format(
      "image '{}': unknown image format (first bytes {}). Supported: JPEG, PNG, BMP, binary PPM/PGM.",
      source_name, head));
}

Result<DecodeInfo> decode_image_into(std::span<const std::byte> bytes, std::string_view source_name,
                                     const DecodeOptions& options, Image* out) {
  const ImageFormat format = detect_image_format(bytes);
  if (format == ImageFormat::kJpeg) {
    DecodeInfo info;
    info.format = format;
    const Status decoded =
        image_detail::decode_jpeg_into(bytes, source_name, options.min_shorter_side, out, &info);
    if (!decoded.is_ok()) {
      out->width = out->height = 0;
      out->rgb.clear();
      return decoded;
    }
    return info;
  }
  GPULAB_ASSIGN_OR_RETURN(Image image, decode_image_bytes(bytes, source_name));
  DecodeInfo info{.format = format, .source_width = image.width, .source_height = image.height};
  *out = std::move(image);
  return info;
}

Result<Image> decode_image(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, read_file_bytes(path));
  return decode_image_bytes(bytes, path.string());
}

namespace image_detail {

Result<Image> allocate_image(int width, int height, size_t file_bytes, std::string_view source_name) {
  GPULAB_TRY(check_decode_budget(width, height, file_bytes, source_name));
  Image image;
  image.width = width;
  image.height = height;
  image.channels = 3;
  try {
    image.rgb.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  } catch (const std::bad_alloc&) {
    return Status::out_of_memory(fmt::format("image '{}': cannot allocate {} bytes for {}x{} RGB pixels.",
                                             source_name, static_cast<size_t>(width) * height * 3, width,
                                             height));
  }
  return image;
}

Status reshape_image(int width, int height, std::string_view source_name, Image* image) {
  GPULAB_TRY(check_image_dimensions(width, height, source_name));
  const size_t bytes = static_cast<size_t>(width) * static_cast<size_t>(height) * 3;
  try {
    image->rgb.resize(bytes);
  } catch (const std::bad_alloc&) {
    return Status::out_of_memory(fmt::format("image '{}': cannot allocate {} bytes for {}x{} RGB pixels.",
                                             source_name, bytes, width, height));
  }
  image->width = width;
  image->height = height;
  image->channels = 3;
  return Status::ok();
}

}  // namespace image_detail
}  // namespace gpulab
