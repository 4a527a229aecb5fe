// Host-side rules of the 8-bit tactics: every name q8_mma_tactics() offers is one the plan format
// and the conv step accept as an 8-bit tactic (engine.cc refuses a plan whose INT8 layer names
// anything else), which tiles take which layers (q8_mma_tactic_supports), and cuDNN's 8-bit tactic
// strings (cudnn_engine_config.h) and layers (cudnn_q8_conv_supports). Needs the CUDA build but no
// GPU: nothing here reaches the device.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/cudnn_engine_config.h"
#include "backends/cuda/cudnn_q8_conv.h"
#include "backends/cuda/kernels/quant_kernels.h"
#include "runtime/conv_step.h"

namespace gpulab::kernels {
namespace {

// ResNet-18's layer2 3x3 convolution at batch 8, INT8 in and out, with a residual.
Q8ConvDesc layer2() {
  Q8ConvDesc d{.n = 8, .h = 28, .w = 28, .c = 128, .k = 128, .r = 3, .s = 3, .out_h = 28, .out_w = 28};
  d.pads = {1, 1, 1, 1};
  d.has_residual = true;
  d.activation = Activation::kRelu;
  return d;
}

TEST(QuantTactics, EveryTileIsAnEightBitTacticOfTheConvStep) {
  for (const std::string_view t : q8_mma_tactics()) {
    EXPECT_TRUE(is_q8_mma_tactic(t)) << t;
    EXPECT_TRUE(is_q8_tactic(t)) << t;
    EXPECT_EQ(conv_kernel_of_tactic(t), ConvKernel::kQ8Mma) << t;
  }
  // The FP16 CUTLASS tactics ("cutlass:<tile>") are not 8-bit ones, nor the other way.
  EXPECT_FALSE(is_q8_tactic("cutlass:128x64x32_s4"));
  EXPECT_NE(conv_kernel_of_tactic("cutlass-q8:128x128"), ConvKernel::kCutlass);
  EXPECT_FALSE(is_q8_mma_tactic("cutlass-q8"));  // a tile is required
}

// The shape memo's key (tactics.cc): layers that differ only in their scales share a key; anything
// that changes a kernel's work does not.
TEST(QuantTactics, ShapeKeyIgnoresScalesOnly) {
  const Q8ConvDesc d = layer2();
  const std::string key = q8_shape_key(d, /*gemm=*/false, /*has_bias=*/true);
  Q8ConvDesc scaled = d;
  scaled.x_scale = 0.3f;
  scaled.y_scale = 7.0f;
  scaled.residual_scale = 0.01f;
  scaled.clip_max = 3.0f;
  EXPECT_EQ(q8_shape_key(scaled, false, true), key);
  EXPECT_NE(q8_shape_key(d, /*gemm=*/true, true), key);
  EXPECT_NE(q8_shape_key(d, false, /*has_bias=*/false), key);
  std::vector<Q8ConvDesc> others(8, d);
  others[0].n = 16;
  others[1].c = 64;
  others[2].k = 256;
  others[3].stride = {2, 2};
  others[4].has_residual = false;
  others[5].activation = Activation::kClip;
  others[6].y_dtype = DataType::kFloat16;
  others[7].pads = {0, 0, 2, 2};
  for (const Q8ConvDesc& o : others) EXPECT_NE(q8_shape_key(o, false, true), key);
}

TEST(QuantTactics, SkipListMatchesNamesAndPrefixes) {
  EXPECT_TRUE(tactic_in_list("cutlass-q8", "cutlass-q8:128x128"));
  EXPECT_TRUE(tactic_in_list("mma-q8:256x64,cutlass-q8", "cutlass-q8:64x256"));
  EXPECT_TRUE(tactic_in_list("wgmma-q8:64x128", "wgmma-q8:64x128"));
  EXPECT_FALSE(tactic_in_list("wgmma-q8:64x128", "wgmma-q8:128x128"));
  EXPECT_FALSE(tactic_in_list("", "mma-q8"));
  EXPECT_FALSE(tactic_in_list(",,", "mma-q8"));  // empty items match nothing
  EXPECT_FALSE(tactic_in_list("cutlass-q8", "mma-q8:128x128"));
}

TEST(QuantTactics, SkipListItemsThatNameNoTacticAreFound) {
  const auto tactics = q8_mma_tactics();
  EXPECT_TRUE(unmatched_list_items("cutlass-q8,wgmma-q8:64x128,dp4a", tactics).empty());
  EXPECT_TRUE(unmatched_list_items(",,", tactics).empty());
  const std::vector<std::string_view> typos{"cutlas-q8", "wgmma-q8:64x64"};
  EXPECT_EQ(unmatched_list_items("cutlas-q8,mma-q8,wgmma-q8:64x64,", tactics), typos);
}

TEST(QuantTactics, CutlassTilesTakeInt8LayersOfSixteenChannelMultiples) {
  int cutlass_tiles = 0;
  for (const std::string_view t : q8_mma_tactics()) {
    if (!t.starts_with("cutlass-q8:")) continue;
    ++cutlass_tiles;
    SCOPED_TRACE(std::string(t));
    EXPECT_TRUE(q8_mma_tactic_supports(t, layer2()).is_ok())
        << q8_mma_tactic_supports(t, layer2()).to_string();
    Q8ConvDesc fp8 = layer2();
    fp8.x_dtype = fp8.y_dtype = DataType::kFp8E4M3;
    EXPECT_EQ(q8_mma_tactic_supports(t, fp8).code(), StatusCode::kUnsupported);
    Q8ConvDesc float_out = layer2();
    float_out.y_dtype = DataType::kFloat16;
    float_out.has_residual = false;
    EXPECT_EQ(q8_mma_tactic_supports(t, float_out).code(), StatusCode::kUnsupported);
    Q8ConvDesc c24 = layer2();  // MobileNetV2's 24-channel layers: rows of 24 bytes, not TMA's 16s
    c24.c = 24;
    EXPECT_EQ(q8_mma_tactic_supports(t, c24).code(), StatusCode::kUnsupported);
    Q8ConvDesc k24 = layer2();
    k24.k = 24;
    EXPECT_EQ(q8_mma_tactic_supports(t, k24).code(), StatusCode::kUnsupported);
  }
  EXPECT_EQ(cutlass_tiles, 3);
}

// The wgmma tiles take INT8 layers of 16-channel multiples only: FP8 on them, even with each
// stage's sum promoted to float32, missed the one-step rule on an H100
// (bench/results/2026-12-07-deaa762).
TEST(QuantTactics, WgmmaTilesTakeInt8Only) {
  int wgmma_tiles = 0;
  for (const std::string_view t : q8_mma_tactics()) {
    if (!t.starts_with("wgmma-q8:")) continue;
    ++wgmma_tiles;
    SCOPED_TRACE(std::string(t));
    EXPECT_TRUE(q8_mma_tactic_supports(t, layer2()).is_ok())
        << q8_mma_tactic_supports(t, layer2()).to_string();
    Q8ConvDesc fp8 = layer2();
    fp8.x_dtype = fp8.y_dtype = DataType::kFp8E4M3;
    EXPECT_EQ(q8_mma_tactic_supports(t, fp8).code(), StatusCode::kUnsupported);
    Q8ConvDesc c24 = layer2();
    c24.c = 24;
    EXPECT_EQ(q8_mma_tactic_supports(t, c24).code(), StatusCode::kUnsupported);
  }
  EXPECT_EQ(wgmma_tiles, 3);
}

TEST(QuantTactics, CudnnTacticsAreEightBitTacticsOfTheirOwnKind) {
  for (const std::string_view t : {"cudnn-q8:4;24=4;eng4_k24=4", "cudnn-q8:71;;eng71"}) {
    EXPECT_TRUE(is_q8_cudnn_tactic(t)) << t;
    EXPECT_TRUE(is_q8_tactic(t)) << t;
    EXPECT_FALSE(is_q8_mma_tactic(t)) << t;
    EXPECT_EQ(conv_kernel_of_tactic(t), ConvKernel::kQ8Cudnn) << t;
    EXPECT_TRUE(check_conv_tactic(t).is_ok()) << t;
  }
  EXPECT_FALSE(is_q8_cudnn_tactic("cudnn-q8"));           // a configuration is required
  EXPECT_FALSE(is_q8_tactic("cudnn:4;24=4;eng4_k24=4"));  // the float convolutions' cuDNN tactics
  EXPECT_EQ(conv_kernel_of_tactic("cudnn:4;24=4;eng4_k24=4"), ConvKernel::kCudnn);
  EXPECT_TRUE(tactic_in_list("cudnn-q8", "cudnn-q8:4;24=4;eng4_k24=4"));
  EXPECT_TRUE(tactic_in_list("cudnn-q8:4;", "cudnn-q8:4;24=4;eng4_k24=4"));
  EXPECT_FALSE(tactic_in_list("cudnn-q8:4;", "cudnn-q8:71;;eng71"));
}

TEST(QuantTactics, SmallBatchTacticsSplitAndRunBelowTheirLimit) {
  const std::string t = q8_tactic_with_small_batch("wgmma-q8:128x256", 32, "mma-q8");
  EXPECT_EQ(t, "wgmma-q8:128x256|upto32:mma-q8");
  const Q8BatchTactics split = split_q8_tactic(t);
  EXPECT_EQ(split.main, "wgmma-q8:128x256");
  EXPECT_EQ(split.small_limit, 32);
  EXPECT_EQ(split.small, "mma-q8");
  EXPECT_EQ(q8_tactic_for_batch(t, 1), "mma-q8");
  EXPECT_EQ(q8_tactic_for_batch(t, 32), "mma-q8");
  EXPECT_EQ(q8_tactic_for_batch(t, 33), "wgmma-q8:128x256");
  EXPECT_EQ(q8_tactic_for_batch("mma-q8:256x64", 1), "mma-q8:256x64");  // no small-batch tactic
  // Of the main tactic's kind, and an 8-bit tactic a plan may carry.
  EXPECT_TRUE(is_q8_tactic(t));
  EXPECT_EQ(conv_kernel_of_tactic(t), ConvKernel::kQ8Mma);
  EXPECT_TRUE(check_conv_tactic(t).is_ok()) << check_conv_tactic(t).to_string();
  const std::string to_direct = q8_tactic_with_small_batch("cutlass-q8:64x256", 32, "direct-q8");
  EXPECT_TRUE(is_q8_tactic(to_direct));
  EXPECT_TRUE(check_conv_tactic(to_direct).is_ok());
  EXPECT_EQ(conv_kernel_of_tactic("cudnn-q8:7;12=26;eng7_k24=26|upto32:mma-q8"), ConvKernel::kQ8Cudnn);
  // What a plan must not carry: a count that is not a positive integer, a small tactic that is not
  // a tile or direct-q8 (cuDNN's need a plan per batch size), a main tactic that is not 8-bit.
  for (const std::string_view bad :
       {"mma-q8|upto:mma-q8", "mma-q8|upto0:mma-q8", "mma-q8|uptox:mma-q8", "mma-q8|upto32",
        "mma-q8|upto32:tile", "mma-q8|upto32:cudnn-q8:7;;eng7", "cudnn:4;;e|upto32:mma-q8"}) {
    EXPECT_FALSE(is_q8_tactic(bad)) << bad;
    EXPECT_EQ(check_conv_tactic(bad).code(), StatusCode::kUnsupported) << bad;
  }
  // A tile name of the right family that this gpulab does not have (a plan from another version).
  EXPECT_EQ(check_conv_tactic("mma-q8|upto32:mma-q8:1x1").code(), StatusCode::kUnsupported);
  EXPECT_EQ(check_conv_tactic("mma-q8:1x1|upto32:mma-q8").code(), StatusCode::kUnsupported);
}

TEST(QuantTactics, CudnnEngineConfigurationsRoundTrip) {
  using cuda::CudnnEngineConfig;
  const auto parsed = cuda::parse_cudnn_engine_config("4;24=4,3=0;eng4_k24=4", "t");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->engine, 4);
  const std::vector<std::pair<int, int64_t>> knobs{{3, 0}, {24, 4}};  // sorted by id
  EXPECT_EQ(parsed->knobs, knobs);
  EXPECT_EQ(cuda::format_cudnn_engine_config("cudnn-q8:", *parsed, "eng4_k24=4"),
            "cudnn-q8:4;3=0,24=4;eng4_k24=4");
  for (const std::string_view body : {"71", "71;", "71;;eng71"}) {
    const auto bare = cuda::parse_cudnn_engine_config(body, body);
    ASSERT_TRUE(bare.is_ok()) << body;
    EXPECT_EQ(bare->engine, 71);
    EXPECT_TRUE(bare->knobs.empty()) << body;
  }
  // Knob values may be negative (cuDNN's tile and split knobs use -1 for "none").
  const auto negative = cuda::parse_cudnn_engine_config("2;7=-1;x", "t");
  ASSERT_TRUE(negative.is_ok());
  EXPECT_EQ(negative->knobs.front().second, -1);
  for (const std::string_view bad :
       {"", "x", "-1", "4x;24=4", "4;24", "4;24=", "4;=3", "4;24=4,", "4;24=a;n"}) {
    const auto refused = cuda::parse_cudnn_engine_config(bad, "cudnn-q8:<bad>");
    ASSERT_FALSE(refused.is_ok()) << "'" << bad << "'";
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("cudnn-q8:<bad>"), std::string::npos);
  }
}

TEST(QuantTactics, CudnnTakesLayersOfOneEightBitTypeWithoutGroups) {
  Q8ConvDesc d = layer2();
  EXPECT_TRUE(cuda::cudnn_q8_conv_supports(d).is_ok());
  d.activation = Activation::kClip;
  EXPECT_TRUE(cuda::cudnn_q8_conv_supports(d).is_ok());
  d.x_dtype = d.y_dtype = DataType::kFp8E4M3;
  EXPECT_TRUE(cuda::cudnn_q8_conv_supports(d).is_ok());
  Q8ConvDesc dequantizing = layer2();
  dequantizing.y_dtype = DataType::kFloat16;
  EXPECT_EQ(cuda::cudnn_q8_conv_supports(dequantizing).code(), StatusCode::kUnsupported);
  Q8ConvDesc mixed = layer2();
  mixed.y_dtype = DataType::kFp8E4M3;
  EXPECT_EQ(cuda::cudnn_q8_conv_supports(mixed).code(), StatusCode::kUnsupported);
  Q8ConvDesc grouped = layer2();
  grouped.groups = 2;
  EXPECT_EQ(cuda::cudnn_q8_conv_supports(grouped).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace gpulab::kernels
