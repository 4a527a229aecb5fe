// The fused stem kernel (launch_fused_stem) against the CPU reference backend: the original
// k x k / 2 convolution (bias, ReLU) over the NCHW image, its output rounded to float16 (as the
// unfused plan stores it), then the 3x3/2 max pool. The kernel gets the weights in the
// space-to-depth layout lower_graph writes; the test builds that layout independently from the
// ONNX [k, c, r, s] weights. Shapes: ResNet's 224x224 stem, odd sizes that leave partial tiles,
// one- and two-channel images, rows that take the 16-byte loads and rows that do not, asymmetric
// pads, no bias, ceil-mode pooling. Every case runs the mma.sync kernel and, on sm_90, the wgmma
// one, each also writing bfloat16 (a BF16 plan's stem), which must be the float16 result rounded,
// and int8 and fp8e4m3 (an INT8 or FP8 plan's stem), which must be the float16 result quantized as
// quant.h's cast does, byte for byte, at a scale that saturates the largest values.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/kernels/kernel_desc.h"
#include "backends/cuda/kernels/kernels.h"
#include "core/quant.h"

#include "kernel_test_util.h"
#include "reference_util.h"

namespace gpulab::kernels {
namespace {

using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::expect_close;
using testing::expect_synced;
using testing::is_sm90;
using testing::random_values;
using testing::round_to;
using testing::run_reference;
using testing::to_nhwc;

struct Case {
  int64_t n = 1, c = 3, h = 224, w = 224;
  int64_t kernel = 7;  // at most 8: 4x4 taps over space-to-depth pixels
  Pads pads{3, 3, 3, 3};
  Pads pool_pads{1, 1, 1, 1};
  bool ceil_mode = false;
  bool bias = true;
};

// Runs both kernels (the wgmma one where the GPU is sm_90) against the reference.
void check_stem(const Case& t) {
  const int64_t k = kStemOutChannels, taps = t.kernel * t.kernel;
  const int64_t conv_h = pool_output_size(t.h, t.kernel, 2, 1, t.pads.top, t.pads.bottom, false);
  const int64_t conv_w = pool_output_size(t.w, t.kernel, 2, 1, t.pads.left, t.pads.right, false);
  FusedStemDesc d;
  d.n = t.n;
  d.c = t.c;
  d.h = t.h;
  d.w = t.w;
  d.pad_top = t.pads.top;
  d.pad_left = t.pads.left;
  d.conv_h = conv_h;
  d.conv_w = conv_w;
  d.pool.kernel = {3, 3};
  d.pool.stride = {2, 2};
  d.pool.pads = t.pool_pads;
  d.pool.ceil_mode = t.ceil_mode;
  d.out_h = pool_output_size(conv_h, 3, 2, 1, t.pool_pads.top, t.pool_pads.bottom, t.ceil_mode);
  d.out_w = pool_output_size(conv_w, 3, 2, 1, t.pool_pads.left, t.pool_pads.right, t.ceil_mode);
  SCOPED_TRACE(::testing::Message() << "n " << t.n << " c " << t.c << " " << t.h << "x" << t.w << " kernel "
                                    << t.kernel << " conv " << conv_h << "x" << conv_w << " pooled "
                                    << d.out_h << "x" << d.out_w << (t.bias ? " bias" : "")
                                    << (t.ceil_mode ? " ceil" : ""));
  ASSERT_TRUE(validate(d).is_ok()) << validate(d).to_string();

  const DataType f16 = DataType::kFloat16;
  const uint32_t seed = static_cast<uint32_t>(t.c * 131 + t.h * 7 + t.w);
  // The kernel rounds the image to float16 itself; the reference sees the rounded image.
  const std::vector<float> x = random_values(t.n * t.c * t.h * t.w, seed);
  const std::vector<float> w_kcrs = round_to(random_values(k * t.c * taps, seed + 1, 0.2f), f16);
  const std::vector<float> b = round_to(random_values(k, seed + 2, 0.5f), f16);
  // Space-to-depth weights [k, 4, 4, 16]: tap (r, s) of channel ci -> tap (r / 2, s / 2) of
  // channel ((r % 2) * 2 + s % 2) * c + ci.
  std::vector<float> w_s2d(k * 4 * 4 * kStemS2dChannels, 0.0f);
  for (int64_t ko = 0; ko < k; ++ko)
    for (int64_t ci = 0; ci < t.c; ++ci)
      for (int64_t r = 0; r < t.kernel; ++r)
        for (int64_t s = 0; s < t.kernel; ++s)
          w_s2d[((ko * 4 + r / 2) * 4 + s / 2) * kStemS2dChannels + ((r % 2) * 2 + s % 2) * t.c + ci] =
              w_kcrs[((ko * t.c + ci) * t.kernel + r) * t.kernel + s];

  Node conv{.name = "conv", .op = OpType::kConv, .inputs = {"x", "w", t.bias ? "b" : ""}, .outputs = {"c"}};
  ConvAttrs ca;
  ca.kernel = {t.kernel, t.kernel};
  ca.stride = {2, 2};
  ca.pads = t.pads;
  ca.activation = Activation::kRelu;
  conv.attrs = ca;
  const Tensor xt = Tensor::from_floats(Shape{t.n, t.c, t.h, t.w}, round_to(x, f16));
  const Tensor wt = Tensor::from_floats(Shape{k, t.c, t.kernel, t.kernel}, w_kcrs);
  const Tensor bt = Tensor::from_floats(Shape{k}, b);
  const Tensor conv_out = run_reference(conv, {&xt, &wt, t.bias ? &bt : nullptr});
  ASSERT_EQ(conv_out.shape(), (Shape{t.n, k, conv_h, conv_w}));
  const Tensor conv_f16 = Tensor::from_floats(
      conv_out.shape(), round_to(std::vector<float>(conv_out.f32().begin(), conv_out.f32().end()), f16));
  Node pool{.name = "pool", .op = OpType::kMaxPool, .inputs = {"c"}, .outputs = {"y"}};
  pool.attrs = d.pool;
  const Tensor ref = run_reference(pool, {&conv_f16});
  ASSERT_EQ(ref.shape(), (Shape{t.n, k, d.out_h, d.out_w}));

  DeviceBuffer dx(encode(x, DataType::kFloat32)), dw(encode(w_s2d, f16)), db(encode(b, f16));
  for (const StemKernel kernel : {StemKernel::kMmaSync, StemKernel::kWgmma}) {
    SCOPED_TRACE(kernel == StemKernel::kWgmma ? "wgmma kernel" : "mma.sync kernel");
    DeviceBuffer dy(static_cast<size_t>(t.n * d.out_h * d.out_w * k * 2));
    const Status s =
        launch_fused_stem(d, dx.get(), dw.get(), t.bias ? db.get() : nullptr, dy.get(), nullptr, kernel);
    // The wgmma kernel exists for sm_90 alone; there it must run.
    if (kernel == StemKernel::kWgmma && !is_sm90()) {
      EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
      continue;
    }
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    expect_synced();
    const std::vector<float> got = decode(dy.download(), f16);
    expect_close(got, to_nhwc(ref), f16);
    EXPECT_TRUE(dy.tail_untouched()) << "wrote past the end of y";
    // bfloat16 out: the float16 result rounded to bfloat16, element for element.
    FusedStemDesc to_bf16 = d;
    to_bf16.out_dtype = DataType::kBFloat16;
    DeviceBuffer dy_bf16(static_cast<size_t>(t.n * d.out_h * d.out_w * k * 2));
    ASSERT_TRUE(launch_fused_stem(to_bf16, dx.get(), dw.get(), t.bias ? db.get() : nullptr, dy_bf16.get(),
                                  nullptr, kernel)
                    .is_ok());
    expect_synced();
    testing::expect_exact(decode(dy_bf16.download(), DataType::kBFloat16),
                          round_to(got, DataType::kBFloat16));
    EXPECT_TRUE(dy_bf16.tail_untouched()) << "wrote past the end of the bfloat16 y";
    // 8-bit out: the float16 result quantized at a scale that puts its largest values 1.5x past the
    // largest code (they saturate), as the cast that this replaces would.
    float amax = 0.0f;
    for (const float v : got) amax = std::max(amax, v);
    for (const DataType q8 : {DataType::kInt8, DataType::kFp8E4M3}) {
      SCOPED_TRACE(dtype_name(q8));
      FusedStemDesc to_q8 = d;
      to_q8.out_dtype = q8;
      to_q8.out_scale = amax / (1.5f * (q8 == DataType::kInt8 ? kInt8QuantMax : kFp8E4M3Max));
      ASSERT_GT(to_q8.out_scale, 0.0f);
      const float inv = 1.0f / to_q8.out_scale;
      std::vector<uint8_t> want(got.size());
      for (size_t i = 0; i < got.size(); ++i)
        want[i] = q8 == DataType::kInt8 ? static_cast<uint8_t>(quantize_int8(got[i], inv))
                                        : float_to_e4m3(got[i] * inv);
      DeviceBuffer dy_q8(got.size());
      ASSERT_TRUE(launch_fused_stem(to_q8, dx.get(), dw.get(), t.bias ? db.get() : nullptr, dy_q8.get(),
                                    nullptr, kernel)
                      .is_ok());
      expect_synced();
      const std::vector<std::byte> bytes = dy_q8.download();
      ASSERT_EQ(bytes.size(), want.size());
      size_t differ = 0, first = want.size();
      for (size_t i = 0; i < want.size(); ++i)
        if (static_cast<uint8_t>(bytes[i]) != want[i]) {
          ++differ;
          first = std::min(first, i);
        }
      EXPECT_EQ(differ, 0u) << "of " << want.size() << " bytes; the first at " << first;
      EXPECT_TRUE(dy_q8.tail_untouched()) << "wrote past the end of the 8-bit y";
    }
  }
}

TEST(FusedStemGpu, ResNetStem) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_stem({.n = 2});
}

TEST(FusedStemGpu, PartialTilesAndOddSizes) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_stem({.n = 3, .h = 61, .w = 47});                              // 16x12 pooled: partial tiles
  check_stem({.n = 1, .c = 1, .h = 30, .w = 50, .bias = false});       // gray image, no bias
  check_stem({.n = 2, .c = 2, .h = 9, .w = 9, .pads = {2, 3, 1, 3}});  // one partial tile, asymmetric pads
  check_stem({.n = 1, .h = 40, .w = 36, .kernel = 8, .pads = {3, 3, 4, 4}});  // 8x8 window: every tap used
}

// Widths that are multiples of 4 take the 16-byte image loads, others the 4-byte ones (above);
// fewer channels leave more of the GEMM's K pairs empty, which the kernel drops.
TEST(FusedStemGpu, AlignedRowsFewChannels) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_stem({.n = 2, .c = 1, .h = 37, .w = 52});
  check_stem({.n = 1, .c = 2, .h = 44, .w = 40, .pads = {2, 1, 3, 2}});
  check_stem({.n = 1, .c = 1, .h = 20, .w = 24, .kernel = 5, .pads = {2, 2, 2, 2}});  // 5x5: more empty taps
}

TEST(FusedStemGpu, CeilModeAndPoolPads) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_stem({.n = 2, .h = 58, .w = 66, .pool_pads = {1, 1, 0, 0}, .ceil_mode = true});
  check_stem({.n = 1, .h = 33, .w = 35, .pool_pads = {1, 1, 1, 0}});
}

// The wgmma kernel cuts images wider than 56 pooled columns into strips, and gives a
// consumer several items (each restarting its ring of space-to-depth rows) when there are more
// items than consumers: 600 small images are 600 items on an H200's 264 consumers.
TEST(FusedStemGpu, StripsAndManyItems) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_stem({.n = 1, .h = 20, .w = 250});                         // 2 strips, 4-byte loads
  check_stem({.n = 1, .c = 2, .h = 24, .w = 456, .bias = false});  // 3 strips, 16-byte loads
  check_stem({.n = 600, .h = 16, .w = 20});                        // several items per consumer
  check_stem({.n = 300, .c = 1, .h = 15, .w = 14, .pads = {2, 3, 1, 3}});
}

TEST(FusedStemGpu, RefusesBadDescriptors) {
  GPULAB_SKIP_WITHOUT_GPU();
  FusedStemDesc d{
      .n = 1, .c = 3, .h = 224, .w = 224, .pad_top = 3, .pad_left = 3, .conv_h = 112, .conv_w = 112};
  d.pool.kernel = {3, 3};
  d.pool.stride = {2, 2};
  d.pool.pads = {1, 1, 1, 1};
  d.out_h = d.out_w = 56;
  DeviceBuffer dx(static_cast<size_t>(3 * 224 * 224 * 4)), dw(static_cast<size_t>(64 * 256 * 2)),
      dy(static_cast<size_t>(56 * 56 * 64 * 2));
  EXPECT_TRUE(launch_fused_stem(d, dx.get(), dw.get(), nullptr, dy.get(), nullptr).is_ok());
  expect_synced();
  FusedStemDesc bad = d;
  bad.out_h = 55;
  EXPECT_EQ(launch_fused_stem(bad, dx.get(), dw.get(), nullptr, dy.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(launch_fused_stem(d, dx.get(), nullptr, nullptr, dy.get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      launch_fused_stem(d, dx.get(), dw.get(), nullptr, static_cast<char*>(dy.get()) + 2, nullptr).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulab::kernels
