// The wgmma 3x3 convolution for 64-channel layers (launch_wgmma_conv) on the device:
//   - small shapes against the CPU reference backend's Conv (units of 14x8 output pixels cut by
//     the image's edges, no bias, float32 bias, no residual, every activation);
//   - ResNet-18's layer1 shape at a batch large enough that every warpgroup loops over several
//     units (every patch buffer in use), element by element against the direct convolution
//     (both accumulate in float32, so they differ by at most a rounding of the output).
// Both storage types, float16 and bfloat16.
// On a GPU other than sm_90 the launch must return kUnsupported.
#include "backends/cuda/wgmma_conv.h"

#include <cmath>

#include "kernel_test_util.h"
#include "reference_util.h"

namespace gpulab::cuda {
namespace {

using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::expect_close;
using testing::expect_synced;
using testing::is_sm90;
using testing::Nhwc;
using testing::random_values;
using testing::round_to;
using testing::run_reference;
using testing::to_nchw_tensor;
using testing::to_nhwc;

constexpr DataType kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16;

struct Case {
  DataType dtype = kF16;
  int64_t n = 1, h = 8, w = 8;
  Activation activation = Activation::kRelu;
  bool bias = true, bias_f32 = false, residual = true;
};

DirectConvDesc desc_of(const Case& t) {
  DirectConvDesc d;
  d.n = t.n;
  d.h = d.out_h = t.h;
  d.w = d.out_w = t.w;
  d.c = d.k = 64;
  d.attrs.kernel = {3, 3};
  d.attrs.pads = {1, 1, 1, 1};
  d.attrs.activation = t.activation;
  d.attrs.clip_min = 0.0f;
  d.attrs.clip_max = 1.5f;
  d.attrs.has_residual = t.residual;
  d.dtype = t.dtype;
  d.bias_float32 = t.bias_f32;
  return d;
}

struct Inputs {
  std::vector<float> x, w_kcrs, w_krsc, b, res;
};

Inputs make_inputs(const Case& t) {
  const int64_t pixels = t.n * t.h * t.w;
  const uint32_t seed = static_cast<uint32_t>(t.n * 1009 + t.h * 31 + t.w);
  Inputs in;
  in.x = round_to(random_values(pixels * 64, seed), t.dtype);
  in.w_kcrs = round_to(random_values(64 * 64 * 9, seed + 1, 0.25f), t.dtype);
  in.w_krsc.resize(in.w_kcrs.size());
  for (int64_t k = 0; k < 64; ++k)
    for (int64_t c = 0; c < 64; ++c)
      for (int64_t rs = 0; rs < 9; ++rs) in.w_krsc[(k * 9 + rs) * 64 + c] = in.w_kcrs[(k * 64 + c) * 9 + rs];
  in.b = round_to(random_values(64, seed + 2), t.dtype);
  in.res = round_to(random_values(pixels * 64, seed + 3), t.dtype);
  return in;
}

std::vector<std::byte> bias_bytes(const Case& t, const std::vector<float>& b) {
  return encode(b, t.bias_f32 ? DataType::kFloat32 : t.dtype);
}

// Runs the kernel variant `tactic`; false (after checking kUnsupported) on a GPU other than sm_90.
bool run_wgmma(std::string_view tactic, const Case& t, const Inputs& in, DeviceBuffer& dy) {
  const DirectConvDesc d = desc_of(t);
  DeviceBuffer dx(encode(in.x, t.dtype)), dw(encode(in.w_krsc, t.dtype)), db(bias_bytes(t, in.b)),
      dr(encode(in.res, t.dtype));
  const Status s = launch_wgmma_conv(tactic, d, dx.get(), dw.get(), t.bias ? db.get() : nullptr,
                                     t.residual ? dr.get() : nullptr, dy.get(), nullptr);
  if (!is_sm90()) {
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
    EXPECT_FALSE(wgmma_conv_supports(d));
    return false;
  }
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(wgmma_conv_supports(d));
  expect_synced();
  return s.is_ok();
}

void check_against_reference(const Case& t) {
  SCOPED_TRACE(::testing::Message() << dtype_name(t.dtype) << " n" << t.n << " " << t.h << "x" << t.w
                                    << " act " << activation_name(t.activation) << (t.bias ? " bias" : "")
                                    << (t.bias_f32 ? " (float32)" : "") << (t.residual ? " residual" : ""));
  const DirectConvDesc d = desc_of(t);
  ASSERT_TRUE(validate_wgmma_conv(d).is_ok()) << validate_wgmma_conv(d).to_string();
  const Inputs in = make_inputs(t);
  const Nhwc xs{t.n, t.h, t.w, 64};
  Node node{.name = "conv", .op = OpType::kConv, .inputs = {"x", "w", t.bias ? "b" : ""}, .outputs = {"y"}};
  if (t.residual) node.inputs.push_back("r");
  node.attrs = d.attrs;
  const Tensor xt = to_nchw_tensor(in.x, xs);
  const Tensor wt = Tensor::from_floats(Shape{64, 64, 3, 3}, in.w_kcrs);
  const Tensor bt = Tensor::from_floats(Shape{64}, in.b);
  const Tensor rt = to_nchw_tensor(in.res, xs);
  std::vector<const Tensor*> inputs = {&xt, &wt, t.bias ? &bt : nullptr};
  if (t.residual) inputs.push_back(&rt);
  const Tensor ref = run_reference(node, inputs);
  ASSERT_EQ(ref.shape(), (Shape{t.n, 64, t.h, t.w}));

  for (std::string_view tactic : wgmma_conv_tactics()) {
    SCOPED_TRACE(tactic);
    DeviceBuffer dy(xs.count() * 2);
    if (!run_wgmma(tactic, t, in, dy)) return;
    expect_close(decode(dy.download(), t.dtype), to_nhwc(ref), t.dtype);
    EXPECT_TRUE(dy.tail_untouched()) << "wrote past the end of y";
  }
}

TEST(WgmmaConvGpu, AgreesWithTheReference) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (const DataType dt : {kF16, kBF16}) {
    check_against_reference({.dtype = dt, .n = 2, .h = 16, .w = 24});  // unit rows of 14 and 2
    check_against_reference({.dtype = dt, .n = 1, .h = 5, .w = 20, .residual = false});  // 8, 8, 4 columns
    check_against_reference(
        {.dtype = dt, .n = 3, .h = 13, .w = 11, .activation = Activation::kNone, .bias = false});
    check_against_reference(
        {.dtype = dt, .n = 1, .h = 9, .w = 9, .activation = Activation::kClip, .bias_f32 = true});
    check_against_reference({.dtype = dt, .n = 1, .h = 1, .w = 1});  // a single pixel: all padding
  }
}

// Layer1 of ResNet-18 at batch 64: 1792 units of 14x8 output pixels, so that every warpgroup of
// an H200 runs several: rs14's 264 warpgroups 6 or 7 each; ws14's 132 thread blocks 13 or 14
// each, so that its ring of six patch buffers wraps twice and each consumer reuses its staging
// tile. Element by element against the direct convolution, which accumulates in float32 too: the
// two differ by the rounding of the output, plus that of the convolution plus bias before the
// residual is added, hence the bound u |conv + bias| + 4u |y| + 1e-3, u the unit roundoff (2^-11
// for float16, 2^-8 for bfloat16).
void check_layer1(DataType dtype) {
  SCOPED_TRACE(dtype_name(dtype));
  const Case t{.dtype = dtype, .n = 64, .h = 56, .w = 56};
  const float u = dtype == kBF16 ? 0x1p-8f : 0x1p-11f;
  const DirectConvDesc d = desc_of(t);
  DirectConvDesc conv_bias = d;  // no residual, no activation
  conv_bias.attrs.has_residual = false;
  conv_bias.attrs.activation = Activation::kNone;
  const Inputs in = make_inputs(t);
  const size_t bytes = static_cast<size_t>(t.n * t.h * t.w * 64 * 2);
  DeviceBuffer dx(encode(in.x, dtype)), dw(encode(in.w_krsc, dtype)), db(encode(in.b, dtype)),
      dr(encode(in.res, dtype)), dref(bytes), dcb(bytes);
  Status s = launch_direct_conv(d, dx.get(), dw.get(), db.get(), dr.get(), dref.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  s = launch_direct_conv(conv_bias, dx.get(), dw.get(), db.get(), nullptr, dcb.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  const std::vector<float> want = decode(dref.download(), dtype), cb = decode(dcb.download(), dtype);
  for (std::string_view tactic : wgmma_conv_tactics()) {
    SCOPED_TRACE(tactic);
    DeviceBuffer dy(bytes);
    if (!run_wgmma(tactic, t, in, dy)) return;
    const std::vector<float> got = decode(dy.download(), dtype);
    ASSERT_EQ(got.size(), want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float bound = u * std::fabs(cb[i]) + 4 * u * std::fabs(want[i]) + 1e-3f;
      if (!(std::fabs(got[i] - want[i]) <= bound) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "first at element " << first << " (pixel " << first / 64 << ", channel "
                       << first % 64 << "): got " << got[first] << ", direct convolution " << want[first]
                       << " (convolution plus bias " << cb[first] << ")";
    EXPECT_TRUE(dy.tail_untouched()) << "wrote past the end of y";
  }
}

TEST(WgmmaConvGpu, ResNetLayer1AgreesWithTheDirectConvolution) {
  GPULAB_SKIP_WITHOUT_GPU();
  check_layer1(kF16);
  check_layer1(kBF16);
}

}  // namespace
}  // namespace gpulab::cuda
