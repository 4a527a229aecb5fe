// The depthwise convolution (launch_depthwise_conv) against the CPU reference backend's Conv
// with groups == channels, on MobileNetV2's shapes and on the generic and scalar paths, in every
// float storage type. Inputs are rounded to the storage type before both sides see them.
#include "backends/cuda/depthwise_conv.h"

#include "backends/cuda/kernels/kernel_desc.h"

#include "kernel_test_util.h"
#include "reference_util.h"

namespace gpulab::cuda {
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

struct Case {
  int64_t n = 1, h = 1, w = 1, c = 1;
  Hw kernel{3, 3};
  Hw stride{1, 1};
  Pads pads{1, 1, 1, 1};
  Hw dilation{1, 1};
  Activation activation = Activation::kNone;
  bool bias = true;
  bool residual = false;
  size_t x_offset_bytes = 0;  // to push x off its 16-byte alignment (the scalar path)
};

DirectConvDesc desc_of(const Case& t, DataType dtype) {
  DirectConvDesc d;
  d.n = t.n;
  d.c = t.c;
  d.h = t.h;
  d.w = t.w;
  d.k = t.c;
  d.out_h =
      kernels::pool_output_size(t.h, t.kernel.h, t.stride.h, t.dilation.h, t.pads.top, t.pads.bottom, false);
  d.out_w =
      kernels::pool_output_size(t.w, t.kernel.w, t.stride.w, t.dilation.w, t.pads.left, t.pads.right, false);
  d.attrs.kernel = t.kernel;
  d.attrs.stride = t.stride;
  d.attrs.pads = t.pads;
  d.attrs.dilation = t.dilation;
  d.attrs.groups = t.c;
  d.attrs.activation = t.activation;
  d.attrs.clip_min = 0.0f;
  d.attrs.clip_max = 6.0f;
  d.attrs.has_residual = t.residual;
  d.dtype = dtype;
  return d;
}

void check_depthwise(const Case& t, DataType dtype) {
  const DirectConvDesc d = desc_of(t, dtype);
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n" << t.n << " " << t.h << "x" << t.w << "x"
                                    << t.c << " kernel " << t.kernel.h << "x" << t.kernel.w << " stride "
                                    << t.stride.h << "x" << t.stride.w << " dilation " << t.dilation.h << "x"
                                    << t.dilation.w << " act " << activation_name(t.activation)
                                    << (t.bias ? " bias" : "") << (t.residual ? " residual" : "")
                                    << " x offset " << t.x_offset_bytes);
  ASSERT_TRUE(validate_depthwise_conv(d).is_ok()) << validate_depthwise_conv(d).to_string();
  const Nhwc xs{t.n, t.h, t.w, t.c}, ys{t.n, d.out_h, d.out_w, t.c};
  const uint32_t seed = static_cast<uint32_t>(t.c * 31 + t.h);
  const std::vector<float> x = round_to(random_values(xs.count(), seed), dtype);
  // [c][r][s][1] (the plan's KRSC with one channel per group) is the ONNX [c, 1, r, s] order.
  const std::vector<float> w = round_to(random_values(t.c * t.kernel.h * t.kernel.w, seed + 1, 0.5f), dtype);
  const std::vector<float> b = round_to(random_values(t.c, seed + 2), dtype);
  const std::vector<float> res = round_to(random_values(ys.count(), seed + 3), dtype);

  Node node{.name = "dw", .op = OpType::kConv, .inputs = {"x", "w", t.bias ? "b" : ""}, .outputs = {"y"}};
  if (t.residual) node.inputs.push_back("r");
  node.attrs = d.attrs;
  const Tensor xt = to_nchw_tensor(x, xs);
  const Tensor wt = Tensor::from_floats(Shape{t.c, 1, t.kernel.h, t.kernel.w}, w);
  const Tensor bt = Tensor::from_floats(Shape{t.c}, b);
  const Tensor rt = to_nchw_tensor(res, ys);
  std::vector<const Tensor*> inputs = {&xt, &wt, t.bias ? &bt : nullptr};
  if (t.residual) inputs.push_back(&rt);
  const Tensor ref = run_reference(node, inputs);
  ASSERT_EQ(ref.shape(), (Shape{t.n, t.c, d.out_h, d.out_w}));
  const std::vector<float> expected = to_nhwc(ref);

  DeviceBuffer dx(encode(x, dtype), t.x_offset_bytes), dw(encode(w, dtype)), db(encode(b, dtype));
  DeviceBuffer dr(encode(res, dtype)), dy(ys.count() * dtype_size(dtype));
  const Status s = launch_depthwise_conv(d, dx.get(), dw.get(), t.bias ? db.get() : nullptr,
                                         t.residual ? dr.get() : nullptr, dy.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(dy.download(), dtype), expected, dtype);
  EXPECT_TRUE(dy.tail_untouched()) << "wrote past the end of y";
}

TEST(DepthwiseConvGpu, MobileNetV2Stride1) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    // The first block's 3x3 (ReLU6), then inverted-residual expansions at 56, 28, 14 and 7.
    check_depthwise({.n = 1, .h = 112, .w = 112, .c = 32, .activation = Activation::kClip}, dtype);
    check_depthwise({.n = 2, .h = 56, .w = 56, .c = 144, .activation = Activation::kClip}, dtype);
    check_depthwise({.n = 2, .h = 14, .w = 14, .c = 384, .activation = Activation::kClip}, dtype);
    check_depthwise({.n = 4, .h = 7, .w = 7, .c = 960, .activation = Activation::kClip}, dtype);
  }
}

TEST(DepthwiseConvGpu, MobileNetV2Stride2) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_depthwise({.n = 2, .h = 112, .w = 112, .c = 96, .stride = {2, 2}, .activation = Activation::kClip},
                    dtype);
    check_depthwise({.n = 2, .h = 56, .w = 56, .c = 144, .stride = {2, 2}, .activation = Activation::kClip},
                    dtype);
    check_depthwise({.n = 3, .h = 14, .w = 14, .c = 576, .stride = {2, 2}, .activation = Activation::kClip},
                    dtype);
  }
}

TEST(DepthwiseConvGpu, EpilogueVariants) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_depthwise({.n = 2, .h = 28, .w = 28, .c = 96, .activation = Activation::kClip, .residual = true},
                    dtype);
    check_depthwise({.n = 2, .h = 28, .w = 28, .c = 96, .activation = Activation::kRelu, .residual = true},
                    dtype);
    check_depthwise({.n = 2, .h = 15, .w = 15, .c = 32, .activation = Activation::kNone, .bias = false},
                    dtype);
    check_depthwise({.n = 2,
                     .h = 15,
                     .w = 15,
                     .c = 32,
                     .stride = {2, 2},
                     .activation = Activation::kNone,
                     .bias = false,
                     .residual = true},
                    dtype);
  }
}

TEST(DepthwiseConvGpu, FiveByFive) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_depthwise({.n = 2,
                     .h = 28,
                     .w = 28,
                     .c = 120,
                     .kernel = {5, 5},
                     .pads = {2, 2, 2, 2},
                     .activation = Activation::kRelu},
                    dtype);
    check_depthwise({.n = 2,
                     .h = 29,
                     .w = 29,
                     .c = 72,
                     .kernel = {5, 5},
                     .stride = {2, 2},
                     .pads = {2, 2, 2, 2},
                     .activation = Activation::kClip,
                     .residual = true},
                    dtype);
  }
}

TEST(DepthwiseConvGpu, GenericShapes) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    // Dilation, an asymmetric kernel with unequal strides and pads, a 7x7 window, a 1x1 window,
    // odd output widths (a partial group of output pixels) and more than one channel tile.
    check_depthwise({.n = 2, .h = 20, .w = 19, .c = 64, .pads = {2, 2, 2, 2}, .dilation = {2, 2}}, dtype);
    check_depthwise({.n = 1,
                     .h = 17,
                     .w = 23,
                     .c = 48,
                     .kernel = {3, 5},
                     .stride = {1, 2},
                     .pads = {1, 2, 0, 1},
                     .activation = Activation::kRelu},
                    dtype);
    check_depthwise({.n = 1, .h = 14, .w = 14, .c = 40, .kernel = {7, 7}, .pads = {3, 3, 3, 3}}, dtype);
    check_depthwise({.n = 1, .h = 9, .w = 9, .c = 16, .kernel = {1, 1}, .pads = {0, 0, 0, 0}}, dtype);
    check_depthwise({.n = 1, .h = 3, .w = 3, .c = 8, .stride = {2, 2}, .pads = {0, 0, 0, 0}}, dtype);
    check_depthwise({.n = 1, .h = 9, .w = 13, .c = 1280, .activation = Activation::kClip}, dtype);
  }
}

TEST(DepthwiseConvGpu, ScalarPath) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    // c not a multiple of the vector width (8 halves; 4 floats: 12 takes the vector path in
    // float32 only), then an x pointer off its 16-byte alignment.
    check_depthwise({.n = 2, .h = 19, .w = 17, .c = 21, .activation = Activation::kClip, .residual = true},
                    dtype);
    check_depthwise({.n = 2, .h = 19, .w = 17, .c = 12, .stride = {2, 2}, .activation = Activation::kRelu},
                    dtype);
    check_depthwise({.n = 1, .h = 11, .w = 11, .c = 3, .kernel = {5, 5}, .pads = {2, 2, 2, 2}}, dtype);
    check_depthwise({.n = 1,
                     .h = 14,
                     .w = 14,
                     .c = 32,
                     .activation = Activation::kClip,
                     .x_offset_bytes = dtype_size(dtype)},
                    dtype);
  }
}

TEST(DepthwiseConvGpu, AgreesWithDirectConvolution) {
  GPULAB_SKIP_WITHOUT_GPU();
  // The direct convolution as a second opinion on the same device buffers, bit for bit in
  // float32 is not guaranteed (summation order), so within the float32 tolerance.
  const Case t{.n = 2, .h = 28, .w = 28, .c = 144, .activation = Activation::kClip, .residual = true};
  const DataType dtype = DataType::kFloat32;
  const DirectConvDesc d = desc_of(t, dtype);
  const Nhwc xs{t.n, t.h, t.w, t.c}, ys{t.n, d.out_h, d.out_w, t.c};
  DeviceBuffer dx(encode(random_values(xs.count(), 7), dtype)), dw(encode(random_values(t.c * 9, 8), dtype));
  DeviceBuffer db(encode(random_values(t.c, 9), dtype)), dr(encode(random_values(ys.count(), 10), dtype));
  DeviceBuffer y_dw(ys.count() * 4), y_direct(ys.count() * 4);
  ASSERT_TRUE(launch_depthwise_conv(d, dx.get(), dw.get(), db.get(), dr.get(), y_dw.get(), nullptr).is_ok());
  ASSERT_TRUE(launch_direct_conv(d, dx.get(), dw.get(), db.get(), dr.get(), y_direct.get(), nullptr).is_ok());
  expect_synced();
  expect_close(decode(y_dw.download(), dtype), decode(y_direct.download(), dtype), dtype);
}

}  // namespace
}  // namespace gpulab::cuda
