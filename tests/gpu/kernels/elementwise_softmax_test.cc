// GPU tests of the elementwise, softmax and top-k kernels, every dtype, on classifier shapes,
// against plain host loops over the same rounded inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/cuda/kernels/kernels.h"
#include "core/quant.h"
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

double act(double v, Activation a, float lo, float hi) {
  switch (a) {
    case Activation::kRelu: return std::max(v, 0.0);
    case Activation::kClip: return std::min(std::max(v, static_cast<double>(lo)), static_cast<double>(hi));
    default: return v;
  }
}

// ---- binary ----------------------------------------------------------------------------------

void check_binary(BinaryDesc d, bool in_place = false) {
  SCOPED_TRACE(::testing::Message() << (d.op == BinaryOp::kAdd ? "add" : "mul") << " " << dtype_name(d.dtype)
                                    << " n" << d.n << " hw" << d.hw << " c" << d.c << " broadcast "
                                    << (d.b_broadcast == Broadcast::kPerImageChannel) << " act "
                                    << activation_name(d.activation) << " in_place " << in_place);
  const int64_t count = d.n * d.hw * d.c;
  const bool broadcast = d.b_broadcast == Broadcast::kPerImageChannel;
  const std::vector<float> a = round_to(random_values(count, 21, 4.0f), d.dtype);
  const std::vector<float> b = round_to(random_values(broadcast ? d.n * d.c : count, 22, 4.0f), d.dtype);
  std::vector<float> expected(count);
  for (int64_t i = 0; i < count; ++i) {
    const double bv = broadcast ? b[(i / (d.hw * d.c)) * d.c + i % d.c] : b[i];
    const double v = d.op == BinaryOp::kAdd ? a[i] + bv : a[i] * bv;
    expected[i] = static_cast<float>(act(v, d.activation, d.clip_min, d.clip_max));
  }
  DeviceBuffer da(encode(a, d.dtype));
  DeviceBuffer db(encode(b, d.dtype));
  DeviceBuffer dy(count * dtype_size(d.dtype));
  DeviceBuffer& out = in_place ? da : dy;
  const Status s = launch_binary(d, da.get(), db.get(), out.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(out.download(), d.dtype), expected, d.dtype);
  EXPECT_TRUE(out.tail_untouched());
}

TEST(ElementwiseKernels, AddActivation) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    // ResNet-18 residual: add + relu on 56x56x64.
    check_binary({.op = BinaryOp::kAdd,
                  .n = 2,
                  .hw = 56 * 56,
                  .c = 64,
                  .activation = Activation::kRelu,
                  .dtype = dtype});
    // MobileNetV2 residual: plain add on 28x28x32.
    check_binary({.op = BinaryOp::kAdd, .n = 2, .hw = 28 * 28, .c = 32, .dtype = dtype});
    // clip(0, 6) and odd channels (scalar path), in place.
    check_binary({.op = BinaryOp::kAdd,
                  .n = 3,
                  .hw = 7 * 7,
                  .c = 5,
                  .activation = Activation::kClip,
                  .clip_min = 0.0f,
                  .clip_max = 6.0f,
                  .dtype = dtype},
                 /*in_place=*/true);
    check_binary({.op = BinaryOp::kAdd,
                  .n = 1,
                  .hw = 14 * 14,
                  .c = 96,
                  .activation = Activation::kClip,
                  .clip_min = -1.0f,
                  .clip_max = 1.5f,
                  .dtype = dtype},
                 /*in_place=*/true);
  }
}

TEST(ElementwiseKernels, MultiplySameShapeAndSqueezeExcitationBroadcast) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_binary({.op = BinaryOp::kMul, .n = 2, .hw = 28 * 28, .c = 40, .dtype = dtype});
    check_binary({.op = BinaryOp::kMul,
                  .n = 2,
                  .hw = 14 * 14,
                  .c = 96,
                  .b_broadcast = Broadcast::kPerImageChannel,
                  .dtype = dtype});
    check_binary({.op = BinaryOp::kMul,
                  .n = 3,
                  .hw = 5 * 5,
                  .c = 3,
                  .b_broadcast = Broadcast::kPerImageChannel,
                  .dtype = dtype},
                 /*in_place=*/true);
  }
}

// ---- bias + activation -------------------------------------------------------------------------

void check_bias_act(BiasActDesc d) {
  SCOPED_TRACE(::testing::Message() << dtype_name(d.dtype) << " bias " << dtype_name(d.bias_dtype)
                                    << " count " << d.count << " c" << d.c << " act "
                                    << activation_name(d.activation));
  const std::vector<float> x = round_to(random_values(d.count, 31), d.dtype);
  const std::vector<float> bias = round_to(random_values(d.c, 32), d.bias_dtype);
  std::vector<float> expected(d.count);
  for (int64_t i = 0; i < d.count; ++i) {
    expected[i] = static_cast<float>(
        act(static_cast<double>(x[i]) + bias[i % d.c], d.activation, d.clip_min, d.clip_max));
  }
  DeviceBuffer dx(encode(x, d.dtype));
  DeviceBuffer db(encode(bias, d.bias_dtype));
  DeviceBuffer dy(d.count * dtype_size(d.dtype));
  const Status s = launch_bias_act(d, dx.get(), db.get(), dy.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(dy.download(), d.dtype), expected, d.dtype);
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(ElementwiseKernels, PerChannelBiasActivation) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_bias_act({.count = 2 * 28 * 28 * 128, .c = 128, .activation = Activation::kRelu, .dtype = dtype});
    check_bias_act({.count = 2 * 28 * 28 * 128,
                    .c = 128,
                    .activation = Activation::kClip,
                    .dtype = dtype,
                    .bias_dtype = dtype});
    check_bias_act({.count = 4 * 1000, .c = 1000, .dtype = dtype});  // classifier bias, NC
    check_bias_act({.count = 3 * 9 * 7, .c = 7, .activation = Activation::kRelu, .dtype = dtype});
  }
}

// ---- unary -------------------------------------------------------------------------------------

double reference_unary(const UnaryDesc& d, double v) {
  switch (d.op) {
    case UnaryOp::kRelu: return std::max(v, 0.0);
    case UnaryOp::kClip:
      return std::min(std::max(v, static_cast<double>(d.clip_min)), static_cast<double>(d.clip_max));
    case UnaryOp::kSigmoid: return 1.0 / (1.0 + std::exp(-v));
    case UnaryOp::kHardSigmoid:
      return std::max(0.0, std::min(1.0, static_cast<double>(d.alpha) * v + d.beta));
    case UnaryOp::kHardSwish: return v * std::max(0.0, std::min(1.0, v / 6.0 + 0.5));
    case UnaryOp::kGelu: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case UnaryOp::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case UnaryOp::kTanh: return std::tanh(v);
    case UnaryOp::kErf: return std::erf(v);
    case UnaryOp::kSqrt: return std::sqrt(v);
    case UnaryOp::kExp: return std::exp(v);
    case UnaryOp::kNeg: return -v;
    case UnaryOp::kFakeQuantize:
      return fake_quantize(static_cast<float>(v), d.alpha, d.beta, d.clip_min, d.clip_max);
  }
  return v;
}

void check_unary(UnaryDesc d, bool in_place) {
  SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(d.op) << " " << dtype_name(d.dtype)
                                    << " count " << d.count << " in_place " << in_place);
  // [-8, 8] covers every piece of the piecewise functions (hard-swish bends at -3 and 3).
  const std::vector<float> x = round_to(random_values(d.count, 41, 8.0f), d.dtype);
  std::vector<float> expected(d.count);
  for (int64_t i = 0; i < d.count; ++i) expected[i] = static_cast<float>(reference_unary(d, x[i]));
  DeviceBuffer dx(encode(x, d.dtype));
  DeviceBuffer dy(d.count * dtype_size(d.dtype));
  DeviceBuffer& out = in_place ? dx : dy;
  const Status s = launch_unary(d, dx.get(), out.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(out.download(), d.dtype), expected, d.dtype);
  EXPECT_TRUE(out.tail_untouched());
}

TEST(ElementwiseKernels, UnaryActivations) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    for (UnaryOp op :
         {UnaryOp::kRelu, UnaryOp::kClip, UnaryOp::kSigmoid, UnaryOp::kHardSigmoid, UnaryOp::kHardSwish}) {
      // MobileNetV3-like 28x28x40 (vector path) and an odd count (scalar path, in place).
      check_unary({.op = op,
                   .count = 2 * 28 * 28 * 40,
                   .alpha = 1.0f / 6.0f,
                   .beta = 0.5f,
                   .clip_min = -0.5f,
                   .clip_max = 2.0f,
                   .dtype = dtype},
                  false);
      check_unary({.op = op, .count = 1001, .dtype = dtype}, true);
    }
  }
}

// ---- softmax -----------------------------------------------------------------------------------

void check_softmax(int64_t rows, int64_t cols, float logit_range, bool in_place) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " range " << logit_range << " in_place "
                                    << in_place);
  const std::vector<float> x = random_values(rows * cols, 51, logit_range);
  std::vector<float> expected(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * cols];
    const double m = *std::max_element(xr, xr + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(xr[j] - m);
    for (int64_t j = 0; j < cols; ++j) expected[r * cols + j] = static_cast<float>(std::exp(xr[j] - m) / sum);
  }
  DeviceBuffer dx(encode(x, DataType::kFloat32));
  DeviceBuffer dy(x.size() * sizeof(float));
  DeviceBuffer& out = in_place ? dx : dy;
  ASSERT_TRUE(launch_softmax({.rows = rows, .cols = cols}, dx.get(), out.get(), nullptr).is_ok());
  expect_synced();
  const std::vector<float> y = decode(out.download(), DataType::kFloat32);
  expect_close(y, expected, DataType::kFloat32);
  for (int64_t r = 0; r < rows; ++r) {
    const double total = std::accumulate(y.begin() + r * cols, y.begin() + (r + 1) * cols, 0.0);
    EXPECT_NEAR(total, 1.0, 1e-4) << "row " << r;
  }
  EXPECT_TRUE(out.tail_untouched());
}

TEST(SoftmaxKernel, ClassifierRows) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_softmax(4, 1000, 8.0f, false);
  check_softmax(3, 1001, 8.0f, true);
  check_softmax(2, 21843, 8.0f, false);  // ImageNet-21k head
  check_softmax(5, 7, 3.0f, false);      // fewer columns than threads
  // Logits of +-300: exp would overflow float32 without the max subtraction.
  check_softmax(2, 1000, 300.0f, false);
}

// ---- top-k -------------------------------------------------------------------------------------

// Host top-k: larger first, ties to the lower index, NaN as -inf.
void reference_topk(const std::vector<float>& x, int64_t rows, int64_t cols, int k,
                    std::vector<int64_t>& indices, std::vector<float>& values) {
  indices.assign(rows * k, 0);
  values.assign(rows * k, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * cols];
    auto key = [&](int64_t j) { return std::isnan(xr[j]) ? -INFINITY : xr[j]; };
    std::vector<int64_t> order(cols);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
    for (int i = 0; i < k; ++i) {
      indices[r * k + i] = order[i];
      values[r * k + i] = xr[order[i]];
    }
  }
}

void check_topk(const std::vector<float>& x, int64_t rows, int64_t cols, int k, DataType index_dtype) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " k " << k << " " << dtype_name(index_dtype));
  std::vector<int64_t> expected_indices;
  std::vector<float> expected_values;
  reference_topk(x, rows, cols, k, expected_indices, expected_values);

  DeviceBuffer dx(encode(x, DataType::kFloat32));
  DeviceBuffer di(rows * k * dtype_size(index_dtype));
  DeviceBuffer dv(rows * k * sizeof(float));
  const Status s = launch_topk({.rows = rows, .cols = cols, .k = k, .index_dtype = index_dtype}, dx.get(),
                               di.get(), dv.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  const std::vector<std::byte> raw = di.download();
  std::vector<int64_t> indices(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) {
    if (index_dtype == DataType::kInt64) {
      std::memcpy(&indices[i], raw.data() + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      indices[i] = v;
    }
  }
  EXPECT_EQ(indices, expected_indices);
  expect_exact(decode(dv.download(), DataType::kFloat32), expected_values);
  EXPECT_TRUE(di.tail_untouched());
  EXPECT_TRUE(dv.tail_untouched());
}

TEST(TopKKernel, ClassifierRows) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (int64_t cols : {1000, 1001, 21843}) {
    const int64_t rows = 3;
    const std::vector<float> x = random_values(rows * cols, 61, 10.0f);
    for (int k : {1, 5, 32}) {
      check_topk(x, rows, cols, k, DataType::kInt32);
    }
    check_topk(x, rows, cols, 5, DataType::kInt64);
  }
}

TEST(TopKKernel, TiesGoToTheLowerIndexAndNaNRanksLast) {
  GPULAB_SKIP_WITHOUT_GPU();
  // Four distinct values over 1000 columns: every rank is a tie.
  std::vector<float> x(2 * 1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 4);
  for (int k : {1, 16, 32}) check_topk(x, 2, 1000, k, DataType::kInt32);

  // NaNs and infinities: NaN ranks as -inf (below every number), +inf first.
  std::vector<float> y = random_values(200, 71);
  y[3] = NAN;
  y[10] = INFINITY;
  y[11] = -INFINITY;
  y[150] = NAN;
  check_topk(y, 1, 200, 32, DataType::kInt32);
  // Fewer columns than k's upper bound and than the block's threads.
  check_topk(random_values(3 * 40, 72), 3, 40, 32, DataType::kInt64);
  check_topk(random_values(7, 73), 1, 7, 7, DataType::kInt32);
}

// ---- linear head -------------------------------------------------------------------------------

void check_linear(LinearDesc d, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << dtype_name(d.dtype) << " -> " << dtype_name(d.out_dtype) << " rows "
                                    << d.rows << " " << d.in_features << " -> " << d.out_features << " bias "
                                    << with_bias);
  const std::vector<float> x = round_to(random_values(d.rows * d.in_features, 91), d.dtype);
  const std::vector<float> w = round_to(random_values(d.out_features * d.in_features, 92, 0.1f), d.dtype);
  const std::vector<float> bias = random_values(d.out_features, 93);
  std::vector<float> expected(d.rows * d.out_features);
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t o = 0; o < d.out_features; ++o) {
      double sum = with_bias ? bias[o] : 0.0;
      for (int64_t k = 0; k < d.in_features; ++k) {
        sum += static_cast<double>(x[r * d.in_features + k]) * w[o * d.in_features + k];
      }
      expected[r * d.out_features + o] = static_cast<float>(sum);
    }
  DeviceBuffer dx(encode(x, d.dtype)), dw(encode(w, d.dtype)), db(encode(bias, DataType::kFloat32));
  DeviceBuffer dy(expected.size() * dtype_size(d.out_dtype));
  const Status s = launch_linear(
      d, dx.get(), dw.get(), with_bias ? static_cast<const float*>(db.get()) : nullptr, dy.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(dy.download(), d.out_dtype), expected, d.dtype);
  EXPECT_TRUE(dy.tail_untouched());
}

// ---- lcg_lanes ----------------------------------------------------------------------------------

// The bench input's generator (measure/bench.h) run lane by lane: each lane's first state is the
// sequence's state at its first element; a step of `lanes` elements is the LCG composed `lanes` times.
TEST(LcgLanesKernel, WritesTheInterleavedSequenceBitForBit) {
  GPULAB_SKIP_WITHOUT_GPU();
  const uint32_t kMul = 1664525u, kAdd = 1013904223u;
  const int64_t n = 1000003;
  std::vector<float> expected(static_cast<size_t>(n));
  uint32_t state = 12345u;
  for (float& v : expected) {
    state = state * kMul + kAdd;
    v = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  for (int64_t lanes : {int64_t{1}, int64_t{100}, int64_t{4096}, n, n + 5}) {
    SCOPED_TRACE(::testing::Message() << lanes << " lanes");
    const int64_t used = std::min(lanes, n);
    std::vector<uint32_t> starts(static_cast<size_t>(used));
    uint32_t s = 12345u, mul = 1, add = 0;
    for (uint32_t& start : starts) {
      s = s * kMul + kAdd;
      start = s;
      mul *= kMul;
      add = add * kMul + kAdd;
    }
    std::vector<std::byte> starts_bytes(starts.size() * sizeof(uint32_t));
    std::memcpy(starts_bytes.data(), starts.data(), starts_bytes.size());
    DeviceBuffer d_starts(starts_bytes);
    DeviceBuffer y(static_cast<size_t>(n) * sizeof(float));
    ASSERT_TRUE(launch_lcg_lanes(static_cast<float*>(y.get()), n,
                                 static_cast<const uint32_t*>(d_starts.get()), used, mul, add, nullptr)
                    .is_ok());
    expect_synced();
    const std::vector<std::byte> got = y.download();
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0);
    EXPECT_TRUE(y.tail_untouched());
  }
  EXPECT_FALSE(launch_lcg_lanes(nullptr, 10, nullptr, 0, 1, 0, nullptr).is_ok());
}

TEST(LinearKernel, ClassifierHeadsAtTinyBatches) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    for (int64_t rows : {1, 3, 8}) {
      check_linear(
          {.rows = rows, .in_features = 512, .out_features = 1000, .dtype = dtype, .out_dtype = dtype},
          true);  // ResNet-18 fc
      check_linear({.rows = rows, .in_features = 1280, .out_features = 1000, .dtype = dtype},
                   true);  // MobileNetV2
    }
    // Odd sizes (scalar path), no bias, more rows than one warp's group.
    check_linear({.rows = 13, .in_features = 37, .out_features = 1001, .dtype = dtype}, false);
  }
}

}  // namespace
}  // namespace gpulab::kernels
