// JPEG through TurboJPEG (libjpeg-turbo 2.1's tjDecompress2 API; the tj3 API arrived in 3.0).
#include <memory>
#include <new>
#include <string>

#include <fmt/format.h>
#include <turbojpeg.h>

#include "core/log.h"
#include "image/decode_internal.h"

namespace gpulab::image_detail {
namespace {

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using TjHandle = std::unique_ptr<void, TjDeleter>;

// PIL's CMYK -> RGB conversion (Convert.c cmyk2rgb): with C, K the un-inverted ink amounts,
// R = (255 - K) - C * (255 - K) / 255, where x*y/255 is computed as ((t >> 8) + t) >> 8 with
// t = x*y + 128 (exact rounding of x*y/255 for bytes).
uint8_t cmyk_channel_to_rgb(int ink, int nk) {
  const int t = ink * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// libjpeg warnings that do not lose image data: junk between markers, odd JFIF/Adobe headers.
bool is_harmless_warning(const std::string& message) {
  return message.find("extraneous bytes before marker") != std::string::npos ||
         message.find("JFIF") != std::string::npos || message.find("Warning: unknown") != std::string::npos ||
         message.find("Adobe APP14") != std::string::npos;
}

}  // namespace

Result<Image> decode_jpeg(std::span<const std::byte> bytes, std::string_view source_name) {
  TjHandle handle(tjInitDecompress());
  if (!handle) {
    return Status::out_of_memory(fmt::format("image '{}': cannot create a TurboJPEG decompressor ({}).",
                                             source_name, tjGetErrorStr2(nullptr)));
  }
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle.get(), data, size, &width, &height, &subsampling, &colorspace) != 0) {
    return Status::invalid_file(
        fmt::format("image '{}': not a readable JPEG ({}). The file is corrupt "
                    "or truncated.",
                    source_name, tjGetErrorStr2(handle.get())));
  }
  GPULAB_ASSIGN_OR_RETURN(Image image, allocate_image(width, height, bytes.size(), source_name));

  // Adobe CMYK/YCCK JPEGs decode to (inverted) CMYK; libjpeg cannot convert them to RGB itself.
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<unsigned char> cmyk_pixels;
  if (cmyk) {
    try {
      cmyk_pixels.resize(static_cast<size_t>(width) * height * 4);
    } catch (const std::bad_alloc&) {
      return Status::out_of_memory(
          fmt::format("image '{}': cannot allocate {}x{} CMYK pixels.", source_name, width, height));
    }
  }
  unsigned char* out = cmyk ? cmyk_pixels.data() : image.rgb.data();
  const int pixel_format = cmyk ? TJPF_CMYK : TJPF_RGB;

  // Accurate integer IDCT and fancy upsampling, libjpeg's defaults (what PIL uses). LIMITSCANS
  // refuses a progressive JPEG of more than 500 scans: a few kB of them keep libjpeg busy for
  // minutes (libjpeg-turbo's own fuzzers found it), and no encoder writes more than a dozen.
  if (tjDecompress2(handle.get(), data, size, out, width, 0, height, pixel_format, TJFLAG_LIMITSCANS) != 0) {
    const std::string what = tjGetErrorStr2(handle.get());
    if (what.find("Premature end") != std::string::npos) {
      return Status::invalid_file(
          fmt::format("image '{}': the JPEG data is truncated ({}). Re-copy or "
                      "re-encode the file.",
                      source_name, what));
    }
    // TurboJPEG reports the last message, and reports it as a warning whenever any warning came
    // first (a fatal error after a warning included), so only known-harmless warnings that leave
    // a complete image are tolerated, as PIL tolerates them.
    if (tjGetErrorCode(handle.get()) != TJERR_WARNING || !is_harmless_warning(what)) {
      return Status::invalid_file(
          fmt::format("image '{}': JPEG decoding failed ({}). The file is corrupt.", source_name, what));
    }
    log_debug("image '{}': libjpeg warning: {}", source_name, what);
  }

  if (cmyk) {
    const size_t pixels = static_cast<size_t>(width) * height;
    for (size_t i = 0; i < pixels; ++i) {
      const unsigned char* p = &cmyk_pixels[i * 4];
      // Stored values are inverted (Adobe convention): ink = 255 - value, 255 - K = stored K.
      const int nk = p[3];
      for (int c = 0; c < 3; ++c) image.rgb[i * 3 + c] = cmyk_channel_to_rgb(255 - p[c], nk);
    }
  }
  return image;
}

}  // namespace gpulab::image_detail
