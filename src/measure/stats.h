// Summary statistics of timing samples, and throughput.
//
// Definitions (docs/metrics.md repeats them for users):
//   mean     arithmetic mean.
//   median   the middle sample of the sorted samples; for an even count the mean of the two
//            middle samples.
//   stddev   population standard deviation: sqrt(sum((x - mean)^2) / n). Defined (0) for n = 1.
//   cov      coefficient of variation, stddev / mean (a fraction: 0.025 is 2.5%); 0 when mean is 0.
//   p-th percentile (0 < p <= 100): NEAREST RANK, as trtexec reports it: the smallest sample such
//            that at least p% of the samples are less than or equal to it, i.e. sorted[ceil(p/100
//            * n) - 1] (1-based rank ceil(p*n/100), at least 1). It is always an observed sample,
//            so p100 = max; for an even count p50 is the lower middle sample and may differ from
//            the median above.
//
// Pure functions; thread-safe; no allocation beyond the returned values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpulab/status.h"

namespace gpulab::measure {

struct Percentile {
  double percentile = 0;  // in (0, 100]
  double value = 0;       // in the samples' unit
  friend bool operator==(const Percentile&, const Percentile&) = default;
};

// Statistics of one metric, in the unit of its samples (milliseconds for every bench metric).
struct Summary {
  int64_t count = 0;
  double min = 0, max = 0, mean = 0, median = 0, stddev = 0;
  double cov = 0;                       // stddev / mean, a fraction
  std::vector<Percentile> percentiles;  // in the order they were asked for

  // The value of percentile `p` when it was computed, else nullptr.
  const double* find_percentile(double p) const;
};

// Summarizes `samples` (any order; not modified). Percentiles are computed in the order given
// and may repeat. Errors (kInvalidArgument): no samples, a NaN or infinite sample, a percentile
// outside (0, 100] or NaN.
Result<Summary> summarize(std::span<const double> samples, std::span<const double> percentiles);

// Nearest-rank percentile of an ascending-sorted, non-empty span (see the header comment).
// Precondition (asserted): !sorted.empty(), 0 < p <= 100.
double nearest_rank_percentile(std::span<const double> sorted, double p);

// Items completed per second of wall time: items / wall_s. kInvalidArgument when wall_s is not
// positive and finite or items is negative.
Result<double> throughput_per_s(int64_t items, double wall_s);

// The time one item takes at a throughput, in milliseconds: 1000 / items_per_s.
// kInvalidArgument when items_per_s is not positive and finite.
Result<double> ms_per_item(double items_per_s);

// "50,90,95,99" -> {50, 90, 95, 99}. Spaces around numbers are allowed; every value must be in
// (0, 100]. kInvalidArgument naming the bad token otherwise (also for an empty list).
Result<std::vector<double>> parse_percentiles(std::string_view text);

// The percentile's display name: 50 -> "p50", 99.9 -> "p99.9" (shortest round-trip form).
std::string percentile_name(double p);

}  // namespace gpulab::measure
