// Conv against hand-computed values and against a naive formula written differently from the
// backend: the input is first copied into an explicitly zero-padded buffer, then every output
// element is one sum over (input channel of its group, kernel row, kernel column).
#include <gtest/gtest.h>

#include <algorithm>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

struct ConvCase {
  const char* label;
  int64_t batch, channels, height, width, out_channels, groups;
  Hw kernel, stride, dilation;
  Pads pads;
  bool bias;
};

std::vector<float> naive_conv(const Tensor& x, const Tensor& w, const Tensor* b, const ConvAttrs& a) {
  const int64_t n_ = x.shape()[0], c_ = x.shape()[1], h_ = x.shape()[2], w_ = x.shape()[3];
  const int64_t m_ = w.shape()[0], cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3];
  const int64_t ph = h_ + a.pads.top + a.pads.bottom, pw = w_ + a.pads.left + a.pads.right;
  std::vector<double> padded(static_cast<size_t>(n_ * c_ * ph * pw), 0.0);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t c = 0; c < c_; ++c)
      for (int64_t i = 0; i < h_; ++i)
        for (int64_t j = 0; j < w_; ++j)
          padded[static_cast<size_t>(((n * c_ + c) * ph + i + a.pads.top) * pw + j + a.pads.left)] =
              x.f32()[static_cast<size_t>(((n * c_ + c) * h_ + i) * w_ + j)];
  const int64_t oh_ = (ph - (a.dilation.h * (kh - 1) + 1)) / a.stride.h + 1;
  const int64_t ow_ = (pw - (a.dilation.w * (kw - 1) + 1)) / a.stride.w + 1;
  std::vector<float> y;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t m = 0; m < m_; ++m)
      for (int64_t oh = 0; oh < oh_; ++oh)
        for (int64_t ow = 0; ow < ow_; ++ow) {
          double s = b ? b->f32()[static_cast<size_t>(m)] : 0.0;
          const int64_t first_channel = (m / (m_ / a.groups)) * cg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j)
                s += static_cast<double>(w.f32()[static_cast<size_t>(((m * cg + c) * kh + i) * kw + j)]) *
                     padded[static_cast<size_t>(
                         ((n * c_ + first_channel + c) * ph + oh * a.stride.h + i * a.dilation.h) * pw +
                         ow * a.stride.w + j * a.dilation.w)];
          y.push_back(static_cast<float>(s));
        }
  return y;
}

TEST(ReferenceConv, HandComputed3x3On4x4) {
  std::vector<float> x_values(16);
  for (int i = 0; i < 16; ++i) x_values[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  const Tensor x = floats({1, 1, 4, 4}, x_values);
  const Tensor w = floats({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  ConvAttrs attrs;
  attrs.kernel = {3, 3};
  auto valid = run_op(make_node(OpType::kConv, attrs, 2), {&x, &w});
  ASSERT_TRUE(valid.is_ok()) << valid.status().to_string();
  EXPECT_EQ(valid->shape(), (Shape{1, 1, 2, 2}));
  // Window sums of [[1..4],[5..8],[9..12],[13..16]].
  EXPECT_TRUE(all_near(*valid, {54, 63, 90, 99}));

  attrs.pads = {1, 1, 1, 1};
  auto same = run_op(make_node(OpType::kConv, attrs, 2), {&x, &w});
  ASSERT_TRUE(same.is_ok()) << same.status().to_string();
  EXPECT_EQ(same->shape(), (Shape{1, 1, 4, 4}));
  EXPECT_TRUE(all_near(*same, {14, 24, 30, 22, 33, 54, 63, 45, 57, 90, 99, 69, 46, 72, 78, 54}));
}

TEST(ReferenceConv, StrideTwoWithBiasByHand) {
  // 2 output channels, 1x1 kernel, stride 2: picks x[0,0], x[0,2], x[2,0], x[2,2], scales, adds bias.
  std::vector<float> x_values(16);
  for (int i = 0; i < 16; ++i) x_values[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x = floats({1, 1, 4, 4}, x_values);
  const Tensor w = floats({2, 1, 1, 1}, {1.0f, -2.0f});
  const Tensor b = floats({2}, {0.5f, 1.0f});
  ConvAttrs attrs;
  attrs.stride = {2, 2};
  auto y = run_op(make_node(OpType::kConv, attrs, 3), {&x, &w, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_TRUE(all_near(*y, {0.5f, 2.5f, 8.5f, 10.5f, 1.0f, -3.0f, -15.0f, -19.0f}));
}

// ctest names the discovered tests after the label ("...MatchesNaiveFormula/grouped").
void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << c.label;
}

class ReferenceConvRandom : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ReferenceConvRandom, MatchesNaiveFormula) {
  const ConvCase& c = GetParam();
  const Tensor x = random_tensor({c.batch, c.channels, c.height, c.width}, 1);
  const Tensor w = random_tensor({c.out_channels, c.channels / c.groups, c.kernel.h, c.kernel.w}, 2);
  const Tensor b = random_tensor({c.out_channels}, 3);
  ConvAttrs attrs;
  attrs.kernel = c.kernel;
  attrs.stride = c.stride;
  attrs.dilation = c.dilation;
  attrs.pads = c.pads;
  attrs.groups = c.groups;
  std::vector<const Tensor*> inputs{&x, &w};
  if (c.bias) inputs.push_back(&b);
  for (int threads : {1, 2}) {
    auto y = run_op(make_node(OpType::kConv, attrs, inputs.size()), inputs, threads);
    ASSERT_TRUE(y.is_ok()) << y.status().to_string();
    EXPECT_TRUE(all_near(*y, naive_conv(x, w, c.bias ? &b : nullptr, attrs), 1e-5)) << c.label;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceConvRandom,
    ::testing::Values(
        ConvCase{"plain_3x3_pad1", 2, 3, 7, 6, 4, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
        ConvCase{"stem_7x7_stride2_pad3", 1, 3, 13, 11, 5, 1, {7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}, true},
        ConvCase{"grouped", 2, 6, 5, 5, 4, 2, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
        ConvCase{"depthwise_stride2", 1, 8, 9, 9, 8, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, false},
        ConvCase{"depthwise_multiplier2", 1, 4, 6, 6, 8, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
        ConvCase{"dilation2", 1, 2, 9, 8, 3, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, true},
        ConvCase{"asymmetric_pads", 1, 2, 6, 7, 3, 1, {3, 2}, {2, 1}, {1, 1}, {0, 1, 2, 0}, true},
        ConvCase{"nonsquare_kernel_dilation2x1_stride1x3",
                 1,
                 3,
                 8,
                 10,
                 2,
                 1,
                 {2, 3},
                 {1, 3},
                 {2, 1},
                 {1, 0, 0, 2},
                 false},
        ConvCase{"projection_1x1_stride2", 3, 4, 6, 6, 6, 1, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, true}));

TEST(ReferenceConv, FusedResidualAndRelu) {
  const Tensor x = random_tensor({2, 3, 5, 5}, 10);
  const Tensor w = random_tensor({4, 3, 3, 3}, 11);
  const Tensor b = random_tensor({4}, 12);
  const Tensor r = random_tensor({2, 4, 5, 5}, 13);
  ConvAttrs attrs;
  attrs.kernel = {3, 3};
  attrs.pads = {1, 1, 1, 1};
  std::vector<float> expected = naive_conv(x, w, &b, attrs);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = std::max(0.0f, expected[i] + r.f32()[i]);
  attrs.activation = Activation::kRelu;
  attrs.has_residual = true;
  auto y = run_op(make_node(OpType::kConv, attrs, 4), {&x, &w, &b, &r});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_TRUE(all_near(*y, expected, 1e-5));
  // Some outputs were clamped and some not, so the test sees the activation.
  EXPECT_GT(std::count(y->f32().begin(), y->f32().end(), 0.0f), 0);
  EXPECT_GT(std::count_if(y->f32().begin(), y->f32().end(), [](float v) { return v > 0; }), 0);
}

TEST(ReferenceConv, FusedClipWithoutBias) {
  const Tensor x = random_tensor({1, 2, 4, 4}, 20);
  Tensor w = random_tensor({3, 2, 3, 3}, 21);
  for (float& v : w.f32()) v *= 4.0f;  // push outputs past the clip range
  ConvAttrs attrs;
  attrs.kernel = {3, 3};
  attrs.pads = {1, 1, 1, 1};
  std::vector<float> expected = naive_conv(x, w, nullptr, attrs);
  for (float& v : expected) v = std::clamp(v, -0.5f, 1.5f);
  attrs.activation = Activation::kClip;
  attrs.clip_min = -0.5f;
  attrs.clip_max = 1.5f;
  auto y = run_op(make_node(OpType::kConv, attrs, 2), {&x, &w});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_TRUE(all_near(*y, expected, 1e-5));
  EXPECT_GT(std::count(y->f32().begin(), y->f32().end(), 1.5f), 0);
  EXPECT_GT(std::count(y->f32().begin(), y->f32().end(), -0.5f), 0);
}

TEST(ReferenceConv, FusedResidualWithoutBiasUsesEmptySlot) {
  const Tensor x = floats({1, 1, 1, 2}, {1, 2});
  const Tensor w = floats({1, 1, 1, 1}, {3});
  const Tensor r = floats({1, 1, 1, 2}, {10, -20});
  ConvAttrs attrs;
  attrs.has_residual = true;
  Node node = make_node(OpType::kConv, attrs, 4);
  node.inputs[2] = "";
  auto y = run_op(node, {&x, &w, nullptr, &r});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_TRUE(all_near(*y, {13, -14}));
}

TEST(ReferenceConv, BadShapesAreErrors) {
  const Tensor x = random_tensor({1, 3, 4, 4}, 30);
  const Tensor w_wrong_channels = random_tensor({2, 2, 3, 3}, 31);
  const Tensor w = random_tensor({2, 3, 3, 3}, 32);
  const Tensor w_too_big = random_tensor({2, 3, 5, 5}, 33);
  const Tensor bias_wrong = random_tensor({3}, 34);
  const Tensor residual_wrong = random_tensor({1, 2, 3, 4}, 35);  // output is [1,2,4,4]
  const Tensor x_rank3 = random_tensor({3, 4, 4}, 36);
  ConvAttrs attrs;
  EXPECT_EQ(run_op(make_node(OpType::kConv, attrs, 2), {&x, &w_wrong_channels}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kConv, attrs, 2), {&x, &w_too_big}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kConv, attrs, 3), {&x, &w, &bias_wrong}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kConv, attrs, 2), {&x_rank3, &w}).status().code(),
            StatusCode::kUnsupported);
  EXPECT_FALSE(run_op(make_node(OpType::kConv, attrs, 1), {&x}).is_ok());  // no weight

  ConvAttrs grouped = attrs;
  grouped.groups = 2;  // 3 channels do not split into 2 groups
  EXPECT_FALSE(run_op(make_node(OpType::kConv, grouped, 2), {&x, &w}).is_ok());

  ConvAttrs fused = attrs;
  fused.pads = {1, 1, 1, 1};
  fused.has_residual = true;
  auto bad_residual = run_op(make_node(OpType::kConv, fused, 4), {&x, &w, nullptr, &residual_wrong});
  EXPECT_EQ(bad_residual.status().code(), StatusCode::kInvalidArgument);
  auto missing_residual = run_op(make_node(OpType::kConv, fused, 3), {&x, &w, nullptr});
  EXPECT_EQ(missing_residual.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(missing_residual.status().message().find("Conv 'Conv_test'"), std::string::npos);

  ConvAttrs zero_stride = attrs;
  zero_stride.stride = {0, 1};
  EXPECT_FALSE(run_op(make_node(OpType::kConv, zero_stride, 2), {&x, &w}).is_ok());

  ConvAttrs huge_pads = attrs;  // would overflow index arithmetic
  huge_pads.pads = {int64_t{1} << 40, 0, int64_t{1} << 40, 0};
  EXPECT_EQ(run_op(make_node(OpType::kConv, huge_pads, 2), {&x, &w}).status().code(),
            StatusCode::kInvalidModel);

  ConvAttrs wrong_kernel = attrs;
  wrong_kernel.kernel = {5, 5};
  EXPECT_FALSE(run_op(make_node(OpType::kConv, wrong_kernel, 2), {&x, &w}).is_ok());

  const Tensor x_int = int64s({1, 1, 1, 1}, {1});
  const Tensor w1 = floats({1, 1, 1, 1}, {1});
  EXPECT_EQ(run_op(make_node(OpType::kConv, attrs, 2), {&x_int, &w1}).status().code(),
            StatusCode::kUnsupported);

  Node wrong_attrs = make_node(OpType::kConv, PoolAttrs{}, 2);
  EXPECT_EQ(run_op(wrong_attrs, {&x, &w}).status().code(), StatusCode::kInvalidModel);
}

}  // namespace
}  // namespace gpulab::testing
