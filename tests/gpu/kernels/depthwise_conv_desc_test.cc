// Host-side rules of the depthwise convolution (validate_depthwise_conv, depthwise_conv_supports,
// launch-time argument checks) and the convolution tactic strings. Needs the CUDA build but no
// GPU: nothing here reaches the device.
#include <gtest/gtest.h>

#include "backends/cuda/depthwise_conv.h"
#include "runtime/conv_step.h"

namespace gpulab::cuda {
namespace {

// MobileNetV2's first depthwise layer: 112x112x32, 3x3, stride 1, pad 1, ReLU6.
DirectConvDesc mobilenet_dw() {
  DirectConvDesc d;
  d.n = 8;
  d.c = 32;
  d.h = 112;
  d.w = 112;
  d.k = 32;
  d.out_h = 112;
  d.out_w = 112;
  d.attrs.kernel = {3, 3};
  d.attrs.pads = {1, 1, 1, 1};
  d.attrs.groups = 32;
  d.attrs.activation = Activation::kClip;
  d.dtype = DataType::kFloat16;
  return d;
}

void expect_rejected(const DirectConvDesc& d, StatusCode code, const std::string& fragment) {
  const Status s = validate_depthwise_conv(d);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_FALSE(depthwise_conv_supports(d));
}

TEST(DepthwiseConvDesc, AcceptsMobileNetShapesInEveryFloatType) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    DirectConvDesc d = mobilenet_dw();
    d.dtype = dtype;
    EXPECT_TRUE(validate_depthwise_conv(d).is_ok()) << validate_depthwise_conv(d).to_string();
    EXPECT_TRUE(depthwise_conv_supports(d));
    d.attrs.stride = {2, 2};
    d.out_h = d.out_w = 56;
    EXPECT_TRUE(depthwise_conv_supports(d));
  }
  DirectConvDesc odd = mobilenet_dw();  // c not a multiple of the vector width: the scalar path
  odd.c = odd.k = odd.attrs.groups = 21;
  EXPECT_TRUE(depthwise_conv_supports(odd));
}

TEST(DepthwiseConvDesc, RejectsConvolutionsThatAreNotDepthwise) {
  DirectConvDesc d = mobilenet_dw();
  d.attrs.groups = 1;  // a dense 3x3
  expect_rejected(d, StatusCode::kInvalidArgument, "groups == c == k");
  d = mobilenet_dw();
  d.k = 64;  // channel multiplier 2
  expect_rejected(d, StatusCode::kInvalidArgument, "groups == c == k");
  d = mobilenet_dw();
  d.attrs.groups = 16;  // grouped, two channels per group
  expect_rejected(d, StatusCode::kInvalidArgument, "groups == c == k");
}

TEST(DepthwiseConvDesc, RejectsBadShapes) {
  DirectConvDesc d = mobilenet_dw();
  d.n = 0;
  expect_rejected(d, StatusCode::kInvalidArgument, "every size");
  d = mobilenet_dw();
  d.attrs.stride = {0, 1};
  expect_rejected(d, StatusCode::kInvalidArgument, "every size");
  d = mobilenet_dw();
  d.attrs.pads.left = -1;
  expect_rejected(d, StatusCode::kInvalidArgument, "pads");
  d = mobilenet_dw();
  d.out_w = 111;  // not the convolution's output size
  expect_rejected(d, StatusCode::kInvalidArgument, "differs from the convolution's 112x112");
  d = mobilenet_dw();
  d.attrs.kernel = {33, 33};
  d.attrs.pads = {16, 16, 16, 16};
  expect_rejected(d, StatusCode::kInvalidArgument, "taps");
  d = mobilenet_dw();
  d.h = int64_t{1} << 32;
  expect_rejected(d, StatusCode::kInvalidArgument, "every size");
}

TEST(DepthwiseConvDesc, RejectsNonFloatTypes) {
  DirectConvDesc d = mobilenet_dw();
  d.dtype = DataType::kInt8;
  expect_rejected(d, StatusCode::kUnsupported, "int8");
}

TEST(DepthwiseConvDesc, LaunchChecksArgumentsBeforeTouchingTheDevice) {
  DirectConvDesc d = mobilenet_dw();
  int dummy = 0;
  d.attrs.has_residual = true;
  const Status no_residual = launch_depthwise_conv(d, &dummy, &dummy, nullptr, nullptr, &dummy, nullptr);
  EXPECT_EQ(no_residual.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_residual.message().find("residual"), std::string::npos) << no_residual.message();
  d.attrs.has_residual = false;
  const Status no_x = launch_depthwise_conv(d, nullptr, &dummy, nullptr, nullptr, &dummy, nullptr);
  EXPECT_EQ(no_x.code(), StatusCode::kInvalidArgument);
  d.attrs.groups = 1;
  EXPECT_EQ(launch_depthwise_conv(d, &dummy, &dummy, nullptr, nullptr, &dummy, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(ConvTactic, OwnKernelsByNameEverythingElseIsCudnn) {
  EXPECT_EQ(conv_kernel_of_tactic("direct"), ConvKernel::kDirect);
  EXPECT_EQ(conv_kernel_of_tactic("depthwise"), ConvKernel::kDepthwise);
  EXPECT_EQ(conv_kernel_of_tactic("cudnn:e12;k1=3"), ConvKernel::kCudnn);
  EXPECT_EQ(conv_kernel_of_tactic("cudnn-unfused:e3"), ConvKernel::kCudnn);
  EXPECT_EQ(conv_kernel_of_tactic(""), ConvKernel::kCudnn);
  EXPECT_EQ(conv_kernel_of_tactic("Depthwise"), ConvKernel::kCudnn);  // exact names only
}

TEST(ConvTactic, CudnnTacticWithoutAPlanRunsTheDirectConvolution) {
  EXPECT_EQ(conv_kernel_for("cudnn:e12", nullptr), ConvKernel::kDirect);
  EXPECT_EQ(conv_kernel_for("depthwise", nullptr), ConvKernel::kDepthwise);
  EXPECT_EQ(conv_kernel_for("direct", nullptr), ConvKernel::kDirect);
}

}  // namespace
}  // namespace gpulab::cuda
