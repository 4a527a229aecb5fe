// A progress line on stderr for long work ("calibrating: 120/500 images, 24%, 31 s"), redrawn in
// place; silent when stderr is not a terminal or with --quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace gpulab::cli {

class ProgressLine {
 public:
  ProgressLine();
  ~ProgressLine();  // clears the line
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Redraws "<what>: done/total images, P%, S s" (at most every 0.2 s, and at the end).
  void update(std::string_view what, int64_t done, int64_t total);
  void clear();

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace gpulab::cli
