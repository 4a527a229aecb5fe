// Access to the goldens written by tests/fixtures/make_image_goldens.py (ctest fixture
// image_goldens).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "image/decode.h"
#include "test_support.h"

namespace gpulab::testing {

inline std::filesystem::path image_golden_dir() {
  if (const char* env = std::getenv("GPULAB_IMAGE_GOLDEN_DIR"); env && *env) return env;
  return fixture_dir() / "image";
}

// The manifest, or nullopt when the generator has not run (tests then skip with that reason).
inline std::optional<nlohmann::json> image_manifest() {
  std::ifstream in(image_golden_dir() / "manifest.json");
  if (!in) return std::nullopt;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

template <typename T>
std::vector<T> read_raw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<T> out(bytes / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(T)));
  return out;
}

// A width x height RGB test image: horizontal and vertical ramps in R and G, a stripe pattern in B.
inline Image gradient_image(int width, int height) {
  Image image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &image.rgb[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(width - 1, 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(height - 1, 1));
      p[2] = static_cast<uint8_t>((x * 7 + y * 13) % 256);
    }
  }
  return image;
}

#define GPULAB_REQUIRE_IMAGE_MANIFEST(var)                                          \
  auto var##_opt = ::gpulab::testing::image_manifest();                             \
  if (!var##_opt || var##_opt->is_discarded()) {                                    \
    GTEST_SKIP() << "no image goldens in " << ::gpulab::testing::image_golden_dir() \
                 << "; run the tests through ctest (fixture image_goldens) or "     \
                    "tests/fixtures/make_image_goldens.py --out <dir>";             \
  }                                                                                 \
  const nlohmann::json& var = *var##_opt

}  // namespace gpulab::testing
