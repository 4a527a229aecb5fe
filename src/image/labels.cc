#include "image/labels.h"

#include <fmt/format.h>

#include "core/file_io.h"

namespace gpulab {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

}  // namespace

Result<std::vector<std::string>> load_labels(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(std::string text, read_file_text(path));
  return parse_labels(text, path.string());
}

Result<std::vector<std::string>> parse_labels(std::string_view text, std::string_view source_name) {
  std::vector<std::string> labels;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    labels.emplace_back(trim(text.substr(start, end - start)));
    start = end + 1;
  }
  if (labels.empty()) {
    return Status::invalid_file(
        fmt::format("labels '{}': the file is empty. Expected one class label per line.", source_name));
  }
  return labels;
}

int64_t label_offset(int64_t num_classes, size_t label_count) {
  if (num_classes == static_cast<int64_t>(label_count)) return 0;
  if (num_classes == static_cast<int64_t>(label_count) + 1) return 1;
  return -1;
}

std::string label_for(int64_t index, const std::vector<std::string>& labels, int64_t num_classes) {
  const int64_t offset = label_offset(num_classes, labels.size());
  if (index < 0 || index >= num_classes || offset < 0) return fmt::format("class {}", index);
  if (offset == 1 && index == 0) return "background";
  return labels[static_cast<size_t>(index - offset)];
}

}  // namespace gpulab
