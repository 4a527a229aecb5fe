// One self-rewriting progress line on stderr for long runs: "<label>: 120/1000 images, 35.2 img/s,
// 3 s elapsed, 25 s left". Silent when stderr is not a terminal or with --quiet.
#pragma once

#include <chrono>
#include <string>

#include "pipeline/pipeline.h"

namespace gpulab::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string label);
  ~ProgressLine();  // clears the line
  // At most five redraws a second; the last update (all done) always draws.
  void update(const PipelineProgress& progress);
  // Clears the line (before printing results on a terminal); later updates draw nothing.
  void finish();

 private:
  std::string label_;
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gpulab::cli
