// Gemm and MatMul against hand-computed products.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace gpulab::testing {
namespace {

// A = [[1,2,3],[4,5,6]], B = [[1,0],[0,1],[2,-1]] -> A*B = [[7,-1],[16,-1]]
const std::vector<float> kA{1, 2, 3, 4, 5, 6};
const std::vector<float> kB{1, 0, 0, 1, 2, -1};

GemmAttrs gemm(float alpha, float beta, bool trans_a, bool trans_b) {
  GemmAttrs g;
  g.alpha = alpha;
  g.beta = beta;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  return g;
}

TEST(ReferenceGemm, PlainProduct) {
  const Tensor a = floats({2, 3}, kA), b = floats({3, 2}, kB);
  auto y = run_op(make_node(OpType::kGemm, GemmAttrs{}, 2), {&a, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_near(*y, {7, -1, 16, -1}));
}

TEST(ReferenceGemm, TransposesAlphaBetaAndBroadcastC) {
  // The same product with both operands stored transposed.
  const Tensor at = floats({3, 2}, {1, 4, 2, 5, 3, 6});
  const Tensor bt = floats({2, 3}, {1, 0, 2, 0, 1, -1});
  const Tensor c_row = floats({2}, {10, 20});          // [N]
  const Tensor c_col = floats({2, 1}, {100, 200});     // [M, 1]
  const Tensor c_scalar = floats({}, {1});             // []
  const Tensor c_full = floats({2, 2}, {1, 2, 3, 4});  // [M, N]
  const Node node = make_node(OpType::kGemm, gemm(2.0f, 0.5f, true, true), 3);
  auto row = run_op(node, {&at, &bt, &c_row});
  ASSERT_TRUE(row.is_ok()) << row.status().to_string();
  EXPECT_TRUE(all_near(*row, {19, 8, 37, 8}));
  auto col = run_op(node, {&at, &bt, &c_col});
  ASSERT_TRUE(col.is_ok());
  EXPECT_TRUE(all_near(*col, {64, 48, 132, 98}));
  auto scalar = run_op(node, {&at, &bt, &c_scalar});
  ASSERT_TRUE(scalar.is_ok());
  EXPECT_TRUE(all_near(*scalar, {14.5f, -1.5f, 32.5f, -1.5f}));
  auto full = run_op(node, {&at, &bt, &c_full});
  ASSERT_TRUE(full.is_ok());
  EXPECT_TRUE(all_near(*full, {14.5f, -1, 33.5f, 0}));
  const Tensor a = floats({2, 3}, kA);
  auto only_b = run_op(make_node(OpType::kGemm, gemm(1, 1, false, true), 2), {&a, &bt});
  ASSERT_TRUE(only_b.is_ok());
  EXPECT_TRUE(all_near(*only_b, {7, -1, 16, -1}));
}

TEST(ReferenceGemm, BadShapesAreErrors) {
  const Tensor a = floats({2, 3}, kA), b = floats({3, 2}, kB);
  const Tensor c_bad = floats({3}, {1, 2, 3});
  const Tensor v = floats({3}, {1, 2, 3});
  EXPECT_EQ(run_op(make_node(OpType::kGemm, gemm(1, 1, false, false), 2), {&a, &a}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kGemm, GemmAttrs{}, 3), {&a, &b, &c_bad}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kGemm, GemmAttrs{}, 2), {&v, &b}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ReferenceMatMul, TwoDimensional) {
  const Tensor a = floats({2, 3}, kA), b = floats({3, 2}, kB);
  auto y = run_op(make_node(OpType::kMatMul, {}, 2), {&a, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_TRUE(all_near(*y, {7, -1, 16, -1}));
}

TEST(ReferenceMatMul, BatchedWithBroadcast) {
  // A [2,1,2,3] (two copies, the second negated), B [3,3,2]: B's batch of 3 broadcasts against A's
  // size-1 dim; B[i] = kB * (i + 1). Output [2,3,2,2].
  std::vector<float> a_values = kA;
  for (float v : kA) a_values.push_back(-v);
  std::vector<float> b_values;
  for (int i = 1; i <= 3; ++i)
    for (float v : kB) b_values.push_back(v * static_cast<float>(i));
  const Tensor a = floats({2, 1, 2, 3}, a_values), b = floats({3, 3, 2}, b_values);
  auto y = run_op(make_node(OpType::kMatMul, {}, 2), {&a, &b});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_EQ(y->shape(), (Shape{2, 3, 2, 2}));
  std::vector<float> expected;
  for (float sign : {1.0f, -1.0f})
    for (int i = 1; i <= 3; ++i)
      for (float v : {7.0f, -1.0f, 16.0f, -1.0f}) expected.push_back(sign * static_cast<float>(i) * v);
  EXPECT_TRUE(all_near(*y, expected));
}

TEST(ReferenceMatMul, VectorOperands) {
  const Tensor a = floats({2, 3}, kA);
  const Tensor v = floats({3}, {1, -1, 2});
  const Tensor w = floats({2}, {1, 2});
  auto mv = run_op(make_node(OpType::kMatMul, {}, 2), {&a, &v});
  ASSERT_TRUE(mv.is_ok()) << mv.status().to_string();
  EXPECT_EQ(mv->shape(), (Shape{2}));
  EXPECT_TRUE(all_near(*mv, {5, 11}));
  auto vm = run_op(make_node(OpType::kMatMul, {}, 2), {&w, &a});
  ASSERT_TRUE(vm.is_ok()) << vm.status().to_string();
  EXPECT_EQ(vm->shape(), (Shape{3}));
  EXPECT_TRUE(all_near(*vm, {9, 12, 15}));
}

TEST(ReferenceMatMul, BadShapesAreErrors) {
  const Tensor a = floats({2, 3}, kA);
  const Tensor b_batch = floats({2, 3, 2}, std::vector<float>(12, 1.0f));
  const Tensor a_batch = floats({3, 2, 3}, std::vector<float>(18, 1.0f));
  EXPECT_EQ(run_op(make_node(OpType::kMatMul, {}, 2), {&a, &a}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_op(make_node(OpType::kMatMul, {}, 2), {&a_batch, &b_batch}).status().code(),
            StatusCode::kInvalidArgument);  // batch 3 vs 2
  EXPECT_FALSE(run_op(make_node(OpType::kMatMul, {}, 1), {&a}).is_ok());
}

}  // namespace
}  // namespace gpulab::testing
