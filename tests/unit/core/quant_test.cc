// The 8-bit rounding rules of src/core/quant.h against independent definitions: E4M3 by a search
// over the 254 finite E4M3 values (nearest, ties to the even mantissa), INT8 by std::nearbyint.
#include "core/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gpulab {
namespace {

// E4M3's value from its definition: (-1)^s * 2^(e - 7) * (1 + m/8), subnormal 2^-6 * m/8.
double e4m3_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}

// Nearest finite E4M3 code by search; ties go to the even code (mantissa LSB 0); beyond 448 saturate.
uint8_t e4m3_by_search(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xff : 0x7f;
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    if (std::signbit(x) != static_cast<bool>(code & 0x80)) continue;
    const double d = std::abs(e4m3_value(code) - static_cast<double>(x));
    if (d < best_d || (d == best_d && (code & 1) == 0)) {
      best_d = d;
      best = code;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Quant, E4M3DecodesItsDefinition) {
  for (int code = 0; code < 256; ++code) {
    const float f = e4m3_to_float(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), e4m3_value(code)) << code;
    EXPECT_EQ(float_to_e4m3(f), code == 0x80 ? 0x80 : code) << "round trip of code " << code;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(Quant, E4M3RoundsToNearestEvenAndSaturates) {
  // Every midpoint between neighbours (the ties) and points just beside them.
  std::vector<float> probes;
  for (int code = 0; code < 0x7e; ++code) {
    const double lo = e4m3_value(code), hi = e4m3_value(code + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float p : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  std::mt19937 rng(34);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = std::exp2(exponent(rng));
    probes.push_back(i % 2 ? v : -v);
  }
  for (float p : probes) ASSERT_EQ(float_to_e4m3(p), e4m3_by_search(p)) << p;
  EXPECT_EQ(float_to_e4m3(460.0f), 0x7e);  // would round to 448 anyway
  EXPECT_EQ(float_to_e4m3(500.0f), 0x7e);  // saturated, not NaN
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(quantize_fp8(3.0f, 0.5f), 1.5f);
}

TEST(Quant, Int8RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(quantize_int8(2.5f, 1.0f), 2);
  EXPECT_EQ(quantize_int8(3.5f, 1.0f), 4);
  EXPECT_EQ(quantize_int8(-2.5f, 1.0f), -2);
  EXPECT_EQ(quantize_int8(-0.5f, 1.0f), 0);
  EXPECT_EQ(quantize_int8(126.6f, 1.0f), 127);
  EXPECT_EQ(quantize_int8(1e9f, 1.0f), 127);
  EXPECT_EQ(quantize_int8(-1e9f, 1.0f), -128);
  EXPECT_EQ(quantize_int8(-1e9f, 1.0f, kInt8WeightMin), -127);
  EXPECT_EQ(quantize_int8(std::numeric_limits<float>::quiet_NaN(), 1.0f), 0);
  EXPECT_EQ(quantize_int8(1.0f, 10.0f), 10);  // x * inv_scale
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-140.0f, 140.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = dist(rng);
    const float want = std::min(127.0f, std::max(-128.0f, std::nearbyint(v)));
    ASSERT_EQ(quantize_int8(v, 1.0f), static_cast<int8_t>(want)) << v;
  }
}

// The epilogue's steps are fused multiply-adds, rounded once: 3 x float(1/3) is 1 + 2^-25 exactly,
// which a multiply rounded on its own would make 1 before the bias cancels it. The same for the
// residual's term. (cuDNN's fused graphs compute this; quant.h's file comment says why it is the rule.)
TEST(Quant, EpilogueStepsAreFusedMultiplyAdds) {
  const float third = 1.0f / 3.0f;
  EXPECT_EQ(q8_scale_bias(3.0f, third, -1.0f), std::ldexp(1.0f, -25));
  EXPECT_EQ(q8_add_residual(-1.0f, 3.0f, third), std::ldexp(1.0f, -25));
  const volatile float product = 3.0f * third;  // rounded on its own: volatile keeps it from contraction
  EXPECT_EQ(product + -1.0f, 0.0f) << "the multiply rounded apart loses the 2^-25";
  // Without a bias (0) the step is the multiply's rounding alone.
  EXPECT_EQ(q8_scale_bias(3.0f, third, 0.0f), 1.0f);
}

TEST(Quant, PerChannelWeightsUseTheirOwnRange) {
  // Channel 0 lies on a grid of 0.5 (amax 20: 40 steps), channel 1 is zero, channel 2 spans +-448.
  const std::vector<float> w = {20.0f, -10.5f, 3.0f, 0.0f, 0.0f, 0.0f, -448.0f, 1.0f, 0.001f};
  const QuantizedWeights q = quantize_per_channel(w, 3, /*fp8=*/false);
  ASSERT_EQ(q.scales.size(), 3u);
  // A step that reproduces channel 0 exactly: 20 / 80 = 0.25 (20 / 120 fits too, but is not a
  // float, so it leaves a tiny error).
  EXPECT_EQ(q.scales[0], 0.25f);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(q.values[i] * q.scales[0], w[i], 1e-5) << i;
  EXPECT_EQ(q.scales[1], 1.0f);  // an all-zero channel
  EXPECT_LE(std::abs(q.values[6]), 127.0f);
  EXPECT_EQ(q.values[8], 0.0f);
  // Never a worse fit than amax / 127.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> random(64);
  for (float& v : random) v = normal(rng);
  const QuantizedWeights r = quantize_per_channel(random, 1, false);
  float amax = 0;
  for (float v : random) amax = std::max(amax, std::abs(v));
  double err = 0, err127 = 0;
  for (size_t i = 0; i < random.size(); ++i) {
    err += std::pow(random[i] - r.values[i] * r.scales[0], 2);
    err127 +=
        std::pow(random[i] - quantize_int8(random[i], 127.0f / amax, kInt8WeightMin) * (amax / 127.0f), 2);
  }
  EXPECT_LE(err, err127);
  EXPECT_GE(r.scales[0], amax / 127.0f * 0.999f);
  // FP8: amax / 448 per channel.
  const QuantizedWeights f = quantize_per_channel(w, 3, /*fp8=*/true);
  EXPECT_FLOAT_EQ(f.scales[2], 1.0f);
  EXPECT_EQ(f.values[6], -448.0f);
  EXPECT_EQ(f.values[7], 1.0f);
  EXPECT_EQ(f.values[8], std::ldexp(1.0f, -9));  // 0.001 * 512 = 0.512: the smallest subnormal
  EXPECT_EQ(f.values[0], 448.0f);
}

}  // namespace
}  // namespace gpulab
