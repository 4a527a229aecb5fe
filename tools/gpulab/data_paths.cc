#include "data_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace gpulab::cli {
namespace {

namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path(ec) : exe.parent_path();
}

std::vector<fs::path> data_roots() {
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("GPULAB_DATA_DIR"); env && *env) roots.emplace_back(env);
  const fs::path exe_dir = executable_dir();
  roots.push_back(exe_dir / ".." / "share" / "gpulab");
  roots.push_back(exe_dir / ".." / "..");  // build/<preset>/gpulab -> source tree
  roots.push_back(GPULAB_SOURCE_DIR);
  std::error_code ec;
  roots.push_back(fs::current_path(ec));
  return roots;
}

Result<std::string> find_data(const std::string& relative, const std::string& what) {
  std::string searched;
  for (const fs::path& root : data_roots()) {
    std::error_code ec;
    const fs::path candidate = (root / relative).lexically_normal();
    if (fs::exists(candidate, ec)) return candidate.string();
    searched += "\n  " + candidate.string();
  }
  return Status::not_found(
      "cannot find the bundled " + what + " '" + relative + "'; looked in:" + searched +
      "\nSet GPULAB_DATA_DIR to the folder holding models/ and data/, or pass it explicitly.");
}

}  // namespace

Result<std::string> default_model_path() {
  return find_data("models/mobilenet_v2_1.0_224.onnx", "model (use --model)");
}
Result<std::string> default_labels_path() {
  return find_data("models/imagenet_classes.txt", "labels (use --labels)");
}
Result<std::string> default_images_dir() {
  return find_data("data/images", "photos (name images or folders)");
}

}  // namespace gpulab::cli
