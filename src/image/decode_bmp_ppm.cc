// Small strict readers for uncompressed BMP and binary PPM/PGM. Every offset and size read from the
// file is checked against the file's length before it is used.
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "image/decode_internal.h"

namespace gpulab::image_detail {
namespace {

uint32_t read_u32le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
uint16_t read_u16le(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}

Status bmp_error(std::string_view source_name, std::string_view what) {
  return Status::invalid_file(
      fmt::format("image '{}': {}. The BMP file is corrupt or truncated.", source_name, what));
}

constexpr uint32_t kBiRgb = 0;
constexpr uint32_t kBiBitfields = 3;

}  // namespace

Result<Image> decode_bmp(std::span<const std::byte> bytes, std::string_view source_name) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint64_t size = bytes.size();
  constexpr uint64_t kFileHeaderBytes = 14;
  if (size < kFileHeaderBytes + 40) {
    return bmp_error(source_name, fmt::format("truncated header ({} bytes)", size));
  }
  const uint64_t pixel_offset = read_u32le(p + 10);
  const uint32_t header_bytes = read_u32le(p + 14);
  if (header_bytes < 40 || kFileHeaderBytes + header_bytes > size) {
    if (header_bytes == 12) {
      return Status::unsupported(
          fmt::format("image '{}': OS/2 BMP (12-byte header) is not supported. "
                      "Convert it to PNG or a Windows BMP.",
                      source_name));
    }
    return bmp_error(source_name, fmt::format("invalid info header size {}", header_bytes));
  }
  const int64_t width = static_cast<int32_t>(read_u32le(p + 18));
  const int64_t signed_height = static_cast<int32_t>(read_u32le(p + 22));
  const uint16_t bits_per_pixel = read_u16le(p + 28);
  const uint32_t compression = read_u32le(p + 30);
  uint32_t colors_used = read_u32le(p + 46);
  const bool top_down = signed_height < 0;
  const int64_t height = top_down ? -signed_height : signed_height;
  GPULAB_TRY(check_image_dimensions(width, height, source_name));

  if (bits_per_pixel != 8 && bits_per_pixel != 24 && bits_per_pixel != 32) {
    return Status::unsupported(
        fmt::format("image '{}': {}-bit BMP is not supported (8, 24 and 32 are). "
                    "Convert it to PNG.",
                    source_name, bits_per_pixel));
  }
  if (compression == kBiBitfields && bits_per_pixel == 32) {
    // Masks follow a 40-byte header, or sit inside a v4/v5 header at the same place.
    if (kFileHeaderBytes + 40 + 12 > size) return bmp_error(source_name, "truncated colour masks");
    const uint32_t r = read_u32le(p + 54), g = read_u32le(p + 58), b = read_u32le(p + 62);
    if (r != 0x00FF0000u || g != 0x0000FF00u || b != 0x000000FFu) {
      return Status::unsupported(
          fmt::format("image '{}': BMP colour masks R={:#x} G={:#x} B={:#x} are not "
                      "supported (only 8 bits per channel, BGR order). Convert it to PNG.",
                      source_name, r, g, b));
    }
  } else if (compression != kBiRgb) {
    return Status::unsupported(
        fmt::format("image '{}': compressed BMP (compression {}) is not supported. "
                    "Convert it to PNG.",
                    source_name, compression));
  }

  // 8-bit: a palette of 4-byte BGRx entries right after the info header.
  const uint8_t* palette = nullptr;
  if (bits_per_pixel == 8) {
    if (colors_used == 0 || colors_used > 256) colors_used = 256;
    const uint64_t palette_offset = kFileHeaderBytes + header_bytes;
    if (palette_offset + uint64_t{colors_used} * 4 > size) return bmp_error(source_name, "truncated palette");
    palette = p + palette_offset;
  }

  const uint64_t stride = (uint64_t{bits_per_pixel} * static_cast<uint64_t>(width) + 31) / 32 * 4;
  if (pixel_offset > size || stride * static_cast<uint64_t>(height) > size - pixel_offset) {
    return bmp_error(source_name,
                     fmt::format("pixel data truncated (needs {} bytes at offset {}, file has {})",
                                 stride * static_cast<uint64_t>(height), pixel_offset, size));
  }
  GPULAB_ASSIGN_OR_RETURN(Image image, allocate_image(static_cast<int>(width), static_cast<int>(height),
                                                      bytes.size(), source_name));
  const int bytes_per_pixel = bits_per_pixel / 8;
  for (int64_t y = 0; y < height; ++y) {
    const int64_t file_row = top_down ? y : height - 1 - y;
    const uint8_t* src = p + pixel_offset + static_cast<uint64_t>(file_row) * stride;
    uint8_t* dst = image.rgb.data() + static_cast<size_t>(y) * width * 3;
    for (int64_t x = 0; x < width; ++x, dst += 3) {
      if (palette != nullptr) {
        const uint8_t index = src[x];
        if (index >= colors_used) {
          return bmp_error(source_name,
                           fmt::format("palette index {} beyond the {} colours", index, colors_used));
        }
        const uint8_t* entry = palette + index * 4;
        dst[0] = entry[2], dst[1] = entry[1], dst[2] = entry[0];
      } else {
        const uint8_t* px = src + x * bytes_per_pixel;  // B, G, R(, unused)
        dst[0] = px[2], dst[1] = px[1], dst[2] = px[0];
      }
    }
  }
  return image;
}

namespace {

// Netpbm header token reader: skips whitespace and '#' comments, then reads a decimal number.
std::optional<int64_t> read_pnm_number(std::span<const std::byte> bytes, size_t& pos) {
  while (pos < bytes.size()) {
    const char c = static_cast<char>(bytes[pos]);
    if (c == '#') {
      while (pos < bytes.size() && static_cast<char>(bytes[pos]) != '\n') ++pos;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos;
    } else {
      break;
    }
  }
  int64_t value = 0;
  size_t digits = 0;
  while (pos < bytes.size() && digits < 10) {
    const char c = static_cast<char>(bytes[pos]);
    if (c < '0' || c > '9') break;
    value = value * 10 + (c - '0');
    ++pos, ++digits;
  }
  if (digits == 0) return std::nullopt;
  return value;
}

}  // namespace

Result<Image> decode_ppm(std::span<const std::byte> bytes, std::string_view source_name) {
  const bool gray = static_cast<char>(bytes[1]) == '5';
  size_t pos = 2;
  const auto width = read_pnm_number(bytes, pos);
  const auto height = read_pnm_number(bytes, pos);
  const auto max_value = read_pnm_number(bytes, pos);
  if (!width || !height || !max_value || pos >= bytes.size()) {
    return Status::invalid_file(
        fmt::format("image '{}': invalid PPM/PGM header. The file is corrupt or truncated.", source_name));
  }
  ++pos;  // the single whitespace byte before the samples
  GPULAB_TRY(check_image_dimensions(*width, *height, source_name));
  if (*max_value != 255) {
    return Status::unsupported(
        fmt::format("image '{}': PPM/PGM with maxval {} is not supported (only 255). "
                    "Convert it to PNG.",
                    source_name, *max_value));
  }
  const uint64_t channels = gray ? 1 : 3;
  const uint64_t needed = static_cast<uint64_t>(*width) * static_cast<uint64_t>(*height) * channels;
  if (bytes.size() - pos < needed) {
    return Status::invalid_file(
        fmt::format("image '{}': PPM/PGM pixel data truncated ({} of {} bytes). "
                    "Re-copy the file.",
                    source_name, bytes.size() - pos, needed));
  }
  GPULAB_ASSIGN_OR_RETURN(Image image, allocate_image(static_cast<int>(*width), static_cast<int>(*height),
                                                      bytes.size(), source_name));
  const auto* src = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
  if (!gray) {
    std::memcpy(image.rgb.data(), src, needed);
  } else {
    for (uint64_t i = 0; i < needed; ++i)
      image.rgb[i * 3] = image.rgb[i * 3 + 1] = image.rgb[i * 3 + 2] = src[i];
  }
  return image;
}

}  // namespace gpulab::image_detail
