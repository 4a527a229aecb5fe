// Host-side rules of the wgmma 3x3 convolution (validate_wgmma_conv, launch-time checks, its
// tactic name). Needs the CUDA build but no GPU: nothing here reaches the device.
#include <gtest/gtest.h>

#include "backends/cuda/wgmma_conv.h"
#include "runtime/conv_step.h"

namespace gpulab::cuda {
namespace {

// ResNet-18's layer1 conv2 at batch 256: 56x56x64, 3x3, pads 1, bias, residual, ReLU.
DirectConvDesc layer1() {
  DirectConvDesc d;
  d.n = 256;
  d.c = d.k = 64;
  d.h = d.w = d.out_h = d.out_w = 56;
  d.attrs.kernel = {3, 3};
  d.attrs.pads = {1, 1, 1, 1};
  d.attrs.activation = Activation::kRelu;
  d.attrs.has_residual = true;
  d.dtype = DataType::kFloat16;
  return d;
}

void expect_rejected(const DirectConvDesc& d, StatusCode code, const std::string& fragment) {
  const Status s = validate_wgmma_conv(d);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_FALSE(wgmma_conv_supports(d));
}

TEST(WgmmaConvDesc, AcceptsLayer1Shapes) {
  EXPECT_TRUE(validate_wgmma_conv(layer1()).is_ok()) << validate_wgmma_conv(layer1()).to_string();
  DirectConvDesc bf16 = layer1();
  bf16.dtype = DataType::kBFloat16;
  EXPECT_TRUE(validate_wgmma_conv(bf16).is_ok()) << validate_wgmma_conv(bf16).to_string();
  DirectConvDesc d = layer1();  // conv1 of a block: no residual; odd sizes and a float32 bias
  d.attrs.has_residual = false;
  d.h = d.out_h = 13;
  d.w = d.out_w = 1;
  d.bias_float32 = true;
  d.attrs.activation = Activation::kClip;
  EXPECT_TRUE(validate_wgmma_conv(d).is_ok()) << validate_wgmma_conv(d).to_string();
}

TEST(WgmmaConvDesc, RejectsWhatTheKernelDoesNotCover) {
  DirectConvDesc d = layer1();
  d.dtype = DataType::kFloat32;
  expect_rejected(d, StatusCode::kUnsupported, "float16 or bfloat16");
  d = layer1();
  d.c = 128;
  expect_rejected(d, StatusCode::kUnsupported, "64 input and 64 output");
  d = layer1();
  d.k = 32;
  expect_rejected(d, StatusCode::kUnsupported, "64 input and 64 output");
  d = layer1();
  d.attrs.groups = 64;
  expect_rejected(d, StatusCode::kUnsupported, "groups");
  d = layer1();
  d.attrs.stride = {2, 2};
  d.out_h = d.out_w = 28;
  expect_rejected(d, StatusCode::kUnsupported, "stride 1");
  d = layer1();
  d.attrs.kernel = {1, 1};
  d.attrs.pads = {0, 0, 0, 0};
  expect_rejected(d, StatusCode::kUnsupported, "3x3");
  d = layer1();
  d.attrs.pads = {1, 1, 0, 0};
  d.out_h = d.out_w = 55;
  expect_rejected(d, StatusCode::kUnsupported, "pads 1");
  d = layer1();
  d.attrs.dilation = {2, 2};
  expect_rejected(d, StatusCode::kUnsupported, "dilation");
  d = layer1();
  d.out_w = 57;
  expect_rejected(d, StatusCode::kInvalidArgument, "output size");
  d = layer1();
  d.n = 0;
  expect_rejected(d, StatusCode::kInvalidArgument, "positive");
  d = layer1();
  d.n = int64_t{1} << 25;  // 2^25 images of 49 blocks
  expect_rejected(d, StatusCode::kUnsupported, "2^30");
}

TEST(WgmmaConvDesc, LaunchRefusesBadArgumentsBeforeTouchingTheDevice) {
  alignas(16) int dummy[4] = {};
  DirectConvDesc f32 = layer1();
  f32.dtype = DataType::kFloat32;
  EXPECT_EQ(
      launch_wgmma_conv(wgmma_conv_tactics()[0], f32, dummy, dummy, nullptr, dummy, dummy, nullptr).code(),
      StatusCode::kUnsupported);
  const Status no_residual =
      launch_wgmma_conv(wgmma_conv_tactics()[0], layer1(), dummy, dummy, nullptr, nullptr, dummy, nullptr);
  EXPECT_EQ(no_residual.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_residual.message().find("null"), std::string::npos) << no_residual.message();
  const Status unaligned =
      launch_wgmma_conv(wgmma_conv_tactics()[0], layer1(), reinterpret_cast<char*>(dummy) + 2, dummy, nullptr,
                        dummy, dummy, nullptr);
  EXPECT_EQ(unaligned.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unaligned.message().find("aligned"), std::string::npos) << unaligned.message();
}

TEST(WgmmaConvDesc, LaunchRefusesUnknownTactics) {
  alignas(16) int dummy[4] = {};
  const Status s =
      launch_wgmma_conv("wgmma-conv3x3:wg9", layer1(), dummy, dummy, nullptr, dummy, dummy, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown tactic"), std::string::npos) << s.message();
}

TEST(WgmmaConvDesc, TacticsAreNamedForTheConvStep) {
  ASSERT_FALSE(wgmma_conv_tactics().empty());
  for (std::string_view t : wgmma_conv_tactics()) {
    EXPECT_TRUE(t.starts_with(kWgmmaConvTacticPrefix)) << t;
    EXPECT_EQ(conv_kernel_of_tactic(t), ConvKernel::kWgmma3x3) << t;
    EXPECT_EQ(conv_kernel_for(t, nullptr), ConvKernel::kWgmma3x3) << t;
    EXPECT_TRUE(check_conv_tactic(t).is_ok()) << t;
  }
}

// A plan or timing cache from an older gpulab may name a variant this one no longer has (ps14 was
// removed in fab23d3): refused by name, so that the engine refuses the plan and tactic timing times
// the layer again, instead of failing at the first launch.
TEST(WgmmaConvDesc, RemovedVariantsAreNotKnownTactics) {
  for (std::string_view t : {"wgmma-conv3x3:ps14", "wgmma-conv3x3:wg2", "wgmma-conv3x3:"}) {
    const Status s = check_conv_tactic(t);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << t;
    EXPECT_NE(s.message().find(std::string(t)), std::string::npos) << s.message();
  }
  EXPECT_EQ(check_conv_tactic("cutlass:no-such-tile").code(), StatusCode::kUnsupported);
  for (std::string_view t : {"direct", "depthwise", "cudnn:41;2=4", "cudnn-unfused:62;2=4", ""})
    EXPECT_TRUE(check_conv_tactic(t).is_ok()) << t;
}

}  // namespace
}  // namespace gpulab::cuda
