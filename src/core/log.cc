#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace gpulab {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kWarning};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) {
  g_level = level;
}
LogLevel log_level() {
  return g_level;
}

void log_message(LogLevel level, std::string_view message) {
  static constexpr const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s%.*s\n", kPrefix[static_cast<int>(level)], static_cast<int>(message.size()),
               message.data());
}

}  // namespace gpulab
