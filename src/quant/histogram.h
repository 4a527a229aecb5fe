// Activation statistics for post-training quantization, and the three calibrators that turn
// them into a range (amax: the largest magnitude kept; the scale is amax / 127 for INT8 and
// amax / 448 for FP8, src/core/quant.h).
//
//   minmax      amax = the largest |x| seen.
//   percentile  amax = the p-th percentile of |x| over every element seen (default 99.99), read
//               from the histogram with linear interpolation inside the bin where the cumulative
//               count reaches p%.
//   entropy     TensorRT's entropy calibrator (Migacz, "8-bit Inference with TensorRT", GTC
//               2017): the histogram of |x| re-binned to 2048 bins over [0, amax], bin 0 (where
//               the zeros of ReLU outputs pile up) given bin 1's count; for each
//               candidate i = 128 .. 2048, P = the first i bins with everything beyond folded
//               into bin i-1, Q = the first i bins merged into 128 levels (level l covers bins
//               [floor(l i / 128), floor((l + 1) i / 128))) and each level's count spread evenly
//               over its non-empty bins (non-empty in P); KL(P || Q) over the normalized
//               distributions, infinite where Q is 0 and P is not. amax = i * bin width for the
//               i with the smallest divergence (the first on ties).
//
// The histogram has kHistogramBins bins of one width, starting at the first non-zero batch's
// largest |x| / kHistogramBins; when a later batch exceeds the range the width doubles (adjacent
// bins merged) until it fits, so it always covers [0, amax] in 4097-8192 bins (fewer only before it
// first grows). Re-binning to 2048 bins splits a source bin's count over the target bins it
// overlaps in proportion to the overlap (the counts are taken as uniform inside a bin).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

inline constexpr int kHistogramBins = 8192;
inline constexpr int kEntropyBins = 2048;
inline constexpr int kEntropyLevels = 128;

enum class Calibrator : uint8_t { kMinMax, kPercentile, kEntropy };
std::string_view calibrator_name(Calibrator calibrator);  // "minmax", "percentile", "entropy"
Result<Calibrator> parse_calibrator(std::string_view name);

class MagnitudeHistogram {
 public:
  // Adds |x| of every element; NaNs are ignored (counted in nan_count()).
  void add(std::span<const float> values);
  // Adds another histogram's counts (for statistics gathered on several threads).
  void merge(const MagnitudeHistogram& other);

  float amax() const { return amax_; }
  int64_t count() const { return count_; }
  int64_t nan_count() const { return nans_; }
  double bin_width() const { return width_; }
  const std::vector<double>& bins() const { return bins_; }

  // The counts over [0, amax()] in `bins` bins of width amax() / bins (see the file comment).
  std::vector<double> rebinned(int bins) const;
  // The p-th percentile of |x| (p in (0, 100]); 0 for an empty histogram.
  float percentile(double p) const;

 private:
  void grow_to(float magnitude);

  std::vector<double> bins_ = std::vector<double>(kHistogramBins, 0.0);
  double width_ = 0;  // 0 until a non-zero magnitude arrives; bins_[0] holds the zeros until then
  float amax_ = 0;
  int64_t count_ = 0, nans_ = 0;
};

// The entropy calibrator's threshold for a histogram of |x| over [0, range] in kEntropyBins bins.
// Returns the chosen number of bins i (the threshold is i * range / bins.size()).
int entropy_threshold_bins(std::span<const double> bins);

// amax of one tensor under `calibrator` (percentile: `percentile` in (0, 100]).
float calibrated_amax(const MagnitudeHistogram& histogram, Calibrator calibrator, double percentile);

}  // namespace gpulab
