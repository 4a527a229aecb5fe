#include "backends/cuda/cudnn_engine_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace gpulab::cuda {

namespace {

// The whole of `text` as an integer.
template <typename T>
bool parse_int(std::string_view text, T& out) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && error == std::errc() && end == text.data() + text.size();
}

}  // namespace

Result<CudnnEngineConfig> parse_cudnn_engine_config(std::string_view body, std::string_view tactic) {
  const auto malformed = [tactic] {
    return Status::invalid_argument(fmt::format("cuDNN: tactic '{}' is malformed.", tactic));
  };
  CudnnEngineConfig config;
  const size_t semi = body.find(';');
  if (!parse_int(body.substr(0, semi), config.engine) || config.engine < 0) return malformed();
  if (semi == std::string_view::npos) return config;
  std::string_view list = body.substr(semi + 1);
  list = list.substr(0, list.find(';'));
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    const size_t eq = item.find('=');
    int knob = 0;
    int64_t value = 0;
    if (eq == std::string_view::npos || !parse_int(item.substr(0, eq), knob) ||
        !parse_int(item.substr(eq + 1), value))
      return malformed();
    config.knobs.emplace_back(knob, value);
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
    if (list.empty()) return malformed();  // a trailing comma
  }
  std::sort(config.knobs.begin(), config.knobs.end());
  return config;
}

std::string format_cudnn_engine_config(std::string_view prefix, CudnnEngineConfig config,
                                       std::string_view name) {
  std::sort(config.knobs.begin(), config.knobs.end());
  std::string list;
  for (const auto& [k, v] : config.knobs) list += fmt::format("{}{}={}", list.empty() ? "" : ",", k, v);
  return fmt::format("{}{};{};{}", prefix, config.engine, list, name);
}

}  // namespace gpulab::cuda
