#include "measure/stats.h"

#include <fmt/format.h>
#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>

namespace gpulab::measure {

const double* Summary::find_percentile(double p) const {
  for (const Percentile& entry : percentiles) {
    if (entry.percentile == p) return &entry.value;
  }
  return nullptr;
}

double nearest_rank_percentile(std::span<const double> sorted, double p) {
  assert(!sorted.empty() && p > 0 && p <= 100);
  const auto n = static_cast<double>(sorted.size());
  // The rank is computed in long double and nudged down by a relative epsilon so that, e.g.,
  // p = 90 with n = 10 gives rank 9, not 10 from 0.9 * 10 = 9.000000000000002.
  const long double exact = static_cast<long double>(p) / 100.0L * static_cast<long double>(n);
  auto rank = static_cast<int64_t>(std::ceil(exact - exact * 1e-12L));
  rank = std::clamp<int64_t>(rank, 1, static_cast<int64_t>(sorted.size()));
  return sorted[static_cast<size_t>(rank - 1)];
}

static Status check_percentile(double p) {
  if (!(p > 0 && p <= 100)) {  // also rejects NaN
    return Status::invalid_argument(
        fmt::format("statistics: percentile {} is outside (0, 100]. Ask for values such as 50, 90, "
                    "99 or 99.9.",
                    p));
  }
  return Status::ok();
}

Result<Summary> summarize(std::span<const double> samples, std::span<const double> percentiles) {
  if (samples.empty()) {
    return Status::invalid_argument("statistics: no samples to summarize. Run at least one iteration.");
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i])) {
      return Status::invalid_argument(
          fmt::format("statistics: sample {} of {} is not finite ({}). Check the timer that produced it.", i,
                      samples.size(), samples[i]));
    }
  }
  for (double p : percentiles) GPULAB_TRY(check_percentile(p));

  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();

  Summary s;
  s.count = static_cast<int64_t>(n);
  s.min = sorted.front();
  s.max = sorted.back();
  // Sum in long double: a million millisecond samples keep their last digits.
  long double sum = 0;
  for (double x : sorted) sum += x;
  const long double mean = sum / static_cast<long double>(n);
  long double squares = 0;
  for (double x : sorted) squares += (x - mean) * (x - mean);
  s.mean = static_cast<double>(mean);
  s.stddev = static_cast<double>(std::sqrt(squares / static_cast<long double>(n)));
  s.median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
  s.cov = s.mean != 0 ? s.stddev / std::fabs(s.mean) : 0.0;
  s.percentiles.reserve(percentiles.size());
  for (double p : percentiles) s.percentiles.push_back({p, nearest_rank_percentile(sorted, p)});
  return s;
}

Result<double> throughput_per_s(int64_t items, double wall_s) {
  if (items < 0 || !(wall_s > 0) || !std::isfinite(wall_s)) {
    return Status::invalid_argument(
        fmt::format("throughput: needs a non-negative item count and a positive wall time (items {}, wall "
                    "{} s). Measure over at least one completed iteration.",
                    items, wall_s));
  }
  return static_cast<double>(items) / wall_s;
}

Result<double> ms_per_item(double items_per_s) {
  if (!(items_per_s > 0) || !std::isfinite(items_per_s)) {
    return Status::invalid_argument(fmt::format(
        "throughput: {} items/s has no time per item. Pass a positive, finite throughput.", items_per_s));
  }
  return 1000.0 / items_per_s;
}

static std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Result<std::vector<double>> parse_percentiles(std::string_view text) {
  std::vector<double> out;
  if (trim(text).empty()) {
    return Status::invalid_argument(
        "--percentiles: the list is empty. Give comma-separated values in (0, 100], e.g. "
        "50,90,95,99.");
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string_view::npos ? text.size() : comma;
    const std::string_view token = trim(text.substr(start, end - start));
    double value = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || ec != std::errc() || ptr != token.data() + token.size() ||
        !(value > 0 && value <= 100)) {
      return Status::invalid_argument(
          fmt::format("--percentiles: '{}' in '{}' is not a number in (0, 100]. Give "
                      "comma-separated values such as 50,90,95,99.",
                      token, text));
    }
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string percentile_name(double p) {
  return fmt::format("p{}", p);
}

}  // namespace gpulab::measure
