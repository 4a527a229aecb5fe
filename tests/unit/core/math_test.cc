#include "core/math.h"

#include "core/checked.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <vector>

namespace gpulab {
namespace {

TEST(Softmax, SumsToOneAndIsShiftInvariant) {
  std::vector<float> logits{1.0f, 2.0f, 3.0f};
  auto p = softmax(logits);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-6);
  // exp(1)/(exp(1)+exp(2)+exp(3)) = 0.09003057
  EXPECT_NEAR(p[0], 0.09003057, 1e-6);
  std::vector<float> big{1001.0f, 1002.0f, 1003.0f};
  auto q = softmax(big);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(p[i], q[i], 1e-6);
}

TEST(TopK, LargestFirstTiesByIndex) {
  std::vector<float> v{0.1f, 0.7f, 0.2f, 0.7f, -1.0f};
  EXPECT_EQ(top_k(v, 3), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(top_k(v, 10).size(), 5u);
  EXPECT_TRUE(top_k(v, 0).empty());
}

}  // namespace
}  // namespace gpulab

namespace gpulab {
namespace {

TEST(Checked, ArithmeticRefusesOverflowInsteadOfWrapping) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(checked_add(2, 3), 5);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(checked_sub(kMin, 1), std::nullopt);
  EXPECT_EQ(checked_mul(-1, kMin), std::nullopt);
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_EQ(checked_mul(int64_t{1} << 32, int64_t{1} << 31), std::nullopt);
  const std::vector<int64_t> dims{1, 3, 224, 224};
  EXPECT_EQ(checked_product(dims), 150528);
  EXPECT_EQ(checked_product(std::span<const int64_t>()), 1);
  const std::vector<int64_t> huge{4611686018427387904, 3, 9, 9};  // an edited MobileNetV2 input
  EXPECT_EQ(checked_product(huge), std::nullopt);
}

}  // namespace
}  // namespace gpulab
