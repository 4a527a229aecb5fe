// The CPU side of the CUDA kernels: descriptor validation and pooling output sizes. No GPU.
#include "backends/cuda/kernels/kernel_desc.h"

#include <cmath>

#include <gtest/gtest.h>

#include <limits>

namespace gpulab::kernels {
namespace {

void expect_invalid(const Status& s, std::string_view mentions) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
}

TEST(PoolOutputSize, MatchesPyTorchFloorMode) {
  // ResNet-18 stem max pool: 112 -> 56 with 3x3 / 2, pad 1.
  EXPECT_EQ(pool_output_size(112, 3, 2, 1, 1, 1, false), 56);
  // AlexNet / GoogLeNet style 3x3 / 2 without padding.
  EXPECT_EQ(pool_output_size(55, 3, 2, 1, 0, 0, false), 27);
  // Global pool as a window: 7x7 / 1.
  EXPECT_EQ(pool_output_size(7, 7, 1, 1, 0, 0, false), 1);
  // Dilation 2 widens a 3-tap window to 5.
  EXPECT_EQ(pool_output_size(10, 3, 1, 2, 0, 0, false), 6);
}

TEST(PoolOutputSize, CeilModeDropsAWindowStartingInThePadding) {
  // GoogLeNet: 112 -> 56 with 3x3 / 2, ceil_mode, no pad ((112-3)/2 = 54.5 -> 55, +1).
  EXPECT_EQ(pool_output_size(112, 3, 2, 1, 0, 0, true), 56);
  EXPECT_EQ(pool_output_size(112, 3, 2, 1, 0, 0, false), 55);
  // 5 inputs, 2x2 / 2, pad 1 on both sides: ceil mode would give 4 windows, starting at input
  // positions -1, 1, 3 and 5; the last lies wholly in the end padding and is dropped.
  EXPECT_EQ(pool_output_size(5, 2, 2, 1, 1, 1, true), 3);
  EXPECT_EQ(pool_output_size(5, 2, 2, 1, 1, 1, false), 3);
  // 6 inputs, 3x3 / 2, ceil: ceil(3/2)+1 = 3, last window starts at 4 < 6: kept.
  EXPECT_EQ(pool_output_size(6, 3, 2, 1, 0, 0, true), 3);
}

TEST(PoolOutputSize, NoWindowFits) {
  EXPECT_LE(pool_output_size(2, 3, 1, 1, 0, 0, false), 0);
  EXPECT_LE(pool_output_size(2, 3, 1, 1, 0, 0, true), 0);
  EXPECT_EQ(pool_output_size(4, 3, 0, 1, 0, 0, false), 0);  // stride 0 is nonsense, not a crash
}

PoolDesc resnet_maxpool() {
  return with_output_size(PoolDesc{.kind = PoolKind::kMax,
                                   .n = 8,
                                   .h = 112,
                                   .w = 112,
                                   .c = 64,
                                   .kernel = {3, 3},
                                   .stride = {2, 2},
                                   .pads = {1, 1, 1, 1},
                                   .dtype = DataType::kFloat16});
}

TEST(PoolDesc, AcceptsResNetStemPool) {
  const PoolDesc d = resnet_maxpool();
  EXPECT_EQ(d.out_h, 56);
  EXPECT_EQ(d.out_w, 56);
  EXPECT_TRUE(validate(d).is_ok()) << validate(d).to_string();
}

TEST(PoolDesc, RejectsNonsense) {
  PoolDesc d = resnet_maxpool();
  d.n = 0;
  expect_invalid(validate(d), "n must be >= 1");

  d = resnet_maxpool();
  d.stride = {0, 2};
  expect_invalid(validate(d), "stride.h");

  d = resnet_maxpool();
  d.pads.left = 3;
  expect_invalid(validate(d), "pads");

  d = resnet_maxpool();
  d.out_h = 57;
  expect_invalid(validate(d), "with_output_size");

  d = resnet_maxpool();
  d.kind = PoolKind::kAverage;
  d.dilation = {2, 2};
  expect_invalid(validate(d), "dilation");

  d = resnet_maxpool();
  d.dtype = DataType::kInt8;
  expect_invalid(validate(d), "int8");

  d = resnet_maxpool();
  d.h = 1;
  d.kernel = {3, 3};
  d.pads = {};
  d = with_output_size(d);
  expect_invalid(validate(d), "does not fit");
}

TEST(ConversionDescs, ChannelPaddingMustNotShrink) {
  EXPECT_TRUE(validate(NchwToNhwcDesc{.n = 1, .c = 3, .h = 224, .w = 224, .c_out = 4}).is_ok());
  expect_invalid(validate(NchwToNhwcDesc{.n = 1, .c = 3, .h = 224, .w = 224, .c_out = 2}), "c_out");

  NormalizeU8Desc u8{.n = 2,
                     .h = 224,
                     .w = 224,
                     .c = 3,
                     .c_out = 8,
                     .mean = {0.485f, 0.456f, 0.406f},
                     .std = {0.229f, 0.224f, 0.225f, 1.0f},
                     .dtype = DataType::kBFloat16};
  EXPECT_TRUE(validate(u8).is_ok());
  u8.std[1] = 0.0f;
  expect_invalid(validate(u8), "channel 1");
  u8.std[1] = 0.224f;
  u8.mean[2] = NAN;
  expect_invalid(validate(u8), "channel 2");
  u8.mean[2] = 0.406f;
  u8.c = 5;
  expect_invalid(validate(u8), "c must be 1..4");

  EXPECT_TRUE(validate(NhwcToNchwF32Desc{.n = 4, .c = 1000}).is_ok());
  EXPECT_TRUE(validate(NhwcToNchwF32Desc{.n = 4, .c = 1000, .c_stored = 1008}).is_ok());
  expect_invalid(validate(NhwcToNchwF32Desc{.n = 4, .c = 1000, .c_stored = 999}), "c_stored");
}

TEST(ElementwiseDescs, Validation) {
  EXPECT_TRUE(validate(BinaryDesc{.n = 2, .hw = 56 * 56, .c = 64, .activation = Activation::kRelu}).is_ok());
  expect_invalid(validate(BinaryDesc{.n = 2, .hw = 0, .c = 64}), "hw");
  expect_invalid(validate(BinaryDesc{
                     .n = 1, .c = 8, .activation = Activation::kClip, .clip_min = 6.0f, .clip_max = 0.0f}),
                 "clip");

  EXPECT_TRUE(validate(BiasActDesc{.count = 64 * 10, .c = 64}).is_ok());
  expect_invalid(validate(BiasActDesc{.count = 65, .c = 64}), "multiple of c");
  expect_invalid(validate(BiasActDesc{
                     .count = 64, .c = 64, .dtype = DataType::kFloat16, .bias_dtype = DataType::kBFloat16}),
                 "bias_dtype");
  EXPECT_TRUE(
      validate(
          BiasActDesc{.count = 64, .c = 64, .dtype = DataType::kFloat16, .bias_dtype = DataType::kFloat16})
          .is_ok());

  EXPECT_TRUE(validate(UnaryDesc{.op = UnaryOp::kHardSwish, .count = 10}).is_ok());
  expect_invalid(validate(UnaryDesc{.op = UnaryOp::kHardSigmoid, .count = 10, .alpha = INFINITY}), "alpha");
  expect_invalid(validate(UnaryDesc{.op = UnaryOp::kClip, .count = 10, .clip_min = NAN}), "clip");
}

TEST(ClassifierTailDescs, Validation) {
  EXPECT_TRUE(validate(SoftmaxDesc{.rows = 4, .cols = 1000}).is_ok());
  expect_invalid(validate(SoftmaxDesc{.rows = 4, .cols = 0}), "cols");

  EXPECT_TRUE(validate(TopKDesc{.rows = 4, .cols = 1001, .k = 5}).is_ok());
  EXPECT_TRUE(
      validate(TopKDesc{.rows = 1, .cols = 21843, .k = kMaxTopK, .index_dtype = DataType::kInt64}).is_ok());
  expect_invalid(validate(TopKDesc{.rows = 4, .cols = 1000, .k = 33}), "k must be");
  expect_invalid(validate(TopKDesc{.rows = 4, .cols = 3, .k = 5}), "k must be");
  expect_invalid(validate(TopKDesc{.rows = 4, .cols = 1000, .k = 0}), "k must be");
  expect_invalid(validate(TopKDesc{.rows = 4, .cols = 1000, .k = 5, .index_dtype = DataType::kFloat32}),
                 "index_dtype");
}

TEST(LinearDesc, Validation) {
  EXPECT_TRUE(validate(LinearDesc{.rows = 1, .in_features = 512, .out_features = 1000}).is_ok());
  EXPECT_TRUE(validate(LinearDesc{.rows = 4,
                                  .in_features = 1280,
                                  .out_features = 1000,
                                  .dtype = DataType::kFloat16,
                                  .out_dtype = DataType::kFloat16})
                  .is_ok());
  expect_invalid(validate(LinearDesc{.rows = 1, .in_features = 0, .out_features = 1000}), "in_features");
  expect_invalid(validate(LinearDesc{.rows = 1,
                                     .in_features = 8,
                                     .out_features = 10,
                                     .dtype = DataType::kFloat16,
                                     .out_dtype = DataType::kBFloat16}),
                 "out_dtype");
}

TEST(ConversionDescs, SpaceToDepthValidation) {
  const auto desc = [](int64_t block, int64_t pad_top, int64_t c_out, DataType dtype) {
    return SpaceToDepthDesc{1, 3, 8, 8, block, pad_top, 0, 4, 4, c_out, dtype};
  };
  EXPECT_TRUE(validate(desc(2, 0, 12, DataType::kFloat32)).is_ok());
  EXPECT_TRUE(validate(desc(2, 3, 16, DataType::kBFloat16)).is_ok());
  expect_invalid(validate(desc(2, 0, 11, DataType::kFloat16)), "block^2 * c");
  expect_invalid(validate(desc(0, 0, 16, DataType::kFloat16)), "block");
  expect_invalid(validate(desc(2, -1, 16, DataType::kFloat16)), "pads");
  expect_invalid(validate(desc(2, 0, 16, DataType::kInt8)), "SpaceToDepthDesc");
}

FusedStemDesc resnet_stem() {
  FusedStemDesc d{
      .n = 256, .c = 3, .h = 224, .w = 224, .pad_top = 3, .pad_left = 3, .conv_h = 112, .conv_w = 112};
  d.pool.kernel = {3, 3};
  d.pool.stride = {2, 2};
  d.pool.pads = {1, 1, 1, 1};
  d.out_h = d.out_w = 56;
  return d;
}

TEST(FusedStemDesc, AcceptsResNetsStem) {
  EXPECT_TRUE(validate(resnet_stem()).is_ok()) << validate(resnet_stem()).to_string();
  FusedStemDesc bf16_out = resnet_stem();
  bf16_out.out_dtype = DataType::kBFloat16;
  EXPECT_TRUE(validate(bf16_out).is_ok()) << validate(bf16_out).to_string();
  // 8-bit out (an INT8 or FP8 plan's stem with its cast): a positive, finite scale.
  for (const DataType q8 : {DataType::kInt8, DataType::kFp8E4M3}) {
    FusedStemDesc q8_out = resnet_stem();
    q8_out.out_dtype = q8;
    q8_out.out_scale = 0.02f;
    EXPECT_TRUE(validate(q8_out).is_ok()) << validate(q8_out).to_string();
    for (const float bad :
         {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      q8_out.out_scale = bad;
      expect_invalid(validate(q8_out), "positive and finite");
    }
  }
  FusedStemDesc gray = resnet_stem();
  gray.c = 1;
  gray.bias_float32 = true;
  EXPECT_TRUE(validate(gray).is_ok());
  FusedStemDesc ceil = resnet_stem();
  ceil.pool.pads = {1, 1, 0, 0};
  ceil.pool.ceil_mode = true;
  EXPECT_TRUE(validate(ceil).is_ok()) << validate(ceil).to_string();
}

// The sm_90 kernel's work division (an H200 has 132 SMs, so 264 consumer warpgroups).
TEST(FusedStemDesc, RowPlanFitsTheBatchToTheConsumers) {
  struct Expected {
    int64_t n, chunk_rows, items;
  };
  for (const Expected e : {
           Expected{256, 56, 256},  // one item per image (all 56 pooled rows): one wave
           Expected{8, 2, 8 * 28},  // the longest runs that still give every run its own consumer
           Expected{1, 1, 56},      // one pooled row per item: 56 consumers share the image
       }) {
    FusedStemDesc d = resnet_stem();
    d.n = e.n;
    const StemRowPlan plan = plan_stem_rows(d, 264);
    SCOPED_TRACE(::testing::Message() << "batch " << e.n);
    EXPECT_EQ(plan.strips, 1);
    EXPECT_EQ(plan.chunk_rows, e.chunk_rows);
    EXPECT_EQ(plan.chunks, 56 / e.chunk_rows);
    EXPECT_EQ(plan.items, e.items);
  }
}

TEST(FusedStemDesc, RowPlanCoversEveryPooledPixel) {
  for (const int64_t out : {1, 7, 56, 57, 113, 200})
    for (const int64_t n : {1, 3, 256, 600})
      for (const int64_t consumers : {2, 64, 264}) {
        FusedStemDesc d = resnet_stem();
        d.n = n;
        d.out_h = out;
        d.out_w = out + 3;
        const StemRowPlan plan = plan_stem_rows(d, consumers);
        SCOPED_TRACE(::testing::Message() << "out " << out << " n " << n << " consumers " << consumers);
        // Strips of 56 pooled columns cover the row, the last one partly.
        EXPECT_GE(plan.strips * kStemStripPooled, d.out_w);
        EXPECT_LT((plan.strips - 1) * kStemStripPooled, d.out_w);
        // Runs of chunk_rows cover the rows, and none is empty.
        ASSERT_GE(plan.chunk_rows, 1);
        EXPECT_GE(plan.chunks * plan.chunk_rows, d.out_h);
        EXPECT_LT((plan.chunks - 1) * plan.chunk_rows, d.out_h);
        EXPECT_EQ(plan.items, n * plan.strips * plan.chunks);
      }
}

TEST(FusedStemDesc, RejectsWhatTheKernelDoesNotCompute) {
  FusedStemDesc d = resnet_stem();
  d.c = 4;
  expect_invalid(validate(d), "image channels");
  d = resnet_stem();
  d.n = 0;
  expect_invalid(validate(d), "n must be >= 1");
  d = resnet_stem();
  d.pad_top = 64;
  expect_invalid(validate(d), "pads");
  d = resnet_stem();
  d.pool.kernel = {2, 2};
  expect_invalid(validate(d), "pools 3x3");
  d = resnet_stem();
  d.pool.pads = {0, 0, 0, 0};
  expect_invalid(validate(d), "pools 3x3");
  d = resnet_stem();
  d.out_w = 57;
  expect_invalid(validate(d), "pooled size");
  d = resnet_stem();
  d.activation = Activation::kNone;
  expect_invalid(validate(d), "ReLU");
  d = resnet_stem();
  d.dtype = DataType::kBFloat16;
  expect_invalid(validate(d), "float16 only");
  d = resnet_stem();
  d.out_dtype = DataType::kFloat32;
  expect_invalid(validate(d), "float16, bfloat16, int8 or fp8e4m3");
  d = resnet_stem();
  d.n = (int64_t{1} << 30) / (56 * 56) + 1;  // 342,393 images: just over 2^30 pooled pixels
  expect_invalid(validate(d), "fewer than 2^30");
  d.n -= 1;
  EXPECT_TRUE(validate(d).is_ok()) << validate(d).to_string();
}

}  // namespace
}  // namespace gpulab::kernels
