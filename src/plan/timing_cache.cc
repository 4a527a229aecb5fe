#include "plan/timing_cache.h"

#include <fmt/format.h>

#include <exception>
#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace gpulab {

Result<TimingCache> TimingCache::load(const std::filesystem::path& path) {
  TimingCache cache;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return cache;
  GPULAB_ASSIGN_OR_RETURN(auto text, read_file_text(path));
  return parse(text, path.string());
}

Result<TimingCache> TimingCache::parse(std::string_view text, std::string_view source_name) {
  TimingCache cache;
  try {
    const auto j = nlohmann::json::parse(text);
    // Compared as a JSON number: get<int>() of a float beyond int's range is undefined behaviour.
    if (j.at("format") != 1) throw std::runtime_error("format is not 1");
    for (const auto& [key, value] : j.at("entries").items())
      cache.entries_[key] =
          TimingEntry{value.at("tactic").get<std::string>(), value.at("time_ms").get<double>()};
  } catch (const std::exception& e) {
    return Status::invalid_file(fmt::format(
        "timing cache '{}': {}. Delete the file; the next build recreates it.", source_name, e.what()));
  }
  return cache;
}

Status TimingCache::save(const std::filesystem::path& path) const {
  nlohmann::json j;
  j["format"] = 1;
  j["entries"] = nlohmann::json::object();
  for (const auto& [key, e] : entries_) j["entries"][key] = {{"tactic", e.tactic}, {"time_ms", e.time_ms}};
  return write_file_atomic(path, j.dump(1)).with_context("writing timing cache");
}

std::string TimingCache::make_key(std::string_view layer_signature, const PlanTarget& t) {
  return fmt::format("{}@{}|sm_{}|cuda{}|cudnn{}|cublaslt{}", layer_signature, t.gpu_name,
                     t.compute_capability, t.cuda_runtime_version, t.cudnn_version, t.cublaslt_version);
}

const TimingEntry* TimingCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace gpulab
