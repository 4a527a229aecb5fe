// Element-wise ops, BatchNormalization and Softmax against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

TEST(ReferenceAdd, NumpyBroadcasting) {
  const Tensor a = floats({2, 3, 1}, {1, 2, 3, 4, 5, 6});
  const Tensor b = floats({1, 4}, {10, 20, 30, 40});
  auto y = run_op(make_node(OpType::kAdd, {}, 2), {&a, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 3, 4}));
  std::vector<float> expected;
  for (float p : {1, 2, 3, 4, 5, 6})
    for (float q : {10, 20, 30, 40}) expected.push_back(p + q);
  EXPECT_TRUE(all_near(*y, expected));
}

TEST(ReferenceMul, PerChannelAndScalar) {
  const Tensor x = floats({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor scale = floats({2, 1, 1}, {10, -1});
  const Tensor scalar = floats({}, {0.5f});
  auto y = run_op(make_node(OpType::kMul, {}, 2), {&x, &scale});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{1, 2, 1, 2}));
  EXPECT_TRUE(all_near(*y, {10, 20, -3, -4}));
  auto z = run_op(make_node(OpType::kMul, {}, 2), {&scalar, &x});
  ASSERT_TRUE(z.is_ok());
  EXPECT_TRUE(all_near(*z, {0.5f, 1, 1.5f, 2}));
}

TEST(ReferenceAdd, Int64ShapeArithmetic) {
  const Tensor a = int64s({3}, {1, 2, 3});
  const Tensor b = int64s({1}, {4});
  auto sum = run_op(make_node(OpType::kAdd, {}, 2), {&a, &b});
  ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
  ASSERT_EQ(sum->dtype(), DataType::kInt64);
  EXPECT_EQ(std::vector<int64_t>(sum->i64().begin(), sum->i64().end()), (std::vector<int64_t>{5, 6, 7}));
  auto product = run_op(make_node(OpType::kMul, {}, 2), {&a, &b});
  ASSERT_TRUE(product.is_ok());
  EXPECT_EQ(std::vector<int64_t>(product->i64().begin(), product->i64().end()),
            (std::vector<int64_t>{4, 8, 12}));
}

TEST(ReferenceBinary, BadInputsAreErrors) {
  const Tensor a = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = floats({2}, {1, 2});
  const Tensor i = int64s({3}, {1, 2, 3});
  EXPECT_EQ(run_op(make_node(OpType::kAdd, {}, 2), {&a, &b}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kMul, {}, 2), {&a, &i}).status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(run_op(make_node(OpType::kAdd, {}, 1), {&a}).is_ok());
  EXPECT_FALSE(run_op(make_node(OpType::kAdd, {}, 3), {&a, &a, &a}).is_ok());
}

TEST(ReferenceUnary, ActivationsByHand) {
  const Tensor x = floats({5}, {-4, -1, 0, 1.5f, 4});
  auto relu = run_op(make_node(OpType::kRelu), {&x});
  ASSERT_TRUE(relu.is_ok());
  EXPECT_TRUE(all_near(*relu, {0, 0, 0, 1.5f, 4}));

  ClipAttrs clip;
  clip.min = -1.0f;
  clip.max = 2.0f;
  auto clipped = run_op(make_node(OpType::kClip, clip), {&x});
  ASSERT_TRUE(clipped.is_ok());
  EXPECT_TRUE(all_near(*clipped, {-1, -1, 0, 1.5f, 2}));

  // Opset >= 11 form: min/max as inputs override the attributes.
  const Tensor lo = floats({}, {0}), hi = floats({}, {6});
  auto relu6 = run_op(make_node(OpType::kClip, ClipAttrs{}, 3), {&x, &lo, &hi});
  ASSERT_TRUE(relu6.is_ok()) << relu6.status().to_string();
  EXPECT_TRUE(all_near(*relu6, {0, 0, 0, 1.5f, 4}));

  auto sigmoid = run_op(make_node(OpType::kSigmoid), {&x});
  ASSERT_TRUE(sigmoid.is_ok());
  std::vector<float> expected;
  for (double v : {-4.0, -1.0, 0.0, 1.5, 4.0}) expected.push_back(static_cast<float>(1 / (1 + std::exp(-v))));
  EXPECT_TRUE(all_near(*sigmoid, expected, 1e-7));

  HardSigmoidAttrs hs;
  hs.alpha = 1.0f / 6;
  hs.beta = 0.5f;
  auto hard_sigmoid = run_op(make_node(OpType::kHardSigmoid, hs), {&x});
  ASSERT_TRUE(hard_sigmoid.is_ok());
  EXPECT_TRUE(all_near(*hard_sigmoid, {0, 1.0f / 3, 0.5f, 0.75f, 1.0f}, 1e-6));
  auto default_hard_sigmoid = run_op(make_node(OpType::kHardSigmoid), {&x});  // alpha 0.2, beta 0.5
  ASSERT_TRUE(default_hard_sigmoid.is_ok());
  EXPECT_TRUE(all_near(*default_hard_sigmoid, {0, 0.3f, 0.5f, 0.8f, 1.0f}, 1e-6));

  const Tensor xs = floats({5}, {-4, -1, 0, 1.5f, 3});
  auto hard_swish = run_op(make_node(OpType::kHardSwish), {&xs});
  ASSERT_TRUE(hard_swish.is_ok());
  // x * relu6(x + 3) / 6
  EXPECT_TRUE(all_near(*hard_swish, {0, -1.0f / 3, 0, 1.125f, 3}, 1e-6));
}

TEST(ReferenceUnary, BadInputsAreErrors) {
  const Tensor x = floats({2}, {1, 2});
  const Tensor i = int64s({2}, {1, 2});
  const Tensor not_scalar = floats({2}, {0, 1});
  EXPECT_EQ(run_op(make_node(OpType::kRelu), {&i}).status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(run_op(make_node(OpType::kClip, ClipAttrs{}, 2), {&x, &not_scalar}).is_ok());
  ClipAttrs empty;
  empty.min = 2;
  empty.max = 1;
  EXPECT_FALSE(run_op(make_node(OpType::kClip, empty), {&x}).is_ok());
  EXPECT_FALSE(run_op(make_node(OpType::kSigmoid, {}, 2), {&x, &x}).is_ok());
}

TEST(ReferenceBatchNorm, InferenceFormula) {
  const Tensor x = floats({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor scale = floats({2}, {2, 1});
  const Tensor bias = floats({2}, {0.5f, -1});
  const Tensor mean = floats({2}, {1, 3});
  const Tensor var = floats({2}, {4, 0.25f});
  BatchNormAttrs attrs;
  attrs.epsilon = 0;
  auto y = run_op(make_node(OpType::kBatchNormalization, attrs, 5), {&x, &scale, &bias, &mean, &var});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  // c0: (x-1)/2*2+0.5, c1: (x-3)/0.5*1-1
  EXPECT_TRUE(all_near(*y, {0.5f, 1.5f, -1, 1}));
  const Tensor short_var = floats({1}, {1});
  EXPECT_EQ(run_op(make_node(OpType::kBatchNormalization, attrs, 5), {&x, &scale, &bias, &mean, &short_var})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(ReferenceSoftmax, RowsByHand) {
  const Tensor x = floats({2, 3}, {1, 2, 3, 1000, 1000, 1000});
  AxisAttrs axis;
  axis.axis = 1;
  auto y = run_op(make_node(OpType::kSoftmax, axis), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_TRUE(all_near(*y,
                       {static_cast<float>(std::exp(1.0) / s), static_cast<float>(std::exp(2.0) / s),
                        static_cast<float>(std::exp(3.0) / s), 1.0f / 3, 1.0f / 3, 1.0f / 3},
                       1e-7));
  // No attributes: ONNX's default axis -1, the same here.
  auto d = run_op(make_node(OpType::kSoftmax), {&x});
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(all_near(*d, values_of(*y), 0));
}

TEST(ReferenceSoftmax, AlongAxisZero) {
  const Tensor x = floats({2, 2}, {0, 5, 0, 5});
  AxisAttrs axis;
  axis.axis = 0;
  auto y = run_op(make_node(OpType::kSoftmax, axis), {&x});
  ASSERT_TRUE(y.is_ok());
  EXPECT_TRUE(all_near(*y, {0.5f, 0.5f, 0.5f, 0.5f}, 1e-7));
  axis.axis = 2;
  EXPECT_EQ(run_op(make_node(OpType::kSoftmax, axis), {&x}).status().code(), StatusCode::kInvalidModel);
}

}  // namespace
}  // namespace gpulab::testing
