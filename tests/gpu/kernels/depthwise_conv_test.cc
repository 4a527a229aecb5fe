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

// The CPU reference backend's Conv with groups == c on NHWC x, [c][r][s] weights (the plan's KRSC
// with one channel per group is the ONNX [c, 1, r, s] order), bias (unless !t.bias) and residual
// (when t.residual): NHWC y.
std::vector<float> reference_depthwise(const Case& t, const DirectConvDesc& d, const std::vector<float>& x,
                                       const std::vector<float>& w, const std::vector<float>& b,
                                       const std::vector<float>& res) {
  const Nhwc xs{t.n, t.h, t.w, t.c}, ys{t.n, d.out_h, d.out_w, t.c};
  Node node{.name = "dw", .op = OpType::kConv, .inputs = {"x", "w", t.bias ? "b" : ""}, .outputs = {"y"}};
  if (t.residual) node.inputs.push_back("r");
  node.attrs = d.attrs;
  const Tensor xt = to_nchw_tensor(x, xs);
  const Tensor wt = Tensor::from_floats(Shape{t.c, 1, t.kernel.h, t.kernel.w}, w);
  const Tensor bt = Tensor::from_floats(Shape{t.c}, b);
  const Tensor rt = to_nchw_tensor(res, ys);
  std::vector<const Tensor*> inputs = {&xt, &wt, t.bias ? &bt : nullptr};
  if (t.residual) inputs.push_back(&rt);
  return to_nhwc(run_reference(node, inputs));
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

  const std::vector<float> expected = reference_depthwise(t, d, x, w, b, res);
  ASSERT_EQ(expected.size(), static_cast<size_t>(ys.count()));

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

// A float32 layer reading float16/bfloat16 x directly (DirectConvDesc::x_dtype, a folded cast):
// bit for bit what it computes from a float32 copy of the same x, and within float32's
// tolerance of the reference.
void check_mixed_input(const Case& t, DataType x_dtype) {
  const DataType dtype = DataType::kFloat32;
  DirectConvDesc d = desc_of(t, dtype);
  SCOPED_TRACE(::testing::Message() << "x " << dtype_name(x_dtype) << " n" << t.n << " " << t.h << "x" << t.w
                                    << "x" << t.c << " kernel " << t.kernel.h << "x" << t.kernel.w
                                    << " stride " << t.stride.h << " x offset " << t.x_offset_bytes);
  const Nhwc xs{t.n, t.h, t.w, t.c}, ys{t.n, d.out_h, d.out_w, t.c};
  const uint32_t seed = static_cast<uint32_t>(t.c * 17 + t.w);
  const std::vector<float> x = round_to(random_values(xs.count(), seed), x_dtype);
  const std::vector<float> w = random_values(t.c * t.kernel.h * t.kernel.w, seed + 1, 0.5f);
  const std::vector<float> b = random_values(t.c, seed + 2);
  const std::vector<float> res = random_values(ys.count(), seed + 3);

  const std::vector<float> expected = reference_depthwise(t, d, x, w, b, res);

  DeviceBuffer dx16(encode(x, x_dtype), t.x_offset_bytes), dx32(encode(x, dtype));
  DeviceBuffer dw(encode(w, dtype)), db(encode(b, dtype)), dr(encode(res, dtype));
  DeviceBuffer y_mixed(ys.count() * 4), y_float(ys.count() * 4);
  const void* r = t.residual ? dr.get() : nullptr;
  ASSERT_TRUE(launch_depthwise_conv(d, dx32.get(), dw.get(), db.get(), r, y_float.get(), nullptr).is_ok());
  d.x_dtype = x_dtype;
  ASSERT_TRUE(validate_depthwise_conv(d).is_ok()) << validate_depthwise_conv(d).to_string();
  const Status s = launch_depthwise_conv(d, dx16.get(), dw.get(), db.get(), r, y_mixed.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  const std::vector<std::byte> mixed = y_mixed.download();
  EXPECT_TRUE(mixed == y_float.download()) << "not bitwise equal to the float32-x result";
  expect_close(decode(mixed, dtype), expected, dtype);
  EXPECT_TRUE(y_mixed.tail_untouched()) << "wrote past the end of y";
}

TEST(DepthwiseConvGpu, SixteenBitInputIntoFloat32Layer) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType x_dtype : {DataType::kBFloat16, DataType::kFloat16}) {
    // MobileNetV2's stride-1 and stride-2 layers, 5x5, a generic window, the scalar path (c not a
    // multiple of 4) and x off its 8-byte vector alignment.
    check_mixed_input({.n = 2, .h = 56, .w = 56, .c = 144, .activation = Activation::kClip}, x_dtype);
    check_mixed_input({.n = 2, .h = 28, .w = 28, .c = 192, .stride = {2, 2}, .activation = Activation::kClip},
                      x_dtype);
    check_mixed_input({.n = 1, .h = 14, .w = 14, .c = 72, .kernel = {5, 5}, .pads = {2, 2, 2, 2}}, x_dtype);
    check_mixed_input({.n = 1, .h = 13, .w = 15, .c = 40, .kernel = {7, 7}, .pads = {3, 3, 3, 3}}, x_dtype);
    check_mixed_input({.n = 2, .h = 9, .w = 11, .c = 21, .activation = Activation::kRelu, .residual = true},
                      x_dtype);
    check_mixed_input({.n = 1, .h = 14, .w = 14, .c = 32, .x_offset_bytes = 2}, x_dtype);
  }
  // Other pairings are refused with a message.
  DirectConvDesc d = desc_of({.n = 1, .h = 8, .w = 8, .c = 16}, DataType::kFloat16);
  d.x_dtype = DataType::kFloat32;
  const Status s = validate_depthwise_conv(d);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("float32 y"), std::string::npos) << s.message();
  d = desc_of({.n = 1, .h = 8, .w = 8, .c = 16}, DataType::kFloat32);
  d.x_dtype = DataType::kBFloat16;
  EXPECT_EQ(launch_direct_conv(d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kUnsupported);
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
