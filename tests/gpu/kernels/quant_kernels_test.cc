// The 8-bit kernels of INT8/FP8 plans (kernels/quant_kernels.h) against host loops that follow
// src/core/quant.h step by step (its host functions: the same rules, no shared device code). INT8
// must match bit for bit; FP8 convolutions sum in another order than the host loop, so their
// outputs may be one E4M3 step apart (code distance 1), everything else matches exactly. cuDNN's
// 8-bit graph (cuda::CudnnQ8Conv, the cudnn-q8 tactic) is held to the same rule where the tactic
// search would take it.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cudnn_q8_conv.h"
#include "backends/cuda/kernels/quant_kernels.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernel_test_util.h"

namespace gpulab::kernels {
namespace {

using testing::DeviceBuffer;

std::vector<std::byte> as_bytes(const std::vector<uint8_t>& v) {
  std::vector<std::byte> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}
std::vector<uint8_t> as_u8(const std::vector<std::byte>& v) {
  std::vector<uint8_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size());
  return out;
}

// Random 8-bit codes: int8 in [-128, 127]; E4M3 finite codes.
std::vector<uint8_t> random_codes(size_t n, bool fp8, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    b = static_cast<uint8_t>(rng() & 0xff);
    if (fp8 && (b & 0x7f) == 0x7f) b &= 0xfe;  // no NaN
  }
  return v;
}

float value_of(uint8_t b, bool fp8) {
  return fp8 ? e4m3_to_float(b) : static_cast<float>(static_cast<int8_t>(b));
}
uint8_t quantize(float v, float inv, bool fp8) {
  return fp8 ? float_to_e4m3(v * inv) : static_cast<uint8_t>(quantize_int8(v, inv));
}

// Signed position of an E4M3 code on the number line (codes of one sign are monotonic).
int code_rank(uint8_t b, bool fp8) {
  if (!fp8) return static_cast<int8_t>(b);
  return (b & 0x80) ? -(b & 0x7f) : (b & 0x7f);
}

struct ConvCase {
  const char* name;
  Q8ConvDesc d;
};

// The host side of launch_q8_conv: NHWC loops, quant.h's epilogue. Returns 8-bit codes or float
// values (as floats) in `codes` / `values`.
void host_conv(const Q8ConvDesc& d, const std::vector<uint8_t>& x, const std::vector<uint8_t>& w,
               const std::vector<float>& w_scale, const std::vector<float>& bias,
               const std::vector<uint8_t>& res, std::vector<uint8_t>& codes, std::vector<float>& values) {
  const bool fp8 = d.x_dtype == DataType::kFp8E4M3;
  const int64_t cg = d.c / d.groups, kg = d.k / d.groups;
  const int64_t total = d.n * d.out_h * d.out_w * d.k;
  codes.assign(static_cast<size_t>(total), 0);
  values.assign(static_cast<size_t>(total), 0.0f);
  for (int64_t i = 0; i < total; ++i) {
    int64_t t = i;
    const int64_t ko = t % d.k;
    t /= d.k;
    const int64_t ow = t % d.out_w;
    t /= d.out_w;
    const int64_t oh = t % d.out_h;
    const int64_t n = t / d.out_h;
    int64_t acc_i = 0;
    double acc_d = 0;
    for (int64_t r = 0; r < d.r; ++r)
      for (int64_t s = 0; s < d.s; ++s) {
        const int64_t ih = oh * d.stride.h - d.pads.top + r * d.dilation.h;
        const int64_t iw = ow * d.stride.w - d.pads.left + s * d.dilation.w;
        if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
        for (int64_t c = 0; c < cg; ++c) {
          const uint8_t xb = x[static_cast<size_t>(((n * d.h + ih) * d.w + iw) * d.c + (ko / kg) * cg + c)];
          const uint8_t wb = w[static_cast<size_t>(((ko * d.r + r) * d.s + s) * cg + c)];
          if (fp8)
            acc_d += static_cast<double>(value_of(xb, true)) * value_of(wb, true);
          else
            acc_i += static_cast<int8_t>(xb) * static_cast<int8_t>(wb);
        }
      }
    float v = q8_scale_bias(fp8 ? static_cast<float>(acc_d) : static_cast<float>(acc_i),
                            d.x_scale * w_scale[ko], bias.empty() ? 0.0f : bias[ko]);
    if (d.has_residual) v = q8_add_residual(v, value_of(res[static_cast<size_t>(i)], fp8), d.residual_scale);
    if (d.activation == Activation::kRelu) v = std::max(v, 0.0f);
    if (d.activation == Activation::kClip) v = std::min(std::max(v, d.clip_min), d.clip_max);
    if (d.y_dtype == d.x_dtype)
      codes[static_cast<size_t>(i)] = quantize(v, 1.0f / d.y_scale, fp8);
    else
      values[static_cast<size_t>(i)] =
          d.y_dtype == DataType::kFloat16 ? half_bits_to_float(float_to_half_bits(v)) : v;
  }
}

std::vector<ConvCase> conv_cases(DataType q) {
  std::vector<ConvCase> cases;
  Q8ConvDesc base{.n = 2, .h = 9, .w = 7, .c = 32, .k = 24, .r = 3, .s = 3, .out_h = 9, .out_w = 7};
  base.pads = {1, 1, 1, 1};
  base.x_dtype = base.y_dtype = q;
  base.x_scale = 0.05f;
  base.y_scale = q == DataType::kInt8 ? 0.9f : 0.01f;
  base.activation = Activation::kRelu;
  cases.push_back({"3x3 relu, 8-bit out", base});
  Q8ConvDesc res = base;
  res.r = res.s = 1;
  res.pads = {};
  res.k = 32;
  res.has_residual = true;
  res.residual_scale = 0.03f;
  res.activation = Activation::kNone;
  cases.push_back({"1x1 + residual", res});
  Q8ConvDesc dw = base;
  dw.k = dw.c = dw.groups = 32;
  dw.stride = {2, 2};
  dw.out_h = 5;
  dw.out_w = 4;
  dw.activation = Activation::kClip;
  cases.push_back({"depthwise 3x3/2 clip (INT8: 16 channels x 2 pixels per thread)", dw});
  Q8ConvDesc dw1 = dw;  // stride 1, 13 columns: a row block of 4 pixels with one left over
  dw1.k = dw1.c = dw1.groups = 48;
  dw1.w = 13;
  dw1.stride = {1, 1};
  dw1.out_h = 9;
  dw1.out_w = 13;
  cases.push_back({"depthwise 3x3/1 c 48, 13 wide (INT8: 16 channels x 4 pixels per thread)", dw1});
  Q8ConvDesc dw1_res = dw1;
  dw1_res.has_residual = true;
  dw1_res.residual_scale = 0.04f;
  dw1_res.activation = Activation::kRelu;
  cases.push_back({"depthwise 3x3/1 c 48, residual", dw1_res});
  Q8ConvDesc dw_asym = dw;  // TensorFlow's SAME padding at stride 2: nothing on the top and left
  dw_asym.pads = {0, 0, 1, 1};
  dw_asym.out_h = 4;
  dw_asym.out_w = 3;
  cases.push_back({"depthwise 3x3/2, pads only bottom and right", dw_asym});
  Q8ConvDesc dw6 = dw;
  dw6.k = dw6.c = dw6.groups = 6;  // not a multiple of 4: one channel per thread
  dw6.has_residual = true;
  dw6.residual_scale = 0.04f;
  cases.push_back({"depthwise c 6, residual", dw6});
  Q8ConvDesc dw_res = dw;
  dw_res.has_residual = true;
  dw_res.residual_scale = 0.04f;
  dw_res.y_dtype = DataType::kFloat16;
  cases.push_back({"depthwise, residual, float16 out (4 channels per thread)", dw_res});
  Q8ConvDesc dw5 = dw;  // 5x5: the other window whose weights stay in registers
  dw5.k = dw5.c = dw5.groups = 8;
  dw5.r = dw5.s = 5;
  dw5.stride = {1, 1};
  dw5.pads = {2, 2, 2, 2};
  dw5.out_h = 9;
  dw5.out_w = 7;
  cases.push_back({"depthwise 5x5, c 8", dw5});
  Q8ConvDesc dw13 = dw5;  // 1x3: weights read per tap
  dw13.r = 1;
  dw13.s = 3;
  dw13.pads = {0, 1, 0, 1};
  cases.push_back({"depthwise 1x3, c 8", dw13});
  Q8ConvDesc tiny = dw;  // 2x2 pixels, 16 channel quads: fewer pixels than threads
  tiny.n = 1;
  tiny.h = tiny.w = 3;
  tiny.k = tiny.c = tiny.groups = 64;
  tiny.out_h = tiny.out_w = 2;
  cases.push_back({"depthwise 3x3/2 on 3x3 pixels, c 64", tiny});
  Q8ConvDesc odd = base;
  odd.c = 3;  // not a multiple of 4: the scalar int8 path
  odd.y_dtype = DataType::kFloat16;
  cases.push_back({"3 channels, float16 out", odd});
  Q8ConvDesc gemm{.n = 3, .h = 1, .w = 1, .c = 40, .k = 10, .out_h = 1, .out_w = 1};
  gemm.x_dtype = q;
  gemm.x_scale = 0.02f;
  gemm.y_dtype = DataType::kFloat32;
  cases.push_back({"gemm, float32 out", gemm});
  return cases;
}

// Shapes the tensor-core kernel runs (c a multiple of 8, groups 1): partial tiles of 128 pixels and
// 64 channels, a reduction that ends inside a 64-byte stage, taps that end in half a 16-byte chunk,
// strides, dilation and padding.
std::vector<ConvCase> mma_conv_cases(DataType q) {
  std::vector<ConvCase> cases;
  for (const ConvCase& c : conv_cases(q))
    if (validate_q8_mma(c.d).is_ok()) cases.push_back(c);
  Q8ConvDesc big{.n = 3, .h = 15, .w = 13, .c = 64, .k = 72, .r = 3, .s = 3, .out_h = 8, .out_w = 7};
  big.stride = {2, 2};
  big.pads = {1, 1, 1, 1};
  big.x_dtype = big.y_dtype = q;
  big.x_scale = 0.04f;
  big.y_scale = q == DataType::kInt8 ? 1.5f : 0.02f;
  big.activation = Activation::kRelu;
  cases.push_back({"3x3/2, c 64, k 72, two tiles each way", big});
  Q8ConvDesc down = big;
  down.r = down.s = 1;
  down.pads = {};
  down.c = 48;
  down.k = 64;
  down.y_dtype = DataType::kFloat16;
  down.activation = Activation::kNone;
  cases.push_back({"1x1/2, c 48, float16 out", down});
  Q8ConvDesc project = big;
  project.r = project.s = 1;
  project.stride = {1, 1};
  project.pads = {};
  project.h = project.out_h = 9;
  project.w = project.out_w = 11;
  project.c = 144;
  project.k = 24;
  project.has_residual = true;
  project.residual_scale = 0.05f;
  project.activation = Activation::kClip;
  cases.push_back({"1x1, c 144 (a stage and a quarter), residual, clip", project});
  Q8ConvDesc expand = project;  // MobileNetV2's expand after a 24-channel layer: half-chunks of K
  expand.c = 24;
  expand.k = 144;
  expand.has_residual = false;
  cases.push_back({"1x1, c 24 into 144 (8-byte rows), clip", expand});
  Q8ConvDesc expand16 = expand;  // MobileNetV2's first expand; 297 pixels end inside a block of 4
  expand16.c = 16;
  expand16.k = 96;
  cases.push_back({"1x1, c 16 into 96, clip", expand16});
  Q8ConvDesc project16 = expand;  // its first project: 32 channels into 16, one channel group
  project16.c = 32;
  project16.k = 16;
  project16.activation = Activation::kNone;
  cases.push_back({"1x1, c 32 into 16", project16});
  Q8ConvDesc odd_taps = big;  // 3x3 over 40 channels: every tap ends in a half chunk
  odd_taps.c = 40;
  odd_taps.k = 24;
  cases.push_back({"3x3/2, c 40 (8-byte rows), k 24", odd_taps});
  Q8ConvDesc dilated = big;
  dilated.c = 16;
  dilated.k = 16;
  dilated.stride = {1, 1};
  dilated.dilation = {2, 2};
  dilated.pads = {2, 2, 2, 2};
  dilated.out_h = 15;
  dilated.out_w = 13;
  cases.push_back({"3x3 dilation 2, c 16", dilated});
  Q8ConvDesc gemm{.n = 5, .h = 1, .w = 1, .c = 512, .k = 10, .out_h = 1, .out_w = 1};
  gemm.x_dtype = q;
  gemm.x_scale = 0.02f;
  gemm.y_dtype = DataType::kFloat32;
  cases.push_back({"gemm c 512, float32 out", gemm});
  // The large tiles' 16-byte epilogue (8-bit y, k a multiple of 16) with a residual: 646 pixels end
  // inside a 256-pixel tile, 160 channels inside a second 128-channel one.
  Q8ConvDesc wide{.n = 2, .h = 17, .w = 19, .c = 32, .k = 160, .r = 3, .s = 3, .out_h = 17, .out_w = 19};
  wide.pads = {1, 1, 1, 1};
  wide.x_dtype = wide.y_dtype = q;
  wide.x_scale = 0.04f;
  wide.y_scale = q == DataType::kInt8 ? 1.5f : 0.02f;
  wide.has_residual = true;
  wide.residual_scale = 0.05f;
  wide.activation = Activation::kRelu;
  cases.push_back({"3x3, c 32, k 160, residual, 646 pixels", wide});
  // ResNet's layer1 shape for mma-q8:3x3c64 (input patches shared by the taps): 13 x 21 pixels end
  // inside its 8 x 16 output tiles both ways; with and without a residual.
  Q8ConvDesc layer1 = wide;
  layer1.h = layer1.out_h = 13;
  layer1.w = layer1.out_w = 21;
  layer1.c = layer1.k = 64;
  cases.push_back({"3x3, c 64, k 64, residual, 13 x 21", layer1});
  layer1.has_residual = false;
  layer1.n = 3;
  cases.push_back({"3x3, c 64, k 64, 3 images of 13 x 21", layer1});
  // ResNet-18's layer4 at batch 1: 49 pixels, 4608 bytes of K (72 stages), a few blocks: split-K
  // with a workspace, its sums split 16 ways; with a residual, and into a float32 Gemm output.
  Q8ConvDesc layer4 = wide;  // 3x3, pads 1, residual, ReLU
  layer4.n = 1;
  layer4.h = layer4.w = layer4.out_h = layer4.out_w = 7;
  layer4.c = layer4.k = 512;
  layer4.x_scale = 0.01f;
  layer4.y_scale = q == DataType::kInt8 ? 4.0f : 0.05f;
  cases.push_back({"3x3, c 512, k 512, 1 image of 7 x 7 (split-K), residual", layer4});
  // ResNet's downsample: 1x1 stride 2, c 64 into 128, 8-bit out (the wgmma tiles' 128-byte K stage
  // half empty).
  Q8ConvDesc downsample = big;
  downsample.r = downsample.s = 1;
  downsample.pads = {};
  downsample.k = 128;
  downsample.activation = Activation::kNone;
  cases.push_back({"1x1/2, c 64, k 128", downsample});
  Q8ConvDesc head = gemm;  // c 512, float32 out
  head.n = 2;
  head.k = 1000;
  cases.push_back({"gemm c 512 into 1000, float32 out (split-K)", head});
  return cases;
}

bool device_has_fp8_mma() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major * 10 + minor >= 89;
}

// A case's seeded inputs, scales and bias, and what host_conv computes from them.
struct CaseData {
  std::vector<uint8_t> x, w, res;
  std::vector<float> w_scale, bias;
  std::vector<uint8_t> want_codes;
  std::vector<float> want_values;
  explicit CaseData(const Q8ConvDesc& d) {
    const bool fp8 = d.x_dtype == DataType::kFp8E4M3;
    x = random_codes(static_cast<size_t>(d.n * d.h * d.w * d.c), fp8, 1);
    w = random_codes(static_cast<size_t>(d.k * d.r * d.s * (d.c / d.groups)), fp8, 2);
    res = random_codes(static_cast<size_t>(d.n * d.out_h * d.out_w * d.k), fp8, 3);
    w_scale.resize(static_cast<size_t>(d.k));
    bias.resize(static_cast<size_t>(d.k));
    for (int64_t k = 0; k < d.k; ++k) {
      w_scale[k] = (fp8 ? 0.001f : 0.01f) * static_cast<float>(1 + k % 5);
      bias[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
    }
    host_conv(d, x, w, w_scale, bias, res, want_codes, want_values);
  }
};

// Outputs of `got` off the host's codes: any difference, and more than one E4M3 step.
struct CodeDistance {
  int off = 0, far = 0;
};
CodeDistance code_distance(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, bool fp8) {
  CodeDistance out;
  for (size_t i = 0; i < want.size(); ++i) {
    const int diff = std::abs(code_rank(got[i], fp8) - code_rank(want[i], fp8));
    out.off += diff > 0;
    out.far += diff > 1;
  }
  return out;
}

// `mma`: launch_q8_mma_conv with each of its tiles on mma_conv_cases, else launch_q8_conv on
// conv_cases.
void check_conv(DataType q, bool mma = false) {
  GPULAB_SKIP_WITHOUT_GPU();
  const bool fp8 = q == DataType::kFp8E4M3;
  if (mma && fp8 && !device_has_fp8_mma()) {
    GTEST_SKIP() << "the FP8 tensor-core kernel needs sm_89 or newer";
  }
  for (const ConvCase& cs : mma ? mma_conv_cases(q) : conv_cases(q)) {
    SCOPED_TRACE(cs.name);
    const Q8ConvDesc& d = cs.d;
    ASSERT_TRUE(validate(d).is_ok()) << validate(d).to_string();
    if (mma) {
      ASSERT_TRUE(validate_q8_mma(d).is_ok()) << validate_q8_mma(d).to_string();
    }
    const CaseData data(d);
    const auto& [x, w, res, w_scale, bias, want_codes, want_values] = data;
    DeviceBuffer dx(as_bytes(x)), dw(as_bytes(w)), dres(as_bytes(res));
    DeviceBuffer dscale(testing::encode(w_scale, DataType::kFloat32)),
        dbias(testing::encode(bias, DataType::kFloat32));
    const size_t out_count = want_codes.size();
    const std::vector<std::string_view> direct{""};
    // The tensor-core tiles run each case twice: without a workspace, and with one (split-K where
    // the case's few blocks and long K ask for it).
    DeviceBuffer workspace(size_t{8} << 20);
    for (const std::string_view tactic : mma ? q8_mma_tactics() : std::span<const std::string_view>(direct))
      for (const bool split : mma ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        SCOPED_TRACE(std::string(tactic) + (split ? " with a workspace" : ""));
        DeviceBuffer dy(out_count * dtype_size(d.y_dtype));
        const auto* scale = static_cast<const float*>(dscale.get());
        const auto* b = static_cast<const float*>(dbias.get());
        const void* r = d.has_residual ? dres.get() : nullptr;
        const Status s =
            mma ? launch_q8_mma_conv(tactic, d, dx.get(), dw.get(), scale, b, r, dy.get(), nullptr,
                                     split ? workspace.get() : nullptr, split ? int64_t{8} << 20 : 0)
                : launch_q8_conv(d, dx.get(), dw.get(), scale, b, r, dy.get(), nullptr);
        if (mma && !q8_mma_tactic_supports(tactic, d).is_ok()) {
          EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
          EXPECT_EQ(q8_mma_tactic_supports(tactic, d).code(), StatusCode::kUnsupported);
          continue;
        }
        if ((tactic.starts_with("wgmma-q8:") || tactic.starts_with("cutlass-q8:")) &&
            !testing::is_sm90()) {  // sm_90a code
          EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.to_string();
          continue;
        }
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        testing::expect_synced();
        EXPECT_TRUE(dy.tail_untouched());
        if (d.y_dtype == d.x_dtype) {
          const CodeDistance dist = code_distance(as_u8(dy.download()), want_codes, fp8);
          if (fp8) {
            EXPECT_EQ(dist.far, 0) << "FP8 outputs more than one E4M3 step apart";
          } else {
            EXPECT_EQ(dist.off, 0) << "INT8 outputs differ";
          }
        } else {
          const auto got = testing::decode(dy.download(), d.y_dtype);
          if (fp8) {
            testing::expect_close(got, want_values, DataType::kFloat16);
          } else {
            testing::expect_exact(got, want_values);
          }
        }
      }
  }
}

TEST(QuantKernels, Int8ConvolutionMatchesTheRulesBitForBit) {
  check_conv(DataType::kInt8);
}

TEST(QuantKernels, Fp8ConvolutionWithinOneStep) {
  check_conv(DataType::kFp8E4M3);
}

TEST(QuantKernels, Int8TensorCoreConvolutionMatchesTheRulesBitForBit) {
  check_conv(DataType::kInt8, /*mma=*/true);
}

TEST(QuantKernels, Fp8TensorCoreConvolutionWithinOneStep) {
  check_conv(DataType::kFp8E4M3, /*mma=*/true);
}

// Configurations run per case, in heuristic order. With 8 the two tests took 53 s and 44 s of an
// H100 call (62b74db), mostly cuDNN compiling engines; the search tries up to 8 per layer itself and
// checks each, so 4 here keep the test a sanity check of the wrapper, not a census.
constexpr int64_t kCudnnConfigsPerCase = 4;

// cuda::CudnnQ8Conv on the tensor-core cases its graph expresses: each configuration that builds
// (the first kCudnnConfigsPerCase in heuristic order), against the host rule. cuDNN does not promise
// quant.h's rounding, and the tactic search keeps only configurations whose bytes agree (INT8) or lie within
// one E4M3 step (FP8); so here: no configuration writes outside y, the first that agrees computes
// the same bytes when rebuilt from its tactic string, and on sm_90 every INT8 case with a
// configuration that ran has one that agrees: cuDNN's fused epilogue computes quant.h's two fused
// multiply-adds and rounds ties to even (bench/kernels/cudnn_q8_probe on an H100,
// bench/results/2026-12-07-9df951c; with the rule of separate roundings before it, three of these
// cases had none). What agrees where is printed ("cudnn-q8 <type>, <case>: [<tactic>: <n> of
// <count> off]").
void check_cudnn(DataType q) {
  GPULAB_SKIP_WITHOUT_GPU();
  const bool fp8 = q == DataType::kFp8E4M3;
  if (fp8 && !device_has_fp8_mma()) {
    GTEST_SKIP() << "cuDNN's FP8 convolutions need sm_89 or newer";
  }
  cudnnHandle_t handle = nullptr;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  const size_t workspace_bytes = size_t{256} << 20;
  DeviceBuffer workspace(workspace_bytes);
  for (const ConvCase& cs : mma_conv_cases(q)) {
    const Q8ConvDesc& d = cs.d;
    if (!cuda::cudnn_q8_conv_supports(d).is_ok()) continue;
    SCOPED_TRACE(cs.name);
    const CaseData data(d);
    DeviceBuffer dx(as_bytes(data.x)), dw(as_bytes(data.w)), dres(as_bytes(data.res));
    DeviceBuffer dbias(testing::encode(data.bias, DataType::kFloat32));
    const auto pointers = [&](void* y) {
      return cuda::Q8ConvPointers{dx.get(), dw.get(), static_cast<const float*>(dbias.get()),
                                  d.has_residual ? dres.get() : nullptr, y};
    };
    auto conv = cuda::CudnnQ8Conv::with_candidates(handle, d, /*has_bias=*/true, data.w_scale);
    std::string summary;
    int agreeing = 0, ran_count = 0;
    if (!conv.is_ok()) summary = " " + conv.status().message();
    for (int64_t i = 0; conv.is_ok() && i < std::min((*conv)->candidate_count(), kCudnnConfigsPerCase); ++i) {
      const std::string tactic = (*conv)->tactic(i);
      if (const Status built = (*conv)->select(i); !built.is_ok()) {
        summary += fmt::format(" [{}: not built]", tactic);
        continue;
      }
      if ((*conv)->workspace_bytes() > static_cast<int64_t>(workspace_bytes)) {
        summary += fmt::format(" [{}: {} MiB of workspace]", tactic, (*conv)->workspace_bytes() >> 20);
        continue;
      }
      DeviceBuffer dy(data.want_codes.size());
      const Status ran = (*conv)->launch(handle, pointers(dy.get()), workspace.get());
      ASSERT_TRUE(ran.is_ok()) << tactic << ": " << ran.to_string();
      testing::expect_synced();
      ++ran_count;
      EXPECT_TRUE(dy.tail_untouched()) << tactic;
      const auto got = as_u8(dy.download());
      const CodeDistance dist = code_distance(got, data.want_codes, fp8);
      const bool agrees = fp8 ? dist.far == 0 : dist.off == 0;
      summary += fmt::format(" [{}: {} of {} off{}]", tactic, dist.off, got.size(),
                             fp8 ? fmt::format(", {} by more than one step", dist.far) : "");
      if (!agrees || ++agreeing > 1) continue;
      auto again = cuda::CudnnQ8Conv::with_tactic(handle, d, /*has_bias=*/true, data.w_scale, tactic);
      ASSERT_TRUE(again.is_ok()) << again.status().to_string();
      DeviceBuffer dy2(got.size());
      ASSERT_TRUE((*again)->launch(handle, pointers(dy2.get()), workspace.get()).is_ok());
      testing::expect_synced();
      EXPECT_EQ(as_u8(dy2.download()), got) << tactic << " rebuilt from its tactic string";
    }
    std::printf("cudnn-q8 %s, %s:%s\n", std::string(dtype_name(q)).c_str(), cs.name, summary.c_str());
    if (!fp8 && ran_count > 0 && testing::is_sm90()) {
      EXPECT_GT(agreeing, 0) << "no cuDNN configuration computes the rule's bytes";
    }
  }
  cudnnDestroy(handle);
}

TEST(QuantKernels, Int8CudnnConvolutionAgreesWhereTheSearchWouldTakeIt) {
  check_cudnn(DataType::kInt8);
}

TEST(QuantKernels, Fp8CudnnConvolutionAgreesWhereTheSearchWouldTakeIt) {
  check_cudnn(DataType::kFp8E4M3);
}

TEST(QuantKernels, InputCastsPoolsMatchExactly) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType q : {DataType::kInt8, DataType::kFp8E4M3}) {
    SCOPED_TRACE(dtype_name(q));
    const bool fp8 = q == DataType::kFp8E4M3;
    // Input: [2, 3, 10, 10] float NCHW -> space-to-depth block 2, pads 1, 16 channels (the
    // 16-byte kernel) and 12 (one byte per thread).
    for (const int64_t c_out : {16, 12}) {
      SCOPED_TRACE(c_out);
      QuantizeInputDesc in;
      in.layout = SpaceToDepthDesc{2, 3, 10, 10, 2, 1, 1, 6, 6, c_out, DataType::kFloat32};
      in.dtype = q;
      in.scale = fp8 ? 0.004f : 0.02f;
      const auto image = testing::random_values(2 * 3 * 10 * 10, 9, 2.5f);
      std::vector<uint8_t> want_in(static_cast<size_t>(2 * 6 * 6 * c_out), 0);
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t y = 0; y < 6; ++y)
          for (int64_t x = 0; x < 6; ++x)
            for (int64_t ch = 0; ch < c_out; ++ch) {
              float v = 0;
              if (ch < 12) {
                const int64_t iy = y * 2 + (ch / 3) / 2 - 1, ix = x * 2 + (ch / 3) % 2 - 1;
                if (iy >= 0 && iy < 10 && ix >= 0 && ix < 10)
                  v = image[((n * 3 + ch % 3) * 10 + iy) * 10 + ix];
              }
              want_in[((n * 6 + y) * 6 + x) * c_out + ch] = quantize(v, 1.0f / in.scale, fp8);
            }
      DeviceBuffer dimage(testing::encode(image, DataType::kFloat32)), dq(want_in.size());
      ASSERT_TRUE(
          launch_quantize_input(in, static_cast<const float*>(dimage.get()), dq.get(), nullptr).is_ok());
      testing::expect_synced();
      EXPECT_EQ(as_u8(dq.download()), want_in);
    }
    // Casts: dequantize to float16, quantize back from float32.
    const auto codes = random_codes(1000, fp8, 4);
    std::vector<float> want_half(codes.size());
    for (size_t i = 0; i < codes.size(); ++i)
      want_half[i] = half_bits_to_float(float_to_half_bits(value_of(codes[i], fp8) * 0.25f));
    DeviceBuffer dcodes(as_bytes(codes)), dhalf(codes.size() * 2);
    ASSERT_TRUE(launch_quant_cast({.count = 1000, .from = q, .to = DataType::kFloat16, .scale = 0.25f},
                                  dcodes.get(), dhalf.get(), nullptr)
                    .is_ok());
    testing::expect_synced();
    testing::expect_exact(testing::decode(dhalf.download(), DataType::kFloat16), want_half);
    const auto floats = testing::random_values(1000, 5, 40.0f);
    std::vector<uint8_t> want_q(floats.size());
    for (size_t i = 0; i < floats.size(); ++i) want_q[i] = quantize(floats[i], 1.0f / 0.25f, fp8);
    DeviceBuffer dfloats(testing::encode(floats, DataType::kFloat32)), dout(floats.size());
    ASSERT_TRUE(launch_quant_cast({.count = 1000, .from = DataType::kFloat32, .to = q, .scale = 0.25f},
                                  dfloats.get(), dout.get(), nullptr)
                    .is_ok());
    testing::expect_synced();
    EXPECT_EQ(as_u8(dout.download()), want_q);
    // Quantize from float16 (an INT8 plan's stem output): 8-element vectors, then a tail of 3 one
    // element per thread; and from an odd offset, where only the one-element kernel runs.
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      SCOPED_TRACE(offset);
      const size_t count = 1003;
      std::vector<float> halves(count);
      std::vector<uint8_t> want_h(count);
      for (size_t i = 0; i < count; ++i) {
        halves[i] = half_bits_to_float(float_to_half_bits(floats[i % floats.size()] * 0.7f));
        want_h[i] = quantize(halves[i], 1.0f / 0.25f, fp8);
      }
      // Offset 1: x 2 bytes and y 1 byte past an aligned address.
      DeviceBuffer dh(testing::encode(halves, DataType::kFloat16), 2 * offset);
      DeviceBuffer dq8(std::vector<std::byte>(count), offset);
      ASSERT_TRUE(
          launch_quant_cast(
              {.count = static_cast<int64_t>(count), .from = DataType::kFloat16, .to = q, .scale = 0.25f},
              dh.get(), dq8.get(), nullptr)
              .is_ok());
      testing::expect_synced();
      EXPECT_EQ(as_u8(dq8.download()), want_h);
      EXPECT_TRUE(dq8.tail_untouched());
    }
    // Max pool 3x3/2 pad 1 over [1, 9, 9, C]: the largest value's code. C = 8: one byte per
    // thread; C = 32: 16-byte vectors. FP8 codes include +0 and -0 (0x00, 0x80), equal values
    // whose code is the first one met.
    for (const int64_t pc : {8, 32}) {
      SCOPED_TRACE(pc);
      PoolDesc pool;
      pool.n = 1;
      pool.h = pool.w = 9;
      pool.c = pc;
      pool.kernel = {3, 3};
      pool.stride = {2, 2};
      pool.pads = {1, 1, 1, 1};
      pool.dtype = q;
      pool = with_output_size(pool);
      auto px = random_codes(static_cast<size_t>(9 * 9 * pc), fp8, 6);
      for (size_t i = 0; i < px.size(); i += 5) px[i] = i % 2 ? 0x80 : 0x00;  // zeroes of both signs
      std::vector<uint8_t> want_pool(static_cast<size_t>(pool.out_h * pool.out_w * pc));
      for (int64_t oh = 0; oh < pool.out_h; ++oh)
        for (int64_t ow = 0; ow < pool.out_w; ++ow)
          for (int64_t c = 0; c < pc; ++c) {
            float best = -1e30f;
            uint8_t code = 0;
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t s = 0; s < 3; ++s) {
                const int64_t ih = oh * 2 - 1 + r, iw = ow * 2 - 1 + s;
                if (ih < 0 || ih >= 9 || iw < 0 || iw >= 9) continue;
                const uint8_t b = px[(ih * 9 + iw) * pc + c];
                if (value_of(b, fp8) > best) best = value_of(b, fp8), code = b;
              }
            want_pool[(oh * pool.out_w + ow) * pc + c] = code;
          }
      DeviceBuffer dpx(as_bytes(px)), dpool(want_pool.size());
      ASSERT_TRUE(launch_q8_max_pool(pool, dpx.get(), dpool.get(), nullptr).is_ok());
      testing::expect_synced();
      EXPECT_EQ(as_u8(dpool.download()), want_pool);
    }
    // Global average pool [2, 7, 7, 16] -> 8 bits and float16.
    const auto gx = random_codes(2 * 49 * 16, fp8, 7);
    const Q8GlobalPoolDesc gap{.n = 2,
                               .h = 7,
                               .w = 7,
                               .c = 16,
                               .x_dtype = q,
                               .x_scale = 0.1f,
                               .y_dtype = q,
                               .y_scale = fp8 ? 0.01f : 0.05f};
    std::vector<uint8_t> want_gap(32);
    std::vector<float> want_gap_half(32);
    const float multiplier = 0.1f / 49.0f;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 16; ++c) {
        float sum = 0;
        for (int64_t p = 0; p < 49; ++p) sum += value_of(gx[(n * 49 + p) * 16 + c], fp8);
        want_gap[n * 16 + c] = quantize(sum * multiplier, 1.0f / gap.y_scale, fp8);
        want_gap_half[n * 16 + c] = half_bits_to_float(float_to_half_bits(sum * multiplier));
      }
    DeviceBuffer dgx(as_bytes(gx)), dgap(32), dgap_half(64);
    ASSERT_TRUE(launch_q8_global_avg_pool(gap, dgx.get(), dgap.get(), nullptr).is_ok());
    Q8GlobalPoolDesc to_half = gap;
    to_half.y_dtype = DataType::kFloat16;
    ASSERT_TRUE(launch_q8_global_avg_pool(to_half, dgx.get(), dgap_half.get(), nullptr).is_ok());
    testing::expect_synced();
    EXPECT_EQ(as_u8(dgap.download()), want_gap);
    testing::expect_exact(testing::decode(dgap_half.download(), DataType::kFloat16), want_gap_half);
  }
}

// The tactic search's random inputs (q8_check.cu): a function of (seed, index) only, every byte
// value but E4M3's NaN codes, nothing written past the end (odd counts, unaligned start).
TEST(QuantSearchKernels, RandomCodesAreSeededFiniteAndCoverTheCodes) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (const bool fp8 : {false, true}) {
    constexpr size_t kCount = 100'003;
    DeviceBuffer a(kCount), b(kCount), c(kCount), shifted(std::vector<std::byte>(kCount), 3);
    ASSERT_TRUE(launch_random_q8(a.get(), kCount, fp8, 11, nullptr).is_ok());
    ASSERT_TRUE(launch_random_q8(b.get(), kCount, fp8, 11, nullptr).is_ok());
    ASSERT_TRUE(launch_random_q8(c.get(), kCount, fp8, 12, nullptr).is_ok());
    ASSERT_TRUE(launch_random_q8(shifted.get(), kCount, fp8, 11, nullptr).is_ok());
    testing::expect_synced();
    EXPECT_TRUE(a.tail_untouched());
    EXPECT_TRUE(shifted.tail_untouched());
    const auto got_a = a.download(), got_c = c.download();
    EXPECT_EQ(got_a, b.download());
    EXPECT_EQ(got_a, shifted.download()) << "the bytes depend on the index, not on the address";
    size_t same = 0;
    for (size_t i = 0; i < kCount; ++i) same += got_a[i] == got_c[i];
    EXPECT_LT(same, kCount / 100) << "another seed, other codes (1 in 256 alike by chance)";
    std::vector<int> seen(256, 0);
    for (const std::byte v : got_a) ++seen[static_cast<uint8_t>(v)];
    for (int v = 0; v < 256; ++v) {
      const bool nan = fp8 && (v & 0x7f) == 0x7f;
      if (nan) {
        EXPECT_EQ(seen[v], 0) << "E4M3 NaN code " << v;
      } else {
        // ~390 each if uniform; far fewer means the hash is poor.
        EXPECT_GT(seen[v], 250) << "code " << v;
      }
    }
  }
}

// The search's comparison (q8_check.cu) against q8_difference's rule on the host: INT8 counts every
// differing byte, FP8 only codes more than one E4M3 step apart (across zero's two codes too); both
// keep the widest gap (signed values, E4M3 steps).
TEST(QuantSearchKernels, CountsTheDifferencesTheSearchRefusesFor) {
  GPULAB_SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  constexpr size_t kCount = 70'001;
  std::vector<std::byte> a(kCount), b(kCount);
  for (size_t i = 0; i < kCount; ++i) a[i] = b[i] = static_cast<std::byte>(rng() & 0xff);
  // Changes of one and two steps, and sign flips of small codes, in a scattered tenth of the bytes.
  for (size_t i = 0; i < kCount; i += 7 + (i % 5)) {
    const auto v = static_cast<uint8_t>(a[i]);
    const int change = static_cast<int>(i % 3);  // 0: +1 code, 1: +2 codes, 2: flip the sign bit
    b[i] = static_cast<std::byte>(change == 2 ? (v ^ 0x80) : static_cast<uint8_t>(v + change + 1));
  }
  for (const bool fp8 : {false, true}) {
    size_t want = 0, widest = 0;
    for (size_t i = 0; i < kCount; ++i) {
      const auto apart = static_cast<size_t>(
          std::abs(code_rank(static_cast<uint8_t>(a[i]), fp8) - code_rank(static_cast<uint8_t>(b[i]), fp8)));
      want += apart > (fp8 ? 1u : 0u);
      widest = std::max(widest, apart);
    }
    ASSERT_GT(want, 1000u);
    ASSERT_GT(widest, 2u);
    DeviceBuffer da(a), db(b, 1), counter(sizeof(Q8Differences));
    ASSERT_EQ(cudaMemset(counter.get(), 0, sizeof(Q8Differences)), cudaSuccess);
    auto* differ = static_cast<Q8Differences*>(counter.get());
    ASSERT_TRUE(launch_count_q8_differences(da.get(), db.get(), kCount, fp8, differ, nullptr).is_ok());
    ASSERT_TRUE(launch_count_q8_differences(da.get(), da.get(), kCount, fp8, differ, nullptr).is_ok());
    Q8Differences got;
    ASSERT_EQ(cudaMemcpy(&got, differ, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got.far, want) << (fp8 ? "FP8" : "INT8");
    EXPECT_EQ(got.widest, widest) << (fp8 ? "FP8" : "INT8");
  }
}

}  // namespace
}  // namespace gpulab::kernels
