// PNG through libpng's progressive-free "read the whole image" API.
//
// libpng reports errors by longjmp. To keep that well-defined in C++, the setjmp frame
// (run_png_read) holds no objects with destructors, every C++ object lives in PngReadState in the
// caller's frame, and the callbacks libpng jumps out of hold none either.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <png.h>

#include "image/decode_internal.h"

namespace gpulab::image_detail {
namespace {

struct PngReadState {
  std::span<const std::byte> bytes;
  size_t pos = 0;
  std::string_view source_name;
  char error[256] = {};
  Image image;
  std::vector<png_bytep> rows;
  Status status;  // set by allocate_rows when allocation or a dimension check fails
};

void read_callback(png_structp png, png_bytep out, size_t count) {
  auto* state = static_cast<PngReadState*>(png_get_io_ptr(png));
  if (count > state->bytes.size() - state->pos) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(out, state->bytes.data() + state->pos, count);
  state->pos += count;
}

void error_callback(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngReadState*>(png_get_error_ptr(png));
  std::snprintf(state->error, sizeof(state->error), "%s", message);
  png_longjmp(png, 1);
}

void warning_callback(png_structp, png_const_charp) {}  // e.g. unknown ancillary chunks: harmless

// C++ work between libpng calls; no exception or longjmp leaves it.
bool allocate_rows(PngReadState* state, png_uint_32 width, png_uint_32 height, size_t row_bytes) {
  auto image = allocate_image(static_cast<int>(width > 0x7fffffff ? 0 : width),
                              static_cast<int>(height > 0x7fffffff ? 0 : height), state->bytes.size(),
                              state->source_name);
  if (!image.is_ok()) {
    state->status = image.status();
    return false;
  }
  if (row_bytes != static_cast<size_t>(width) * 3) {
    state->status =
        Status::internal(fmt::format("image '{}': libpng produced {} bytes per row, expected {} "
                                     "(RGB). This is a bug in gpulab's PNG transforms.",
                                     state->source_name, row_bytes, static_cast<size_t>(width) * 3));
    return false;
  }
  state->image = std::move(image).value();
  try {
    state->rows.resize(height);
  } catch (const std::bad_alloc&) {
    state->status =
        Status::out_of_memory(fmt::format("image '{}': cannot allocate row pointers.", state->source_name));
    return false;
  }
  for (png_uint_32 y = 0; y < height; ++y) state->rows[y] = state->image.rgb.data() + y * row_bytes;
  return true;
}

// Returns false with state->error (libpng failure) or state->status (our failure) set.
bool run_png_read(png_structp png, png_infop info, PngReadState* state) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, state, read_callback);
  png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  // libpng allocates a chunk's declared length before reading it, and an image's rows from the
  // header's width: no chunk may be larger than the file itself (plus 1 MiB for decompressed
  // text and profiles), no side longer than the decoders' limit.
  png_set_chunk_malloc_max(png, state->bytes.size() + (size_t{1} << 20));
  png_set_user_limits(png, static_cast<png_uint_32>(kMaxImageSide), static_cast<png_uint_32>(kMaxImageSide));
  // libpng 1.6's eXIf reader allocates the declared length without that limit; chunks that only
  // carry metadata gpulab does not use (EXIF, text, colour profile, gamma, times, palettes'
  // histograms, physical size, background) are skipped unread instead.
  static constexpr png_byte kSkipped[] =
      "eXIf\0iCCP\0iTXt\0tEXt\0zTXt\0sPLT\0tIME\0hIST\0pCAL\0sCAL\0"
      "oFFs\0pHYs\0bKGD\0sBIT\0cHRM\0gAMA\0sRGB";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkipped, static_cast<int>(sizeof(kSkipped) / 5));
  png_read_info(png, info);

  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);

  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);  // keeps the high byte, as PIL does for RGB
  png_set_strip_alpha(png);                    // PIL's convert("RGB") drops alpha
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);

  if (!allocate_rows(state, width, height, png_get_rowbytes(png, info))) return false;
  png_read_image(png, state->rows.data());
  png_read_end(png, nullptr);  // checks the CRCs of the chunks after the image data
  return true;
}

}  // namespace

Result<Image> decode_png(std::span<const std::byte> bytes, std::string_view source_name) {
  PngReadState state;
  state.bytes = bytes;
  state.source_name = source_name;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, error_callback, warning_callback);
  if (png == nullptr)
    return Status::out_of_memory(fmt::format("image '{}': cannot create a libpng reader.", source_name));
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return Status::out_of_memory(fmt::format("image '{}': cannot create a libpng info struct.", source_name));
  }
  const bool ok = run_png_read(png, info, &state);
  png_destroy_read_struct(&png, &info, nullptr);
  if (ok) return std::move(state.image);
  if (!state.status.is_ok()) return state.status;
  return Status::invalid_file(
      fmt::format("image '{}': PNG decoding failed (libpng: {}). The file is corrupt "
                  "or truncated.",
                  source_name, state.error));
}

}  // namespace gpulab::image_detail
