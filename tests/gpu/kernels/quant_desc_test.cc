// The 8-bit kernels' descriptor rules (quant_desc.h), on the CPU.
#include "backends/cuda/kernels/quant_desc.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace gpulab::kernels {
namespace {

Q8ConvDesc conv() {
  Q8ConvDesc d{.n = 1, .h = 8, .w = 8, .c = 16, .k = 16, .r = 3, .s = 3, .out_h = 8, .out_w = 8};
  d.pads = {1, 1, 1, 1};
  return d;
}

TEST(QuantDesc, ConvolutionRules) {
  EXPECT_TRUE(validate(conv()).is_ok());
  Q8ConvDesc size = conv();
  size.out_h = 7;
  EXPECT_EQ(validate(size).code(), StatusCode::kInvalidArgument);
  Q8ConvDesc groups = conv();
  groups.groups = 3;
  EXPECT_FALSE(validate(groups).is_ok());
  Q8ConvDesc mixed = conv();
  mixed.y_dtype = DataType::kFp8E4M3;  // int8 in, fp8 out
  EXPECT_FALSE(validate(mixed).is_ok());
  Q8ConvDesc float_in = conv();
  float_in.x_dtype = DataType::kFloat16;
  EXPECT_FALSE(validate(float_in).is_ok());
  Q8ConvDesc dequantizing = conv();
  dequantizing.y_dtype = DataType::kFloat16;
  EXPECT_TRUE(validate(dequantizing).is_ok());
  Q8ConvDesc scale = conv();
  scale.x_scale = 0;
  EXPECT_FALSE(validate(scale).is_ok());
  scale.x_scale = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(validate(scale).is_ok());
}

TEST(QuantDesc, TensorCoreConvolutionRules) {
  EXPECT_TRUE(validate_q8_mma(conv()).is_ok());
  Q8ConvDesc fp8 = conv();
  fp8.x_dtype = fp8.y_dtype = DataType::kFp8E4M3;
  EXPECT_TRUE(validate_q8_mma(fp8).is_ok());
  Q8ConvDesc gemm{.n = 3, .h = 1, .w = 1, .c = 512, .k = 1000, .out_h = 1, .out_w = 1};
  EXPECT_TRUE(validate_q8_mma(gemm).is_ok());
  Q8ConvDesc depthwise = conv();
  depthwise.groups = 16;
  EXPECT_EQ(validate_q8_mma(depthwise).code(), StatusCode::kUnsupported);
  EXPECT_NE(validate_q8_mma(depthwise).message().find("groups 1"), std::string::npos);
  Q8ConvDesc channels = conv();
  channels.c = 24;  // a multiple of 8: each tap's last 16-byte chunk half zeros
  EXPECT_TRUE(validate_q8_mma(channels).is_ok());
  channels.c = 20;
  EXPECT_EQ(validate_q8_mma(channels).code(), StatusCode::kUnsupported);
  EXPECT_NE(validate_q8_mma(channels).message().find("a multiple of 8 input channels"), std::string::npos);
  Q8ConvDesc wide = conv();
  wide.h = wide.w = wide.out_h = wide.out_w = 1 << 14;
  wide.c = 16;
  EXPECT_EQ(validate_q8_mma(wide).code(), StatusCode::kUnsupported);  // h * w * c over int32
  Q8ConvDesc bad = conv();
  bad.out_h = 7;  // validate()'s rules first
  EXPECT_EQ(validate_q8_mma(bad).code(), StatusCode::kInvalidArgument);
}

TEST(QuantDesc, CastsInputsAndPools) {
  EXPECT_TRUE(validate(QuantCastDesc{.count = 4, .from = DataType::kInt8, .to = DataType::kFloat16}).is_ok());
  EXPECT_TRUE(
      validate(QuantCastDesc{.count = 4, .from = DataType::kFloat32, .to = DataType::kFp8E4M3}).is_ok());
  EXPECT_FALSE(
      validate(QuantCastDesc{.count = 4, .from = DataType::kInt8, .to = DataType::kFp8E4M3}).is_ok());
  EXPECT_FALSE(
      validate(QuantCastDesc{.count = 0, .from = DataType::kInt8, .to = DataType::kFloat16}).is_ok());
  QuantizeInputDesc in;
  in.layout = SpaceToDepthDesc{1, 3, 8, 8, 1, 0, 0, 8, 8, 16, DataType::kFloat32};
  EXPECT_TRUE(validate(in).is_ok());
  in.dtype = DataType::kFloat16;
  EXPECT_FALSE(validate(in).is_ok());
  PoolDesc pool;
  pool.n = 1;
  pool.h = pool.w = 4;
  pool.c = 8;
  pool.kernel = pool.stride = {2, 2};
  pool.dtype = DataType::kInt8;
  pool = with_output_size(pool);
  EXPECT_TRUE(validate_q8_max_pool(pool).is_ok());
  pool.kind = PoolKind::kAverage;
  EXPECT_FALSE(validate_q8_max_pool(pool).is_ok());
  EXPECT_TRUE(validate(Q8GlobalPoolDesc{.n = 1, .h = 7, .w = 7, .c = 8}).is_ok());
  EXPECT_FALSE(
      validate(Q8GlobalPoolDesc{.n = 1, .h = 7, .w = 7, .c = 8, .x_dtype = DataType::kFloat16}).is_ok());
}

}  // namespace
}  // namespace gpulab::kernels
