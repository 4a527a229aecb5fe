// The CUTLASS small-channel convolution (launch_cutlass_conv), every tile, against the CPU
// reference backend's Conv on stem shapes: ResNet's 7x7/2 stem over 8 channels and its
// space-to-depth form (4x4/1 over 16, pads 2 before and 1 after), MobileNetV2's 3x3/2 stem (32
// outputs: half a tile), odd sizes, no bias, no activation. Inputs are rounded to float16 first.
#include "backends/cuda/cutlass_conv.h"

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
using testing::Nhwc;
using testing::random_values;
using testing::round_to;
using testing::run_reference;
using testing::to_nchw_tensor;
using testing::to_nhwc;

struct Case {
  int64_t n = 1, h = 1, w = 1, c = 8, k = 64;
  Hw kernel{7, 7};
  Hw stride{2, 2};
  Pads pads{3, 3, 3, 3};
  Activation activation = Activation::kRelu;
  bool bias = true;
};

void check_cutlass(const Case& t, std::string_view tactic) {
  DirectConvDesc d;
  d.n = t.n;
  d.c = t.c;
  d.h = t.h;
  d.w = t.w;
  d.k = t.k;
  d.attrs.kernel = t.kernel;
  d.attrs.stride = t.stride;
  d.attrs.pads = t.pads;
  d.attrs.activation = t.activation;
  d.out_h = kernels::pool_output_size(t.h, t.kernel.h, t.stride.h, 1, t.pads.top, t.pads.bottom, false);
  d.out_w = kernels::pool_output_size(t.w, t.kernel.w, t.stride.w, 1, t.pads.left, t.pads.right, false);
  d.dtype = DataType::kFloat16;
  SCOPED_TRACE(::testing::Message() << tactic << " " << describe(d) << " act "
                                    << activation_name(t.activation) << (t.bias ? " bias" : ""));
  ASSERT_TRUE(validate_cutlass_conv(d).is_ok()) << validate_cutlass_conv(d).to_string();
  const Nhwc xs{t.n, t.h, t.w, t.c}, ys{t.n, d.out_h, d.out_w, t.k};
  const uint32_t seed = static_cast<uint32_t>(t.c * 131 + t.h * 7 + t.k);
  const DataType f16 = DataType::kFloat16;
  const std::vector<float> x = round_to(random_values(xs.count(), seed), f16);
  // ONNX's [k, c, r, s] for the reference; the kernel reads [k, r, s, c].
  const int64_t taps = t.kernel.h * t.kernel.w;
  const std::vector<float> w_kcrs = round_to(random_values(t.k * t.c * taps, seed + 1, 0.25f), f16);
  std::vector<float> w_krsc(w_kcrs.size());
  for (int64_t k = 0; k < t.k; ++k)
    for (int64_t c = 0; c < t.c; ++c)
      for (int64_t rs = 0; rs < taps; ++rs)
        w_krsc[(k * taps + rs) * t.c + c] = w_kcrs[(k * t.c + c) * taps + rs];
  const std::vector<float> b = round_to(random_values(t.k, seed + 2), f16);

  Node node{.name = "stem", .op = OpType::kConv, .inputs = {"x", "w", t.bias ? "b" : ""}, .outputs = {"y"}};
  node.attrs = d.attrs;
  const Tensor xt = to_nchw_tensor(x, xs);
  const Tensor wt = Tensor::from_floats(Shape{t.k, t.c, t.kernel.h, t.kernel.w}, w_kcrs);
  const Tensor bt = Tensor::from_floats(Shape{t.k}, b);
  const Tensor ref = run_reference(node, {&xt, &wt, t.bias ? &bt : nullptr});
  ASSERT_EQ(ref.shape(), (Shape{t.n, t.k, d.out_h, d.out_w}));

  DeviceBuffer dx(encode(x, f16)), dw(encode(w_krsc, f16)), db(encode(b, f16));
  DeviceBuffer dy(ys.count() * 2);
  const Status s =
      launch_cutlass_conv(tactic, d, dx.get(), dw.get(), t.bias ? db.get() : nullptr, dy.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  expect_close(decode(dy.download(), f16), to_nhwc(ref), f16);
  EXPECT_TRUE(dy.tail_untouched()) << "wrote past the end of y";
}

TEST(CutlassConvGpu, ResNetStems) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (std::string_view tactic : cutlass_conv_tactics()) {
    check_cutlass({.n = 2, .h = 64, .w = 64}, tactic);  // 7x7/2 over RGB padded to 8 channels
    check_cutlass(
        {.n = 2, .h = 32, .w = 32, .c = 16, .kernel = {4, 4}, .stride = {1, 1}, .pads = {2, 2, 1, 1}},
        tactic);  // the space-to-depth form
  }
}

TEST(CutlassConvGpu, MobileNetStemAndEpilogueVariants) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (std::string_view tactic : cutlass_conv_tactics()) {
    check_cutlass({.n = 3, .h = 40, .w = 40, .k = 32, .kernel = {3, 3}, .pads = {1, 1, 1, 1}}, tactic);
    check_cutlass({.n = 1,
                   .h = 37,
                   .w = 29,
                   .c = 24,
                   .k = 48,
                   .kernel = {3, 5},
                   .stride = {1, 2},
                   .pads = {1, 2, 0, 1},
                   .activation = Activation::kNone},
                  tactic);
    check_cutlass({.n = 2,
                   .h = 19,
                   .w = 23,
                   .c = 32,
                   .k = 128,
                   .kernel = {1, 1},
                   .stride = {1, 1},
                   .pads = {0, 0, 0, 0},
                   .bias = false},
                  tactic);
    check_cutlass({.n = 1,
                   .h = 9,
                   .w = 9,
                   .c = 8,
                   .k = 8,
                   .kernel = {3, 3},
                   .stride = {1, 1},
                   .pads = {1, 1, 1, 1},
                   .activation = Activation::kNone,
                   .bias = false},
                  tactic);
  }
}

}  // namespace
}  // namespace gpulab::cuda
