// MaxPool, AveragePool and GlobalAveragePool against hand-computed values.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

Tensor iota_plane(int64_t h, int64_t w, float start = 1.0f) {
  std::vector<float> v(static_cast<size_t>(h * w));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return floats({1, 1, h, w}, v);
}

PoolAttrs pool(Hw kernel, Hw stride, Pads pads = {}, bool ceil_mode = false, bool include_pad = false) {
  PoolAttrs a;
  a.kernel = kernel;
  a.stride = stride;
  a.pads = pads;
  a.ceil_mode = ceil_mode;
  a.count_include_pad = include_pad;
  return a;
}

TEST(ReferenceMaxPool, TwoByTwoStrideTwo) {
  const Tensor x = iota_plane(4, 4);
  auto y = run_op(make_node(OpType::kMaxPool, pool({2, 2}, {2, 2})), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{1, 1, 2, 2}));
  EXPECT_TRUE(all_near(*y, {6, 8, 14, 16}));
}

TEST(ReferenceMaxPool, PaddingIsNeverTheMaximum) {
  // All-negative input: a zero from the padding must not win.
  Tensor x = iota_plane(3, 3, -20.0f);
  auto y = run_op(make_node(OpType::kMaxPool, pool({3, 3}, {2, 2}, {1, 1, 1, 1})), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{1, 1, 2, 2}));
  // x = [[-20,-19,-18],[-17,-16,-15],[-14,-13,-12]]
  EXPECT_TRUE(all_near(*y, {-16, -15, -13, -12}));
}

TEST(ReferenceMaxPool, CeilModeAddsPartialWindow) {
  const Tensor x = iota_plane(6, 6);
  auto floor_y = run_op(make_node(OpType::kMaxPool, pool({3, 3}, {2, 2})), {&x});
  ASSERT_TRUE(floor_y.is_ok());
  EXPECT_EQ(floor_y->shape(), (Shape{1, 1, 2, 2}));
  EXPECT_TRUE(all_near(*floor_y, {15, 17, 27, 29}));
  auto ceil_y = run_op(make_node(OpType::kMaxPool, pool({3, 3}, {2, 2}, {}, true)), {&x});
  ASSERT_TRUE(ceil_y.is_ok());
  EXPECT_EQ(ceil_y->shape(), (Shape{1, 1, 3, 3}));
  // The last row/column window covers only input rows/cols 4..5.
  EXPECT_TRUE(all_near(*ceil_y, {15, 17, 18, 27, 29, 30, 33, 35, 36}));
}

TEST(ReferenceMaxPool, CeilModeDropsWindowStartingInPadding) {
  // Kernel 3, stride 3, pad 1: for width 5, ceil((5+2-3)/3)+1 = 3, but the third window would
  // start at 2*3-1 = 5, past the input, so PyTorch keeps 2; for width 6 it starts at 5 and stays.
  const PoolAttrs a = pool({1, 3}, {1, 3}, {0, 1, 0, 1}, true);
  const Tensor x5 = iota_plane(1, 5);
  auto y5 = run_op(make_node(OpType::kMaxPool, a), {&x5});
  ASSERT_TRUE(y5.is_ok()) << y5.status().to_string();
  EXPECT_EQ(y5->shape(), (Shape{1, 1, 1, 2}));
  EXPECT_TRUE(all_near(*y5, {2, 5}));
  const Tensor x6 = iota_plane(1, 6);
  auto y6 = run_op(make_node(OpType::kMaxPool, a), {&x6});
  ASSERT_TRUE(y6.is_ok()) << y6.status().to_string();
  EXPECT_EQ(y6->shape(), (Shape{1, 1, 1, 3}));
  EXPECT_TRUE(all_near(*y6, {2, 5, 6}));
}

TEST(ReferenceMaxPool, Dilation) {
  const Tensor x = iota_plane(5, 5);
  PoolAttrs a = pool({2, 2}, {1, 1});
  a.dilation = {2, 2};
  auto y = run_op(make_node(OpType::kMaxPool, a), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{1, 1, 3, 3}));
  EXPECT_TRUE(all_near(*y, {13, 14, 15, 18, 19, 20, 23, 24, 25}));
}

TEST(ReferenceAveragePool, CountIncludePad) {
  const Tensor x = floats({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  auto excl = run_op(make_node(OpType::kAveragePool, pool({3, 3}, {1, 1}, {1, 1, 1, 1})), {&x});
  ASSERT_TRUE(excl.is_ok()) << excl.status().to_string();
  EXPECT_TRUE(all_near(*excl, std::vector<float>(9, 1.0f)));
  auto incl = run_op(make_node(OpType::kAveragePool, pool({3, 3}, {1, 1}, {1, 1, 1, 1}, false, true)), {&x});
  ASSERT_TRUE(incl.is_ok()) << incl.status().to_string();
  const float c = 4.0f / 9, e = 6.0f / 9;
  EXPECT_TRUE(all_near(*incl, {c, e, c, e, 1, e, c, e, c}));
}

TEST(ReferenceAveragePool, CeilModeWithPadsLikePyTorch) {
  // in 8, kernel 3, stride 2, pad 1, ceil: 5 outputs; the last window [7, 10) is clipped to the
  // padded input [.., 9), so with count_include_pad it counts 2 rows, without it 1.
  const Tensor x = floats({1, 1, 8, 8}, std::vector<float>(64, 1.0f));
  auto excl = run_op(make_node(OpType::kAveragePool, pool({3, 3}, {2, 2}, {1, 1, 1, 1}, true)), {&x});
  ASSERT_TRUE(excl.is_ok()) << excl.status().to_string();
  EXPECT_EQ(excl->shape(), (Shape{1, 1, 5, 5}));
  EXPECT_TRUE(all_near(*excl, std::vector<float>(25, 1.0f)));
  auto incl = run_op(make_node(OpType::kAveragePool, pool({3, 3}, {2, 2}, {1, 1, 1, 1}, true, true)), {&x});
  ASSERT_TRUE(incl.is_ok()) << incl.status().to_string();
  EXPECT_NEAR(incl->f32()[0], 4.0 / 9, 1e-6);   // corner: 2x2 real of 3x3
  EXPECT_NEAR(incl->f32()[2], 6.0 / 9, 1e-6);   // top edge
  EXPECT_NEAR(incl->f32()[6], 1.0, 1e-6);       // interior
  EXPECT_NEAR(incl->f32()[4], 2.0 / 6, 1e-6);   // right edge: 3 rows x 2 cols counted, 2 real
  EXPECT_NEAR(incl->f32()[24], 1.0 / 4, 1e-6);  // bottom-right: 2x2 counted, 1 real
}

TEST(ReferenceAveragePool, AveragesValues) {
  const Tensor x = iota_plane(4, 4);
  auto y = run_op(make_node(OpType::kAveragePool, pool({2, 2}, {2, 2})), {&x});
  ASSERT_TRUE(y.is_ok());
  EXPECT_TRUE(all_near(*y, {3.5f, 5.5f, 11.5f, 13.5f}));
}

TEST(ReferenceGlobalAveragePool, MeanPerChannel) {
  const Tensor x = floats({2, 2, 1, 3}, {1, 2, 3, 4, 5, 6, -1, -2, -3, 0, 0, 9});
  auto y = run_op(make_node(OpType::kGlobalAveragePool), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 2, 1, 1}));
  EXPECT_TRUE(all_near(*y, {2, 5, -2, 3}));
}

TEST(ReferencePool, BadInputsAreErrors) {
  const Tensor x3 = floats({1, 4, 4}, std::vector<float>(16, 0.0f));
  const Tensor x = iota_plane(2, 2);
  EXPECT_EQ(run_op(make_node(OpType::kMaxPool, pool({2, 2}, {1, 1})), {&x3}).status().code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(run_op(make_node(OpType::kMaxPool, pool({3, 3}, {1, 1})), {&x}).status().code(),
            StatusCode::kInvalidArgument);  // window larger than the input
  EXPECT_EQ(run_op(make_node(OpType::kMaxPool), {&x}).status().code(), StatusCode::kInvalidModel);
  EXPECT_FALSE(run_op(make_node(OpType::kAveragePool, pool({2, 2}, {0, 1})), {&x}).is_ok());
  EXPECT_FALSE(run_op(make_node(OpType::kMaxPool, pool({2, 2}, {1, 1}, {2, 0, 0, 0})), {&x}).is_ok());
  const Tensor x1 = floats({1, 1}, {1});
  EXPECT_FALSE(run_op(make_node(OpType::kGlobalAveragePool), {&x1}).is_ok());
  Node with_indices = make_node(OpType::kMaxPool, pool({2, 2}, {1, 1}), 1, 2);
  EXPECT_EQ(run_op(with_indices, {&x}).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace gpulab::testing
