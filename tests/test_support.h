// Helpers shared by the tests: where the fixtures and the shared data live.
#pragma once

#include <sys/wait.h>

#include <cstdio>
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

// Runs the built gpulab executable with `args` (a shell-quoted string) and returns its exit code
// and output (stdout, plus stderr when merge_stderr).
struct CliRun {
  int exit_code = -1;
  std::string out;
};
inline CliRun run_gpulab(const std::string& args, bool merge_stderr = true) {
  CliRun r;
  const std::string cmd =
      "'" + gpulab_exe().string() + "' " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace gpulab::testing
