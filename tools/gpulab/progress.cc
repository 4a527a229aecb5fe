#include "progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "core/log.h"

namespace gpulab::cli {

ProgressLine::ProgressLine(std::string label)
    : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) != 0 && log_level() < LogLevel::kError) {}

ProgressLine::~ProgressLine() {
  finish();
}

void ProgressLine::finish() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
  enabled_ = false;
}

void ProgressLine::update(const PipelineProgress& p) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && p.images_done < p.images_total && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  drawn_ = true;
  const double ips = p.elapsed_s > 0 ? static_cast<double>(p.images_done) / p.elapsed_s : 0;
  const double left_s = ips > 0 ? static_cast<double>(p.images_total - p.images_done) / ips : 0;
  const std::string line = fmt::format("{}: {}/{} images, {:.1f} img/s, {:.0f} s elapsed, {:.0f} s left",
                                       label_, p.images_done, p.images_total, ips, p.elapsed_s, left_s);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace gpulab::cli
