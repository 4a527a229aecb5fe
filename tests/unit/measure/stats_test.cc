#include "measure/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace gpulab::measure {
namespace {

TEST(Summarize, OneSample) {
  const std::vector<double> samples{2.5};
  const std::vector<double> pcts{50, 99, 100};
  auto s = summarize(samples, pcts);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->count, 1);
  EXPECT_EQ(s->min, 2.5);
  EXPECT_EQ(s->max, 2.5);
  EXPECT_EQ(s->mean, 2.5);
  EXPECT_EQ(s->median, 2.5);
  EXPECT_EQ(s->stddev, 0.0);
  EXPECT_EQ(s->cov, 0.0);
  ASSERT_EQ(s->percentiles.size(), 3u);
  for (const auto& p : s->percentiles) EXPECT_EQ(p.value, 2.5);
}

TEST(Summarize, OddCountUnsortedInput) {
  // Sorted: 1 2 3 4 5. Mean 3, population variance (4+1+0+1+4)/5 = 2.
  const std::vector<double> samples{5, 1, 4, 2, 3};
  const std::vector<double> pcts{20, 50, 90, 100};
  auto s = summarize(samples, pcts);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->count, 5);
  EXPECT_EQ(s->min, 1);
  EXPECT_EQ(s->max, 5);
  EXPECT_DOUBLE_EQ(s->mean, 3);
  EXPECT_EQ(s->median, 3);
  EXPECT_DOUBLE_EQ(s->stddev, std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(s->cov, std::sqrt(2.0) / 3);
  // Nearest rank: ceil(p/100 * 5): 20 -> 1, 50 -> 3, 90 -> 5, 100 -> 5.
  EXPECT_EQ(*s->find_percentile(20), 1);
  EXPECT_EQ(*s->find_percentile(50), 3);
  EXPECT_EQ(*s->find_percentile(90), 5);
  EXPECT_EQ(*s->find_percentile(100), 5);
  EXPECT_EQ(s->find_percentile(95), nullptr);
}

TEST(Summarize, EvenCountMedianAveragesMiddlePairButP50IsASample) {
  const std::vector<double> samples{4, 1, 3, 2};
  const std::vector<double> pcts{50, 75, 76};
  auto s = summarize(samples, pcts);
  ASSERT_TRUE(s.is_ok());
  EXPECT_DOUBLE_EQ(s->median, 2.5);
  EXPECT_EQ(*s->find_percentile(50), 2);  // rank ceil(2) = 2
  EXPECT_EQ(*s->find_percentile(75), 3);  // rank ceil(3) = 3
  EXPECT_EQ(*s->find_percentile(76), 4);  // rank ceil(3.04) = 4
}

TEST(Summarize, PercentilesOfOneToHundred) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  const std::vector<double> pcts{1, 50, 90, 95, 99, 99.5, 100};
  auto s = summarize(samples, pcts);
  ASSERT_TRUE(s.is_ok());
  // With 1..100 the nearest-rank p-th percentile is exactly ceil(p).
  EXPECT_EQ(s->percentiles[0].value, 1);
  EXPECT_EQ(s->percentiles[1].value, 50);
  EXPECT_EQ(s->percentiles[2].value, 90);
  EXPECT_EQ(s->percentiles[3].value, 95);
  EXPECT_EQ(s->percentiles[4].value, 99);
  EXPECT_EQ(s->percentiles[5].value, 100);
  EXPECT_EQ(s->percentiles[6].value, 100);
  EXPECT_DOUBLE_EQ(s->median, 50.5);
  EXPECT_DOUBLE_EQ(s->mean, 50.5);
}

TEST(Summarize, RankIsNotPushedUpByRounding) {
  // 0.9 * 10 is 9.000000000000002 in binary; the 90th percentile of 10 samples is the 9th.
  std::vector<double> samples{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<double> pcts{90, 70, 30};
  auto s = summarize(samples, pcts);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->percentiles[0].value, 9);
  EXPECT_EQ(s->percentiles[1].value, 7);
  EXPECT_EQ(s->percentiles[2].value, 3);
}

TEST(Summarize, KnownCoefficientOfVariation) {
  // Mean 10, population stddev 1: CoV 10%.
  const std::vector<double> samples{9, 11, 9, 11};
  auto s = summarize(samples, {});
  ASSERT_TRUE(s.is_ok());
  EXPECT_DOUBLE_EQ(s->mean, 10);
  EXPECT_DOUBLE_EQ(s->stddev, 1);
  EXPECT_DOUBLE_EQ(s->cov, 0.1);
  EXPECT_TRUE(s->percentiles.empty());
}

TEST(Summarize, ZeroMeanHasZeroCov) {
  const std::vector<double> samples{-1, 1};
  auto s = summarize(samples, {});
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->cov, 0);
}

TEST(Summarize, EmptyIsAnError) {
  auto s = summarize({}, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("no samples"), std::string::npos);
}

TEST(Summarize, NonFiniteSampleIsAnError) {
  const std::vector<double> samples{1, std::numeric_limits<double>::quiet_NaN()};
  auto s = summarize(samples, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("sample 1 of 2"), std::string::npos);
  const std::vector<double> inf{std::numeric_limits<double>::infinity()};
  EXPECT_FALSE(summarize(inf, {}).is_ok());
}

TEST(Summarize, PercentileOutOfRangeIsAnError) {
  const std::vector<double> samples{1, 2};
  for (double p : {0.0, -5.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
    const std::vector<double> pcts{p};
    auto s = summarize(samples, pcts);
    ASSERT_FALSE(s.is_ok()) << p;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("outside (0, 100]"), std::string::npos);
  }
}

TEST(Throughput, KnownValues) {
  auto t = throughput_per_s(1000, 2.0);
  ASSERT_TRUE(t.is_ok());
  EXPECT_DOUBLE_EQ(*t, 500);
  auto zero = throughput_per_s(0, 1.0);
  ASSERT_TRUE(zero.is_ok());
  EXPECT_EQ(*zero, 0);
  auto ms = ms_per_item(500);
  ASSERT_TRUE(ms.is_ok());
  EXPECT_DOUBLE_EQ(*ms, 2);
}

TEST(Throughput, BadInputsAreErrors) {
  EXPECT_FALSE(throughput_per_s(10, 0).is_ok());
  EXPECT_FALSE(throughput_per_s(10, -1).is_ok());
  EXPECT_FALSE(throughput_per_s(-1, 1).is_ok());
  EXPECT_FALSE(throughput_per_s(1, std::numeric_limits<double>::infinity()).is_ok());
  EXPECT_FALSE(ms_per_item(0).is_ok());
  EXPECT_FALSE(ms_per_item(-3).is_ok());
}

TEST(ParsePercentiles, Lists) {
  auto p = parse_percentiles("50,90, 95 ,99.9,100");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(*p, (std::vector<double>{50, 90, 95, 99.9, 100}));
  auto one = parse_percentiles("99");
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, std::vector<double>{99});
}

TEST(ParsePercentiles, BadTokensAreNamed) {
  for (const char* text : {"", " ", "50,,90", "50,abc", "0", "101", "-5", "50,", "9O"}) {
    auto p = parse_percentiles(text);
    ASSERT_FALSE(p.is_ok()) << "'" << text << "'";
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("--percentiles"), std::string::npos);
  }
  auto p = parse_percentiles("50,abc");
  EXPECT_NE(p.status().message().find("'abc'"), std::string::npos);
}

TEST(PercentileName, ShortestForm) {
  EXPECT_EQ(percentile_name(50), "p50");
  EXPECT_EQ(percentile_name(99.9), "p99.9");
  EXPECT_EQ(percentile_name(100), "p100");
}

}  // namespace
}  // namespace gpulab::measure
