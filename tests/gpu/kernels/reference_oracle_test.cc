// The kernels against the CPU reference backend (run_reference_node), op by op, as in ggml's
// test-backend-ops: the reference runs the ONNX node on NCHW float32 tensors holding the same
// (dtype-rounded) values the kernel sees on the device in NHWC.
#include "backends/cuda/kernels/kernels.h"
#include "kernel_test_util.h"
#include "reference_util.h"

namespace gpulab::kernels {
namespace {

using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::expect_close;
using testing::expect_synced;
using testing::float_types;
using testing::Nhwc;
using testing::random_values;
using testing::round_to;
using testing::run_reference;
using testing::to_nchw_tensor;
using testing::to_nhwc;

void check_pool_vs_reference(PoolDesc d) {
  d = with_output_size(d);
  SCOPED_TRACE(::testing::Message() << (d.kind == PoolKind::kMax ? "MaxPool " : "AveragePool ")
                                    << dtype_name(d.dtype) << " " << d.h << "x" << d.w << "x" << d.c);
  const Nhwc s{d.n, d.h, d.w, d.c};
  const std::vector<float> x = round_to(random_values(s.count(), 81), d.dtype);
  const Node node{.name = "pool",
                  .op = d.kind == PoolKind::kMax ? OpType::kMaxPool : OpType::kAveragePool,
                  .inputs = {"x"},
                  .outputs = {"y"},
                  .attrs = PoolAttrs{.kernel = d.kernel,
                                     .stride = d.stride,
                                     .pads = d.pads,
                                     .dilation = d.dilation,
                                     .ceil_mode = d.ceil_mode,
                                     .count_include_pad = d.count_include_pad}};
  const Tensor xt = to_nchw_tensor(x, s);
  const Tensor ref = run_reference(node, {&xt});
  ASSERT_EQ(ref.shape(), (Shape{d.n, d.c, d.out_h, d.out_w}));
  // The reference rounds to float32; the kernel to its dtype.
  const std::vector<float> expected = to_nhwc(ref);

  DeviceBuffer dx(encode(x, d.dtype));
  DeviceBuffer dy(expected.size() * dtype_size(d.dtype));
  ASSERT_TRUE(launch_pool(d, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  expect_close(decode(dy.download(), d.dtype), expected, d.dtype);
}

TEST(KernelsVsReference, Pooling) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_pool_vs_reference({.kind = PoolKind::kMax,
                             .n = 2,
                             .h = 112,
                             .w = 112,
                             .c = 64,
                             .kernel = {3, 3},
                             .stride = {2, 2},
                             .pads = {1, 1, 1, 1},
                             .dtype = dtype});
    check_pool_vs_reference({.kind = PoolKind::kMax,
                             .n = 1,
                             .h = 57,
                             .w = 57,
                             .c = 24,
                             .kernel = {3, 3},
                             .stride = {2, 2},
                             .ceil_mode = true,
                             .dtype = dtype});
    check_pool_vs_reference({.kind = PoolKind::kAverage,
                             .n = 2,
                             .h = 17,
                             .w = 17,
                             .c = 32,
                             .kernel = {3, 3},
                             .stride = {1, 1},
                             .pads = {1, 1, 1, 1},
                             .count_include_pad = false,
                             .dtype = dtype});
    check_pool_vs_reference({.kind = PoolKind::kAverage,
                             .n = 1,
                             .h = 12,
                             .w = 13,
                             .c = 8,
                             .kernel = {3, 3},
                             .stride = {2, 2},
                             .pads = {1, 1, 1, 1},
                             .ceil_mode = true,
                             .count_include_pad = true,
                             .dtype = dtype});
  }
}

TEST(KernelsVsReference, GlobalAveragePool) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    for (const Nhwc s : {Nhwc{2, 7, 7, 512}, Nhwc{2, 7, 7, 1280}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " c" << s.c);
      const std::vector<float> x = round_to(random_values(s.count(), 82), dtype);
      const Node node{.name = "gap", .op = OpType::kGlobalAveragePool, .inputs = {"x"}, .outputs = {"y"}};
      const Tensor xt = to_nchw_tensor(x, s);
      const std::vector<float> expected = to_nhwc(run_reference(node, {&xt}));
      DeviceBuffer dx(encode(x, dtype));
      DeviceBuffer dy(s.n * s.c * dtype_size(dtype));
      ASSERT_TRUE(launch_global_avg_pool({.n = s.n, .h = s.h, .w = s.w, .c = s.c, .dtype = dtype}, dx.get(),
                                         dy.get(), nullptr)
                      .is_ok());
      expect_synced();
      expect_close(decode(dy.download(), dtype), expected, dtype);
    }
  }
}

TEST(KernelsVsReference, AddRelu) {
  GPULAB_SKIP_WITHOUT_GPU();
  const Nhwc s{2, 56, 56, 64};
  for (DataType dtype : float_types()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> a = round_to(random_values(s.count(), 83), dtype);
    const std::vector<float> b = round_to(random_values(s.count(), 84), dtype);
    const Tensor at = to_nchw_tensor(a, s), bt = to_nchw_tensor(b, s);
    const Tensor sum = run_reference(
        {.name = "add", .op = OpType::kAdd, .inputs = {"a", "b"}, .outputs = {"s"}}, {&at, &bt});
    const std::vector<float> expected = to_nhwc(
        run_reference({.name = "relu", .op = OpType::kRelu, .inputs = {"s"}, .outputs = {"y"}}, {&sum}));
    DeviceBuffer da(encode(a, dtype)), db(encode(b, dtype)), dy(s.count() * dtype_size(dtype));
    ASSERT_TRUE(launch_binary({.op = BinaryOp::kAdd,
                               .n = s.n,
                               .hw = s.h * s.w,
                               .c = s.c,
                               .activation = Activation::kRelu,
                               .dtype = dtype},
                              da.get(), db.get(), dy.get(), nullptr)
                    .is_ok());
    expect_synced();
    expect_close(decode(dy.download(), dtype), expected, dtype);
  }
}

TEST(KernelsVsReference, SqueezeExcitationMulAndActivations) {
  GPULAB_SKIP_WITHOUT_GPU();
  const Nhwc s{2, 14, 14, 96};
  for (DataType dtype : float_types()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> x = round_to(random_values(s.count(), 85, 6.0f), dtype);
    const std::vector<float> scale = round_to(random_values(s.n * s.c, 86), dtype);
    const Tensor xt = to_nchw_tensor(x, s), st = to_nchw_tensor(scale, Nhwc{s.n, 1, 1, s.c});

    // x * scale with scale [N, C, 1, 1] (numpy broadcasting in the reference).
    const std::vector<float> expected_mul = to_nhwc(run_reference(
        {.name = "mul", .op = OpType::kMul, .inputs = {"x", "s"}, .outputs = {"y"}}, {&xt, &st}));
    DeviceBuffer dx(encode(x, dtype)), ds(encode(scale, dtype)), dy(s.count() * dtype_size(dtype));
    ASSERT_TRUE(launch_binary({.op = BinaryOp::kMul,
                               .n = s.n,
                               .hw = s.h * s.w,
                               .c = s.c,
                               .b_broadcast = Broadcast::kPerImageChannel,
                               .dtype = dtype},
                              dx.get(), ds.get(), dy.get(), nullptr)
                    .is_ok());
    expect_synced();
    expect_close(decode(dy.download(), dtype), expected_mul, dtype);

    const struct {
      OpType op;
      UnaryOp kernel_op;
    } kUnary[] = {{OpType::kSigmoid, UnaryOp::kSigmoid},
                  {OpType::kHardSigmoid, UnaryOp::kHardSigmoid},
                  {OpType::kHardSwish, UnaryOp::kHardSwish},
                  {OpType::kRelu, UnaryOp::kRelu}};
    for (const auto& u : kUnary) {
      SCOPED_TRACE(op_name(u.op));
      Node node{.name = "act", .op = u.op, .inputs = {"x"}, .outputs = {"y"}};
      if (u.op == OpType::kHardSigmoid) node.attrs = HardSigmoidAttrs{};
      const std::vector<float> expected = to_nhwc(run_reference(node, {&xt}));
      dy.poison();
      const HardSigmoidAttrs hs;  // ONNX defaults, as the reference uses
      ASSERT_TRUE(
          launch_unary(
              {.op = u.kernel_op, .count = s.count(), .alpha = hs.alpha, .beta = hs.beta, .dtype = dtype},
              dx.get(), dy.get(), nullptr)
              .is_ok());
      expect_synced();
      expect_close(decode(dy.download(), dtype), expected, dtype);
    }
  }
}

TEST(KernelsVsReference, Softmax) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (int64_t classes : {1000, 1001}) {
    SCOPED_TRACE(classes);
    const int64_t rows = 4;
    const std::vector<float> x = random_values(rows * classes, 87, 10.0f);
    const Tensor xt = Tensor::from_floats(Shape{rows, classes}, x);
    const Node node{.name = "softmax",
                    .op = OpType::kSoftmax,
                    .inputs = {"x"},
                    .outputs = {"y"},
                    .attrs = AxisAttrs{.axis = -1}};
    const Tensor ref = run_reference(node, {&xt});
    const std::vector<float> expected(ref.f32().begin(), ref.f32().end());
    DeviceBuffer dx(encode(x, DataType::kFloat32)), dy(x.size() * sizeof(float));
    ASSERT_TRUE(launch_softmax({.rows = rows, .cols = classes}, dx.get(), dy.get(), nullptr).is_ok());
    expect_synced();
    expect_close(decode(dy.download(), DataType::kFloat32), expected, DataType::kFloat32);
  }
}

TEST(KernelsVsReference, LinearHeadAsGemm) {
  GPULAB_SKIP_WITHOUT_GPU();
  const int64_t rows = 2, in = 512, out = 1000;
  for (DataType dtype : float_types()) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<float> x = round_to(random_values(rows * in, 94), dtype);
    const std::vector<float> w = round_to(random_values(out * in, 95, 0.1f), dtype);
    const std::vector<float> b = random_values(out, 96);
    const Tensor xt = Tensor::from_floats(Shape{rows, in}, x), wt = Tensor::from_floats(Shape{out, in}, w),
                 bt = Tensor::from_floats(Shape{out}, b);
    const Node node{.name = "fc",
                    .op = OpType::kGemm,
                    .inputs = {"x", "w", "b"},
                    .outputs = {"y"},
                    .attrs = GemmAttrs{.trans_b = true}};
    const Tensor ref = run_reference(node, {&xt, &wt, &bt});
    const std::vector<float> expected(ref.f32().begin(), ref.f32().end());
    DeviceBuffer dx(encode(x, dtype)), dw(encode(w, dtype)), db(encode(b, DataType::kFloat32));
    DeviceBuffer dy(rows * out * sizeof(float));
    ASSERT_TRUE(launch_linear({.rows = rows, .in_features = in, .out_features = out, .dtype = dtype},
                              dx.get(), dw.get(), static_cast<const float*>(db.get()), dy.get(), nullptr)
                    .is_ok());
    expect_synced();
    expect_close(decode(dy.download(), DataType::kFloat32), expected, dtype);
  }
}

}  // namespace
}  // namespace gpulab::kernels
