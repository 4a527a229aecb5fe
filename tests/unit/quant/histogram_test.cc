// The calibration statistics and calibrators of src/quant/histogram.h on distributions whose
// answers are known.
#include "quant/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace gpulab {
namespace {

TEST(Histogram, GrowsByMergingAndKeepsEveryCount) {
  MagnitudeHistogram h;
  h.add(std::vector<float>{0.0f, 0.0f});  // zeros before any range is known
  EXPECT_EQ(h.bin_width(), 0.0);
  h.add(std::vector<float>{-1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN()});
  const double width = h.bin_width();
  EXPECT_DOUBLE_EQ(width, 1.0 / kHistogramBins);
  h.add(std::vector<float>{3.0f});  // beyond the range: the width doubles twice (4 x 8192 bins > 3)
  EXPECT_DOUBLE_EQ(h.bin_width(), 4 * width);
  EXPECT_EQ(h.amax(), 3.0f);
  EXPECT_EQ(h.count(), 5);
  EXPECT_EQ(h.nan_count(), 1);
  EXPECT_EQ(std::accumulate(h.bins().begin(), h.bins().end(), 0.0), 5.0);
  EXPECT_EQ(h.bins()[0], 2.0) << "the zeros stay in bin 0";
  const std::vector<double> r = h.rebinned(kEntropyBins);
  EXPECT_NEAR(std::accumulate(r.begin(), r.end(), 0.0), 5.0, 1e-9);
}

TEST(Histogram, PercentileOfAUniformDistribution) {
  MagnitudeHistogram h;
  std::vector<float> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / static_cast<float>(v.size());
  h.add(v);
  EXPECT_NEAR(h.percentile(50), 0.5, 1e-3);
  EXPECT_NEAR(h.percentile(99), 0.99, 1e-3);
  EXPECT_FLOAT_EQ(h.percentile(100), h.amax());
  EXPECT_EQ(calibrated_amax(h, Calibrator::kMinMax, 99.99), h.amax());
}

TEST(Histogram, EntropyKeepsADenseRangeAndClipsASparseTail) {
  // Uniform on [0, 1]: no threshold below the maximum loses less information.
  std::vector<double> uniform(kEntropyBins, 100.0);
  EXPECT_EQ(entropy_threshold_bins(uniform), kEntropyBins);
  // Gaussian magnitudes with a few far outliers: the threshold lands far below the outliers,
  // at a few standard deviations.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  MagnitudeHistogram h;
  std::vector<float> v(200000);
  for (float& x : v) x = normal(rng);
  v[0] = 40.0f;
  v[1] = -35.0f;
  h.add(v);
  const float entropy = calibrated_amax(h, Calibrator::kEntropy, 99.99);
  EXPECT_GT(entropy, 2.5f);
  EXPECT_LT(entropy, 8.0f);
  const float percentile = calibrated_amax(h, Calibrator::kPercentile, 99.99);
  EXPECT_GT(percentile, 3.5f);
  EXPECT_LT(percentile, 4.5f);  // 99.99% of |N(0,1)| lies below 3.89
  // The zeros of a ReLU output (half of it) do not drag the entropy threshold down.
  MagnitudeHistogram relu;
  for (float& x : v) x = std::max(x, 0.0f);
  relu.add(v);
  EXPECT_GT(calibrated_amax(relu, Calibrator::kEntropy, 99.99), 2.5f);
}

TEST(Histogram, CalibratorNames) {
  for (Calibrator c : {Calibrator::kMinMax, Calibrator::kPercentile, Calibrator::kEntropy}) {
    auto parsed = parse_calibrator(calibrator_name(c));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, c);
  }
  const auto bad = parse_calibrator("kl");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  MagnitudeHistogram empty;
  EXPECT_EQ(calibrated_amax(empty, Calibrator::kEntropy, 99.99), 0.0f);
}

}  // namespace
}  // namespace gpulab
