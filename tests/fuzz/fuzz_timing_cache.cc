// The timing cache's JSON (TimingCache::load after reading the file).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plan/timing_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cache = gpulab::TimingCache::parse(text, "fuzz.json");
  if (cache.is_ok()) (void)cache->find("conv@GPU|sm_90|cuda0|cudnn0|cublaslt0");
  return 0;
}
