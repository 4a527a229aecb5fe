// Leveled logging to stderr. Thread-safe (one line per call). Library code logs at kDebug/kInfo;
// the CLI sets the level from --verbose/--quiet.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace gpulab {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, std::string_view message);

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kDebug)
    log_message(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kInfo)
    log_message(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warning(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kWarning)
    log_message(LogLevel::kWarning, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace gpulab
