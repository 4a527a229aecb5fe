// GPU tests of the view-step kernels (layout copies, broadcast arithmetic, LayerNorm, the plain
// attention) and the transformer unary ops, every float dtype, on transformer shapes, against host
// loops over the same rounded inputs.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/view_kernels.h"
#include "kernel_test_util.h"

namespace gpulab::kernels {
namespace {

using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::expect_close;
using testing::expect_exact;
using testing::expect_synced;
using testing::float_types;
using testing::random_values;
using testing::round_to;

TEST(ViewKernels, CopyTransposesAndConverts) {
  GPULAB_SKIP_WITHOUT_GPU();
  // NCHW [96, 7, 7] -> token-major [49, 96] (a ConvNeXt / Swin layout change), per image.
  const int64_t n = 2, c = 96, hw = 49;
  for (DataType xt : float_types()) {
    for (DataType yt : float_types()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(xt) << " -> " << dtype_name(yt));
      const std::vector<float> x = round_to(random_values(n * c * hw, 31), xt);
      StridedView xv = dense_strided_view({hw, c});
      xv.strides = {1, hw};
      xv.image_stride = c * hw;
      CopyDesc d{.n = n, .x = xv, .y = dense_strided_view({hw, c}), .x_dtype = xt, .y_dtype = yt};
      std::vector<float> expected(n * hw * c);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < hw; ++t)
          for (int64_t k = 0; k < c; ++k) expected[(i * hw + t) * c + k] = x[(i * c + k) * hw + t];
      expected = round_to(expected, yt);
      DeviceBuffer dx(encode(x, xt));
      DeviceBuffer dy(expected.size() * dtype_size(yt));
      const Status s = launch_copy(d, dx.get(), dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_exact(decode(dy.download(), yt), expected);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

TEST(ViewKernels, EltwiseBroadcastsZeroStrides) {
  GPULAB_SKIP_WITHOUT_GPU();
  // y[t, c] = a[t, c] (op) b[c]: a bias or layer scale over the tokens, b shared by the images.
  const int64_t n = 3, t = 50, c = 64;
  for (DataType dt : float_types()) {
    for (EltwiseKernelOp op :
         {EltwiseKernelOp::kAdd, EltwiseKernelOp::kSub, EltwiseKernelOp::kMul, EltwiseKernelOp::kDiv}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " op " << static_cast<int>(op));
      const std::vector<float> a = round_to(random_values(n * t * c, 41), dt);
      const std::vector<float> b = round_to(random_values(c, 42), dt);
      StridedView bv = dense_strided_view({t, c});
      bv.strides[0] = 0;
      bv.image_stride = 0;
      EltwiseDesc d{.n = n,
                    .op = op,
                    .a = dense_strided_view({t, c}),
                    .b = bv,
                    .y = dense_strided_view({t, c}),
                    .dtype = dt};
      std::vector<float> expected(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double p = a[i], q = b[i % c];
        const double r = op == EltwiseKernelOp::kAdd   ? p + q
                         : op == EltwiseKernelOp::kSub ? p - q
                         : op == EltwiseKernelOp::kMul ? p * q
                                                       : p / q;
        expected[i] = static_cast<float>(r);
      }
      DeviceBuffer da(encode(a, dt)), db(encode(b, dt)), dy(a.size() * dtype_size(dt));
      const Status s = launch_eltwise(d, da.get(), db.get(), dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_close(decode(dy.download(), dt), expected, dt);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

// The L2 mode (F.normalize, Swin V2's cosine attention): Swin V2-T's 32-wide heads and a wider row,
// a zero row (zeros out) and one whose norm is below epsilon (divided by epsilon).
TEST(ViewKernels, L2NormalizePerRow) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (const auto& [rows, c] : {std::pair<int64_t, int64_t>{49, 32}, {7, 1000}}) {
    for (DataType dt : float_types()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " rows " << rows << " c " << c);
      const int64_t n = 2;
      const float eps = 1e-3f;
      std::vector<float> x = random_values(n * rows * c, 61, 2.0f);
      std::fill_n(x.begin(), c, 0.0f);                                   // a zero row
      for (int64_t k = 0; k < c; ++k) x[c + k] = k == 0 ? 1e-4f : 0.0f;  // norm 1e-4 < eps
      x = round_to(x, dt);
      const std::vector<float> gamma(c, 1.0f);
      LayerNormDesc d{.n = n,
                      .rows = rows,
                      .c = c,
                      .x_row_stride = c,
                      .x_image_stride = rows * c,
                      .y_row_stride = c,
                      .y_image_stride = rows * c,
                      .epsilon = eps,
                      .dtype = dt,
                      .l2 = true};
      std::vector<float> expected(n * rows * c);
      for (int64_t r = 0; r < n * rows; ++r) {
        const float* row = x.data() + r * c;
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += double{row[k]} * row[k];
        const double den = std::max(std::sqrt(sum), double{eps});
        for (int64_t k = 0; k < c; ++k) expected[r * c + k] = static_cast<float>(row[k] / den);
      }
      DeviceBuffer dx(encode(x, dt)), dy(expected.size() * dtype_size(dt));
      DeviceBuffer dg(encode(gamma, DataType::kFloat32));
      const Status s =
          launch_layer_norm(d, dx.get(), static_cast<const float*>(dg.get()), nullptr, dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_close(decode(dy.download(), dt), expected, dt);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

TEST(ViewKernels, LayerNormPerRow) {
  GPULAB_SKIP_WITHOUT_GPU();
  // ViT-B: 197 tokens of 768, epsilon 1e-6; rows strided wider than c (a slice of a wider tensor).
  for (const auto& [rows, c, pad] :
       {std::tuple<int64_t, int64_t, int64_t>{197, 768, 0}, {49, 96, 32}, {7, 1000, 3}}) {
    for (DataType dt : float_types()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " rows " << rows << " c " << c);
      const int64_t n = 2, stride = c + pad;
      std::vector<float> x = random_values(n * rows * stride, 51, 3.0f);
      for (size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;  // a mean away from zero
      x = round_to(x, dt);
      const std::vector<float> gamma = random_values(c, 52), beta = random_values(c, 53);
      LayerNormDesc d{.n = n,
                      .rows = rows,
                      .c = c,
                      .x_row_stride = stride,
                      .x_image_stride = rows * stride,
                      .y_row_stride = c,
                      .y_image_stride = rows * c,
                      .epsilon = 1e-6f,
                      .dtype = dt};
      std::vector<float> expected(n * rows * c);
      for (int64_t r = 0; r < n * rows; ++r) {
        const float* row = x.data() + r * stride;
        double mean = 0, var = 0;
        for (int64_t k = 0; k < c; ++k) mean += row[k];
        mean /= c;
        for (int64_t k = 0; k < c; ++k) var += (row[k] - mean) * (row[k] - mean);
        var /= c;
        for (int64_t k = 0; k < c; ++k)
          expected[r * c + k] =
              static_cast<float>((row[k] - mean) / std::sqrt(var + 1e-6) * gamma[k] + beta[k]);
      }
      DeviceBuffer dx(encode(x, dt)), dy(expected.size() * dtype_size(dt));
      DeviceBuffer dg(encode(gamma, DataType::kFloat32)), db(encode(beta, DataType::kFloat32));
      const Status s = launch_layer_norm(d, dx.get(), static_cast<const float*>(dg.get()),
                                         static_cast<const float*>(db.get()), dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_close(decode(dy.download(), dt), expected, dt);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

// Host scaled dot-product attention over the descriptor's views.
std::vector<float> host_attention(const AttentionDesc& d, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<float>& bias) {
  const int64_t b_count = d.q.dims[0], heads = d.q.dims[1], t_count = d.q.dims[2], s_count = d.k.dims[2];
  const int64_t dq = d.q.dims[3], dv = d.v.dims[3];
  auto at = [](const StridedView& view, int64_t n, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return view.offset + n * view.image_stride + i0 * view.strides[0] + i1 * view.strides[1] +
           i2 * view.strides[2] + i3 * view.strides[3];
  };
  std::vector<float> y(d.n * d.y.numel());
  std::vector<double> p(s_count);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t b = 0; b < b_count; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < t_count; ++t) {
          double max_score = -INFINITY;
          for (int64_t s = 0; s < s_count; ++s) {
            double dot = 0;
            for (int64_t e = 0; e < dq; ++e)
              dot += double(q[at(d.q, n, b, h, t, e)]) * k[at(d.k, n, b, h, s, e)];
            p[s] = d.scale * dot + (d.has_bias ? bias[at(d.bias, n, b, h, t, s)] : 0.0);
            max_score = std::max(max_score, p[s]);
          }
          double sum = 0;
          for (auto& ps : p) sum += (ps = std::exp(ps - max_score));
          for (int64_t e = 0; e < dv; ++e) {
            double acc = 0;
            for (int64_t s = 0; s < s_count; ++s) acc += p[s] * v[at(d.v, n, b, h, s, e)];
            y[at(d.y, n, b, h, t, e)] = static_cast<float>(acc / sum);
          }
        }
  return y;
}

TEST(ViewKernels, AttentionMatchesHostLoops) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dt : float_types()) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " bias " << with_bias);
      // Swin-like: 4 windows x 3 heads x 49 tokens x 32, Q/K/V as interleaved heads of one [49, 3 x 3 x 32]
      // QKV projection per window (the views the lowering hands over), the bias per head shared by the
      // windows and images.
      const int64_t n = 2, windows = 4, heads = 3, tokens = 49, dim = 32;
      const int64_t row = 3 * heads * dim, window_stride = tokens * row;
      const std::vector<float> qkv = round_to(random_values(n * windows * window_stride, 61), dt);
      const std::vector<float> bias = round_to(random_values(heads * tokens * tokens, 62), dt);
      auto head_view = [&](int64_t part) {
        StridedView v;
        v.rank = 4;
        v.dims = {windows, heads, tokens, dim};
        v.strides = {window_stride, dim, row, 1};
        v.offset = part * heads * dim;
        v.image_stride = windows * window_stride;
        return v;
      };
      StridedView bv = dense_strided_view({windows, heads, tokens, tokens});
      bv.strides[0] = 0;
      bv.image_stride = 0;
      AttentionDesc d{.n = n,
                      .q = head_view(0),
                      .k = head_view(1),
                      .v = head_view(2),
                      .y = dense_strided_view({windows, heads, tokens, dim}),
                      .bias = bv,
                      .has_bias = with_bias,
                      .scale = 1.0f / std::sqrt(32.0f),
                      .dtype = dt};
      const std::vector<float> expected = host_attention(d, qkv, qkv, qkv, bias);
      DeviceBuffer dqkv(encode(qkv, dt)), dbias(encode(bias, dt)), dy(expected.size() * dtype_size(dt));
      const Status s = launch_attention(d, dqkv.get(), dqkv.get(), dqkv.get(),
                                        with_bias ? dbias.get() : nullptr, dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_close(decode(dy.download(), dt), expected, dt);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

TEST(ViewKernels, TransformerUnaryOps) {
  GPULAB_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<UnaryOp, double (*)(double)>> ops = {
      {UnaryOp::kGelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {UnaryOp::kGeluTanh,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
       }},
      {UnaryOp::kTanh, [](double x) { return std::tanh(x); }},
      {UnaryOp::kErf, [](double x) { return std::erf(x); }},
      {UnaryOp::kSqrt, [](double x) { return std::sqrt(std::abs(x)); }},
      {UnaryOp::kExp, [](double x) { return std::exp(x); }},
      {UnaryOp::kNeg, [](double x) { return -x; }},
  };
  for (DataType dt : float_types()) {
    for (const auto& [op, f] : ops) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " op " << static_cast<int>(op));
      std::vector<float> x = random_values(3 * 197 * 64 + 5, 71, 3.0f);
      if (op == UnaryOp::kSqrt)
        for (auto& v : x) v = std::abs(v);
      x = round_to(x, dt);
      std::vector<float> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) expected[i] = static_cast<float>(f(x[i]));
      DeviceBuffer dx(encode(x, dt)), dy(x.size() * dtype_size(dt));
      const UnaryDesc d{.op = op, .count = static_cast<int64_t>(x.size()), .dtype = dt};
      const Status s = launch_unary(d, dx.get(), dy.get(), nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_synced();
      expect_close(decode(dy.download(), dt), expected, dt);
      EXPECT_TRUE(dy.tail_untouched());
    }
  }
}

}  // namespace
}  // namespace gpulab::kernels
