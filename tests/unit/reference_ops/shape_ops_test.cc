// Data-movement ops: Identity, Dropout, Flatten, Reshape, Shape, Gather, Unsqueeze, Concat.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

std::vector<int64_t> ints(const Tensor& t) {
  return {t.i64().begin(), t.i64().end()};
}

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(ReferenceShapeOps, IdentityAndDropoutCopy) {
  const Tensor x = floats({2, 2}, {1, 2, 3, 4});
  auto id = run_op(make_node(OpType::kIdentity), {&x});
  ASSERT_TRUE(id.is_ok());
  EXPECT_EQ(id->shape(), x.shape());
  EXPECT_TRUE(all_near(*id, {1, 2, 3, 4}, 0));
  std::vector<Tensor> outputs;
  ASSERT_TRUE(
      run_reference_node(make_node(OpType::kDropout, {}, 1, 2), std::vector<const Tensor*>{&x}, outputs)
          .is_ok());
  EXPECT_TRUE(all_near(outputs[0], {1, 2, 3, 4}, 0));
  ASSERT_EQ(outputs[1].dtype(), DataType::kBool);
  EXPECT_EQ(outputs[1].shape(), x.shape());
}

TEST(ReferenceShapeOps, Flatten) {
  const Tensor x = floats({2, 3, 2, 1}, iota(12));
  for (auto [axis, shape] : std::vector<std::pair<int64_t, Shape>>{
           {1, Shape{2, 6}}, {0, Shape{1, 12}}, {2, Shape{6, 2}}, {4, Shape{12, 1}}, {-1, Shape{12, 1}}}) {
    FlattenAttrs a;
    a.axis = axis;
    auto y = run_op(make_node(OpType::kFlatten, a), {&x});
    ASSERT_TRUE(y.is_ok()) << y.status().to_string();
    EXPECT_EQ(y->shape(), shape) << "axis " << axis;
    EXPECT_TRUE(all_near(*y, iota(12), 0));
  }
  FlattenAttrs bad;
  bad.axis = 5;
  EXPECT_FALSE(run_op(make_node(OpType::kFlatten, bad), {&x}).is_ok());
}

TEST(ReferenceShapeOps, ReshapeZeroAndMinusOne) {
  const Tensor x = floats({2, 3, 4}, iota(24));
  const Tensor target = int64s({3}, {0, -1, 2});
  auto y = run_op(make_node(OpType::kReshape, {}, 2), {&x, &target});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 6, 2}));
  EXPECT_TRUE(all_near(*y, iota(24), 0));

  const Tensor two_unknowns = int64s({2}, {-1, -1});
  const Tensor wrong_count = int64s({2}, {5, 5});
  const Tensor indivisible = int64s({2}, {-1, 5});
  const Tensor float_shape = floats({1}, {24});
  for (const Tensor* t : {&two_unknowns, &wrong_count, &indivisible, &float_shape})
    EXPECT_FALSE(run_op(make_node(OpType::kReshape, {}, 2), {&x, t}).is_ok());
}

TEST(ReferenceShapeOps, ReshapeBatchPlaceholder) {
  const Tensor x = floats({3, 4}, iota(12));
  const Tensor target = int64s({2}, {Shape::kBatch, -1});
  EXPECT_EQ(run_op(make_node(OpType::kReshape, {}, 2), {&x, &target}).status().code(),
            StatusCode::kInvalidArgument);  // no batch bound
  std::vector<Tensor> outputs;
  ReferenceOptions options;
  options.bound_batch = 3;
  ASSERT_TRUE(run_reference_node(make_node(OpType::kReshape, {}, 2), std::vector<const Tensor*>{&x, &target},
                                 outputs, options)
                  .is_ok());
  EXPECT_EQ(outputs[0].shape(), (Shape{3, 4}));
}

TEST(ReferenceShapeOps, ShapeGatherUnsqueezeConcat) {
  const Tensor x = floats({5, 6, 7}, iota(210));
  auto shape = run_op(make_node(OpType::kShape), {&x});
  ASSERT_TRUE(shape.is_ok());
  ASSERT_EQ(shape->dtype(), DataType::kInt64);
  EXPECT_EQ(ints(*shape), (std::vector<int64_t>{5, 6, 7}));

  const Tensor index = int64s({}, {-1});  // scalar index, negative: the last dim
  auto last = run_op(make_node(OpType::kGather, AxisAttrs{}, 2), {&*shape, &index});
  ASSERT_TRUE(last.is_ok()) << last.status().to_string();
  EXPECT_EQ(last->shape().rank(), 0u);
  EXPECT_EQ(ints(*last), (std::vector<int64_t>{7}));

  UnsqueezeAttrs unsqueeze;
  unsqueeze.axes = {0};
  auto vec = run_op(make_node(OpType::kUnsqueeze, unsqueeze), {&*last});
  ASSERT_TRUE(vec.is_ok()) << vec.status().to_string();
  EXPECT_EQ(vec->shape(), (Shape{1}));

  const Tensor minus_one = int64s({1}, {-1});
  auto concat = run_op(make_node(OpType::kConcat, AxisAttrs{}, 2), {&*vec, &minus_one});
  ASSERT_TRUE(concat.is_ok()) << concat.status().to_string();
  EXPECT_EQ(ints(*concat), (std::vector<int64_t>{7, -1}));
}

TEST(ReferenceShapeOps, GatherRowsOfFloats) {
  const Tensor x = floats({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor rows = int64s({2}, {2, 0});
  auto y = run_op(make_node(OpType::kGather, AxisAttrs{}, 2), {&x, &rows});
  ASSERT_TRUE(y.is_ok());
  EXPECT_EQ(y->shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_near(*y, {5, 6, 1, 2}, 0));
  AxisAttrs cols;
  cols.axis = 1;
  const Tensor col = int64s({1, 1}, {1});
  auto z = run_op(make_node(OpType::kGather, cols, 2), {&x, &col});
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(z->shape(), (Shape{3, 1, 1}));
  EXPECT_TRUE(all_near(*z, {2, 4, 6}, 0));
  const Tensor out_of_range = int64s({1}, {3});
  EXPECT_EQ(run_op(make_node(OpType::kGather, AxisAttrs{}, 2), {&x, &out_of_range}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ReferenceShapeOps, UnsqueezeSeveralAxes) {
  const Tensor x = floats({2, 3}, iota(6));
  UnsqueezeAttrs a;
  a.axes = {0, -1};
  auto y = run_op(make_node(OpType::kUnsqueeze, a), {&x});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{1, 2, 3, 1}));
  // Axes as an input (opset 13) instead of attributes.
  const Tensor axes = int64s({1}, {1});
  auto z = run_op(make_node(OpType::kUnsqueeze, UnsqueezeAttrs{}, 2), {&x, &axes});
  ASSERT_TRUE(z.is_ok()) << z.status().to_string();
  EXPECT_EQ(z->shape(), (Shape{2, 1, 3}));
  UnsqueezeAttrs repeated;
  repeated.axes = {1, 1};
  EXPECT_FALSE(run_op(make_node(OpType::kUnsqueeze, repeated), {&x}).is_ok());
  EXPECT_FALSE(run_op(make_node(OpType::kUnsqueeze), {&x}).is_ok());  // no axes at all
}

TEST(ReferenceShapeOps, ConcatChannels) {
  const Tensor a = floats({2, 1, 2}, {1, 2, 3, 4});
  const Tensor b = floats({2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17});
  AxisAttrs axis;
  axis.axis = 1;
  auto y = run_op(make_node(OpType::kConcat, axis, 2), {&a, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 3, 2}));
  EXPECT_TRUE(all_near(*y, {1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17}, 0));
  axis.axis = 2;
  EXPECT_EQ(run_op(make_node(OpType::kConcat, axis, 2), {&a, &b}).status().code(),
            StatusCode::kInvalidArgument);
  const Tensor ints_t = int64s({2, 1, 2}, {1, 2, 3, 4});
  axis.axis = 1;
  EXPECT_FALSE(run_op(make_node(OpType::kConcat, axis, 2), {&a, &ints_t}).is_ok());
}

TEST(ReferenceShapeOps, ConstantIsRejected) {
  auto y = run_op(make_node(OpType::kConstant, {}, 0), {});
  EXPECT_EQ(y.status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace gpulab::testing
