// A labelled folder's labels.tsv (the rows load_labelled_folder reads). Every image "exists", so
// that the rows after the first are reached; the existence check itself is a unit test.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "image/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)gpulab::parse_labels_tsv(text, "dataset", "dataset/labels.tsv",
                                 [](const std::filesystem::path&) { return true; });
  return 0;
}
