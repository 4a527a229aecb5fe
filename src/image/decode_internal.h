// Per-format decoders behind decode_image_bytes(); not part of the image library's API.
// Each receives bytes whose magic already matched and a name for messages.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "image/decode.h"

namespace gpulab::image_detail {

Result<Image> decode_jpeg(std::span<const std::byte> bytes, std::string_view source_name);
// decode_jpeg into `out` (its buffer reused), with DCT scaling (DecodeOptions::min_shorter_side).
Status decode_jpeg_into(std::span<const std::byte> bytes, std::string_view source_name, int min_shorter_side,
                        Image* out, DecodeInfo* info);
Result<Image> decode_png(std::span<const std::byte> bytes, std::string_view source_name);
Result<Image> decode_bmp(std::span<const std::byte> bytes, std::string_view source_name);
Result<Image> decode_ppm(std::span<const std::byte> bytes, std::string_view source_name);

// An Image of the given size with its pixel buffer allocated, decoded from a file of
// `file_bytes`: kInvalidFile beyond check_decode_budget, kOutOfMemory if the allocation fails.
Result<Image> allocate_image(int width, int height, size_t file_bytes, std::string_view source_name);
// Sets `image` to the given size, reusing its buffer's capacity; kOutOfMemory if growing fails.
Status reshape_image(int width, int height, std::string_view source_name, Image* image);

}  // namespace gpulab::image_detail
