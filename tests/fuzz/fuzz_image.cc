// Image decoding. GPULAB_FUZZ_IMAGE_FORMAT picks the target:
//   0 (fuzz_image)       format sniffing and whichever decoder the magic bytes choose, then the
//                        preprocessing classify applies (resize, crop, normalize)
//   1..4 (fuzz_jpeg, fuzz_png, fuzz_bmp, fuzz_ppm)  one decoder: the input's first bytes are
//                        overwritten with that format's magic, so that every run reaches it
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "image/decode.h"
#include "image/preprocess.h"

#ifndef GPULAB_FUZZ_IMAGE_FORMAT
#error "GPULAB_FUZZ_IMAGE_FORMAT must be defined (tests/fuzz/CMakeLists.txt)"
#endif

namespace {

// Makes `bytes` start with the magic of the target's format; false when too short for it.
bool force_magic(std::vector<uint8_t>& bytes) {
  static constexpr uint8_t kJpeg[] = {0xFF, 0xD8, 0xFF};
  static constexpr uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  switch (GPULAB_FUZZ_IMAGE_FORMAT) {
    case 1:
      if (bytes.size() < sizeof(kJpeg)) return false;
      std::memcpy(bytes.data(), kJpeg, sizeof(kJpeg));
      return true;
    case 2:
      if (bytes.size() < sizeof(kPng)) return false;
      std::memcpy(bytes.data(), kPng, sizeof(kPng));
      return true;
    case 3:
      if (bytes.size() < 2) return false;
      bytes[0] = 'B', bytes[1] = 'M';
      return true;
    case 4:
      if (bytes.size() < 3) return false;
      bytes[0] = 'P';
      if (bytes[1] != '5' && bytes[1] != '6') bytes[1] = '6';
      if (bytes[2] != ' ' && bytes[2] != '\n' && bytes[2] != '\t' && bytes[2] != '\r') bytes[2] = '\n';
      return true;
    default: return true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab;
  std::vector<uint8_t> bytes(data, data + size);
  if (!force_magic(bytes)) return 0;
  auto image = decode_image_bytes(std::as_bytes(std::span(bytes)), "fuzz.img");
  if (!image.is_ok()) return 0;
  if (image->rgb.size() != static_cast<size_t>(image->width) * image->height * 3) std::abort();
  if (GPULAB_FUZZ_IMAGE_FORMAT == 0) {
    static const PreprocessSpec spec = PreprocessSpec::torchvision_imagenet();
    std::vector<float> chw(static_cast<size_t>(spec.image_numel()));
    (void)preprocess(*image, spec, chw);
  }
  return 0;
}
