// JPEG through TurboJPEG (libjpeg-turbo 2.1's tjDecompress2 API; the tj3 API arrived in 3.0).
#include <algorithm>
#include <cstdint>
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

// The DCT scaling factor with the fewest pixels whose scaled shorter side is still at least
// `min_shorter_side`, among 1/2, 1/4 and 1/8; 1/1 when none qualifies or no scaling is asked for.
// libjpeg-turbo has SIMD code for those reduced IDCTs only; its other factors (3/8, 5/8, 3/4, 7/8)
// run plain-C IDCTs, and decoding at 3/8 measured slower than at 1/2 despite 44% fewer pixels
// (1024x768 photos: 0.36 vs 0.29 ms per image; the entropy decoding costs the same either way).
tjscalingfactor choose_scaling(int width, int height, int min_shorter_side) {
  tjscalingfactor best{1, 1};
  if (min_shorter_side <= 0) return best;
  for (const int denom : {2, 4, 8}) {
    const tjscalingfactor f{1, denom};
    if (std::min(TJSCALED(width, f), TJSCALED(height, f)) >= min_shorter_side) best = f;
  }
  return best;
}

// One TurboJPEG decompressor per thread, kept for the thread's life (creating one per image
// costs a few allocations and initialisations). After any call that reported an error or a
// warning, TurboJPEG 2.1 can leave the handle unable to read the next, valid file ("Bogus DQT
// index"), so such a handle is replaced (ThreadDecompressor::discard).
class ThreadDecompressor {
 public:
  static void* get() {
    TjHandle& h = handle();
    if (!h) h.reset(tjInitDecompress());
    return h.get();
  }
  static void discard() { handle().reset(); }

 private:
  static TjHandle& handle() {
    thread_local TjHandle h;
    return h;
  }
};

}  // namespace

Result<Image> decode_jpeg(std::span<const std::byte> bytes, std::string_view source_name) {
  Image image;
  DecodeInfo info;
  GPULAB_TRY(decode_jpeg_into(bytes, source_name, /*min_shorter_side=*/0, &image, &info));
  return image;
}

Status decode_jpeg_into(std::span<const std::byte> bytes, std::string_view source_name, int min_shorter_side,
                        Image* out, DecodeInfo* info) {
  void* handle = ThreadDecompressor::get();
  if (!handle) {
    return Status::out_of_memory(fmt::format("image '{}': cannot create a TurboJPEG decompressor ({}).",
                                             source_name, tjGetErrorStr2(nullptr)));
  }
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, data, size, &width, &height, &subsampling, &colorspace) != 0) {
    const Status status =
        Status::invalid_file(fmt::format("image '{}': not a readable JPEG ({}). The file is corrupt "
                                         "or truncated.",
                                         source_name, tjGetErrorStr2(handle)));
    ThreadDecompressor::discard();
    return status;
  }
  // The budget on what the header promises: libjpeg's memory and time follow the full size, also
  // when it decodes scaled.
  GPULAB_TRY(check_decode_budget(width, height, bytes.size(), source_name));
  const tjscalingfactor scale = choose_scaling(width, height, min_shorter_side);
  const int out_w = TJSCALED(width, scale), out_h = TJSCALED(height, scale);
  GPULAB_TRY(reshape_image(out_w, out_h, source_name, out));
  info->source_width = width;
  info->source_height = height;
  info->scale_num = scale.num;
  info->scale_denom = scale.denom;

  // Adobe CMYK/YCCK JPEGs decode to (inverted) CMYK; libjpeg cannot convert them to RGB itself.
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<unsigned char> cmyk_pixels;
  if (cmyk) {
    try {
      cmyk_pixels.resize(static_cast<size_t>(out_w) * out_h * 4);
    } catch (const std::bad_alloc&) {
      return Status::out_of_memory(
          fmt::format("image '{}': cannot allocate {}x{} CMYK pixels.", source_name, out_w, out_h));
    }
  }
  unsigned char* pixels = cmyk ? cmyk_pixels.data() : out->rgb.data();
  const int pixel_format = cmyk ? TJPF_CMYK : TJPF_RGB;

  // Accurate integer IDCT and fancy upsampling, libjpeg's defaults (what PIL uses). LIMITSCANS
  // refuses a progressive JPEG of more than 500 scans: a few kB of them keep libjpeg busy for
  // minutes (libjpeg-turbo's own fuzzers found it), and no encoder writes more than a dozen.
  // Asking for out_w x out_h makes TurboJPEG scale by `scale` in the IDCT.
  if (tjDecompress2(handle, data, size, pixels, out_w, 0, out_h, pixel_format, TJFLAG_LIMITSCANS) != 0) {
    const std::string what = tjGetErrorStr2(handle);
    const bool warning = tjGetErrorCode(handle) == TJERR_WARNING;
    ThreadDecompressor::discard();
    if (what.find("Premature end") != std::string::npos) {
      return Status::invalid_file(
          fmt::format("image '{}': the JPEG data is truncated ({}). Re-copy or "
                      "re-encode the file.",
                      source_name, what));
    }
    // TurboJPEG reports the last message, and reports it as a warning whenever any warning came
    // first (a fatal error after a warning included), so only known-harmless warnings that leave
    // a complete image are tolerated, as PIL tolerates them.
    if (!warning || !is_harmless_warning(what)) {
      return Status::invalid_file(
          fmt::format("image '{}': JPEG decoding failed ({}). The file is corrupt.", source_name, what));
    }
    log_debug("image '{}': libjpeg warning: {}", source_name, what);
  }

  if (cmyk) {
    const size_t count = static_cast<size_t>(out_w) * out_h;
    for (size_t i = 0; i < count; ++i) {
      const unsigned char* p = &cmyk_pixels[i * 4];
      // Stored values are inverted (Adobe convention): ink = 255 - value, 255 - K = stored K.
      const int nk = p[3];
      for (int c = 0; c < 3; ++c) out->rgb[i * 3 + c] = cmyk_channel_to_rgb(255 - p[c], nk);
    }
  }
  return Status::ok();
}

}  // namespace gpulab::image_detail
