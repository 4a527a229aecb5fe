// The INT8/FP8 calibration cache's JSON (load_calibration_cache after reading the file).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "quant/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gpulab::parse_calibration_cache(text, "fuzz.json");
  return 0;
}
