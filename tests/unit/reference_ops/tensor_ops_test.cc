// The reference ops of the transformer classifiers' exports, against values worked out by hand (or,
// for erf, tanh and GELU, against the closed forms): Transpose, Slice, Split, Squeeze, Expand, Where,
// Pad, ScatterND, ConstantOfShape, Range, Cast, the binary and unary math ops, ReduceMean/L2,
// LayerNormalization, LpNormalization and Attention.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(ReferenceTensorOps, TransposeSliceSplitSqueeze) {
  const Tensor x = floats({2, 3}, iota(6));  // [[0 1 2] [3 4 5]]
  auto t = run_op(make_node(OpType::kTranspose, TransposeAttrs{{1, 0}}), {&x});
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_near(*t, {0, 3, 1, 4, 2, 5}, 0));
  auto r = run_op(make_node(OpType::kTranspose, TransposeAttrs{}), {&x});  // empty perm: reverse
  EXPECT_TRUE(all_near(*r, {0, 3, 1, 4, 2, 5}, 0));

  // x[:, ::-2] and x[1:, -2:]
  const Tensor st = int64s({1}, {-1}), en = int64s({1}, {-100}), ax = int64s({1}, {1}),
               step = int64s({1}, {-2});
  auto s1 = run_op(make_node(OpType::kSlice, {}, 5), {&x, &st, &en, &ax, &step});
  ASSERT_TRUE(s1.is_ok()) << s1.status().to_string();
  EXPECT_EQ(s1->shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_near(*s1, {2, 0, 5, 3}, 0));
  const Tensor st2 = int64s({2}, {1, -2}), en2 = int64s({2}, {INT64_MAX, INT64_MAX});
  auto s2 = run_op(make_node(OpType::kSlice, {}, 3), {&x, &st2, &en2});
  ASSERT_TRUE(s2.is_ok()) << s2.status().to_string();
  EXPECT_EQ(s2->shape(), (Shape{1, 2}));
  EXPECT_TRUE(all_near(*s2, {4, 5}, 0));

  std::vector<Tensor> parts;
  ASSERT_TRUE(run_reference_node(make_node(OpType::kSplit, SplitAttrs{1, {1, 2}}, 1, 2),
                                 std::vector<const Tensor*>{&x}, parts)
                  .is_ok());
  EXPECT_TRUE(all_near(parts[0], {0, 3}, 0));
  EXPECT_TRUE(all_near(parts[1], {1, 2, 4, 5}, 0));
  ASSERT_TRUE(run_reference_node(make_node(OpType::kSplit, SplitAttrs{0, {}}, 1, 2),
                                 std::vector<const Tensor*>{&x}, parts)
                  .is_ok());  // equal parts
  EXPECT_TRUE(all_near(parts[1], {3, 4, 5}, 0));

  const Tensor y = floats({1, 3, 1}, {7, 8, 9});
  auto q = run_op(make_node(OpType::kSqueeze, UnsqueezeAttrs{{0, -1}}), {&y});
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->shape(), (Shape{3}));
  EXPECT_FALSE(run_op(make_node(OpType::kSqueeze, UnsqueezeAttrs{{1}}), {&y}).is_ok()) << "dim 1 is 3";
}

TEST(ReferenceTensorOps, ExpandWherePadScatter) {
  const Tensor x = floats({1, 2}, {1, 2});
  const Tensor shape = int64s({2}, {3, 1});
  auto e = run_op(make_node(OpType::kExpand, {}, 2), {&x, &shape});  // both ways: [3, 2]
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->shape(), (Shape{3, 2}));
  EXPECT_TRUE(all_near(*e, {1, 2, 1, 2, 1, 2}, 0));

  Tensor cond(DataType::kBool, Shape{2});
  cond.data()[0] = std::byte{1};
  const Tensor a = floats({2, 2}, {1, 2, 3, 4}), b = floats({}, {-1});
  auto w = run_op(make_node(OpType::kWhere, {}, 3), {&cond, &a, &b});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_TRUE(all_near(*w, {1, -1, 3, -1}, 0));

  const Tensor pads = int64s({4}, {0, 1, 1, 0}), value = floats({}, {9});
  auto p = run_op(make_node(OpType::kPad, {}, 3), {&x, &pads, &value});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_near(*p, {9, 1, 2, 9, 9, 9}, 0));

  const Tensor data = floats({2, 2}, {0, 0, 0, 0}), idx = int64s({2, 2}, {0, 1, 1, 0}),
               upd = floats({2}, {5, 6});
  auto sc = run_op(make_node(OpType::kScatterND, {}, 3), {&data, &idx, &upd});
  ASSERT_TRUE(sc.is_ok()) << sc.status().to_string();
  EXPECT_TRUE(all_near(*sc, {0, 5, 6, 0}, 0));
}

TEST(ReferenceTensorOps, ConstantOfShapeRangeCast) {
  const Tensor shape = int64s({2}, {2, 3});
  auto c = run_op(make_node(OpType::kConstantOfShape, ConstantOfShapeAttrs{DataType::kInt64, 7}), {&shape});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(ints(*c), (std::vector<int64_t>(6, 7)));
  const Tensor start = int64s({}, {5}), limit = int64s({}, {-2}), delta = int64s({}, {-3});
  auto r = run_op(make_node(OpType::kRange, {}, 3), {&start, &limit, &delta});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(ints(*r), (std::vector<int64_t>{5, 2, -1}));
  const Tensor f = floats({3}, {-1.7f, 0.0f, 2.9f});
  auto i = run_op(make_node(OpType::kCast, CastAttrs{DataType::kInt64}), {&f});
  ASSERT_TRUE(i.is_ok());
  EXPECT_EQ(ints(*i), (std::vector<int64_t>{-1, 0, 2})) << "truncates toward zero";
  auto bo = run_op(make_node(OpType::kCast, CastAttrs{DataType::kBool}), {&f});
  ASSERT_TRUE(bo.is_ok());
  EXPECT_EQ(bo->data()[1], std::byte{0});
  EXPECT_EQ(bo->data()[2], std::byte{1});
  auto n = run_op(make_node(OpType::kNot), {&*bo});
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(n->data()[1], std::byte{1});
}

TEST(ReferenceMath, BinaryOpsWithBroadcasting) {
  const Tensor a = floats({2, 2}, {1, -7, 4, 9}), b = floats({2}, {2, 3});
  const auto run = [&](OpType op, NodeAttrs attrs = {}) { return run_op(make_node(op, attrs, 2), {&a, &b}); };
  EXPECT_TRUE(all_near(*run(OpType::kSub), {-1, -10, 2, 6}, 0));
  EXPECT_TRUE(all_near(*run(OpType::kDiv), {0.5f, -7.0f / 3, 2, 3}, 1e-7));
  EXPECT_TRUE(all_near(*run(OpType::kPow), {1, -343, 16, 729}, 0));
  EXPECT_TRUE(all_near(*run(OpType::kMax), {2, 3, 4, 9}, 0));
  EXPECT_TRUE(all_near(*run(OpType::kMin), {1, -7, 2, 3}, 0));
  EXPECT_TRUE(all_near(*run(OpType::kMod, ModAttrs{true}), {1, -1, 0, 0}, 0)) << "fmod: the dividend's sign";
  EXPECT_TRUE(all_near(*run(OpType::kMod, ModAttrs{false}), {1, 2, 0, 0}, 0)) << "Python: the divisor's sign";
  auto eq = run(OpType::kEqual);
  ASSERT_TRUE(eq.is_ok());
  EXPECT_EQ(eq->dtype(), DataType::kBool);
  const Tensor i = int64s({3}, {7, -7, 8}), j = int64s({}, {2});
  auto d = run_op(make_node(OpType::kDiv, {}, 2), {&i, &j});
  EXPECT_EQ(ints(*d), (std::vector<int64_t>{3, -3, 4})) << "ONNX integer Div truncates";
  auto m = run_op(make_node(OpType::kMod, ModAttrs{false}, 2), {&i, &j});
  EXPECT_EQ(ints(*m), (std::vector<int64_t>{1, 1, 0}));
  const Tensor zero = int64s({}, {0});
  EXPECT_EQ(run_op(make_node(OpType::kDiv, {}, 2), {&i, &zero}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ReferenceMath, UnaryOps) {
  const std::vector<float> xs{-2.0f, -0.5f, 0.0f, 0.75f, 3.0f};
  const Tensor x = floats({5}, xs);
  const auto expect = [&](OpType op, NodeAttrs attrs, double (*f)(double)) {
    auto y = run_op(make_node(op, attrs), {&x});
    ASSERT_TRUE(y.is_ok()) << op_name(op) << ": " << y.status().to_string();
    std::vector<float> want;
    for (float v : xs) want.push_back(static_cast<float>(f(v)));
    EXPECT_TRUE(all_near(*y, want, 0)) << op_name(op);
  };
  expect(OpType::kErf, {}, [](double v) { return std::erf(v); });
  expect(OpType::kTanh, {}, [](double v) { return std::tanh(v); });
  expect(OpType::kExp, {}, [](double v) { return std::exp(v); });
  expect(OpType::kNeg, {}, [](double v) { return -v; });
  expect(OpType::kGelu, GeluAttrs{false},
         [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  expect(OpType::kGelu, GeluAttrs{true}, [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  });
  // GELU(1) = 0.8413447... (Phi(1)); the tanh form 0.8411920...
  const Tensor one = floats({}, {1});
  EXPECT_NEAR(run_op(make_node(OpType::kGelu, GeluAttrs{false}), {&one})->f32()[0], 0.8413447, 1e-6);
  EXPECT_NEAR(run_op(make_node(OpType::kGelu, GeluAttrs{true}), {&one})->f32()[0], 0.8411920, 1e-6);
  const Tensor four = floats({}, {4});
  EXPECT_EQ(run_op(make_node(OpType::kSqrt), {&four})->f32()[0], 2.0f);
}

TEST(ReferenceNormalization, ReduceMeanAndL2OverAnyAxes) {
  const Tensor x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto m = run_op(make_node(OpType::kReduceMean, ReduceAttrs{{-1}, true}), {&x});
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->shape(), (Shape{2, 1}));
  EXPECT_TRUE(all_near(*m, {2, 5}, 0));
  auto all = run_op(make_node(OpType::kReduceMean, ReduceAttrs{{}, false}), {&x});
  EXPECT_EQ(all->shape(), (Shape{}));
  EXPECT_TRUE(all_near(*all, {3.5f}, 0));
  auto l2 = run_op(make_node(OpType::kReduceL2, ReduceAttrs{{0}, false}), {&x});
  EXPECT_TRUE(all_near(*l2, {std::sqrt(17.0f), std::sqrt(29.0f), std::sqrt(45.0f)}, 1e-6));
}

TEST(ReferenceNormalization, LayerNormalizationByHand) {
  // Rows [1, 2, 3] and [2, 2, 8]: means 2 and 4, biased variances 2/3 and 8.
  const Tensor x = floats({2, 3}, {1, 2, 3, 2, 2, 8});
  const Tensor scale = floats({3}, {1, 2, 0.5f}), bias = floats({3}, {0, 1, -1});
  auto y = run_op(make_node(OpType::kLayerNormalization, LayerNormAttrs{-1, 0.0f}, 3), {&x, &scale, &bias});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  const double s1 = 1 / std::sqrt(2.0 / 3), s2 = 1 / std::sqrt(8.0);
  EXPECT_TRUE(
      all_near(*y,
               {static_cast<float>(-s1), 1, static_cast<float>(0.5 * s1 - 1), static_cast<float>(-2 * s2),
                static_cast<float>(-4 * s2 + 1), static_cast<float>(0.5 * 4 * s2 - 1)},
               1e-6));
}

TEST(ReferenceNormalization, LpNormalizationByHand) {
  // Rows [3, 4], [0, 0] and [1e-3, 0] along the last axis: L2 norms 5, 0 and 1e-3.
  const Tensor x = floats({3, 2}, {3, 4, 0, 0, 1e-3f, 0});
  auto l2 = run_op(make_node(OpType::kLpNormalization, LpNormAttrs{-1, 2, 0.0f}), {&x});
  ASSERT_TRUE(l2.is_ok()) << l2.status().to_string();
  EXPECT_TRUE(all_near(*l2, {0.6f, 0.8f, 0, 0, 1, 0}, 1e-6));  // a zero norm gives zeros
  // F.normalize's epsilon: the norm is taken as at least 0.01.
  auto eps = run_op(make_node(OpType::kLpNormalization, LpNormAttrs{-1, 2, 0.01f}), {&x});
  ASSERT_TRUE(eps.is_ok()) << eps.status().to_string();
  EXPECT_TRUE(all_near(*eps, {0.6f, 0.8f, 0, 0, 0.1f, 0}, 1e-6));
  // p 1 along axis 0: columns [3, 0, 1e-3] and [4, 0, 0].
  auto l1 = run_op(make_node(OpType::kLpNormalization, LpNormAttrs{0, 1, 0.0f}), {&x});
  ASSERT_TRUE(l1.is_ok()) << l1.status().to_string();
  EXPECT_TRUE(all_near(*l1, {3 / 3.001f, 1, 0, 0, 1e-3f / 3.001f, 0}, 1e-6));
}

TEST(ReferenceAttention, SoftmaxOfScaledScoresWeighsV) {
  // One head, T = 1, S = 2: scores scale * q.k = 0.5 * [2, 0] -> softmax [e/(e+1), 1/(e+1)].
  const Tensor q = floats({1, 1, 2}, {1, 1}), k = floats({1, 2, 2}, {1, 1, 0, 0}),
               v = floats({1, 2, 1}, {10, 20});
  auto y = run_op(make_node(OpType::kAttention, AttentionAttrs{0.5f}, 3), {&q, &k, &v});
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  const double e = std::exp(1.0);
  EXPECT_TRUE(all_near(*y, {static_cast<float>((10 * e + 20) / (e + 1))}, 1e-5));
  // A bias of -inf-like size on the first key leaves the second's value.
  const Tensor bias = floats({1, 2}, {-1000, 0});
  auto b = run_op(make_node(OpType::kAttention, AttentionAttrs{0.5f}, 4), {&q, &k, &v, &bias});
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_TRUE(all_near(*b, {20}, 1e-4));
  // Broadcast leading dims: Q [2, 1, 2] against one K/V [1, 2, 2].
  const Tensor q2 = floats({2, 1, 2}, {1, 1, 0, 0});
  auto c = run_op(make_node(OpType::kAttention, AttentionAttrs{0.5f}, 3), {&q2, &k, &v});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(all_near(*c, {static_cast<float>((10 * e + 20) / (e + 1)), 15}, 1e-5));
}

}  // namespace
}  // namespace gpulab::testing
