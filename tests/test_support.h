// Helpers shared by the tests: where the fixtures and the shared data live.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// The ImageNet sample set (one photo per class, labels.tsv): $GPULAB_DATASET_DIR, else
// <shared>/datasets/imagenet-sample-256. nullopt when neither is set up.
inline std::optional<std::filesystem::path> sample_dataset_dir() {
  if (const char* env = std::getenv("GPULAB_DATASET_DIR"); env && *env) return std::filesystem::path(env);
  if (auto shared = shared_dir()) return *shared / "datasets" / "imagenet-sample-256";
  return std::nullopt;
}

// Its images folder, when there; tests skip without it, saying kNoSampleSet.
inline std::optional<std::filesystem::path> sample_photo_dir() {
  auto dir = sample_dataset_dir();
  if (!dir || !std::filesystem::is_directory(*dir / "images")) return std::nullopt;
  return *dir / "images";
}
inline constexpr const char* kNoSampleSet =
    "ImageNet sample set not found (set GPULAB_DATASET_DIR or provide ../shared)";

// The path of the gpulab executable built with the tests.
inline std::filesystem::path gpulab_exe() {
  return std::filesystem::path(GPULAB_BINARY_DIR) / "gpulab";
}

// Runs the built gpulab executable with `args` (a shell-quoted string), after `env` (shell
// assignments such as "LD_LIBRARY_PATH=dir"), and returns its exit code and output.
struct CliRun {
  int exit_code = -1;
  std::string out;     // stdout
  std::string err;     // stderr
  std::string output;  // stdout, then stderr
};
inline CliRun run_gpulab(const std::string& args, const std::string& env = "") {
  CliRun r;
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() / ("gpulab-cli-" + std::to_string(::getpid()) + ".stderr");
  const std::string cmd = env + " '" + gpulab_exe().string() + "' " + args + " 2>'" + err_file.string() + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  std::error_code ec;
  std::filesystem::remove(err_file, ec);
  r.output = r.out + r.err;
  return r;
}

}  // namespace gpulab::testing
