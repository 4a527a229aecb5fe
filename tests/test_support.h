// Helpers shared by the tests: where the fixtures and the shared data live.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace gpulab::testing {

inline std::filesystem::path source_dir() {
  return GPULAB_SOURCE_DIR;
}
inline std::filesystem::path fixture_dir() {
  return GPULAB_FIXTURE_DIR;
}

// The shared data folder (models, images, datasets): $GPULAB_SHARED_DIR, else ../shared beside
// the checkout. nullopt when absent: tests that need it skip with that reason.
inline std::optional<std::filesystem::path> shared_dir() {
  if (const char* env = std::getenv("GPULAB_SHARED_DIR"); env && *env) {
    if (std::filesystem::is_directory(env)) return std::filesystem::path(env);
    return std::nullopt;
  }
  auto p = source_dir().parent_path() / "shared";
  if (std::filesystem::is_directory(p)) return p;
  return std::nullopt;
}

// The path of the gpulab executable built with the tests.
inline std::filesystem::path gpulab_exe() {
  return std::filesystem::path(GPULAB_BINARY_DIR) / "gpulab";
}

}  // namespace gpulab::testing
