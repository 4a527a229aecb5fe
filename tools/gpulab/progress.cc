#include "progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/log.h"

namespace gpulab::cli {

ProgressLine::ProgressLine()
    : enabled_(isatty(STDERR_FILENO) != 0 && log_level() <= LogLevel::kWarning),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::update(std::string_view what, int64_t done, int64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double percent = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
  std::fprintf(stderr, "\r%-28.*s %6lld/%-6lld images %5.1f%% %7.0f s ", static_cast<int>(what.size()),
               what.data(), static_cast<long long>(done), static_cast<long long>(total), percent, seconds);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r%72s\r", "");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace gpulab::cli
