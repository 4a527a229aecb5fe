#include "quant/histogram.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpulab {

std::string_view calibrator_name(Calibrator calibrator) {
  switch (calibrator) {
    case Calibrator::kMinMax: return "minmax";
    case Calibrator::kPercentile: return "percentile";
    case Calibrator::kEntropy: return "entropy";
  }
  return "?";
}

Result<Calibrator> parse_calibrator(std::string_view name) {
  for (Calibrator c : {Calibrator::kMinMax, Calibrator::kPercentile, Calibrator::kEntropy})
    if (calibrator_name(c) == name) return c;
  return Status::invalid_argument(
      fmt::format("calibrator '{}' is not known. Use entropy, percentile or minmax.", name));
}

void MagnitudeHistogram::grow_to(float magnitude) {
  if (width_ == 0) width_ = static_cast<double>(magnitude) / kHistogramBins;
  while (static_cast<double>(magnitude) > width_ * kHistogramBins) {
    for (int j = 0; j < kHistogramBins / 2; ++j) bins_[j] = bins_[2 * j] + bins_[2 * j + 1];
    std::fill(bins_.begin() + kHistogramBins / 2, bins_.end(), 0.0);
    width_ *= 2;
  }
}

void MagnitudeHistogram::add(std::span<const float> values) {
  float largest = 0;
  int64_t nans = 0;
  for (float v : values) {
    const float a = std::fabs(v);
    if (std::isnan(a)) {
      ++nans;
      continue;
    }
    largest = std::max(largest, a);
  }
  nans_ += nans;
  count_ += static_cast<int64_t>(values.size()) - nans;
  amax_ = std::max(amax_, largest);
  if (largest > 0) grow_to(largest);
  if (width_ == 0) {  // every element so far is zero
    bins_[0] += static_cast<double>(values.size()) - static_cast<double>(nans);
    return;
  }
  const double inv = 1.0 / width_;
  for (float v : values) {
    const float a = std::fabs(v);
    if (std::isnan(a)) continue;
    bins_[static_cast<size_t>(std::min<double>(a * inv, kHistogramBins - 1))] += 1;
  }
}

std::vector<double> MagnitudeHistogram::rebinned(int bins) const {
  std::vector<double> out(static_cast<size_t>(bins), 0.0);
  if (amax_ <= 0 || width_ == 0) {
    out[0] = static_cast<double>(count_);
    return out;
  }
  const double target = static_cast<double>(amax_) / bins, top = amax_;
  for (int j = 0; j < kHistogramBins; ++j) {
    const double c = bins_[j];
    if (c == 0) continue;
    const double lo = j * width_, hi = std::min((j + 1) * width_, top);
    if (hi <= lo) {
      out[static_cast<size_t>(std::min<double>(lo / target, bins - 1))] += c;
      continue;
    }
    const int first = static_cast<int>(std::min<double>(lo / target, bins - 1));
    const int last = static_cast<int>(std::min<double>(hi / target, bins - 1));
    for (int t = first; t <= last; ++t) {
      const double overlap = std::min(hi, (t + 1) * target) - std::max(lo, t * target);
      if (overlap > 0) out[static_cast<size_t>(t)] += c * overlap / (hi - lo);
    }
  }
  return out;
}

float MagnitudeHistogram::percentile(double p) const {
  if (count_ == 0 || width_ == 0) return 0.0f;
  const double want = static_cast<double>(count_) * std::clamp(p, 0.0, 100.0) / 100.0;
  double cumulative = 0;
  for (int j = 0; j < kHistogramBins; ++j) {
    if (bins_[j] > 0 && cumulative + bins_[j] >= want) {
      const double fraction = (want - cumulative) / bins_[j];
      return static_cast<float>(std::min<double>((j + fraction) * width_, amax_));
    }
    cumulative += bins_[j];
  }
  return amax_;
}

int entropy_threshold_bins(std::span<const double> bins) {
  const int n = static_cast<int>(bins.size());
  if (n <= kEntropyLevels) return n;
  double total = 0;
  for (double b : bins) total += b;
  if (total <= 0) return n;
  std::vector<double> suffix(static_cast<size_t>(n) + 1, 0.0);  // suffix[i] = sum of bins[i..]
  for (int j = n - 1; j >= 0; --j) suffix[j] = suffix[j + 1] + bins[j];
  std::vector<double> p(static_cast<size_t>(n)), q(static_cast<size_t>(n));
  int best = n;
  double best_kl = std::numeric_limits<double>::infinity();
  for (int i = kEntropyLevels; i <= n; ++i) {
    std::copy(bins.begin(), bins.begin() + i, p.begin());
    p[i - 1] += suffix[i];  // the clipped elements saturate into the last bin
    const double q_total = total - suffix[i];
    if (q_total <= 0) continue;
    for (int level = 0; level < kEntropyLevels; ++level) {
      const int start = static_cast<int>(static_cast<int64_t>(level) * i / kEntropyLevels);
      const int stop = static_cast<int>(static_cast<int64_t>(level + 1) * i / kEntropyLevels);
      double sum = 0;
      int nonzero = 0;
      for (int j = start; j < stop; ++j) {
        sum += bins[j];
        nonzero += p[j] > 0;
      }
      for (int j = start; j < stop; ++j) q[j] = p[j] > 0 ? sum / nonzero : 0.0;
    }
    double kl = 0;
    for (int j = 0; j < i; ++j) {
      if (p[j] <= 0) continue;
      if (q[j] <= 0) {
        kl = std::numeric_limits<double>::infinity();
        break;
      }
      const double pj = p[j] / total, qj = q[j] / q_total;
      kl += pj * std::log(pj / qj);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return best;
}

float calibrated_amax(const MagnitudeHistogram& histogram, Calibrator calibrator, double percentile) {
  switch (calibrator) {
    case Calibrator::kMinMax: return histogram.amax();
    case Calibrator::kPercentile: return histogram.percentile(percentile);
    case Calibrator::kEntropy: {
      if (histogram.amax() <= 0) return 0.0f;
      std::vector<double> bins = histogram.rebinned(kEntropyBins);
      // The exact zeros of ReLU outputs (half of the elements, often) would otherwise make level 0
      // dominate every divergence and drag the threshold down; NVIDIA's pytorch-quantization does
      // the same before its entropy search.
      bins[0] = bins[1];
      const int i = entropy_threshold_bins(bins);
      return static_cast<float>(static_cast<double>(histogram.amax()) * i / kEntropyBins);
    }
  }
  return histogram.amax();
}

}  // namespace gpulab
