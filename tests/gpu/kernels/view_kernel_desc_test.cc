// The CPU side of the view-step kernels: descriptor validation. No GPU.
#include "backends/cuda/kernels/view_kernel_desc.h"

#include <gtest/gtest.h>

namespace gpulab::kernels {
namespace {

void expect_invalid(const Status& s, std::string_view mentions) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(mentions), std::string::npos) << s.message();
}

TEST(StridedView, NumelIsPerImage) {
  EXPECT_EQ(dense_strided_view({49, 96}).numel(), 49 * 96);
  EXPECT_EQ(dense_strided_view({2, 3, 4}).image_stride, 24);
}

TEST(CopyDesc, AcceptsATransposeAndRejectsNonsense) {
  // NCHW [3, 4, 5] read as HWC: the layout change of a ViT patch embedding.
  StridedView x = dense_strided_view({3, 4, 5});
  StridedView x_hwc = x;
  x_hwc.dims = {4, 5, 3};
  x_hwc.strides = {5, 1, 20};
  CopyDesc d{.n = 2, .x = x_hwc, .y = dense_strided_view({4, 5, 3}), .y_dtype = DataType::kFloat16};
  EXPECT_TRUE(validate(d).is_ok()) << validate(d).to_string();

  CopyDesc bad = d;
  bad.n = 0;
  expect_invalid(validate(bad), "n is 0");
  bad = d;
  bad.y = dense_strided_view({4, 3, 5});
  expect_invalid(validate(bad), "differ in dims");
  bad = d;
  bad.x.strides[1] = -1;
  expect_invalid(validate(bad), "x dim 1");
  bad = d;
  bad.y.rank = kMaxStridedRank + 1;
  expect_invalid(validate(bad), "y has rank");
  bad = d;
  bad.x_dtype = DataType::kInt64;
  expect_invalid(validate(bad), "types");
}

TEST(EltwiseDesc, BroadcastIsAZeroStride) {
  StridedView bias = dense_strided_view({49, 96});
  bias.strides[0] = 0;  // a [96] vector added to every token
  bias.image_stride = 0;
  EltwiseDesc d{.n = 1, .a = dense_strided_view({49, 96}), .b = bias, .y = dense_strided_view({49, 96})};
  EXPECT_TRUE(validate(d).is_ok()) << validate(d).to_string();
  d.b.dims[1] = 95;
  expect_invalid(validate(d), "differ in dims");
}

TEST(LayerNormDesc, RowStridesCoverTheRow) {
  LayerNormDesc d{.n = 2,
                  .rows = 197,
                  .c = 768,
                  .x_row_stride = 768,
                  .x_image_stride = 197 * 768,
                  .y_row_stride = 768,
                  .y_image_stride = 197 * 768,
                  .epsilon = 1e-6f,
                  .dtype = DataType::kBFloat16};
  EXPECT_TRUE(validate(d).is_ok()) << validate(d).to_string();
  LayerNormDesc bad = d;
  bad.x_row_stride = 767;
  expect_invalid(validate(bad), "row strides >= c");
  bad = d;
  bad.epsilon = -1.0f;
  expect_invalid(validate(bad), "epsilon");
  bad = d;
  bad.rows = 0;
  expect_invalid(validate(bad), "rows 0");
}

AttentionDesc vit_attention() {
  // ViT-B/32: 12 heads of 64 over 50 tokens, one window.
  return AttentionDesc{.n = 3,
                       .q = dense_strided_view({1, 12, 50, 64}),
                       .k = dense_strided_view({1, 12, 50, 64}),
                       .v = dense_strided_view({1, 12, 50, 64}),
                       .y = dense_strided_view({1, 12, 50, 64}),
                       .scale = 0.125f,
                       .dtype = DataType::kFloat16};
}

TEST(AttentionDesc, AcceptsViTAndSwinShapes) {
  EXPECT_TRUE(validate(vit_attention()).is_ok()) << validate(vit_attention()).to_string();
  // Swin-T stage 1: 64 windows of 49 tokens, 3 heads of 32, a relative-position bias per head
  // shared by the windows (stride 0 over them) and the images (image_stride 0).
  AttentionDesc swin{.n = 1,
                     .q = dense_strided_view({64, 3, 49, 32}),
                     .k = dense_strided_view({64, 3, 49, 32}),
                     .v = dense_strided_view({64, 3, 49, 32}),
                     .y = dense_strided_view({64, 3, 49, 32}),
                     .bias = dense_strided_view({64, 3, 49, 49}),
                     .has_bias = true};
  swin.bias.strides[0] = 0;
  swin.bias.image_stride = 0;
  EXPECT_TRUE(validate(swin).is_ok()) << validate(swin).to_string();
  swin.bias.dims[3] = 48;
  expect_invalid(validate(swin), "bias is not [B, H, T, S]");
}

TEST(AttentionDesc, RejectsMismatchedOperands) {
  AttentionDesc d = vit_attention();
  d.k.dims[3] = 32;  // K's head dim differs from Q's
  expect_invalid(validate(d), "do not fit");
  d = vit_attention();
  d.v.rank = 3;
  expect_invalid(validate(d), "v is not [B, H, T, D]");
  d = vit_attention();
  d.k.dims[2] = d.v.dims[2] = kMaxAttentionKeys + 1;
  expect_invalid(validate(d), "keys, at most");
  d = vit_attention();
  d.dtype = DataType::kInt8;
  expect_invalid(validate(d), "dtype");
}

}  // namespace
}  // namespace gpulab::kernels
