// Label files (one label per line) and the lookups classify makes with them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "image/labels.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto labels = parse_labels(text, "fuzz.txt");
  if (!labels.is_ok()) return 0;
  const auto n = static_cast<int64_t>(labels->size());
  for (int64_t classes : {n - 1, n, n + 1, int64_t{1000}})
    for (int64_t index : {int64_t{-1}, int64_t{0}, n - 1, n, n + 1}) (void)label_for(index, *labels, classes);
  return 0;
}
