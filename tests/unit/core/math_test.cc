#include "core/math.h"

#include <gtest/gtest.h>

#include <cmath>
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
