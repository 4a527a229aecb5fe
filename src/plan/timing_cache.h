// The timing cache: the fastest tactic found for a layer signature on one GPU with one set of
// library versions, reused by later builds. A JSON file:
//   {"format": 1, "entries": {"<key>": {"tactic": "...", "time_ms": 0.123}, ...}}
// Keys join the layer signature and the target, so one file can serve several GPUs.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "gpulab/status.h"
#include "plan/plan.h"

namespace gpulab {

struct TimingEntry {
  std::string tactic;
  double time_ms = 0;
};

class TimingCache {
 public:
  // A missing file is an empty cache; an unreadable or malformed one is kInvalidFile.
  static Result<TimingCache> load(const std::filesystem::path& path);
  // Parses the file's text; `source_name` names it in messages. kInvalidFile when malformed.
  static Result<TimingCache> parse(std::string_view text, std::string_view source_name);
  // Crash-safe write (temporary file, then rename).
  Status save(const std::filesystem::path& path) const;

  // "<signature>@<gpu name>|sm_<cc>|cuda<v>|cudnn<v>|cublaslt<v>"
  static std::string make_key(std::string_view layer_signature, const PlanTarget& target);

  const TimingEntry* find(const std::string& key) const;
  void put(const std::string& key, TimingEntry entry) { entries_[key] = std::move(entry); }
  size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, TimingEntry> entries_;
};

}  // namespace gpulab
