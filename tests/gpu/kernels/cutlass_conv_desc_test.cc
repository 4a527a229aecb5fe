// Host-side rules of the CUTLASS small-channel convolution (validate_cutlass_conv,
// cutlass_conv_supports, launch-time checks, tactic names). Needs the CUDA build but no GPU:
// nothing here reaches the device.
#include <gtest/gtest.h>

#include "backends/cuda/cutlass_conv.h"
#include "runtime/conv_step.h"

namespace gpulab::cuda {
namespace {

// ResNet-18's stem after the space-to-depth rewrite: 112x112x16 (12 data channels), 4x4, stride
// 1, pads 2 before and 1 after, 64 outputs, bias, ReLU.
DirectConvDesc resnet_s2d_stem() {
  DirectConvDesc d;
  d.n = 256;
  d.c = 16;
  d.h = 112;
  d.w = 112;
  d.k = 64;
  d.out_h = 112;
  d.out_w = 112;
  d.attrs.kernel = {4, 4};
  d.attrs.pads = {2, 2, 1, 1};
  d.attrs.activation = Activation::kRelu;
  d.dtype = DataType::kFloat16;
  return d;
}

void expect_rejected(const DirectConvDesc& d, StatusCode code, const std::string& fragment) {
  const Status s = validate_cutlass_conv(d);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_FALSE(cutlass_conv_supports(d));
}

TEST(CutlassConvDesc, AcceptsStems) {
  EXPECT_TRUE(validate_cutlass_conv(resnet_s2d_stem()).is_ok())
      << validate_cutlass_conv(resnet_s2d_stem()).to_string();
  DirectConvDesc plain = resnet_s2d_stem();  // the 7x7/2 stem over RGB padded to 8 channels
  plain.c = 8;
  plain.h = plain.w = 224;
  plain.attrs.kernel = {7, 7};
  plain.attrs.stride = {2, 2};
  plain.attrs.pads = {3, 3, 3, 3};
  EXPECT_TRUE(cutlass_conv_supports(plain));
  plain.attrs.activation = Activation::kNone;
  plain.n = 1024;  // 1.6 GB of output: still under CUTLASS's 32-bit offsets
  EXPECT_TRUE(cutlass_conv_supports(plain));
}

TEST(CutlassConvDesc, RejectsWhatTheKernelsDoNotCover) {
  DirectConvDesc d = resnet_s2d_stem();
  d.dtype = DataType::kBFloat16;
  expect_rejected(d, StatusCode::kUnsupported, "float16");
  d = resnet_s2d_stem();
  d.bias_float32 = true;
  expect_rejected(d, StatusCode::kUnsupported, "float32 bias");
  d = resnet_s2d_stem();
  d.c = 12;
  expect_rejected(d, StatusCode::kUnsupported, "multiples of 8");
  d = resnet_s2d_stem();
  d.c = 64;  // a wide layer: cuDNN's territory
  expect_rejected(d, StatusCode::kUnsupported, "c <= 32");
  d = resnet_s2d_stem();
  d.k = 60;
  expect_rejected(d, StatusCode::kUnsupported, "multiples of 8");
  d = resnet_s2d_stem();
  d.attrs.groups = 2;
  expect_rejected(d, StatusCode::kUnsupported, "groups");
  d = resnet_s2d_stem();
  d.attrs.has_residual = true;
  expect_rejected(d, StatusCode::kUnsupported, "residual");
  d = resnet_s2d_stem();
  d.attrs.activation = Activation::kClip;
  expect_rejected(d, StatusCode::kUnsupported, "ReLU");
  d = resnet_s2d_stem();
  d.attrs.pads = {1, 1, 2, 2};  // more padding after than before
  d.out_h = d.out_w = 112;
  expect_rejected(d, StatusCode::kUnsupported, "pads");
  d = resnet_s2d_stem();
  d.out_h = 113;
  expect_rejected(d, StatusCode::kInvalidArgument, "output size");
  d = resnet_s2d_stem();
  d.n = 0;
  expect_rejected(d, StatusCode::kInvalidArgument, "every size");
  d = resnet_s2d_stem();
  d.n = 1400;  // 2.2 GB of output
  expect_rejected(d, StatusCode::kUnsupported, "2 GiB");
}

TEST(CutlassConvDesc, LaunchRefusesUnknownTacticsAndProblemsBeforeTouchingTheDevice) {
  int dummy = 0;
  const Status unknown =
      launch_cutlass_conv("cutlass:1x1x1_s1", resnet_s2d_stem(), &dummy, &dummy, nullptr, &dummy, nullptr);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("unknown tactic"), std::string::npos) << unknown.message();
  DirectConvDesc bf16 = resnet_s2d_stem();
  bf16.dtype = DataType::kBFloat16;
  EXPECT_EQ(
      launch_cutlass_conv(cutlass_conv_tactics()[0], bf16, &dummy, &dummy, nullptr, &dummy, nullptr).code(),
      StatusCode::kUnsupported);
}

TEST(CutlassConvDesc, TacticsAreNamedForTheConvStep) {
  ASSERT_FALSE(cutlass_conv_tactics().empty());
  for (std::string_view t : cutlass_conv_tactics()) {
    EXPECT_TRUE(t.starts_with(kCutlassTacticPrefix)) << t;
    EXPECT_EQ(conv_kernel_of_tactic(t), ConvKernel::kCutlass) << t;
    EXPECT_EQ(conv_kernel_for(t, nullptr), ConvKernel::kCutlass) << t;
  }
  EXPECT_EQ(conv_kernel_of_tactic("cutlass"), ConvKernel::kCudnn);  // the prefix includes the colon
}

}  // namespace
}  // namespace gpulab::cuda
