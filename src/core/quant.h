// The 8-bit number formats of INT8 and FP8 plans and their rounding rules, written down once.
// Plan lowering (weights), the plan interpreter (the CPU emulation) and the CUDA kernels
// (src/backends/cuda/kernels/quant.cuh mirrors these functions with CUDA intrinsics) follow them;
// docs/architecture.md ("8-bit plans") says the same in prose.
//
// INT8, symmetric (zero point 0), real value = scale * q:
//   weights      one scale per output channel, amax / m over that channel's weights, m the
//                number of steps in [32, 127] whose rounding leaves the smallest squared error
//                (ties to the larger m; 1 for an all-zero channel): amax / 127 unless a coarser
//                step fits the weights better, as it does exactly for weights that already lie on
//                a quantization grid (a model quantized before, like the bundled MobileNetV2);
//                q in [-127, 127], so that negating a weight never overflows and the grid is the
//                same on both sides of zero.
//   activations  one scale per tensor, scale = amax / 127 of the calibrated range (or the scale a
//                model's QuantizeLinear gives); q in [-128, 127], ONNX QuantizeLinear's range, so
//                that an imported Q/DQ model computes what onnxruntime computes.
//   quantize     q = saturate(round_half_to_even(x * inv_scale)), inv_scale = 1.0f / scale in
//                float32, computed once on the host; NaN gives 0 (as the GPU's cvt.rni does).
// FP8 E4M3 (1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits, no infinities, largest
// finite value 448, S.1111.111 is NaN), real value = scale * e4m3:
//   weights      one scale per output channel, amax / 448; activations one per tensor, amax / 448
//   quantize     e4m3 = round_half_to_even(x * inv_scale) to the nearest E4M3 value (subnormals
//                included), finite values beyond +-448 saturated to +-448 (CUDA's __NV_SATFINITE),
//                NaN stays NaN.
// Convolution and GEMM epilogue, float32, in this order, each step rounded once to nearest even:
//   acc = sum(qx * qw)              INT8: exact in int32. FP8: each product is exact in float32,
//                                   the sum is float32 in an unspecified order
//   v   = fma(float(acc), multiplier, bias[k])   one fused multiply-add (float32 bias, 0 without
//                                   one); multiplier[k] = x_scale * w_scale[k] (float32, on the
//                                   host); float(acc) rounds to nearest even above 2^24
//   v   = fma(float(q_res), res_scale, v)   a fused residual, read in the plan's 8-bit type
//   v   = act(v)                    ReLU max(v, 0), Clip min(max(v, lo), hi)
//   out = quantize(v, y_scale), or v rounded to the output's float type when every reader of the
//         output computes in float (a "dequantizing" epilogue).
// Why fused multiply-adds: cuDNN's fused convolution graphs (the cudnn-q8 tactic) compute exactly
// this, every configuration of engines 4 and 7 on the H100 (bench/results/2026-12-07-9df951c,
// cudnn_q8_probe's rounding rules: 0 of 401,408 float outputs differ; engine 2 follows no rule tried
// once a residual is added), while a multiply and an add rounded apart differed on 13% of them and
// moved 0.3-1 INT8 outputs in a million by one step. With the rule cuDNN follows, its
// configurations can be held to the same bytes as gpulab's own kernels, which use __fmaf_rn
// (kernels/quant.cuh), and the interpreter std::fma (correctly rounded on any CPU).
// Agreement: the INT8 integer sum is exact everywhere and the epilogue is defined to the bit, so a
// GPU kernel that follows it step by step matches the interpreter bit for bit. FP8 sums in another
// order, so FP8 agreement is within one E4M3 step of the output.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace gpulab {

inline constexpr int kInt8ActivationMin = -128;
inline constexpr int kInt8WeightMin = -127;
inline constexpr int kInt8Max = 127;
inline constexpr float kInt8QuantMax = 127.0f;  // amax maps to this (scale = amax / 127)
inline constexpr float kFp8E4M3Max = 448.0f;    // amax maps to this (scale = amax / 448)
inline constexpr int kInt8WeightMinSteps = 32;  // the coarsest weight grid the scale search tries

// x rounded to the nearest integer, ties to even, for |x| <= 2^22: adding and subtracting 1.5 * 2^23
// leaves the float with no fraction bits, rounded in the default rounding mode (to nearest even).
// Plain float arithmetic, so it vectorizes and needs no libm call.
inline float round_half_even_small(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
}

// The epilogue's first steps (the file comment's rule): acc * multiplier + bias as one fused
// multiply-add, then the residual's term as another.
inline float q8_scale_bias(float acc, float multiplier, float bias) {
  return std::fma(acc, multiplier, bias);
}
inline float q8_add_residual(float v, float residual, float residual_scale) {
  return std::fma(residual, residual_scale, v);
}

// q = saturate(round_half_to_even(x * inv_scale)) to [lo, 127]; NaN gives 0.
inline int8_t quantize_int8(float x, float inv_scale, int lo = kInt8ActivationMin) {
  float v = x * inv_scale;
  if (v != v) return 0;
  v = std::min(std::max(v, static_cast<float>(lo)), static_cast<float>(kInt8Max));
  return static_cast<int8_t>(round_half_even_small(v));
}

// Whether amax is a range symmetric_scale divides: positive, finite, and amax / qmax a normal float
// (so that the reciprocal 1 / scale is finite).
inline bool has_symmetric_range(float amax, float qmax) {
  return amax > 0.0f && amax <= 3.0e38f && amax / qmax >= std::numeric_limits<float>::min();
}

// The scale of a symmetric range: amax / qmax, or 1 for an empty (zero, subnormal or non-finite)
// range.
inline float symmetric_scale(float amax, float qmax) {
  return has_symmetric_range(amax, qmax) ? amax / qmax : 1.0f;
}

// E4M3 bits -> float (exact).
inline float e4m3_to_float(uint8_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
  const uint32_t exp = (bits >> 3) & 0xfu, mant = bits & 0x7u;
  if (exp == 0xfu && mant == 0x7u) return std::bit_cast<float>(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {                                                                    // subnormal: mant * 2^-9
    const float v = static_cast<float>(mant) * 0.001953125f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
}

// float -> E4M3 bits, round to nearest even, finite values beyond +-448 saturated to +-448, NaN to
// NaN (0x7f with the sign). What CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does.
inline uint8_t float_to_e4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (a >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and Inf): the largest finite value
  if (a < 0x3c800000u) {                      // below 2^-6: a subnormal, in units of 2^-9
    // 8 * 2^-9 = 2^-6 is encoding 0x08, the smallest normal: the integer is the encoding.
    const float units = std::bit_cast<float>(a) * 512.0f;
    return sign | static_cast<uint8_t>(round_half_even_small(units));
  }
  // Round the 23-bit mantissa to 3 bits, ties to even, then rebias the exponent 127 -> 7.
  const uint32_t rounded = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  const uint32_t code = rounded - (120u << 3);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7eu));  // 464.. rounds to 480: saturate
}

// The E4M3 value nearest x * inv_scale (float_to_e4m3's rule), as a float.
inline float quantize_fp8(float x, float inv_scale) {
  return e4m3_to_float(float_to_e4m3(x * inv_scale));
}

// ONNX QuantizeLinear then DequantizeLinear (the float equivalent of a Q/DQ pair that no INT8
// layer takes over): q = clamp(round_half_to_even(x / scale) + zero_point, qmin, qmax), then
// (q - zero_point) * scale; NaN gives 0.
inline float fake_quantize(float x, float scale, float zero_point, float qmin, float qmax) {
  const float q = std::nearbyint(x / scale) + zero_point;
  if (q != q) return 0.0f;
  return (std::min(std::max(q, qmin), qmax) - zero_point) * scale;
}

// Per-output-channel symmetric quantization of a weight laid out [channels, per_channel]: one scale
// per channel (INT8: amax / m with m in [kInt8WeightMinSteps, 127] as the file comment says; FP8:
// amax / 448) and the quantized values as floats (INT8: integers in [-127, 127]; FP8: E4M3
// values). `fp8` picks the format.
struct QuantizedWeights {
  std::vector<float> scales;  // [channels]
  std::vector<float> values;  // [channels * per_channel], quantized numbers (not multiplied by the scale)
};
inline QuantizedWeights quantize_per_channel(std::span<const float> weights, int64_t channels, bool fp8) {
  QuantizedWeights out;
  const int64_t per_channel = channels > 0 ? static_cast<int64_t>(weights.size()) / channels : 0;
  out.scales.resize(static_cast<size_t>(channels));
  out.values.resize(weights.size());
  for (int64_t k = 0; k < channels; ++k) {
    const std::span<const float> w =
        weights.subspan(static_cast<size_t>(k * per_channel), static_cast<size_t>(per_channel));
    float amax = 0.0f;
    for (float v : w) amax = std::max(amax, v < 0 ? -v : v);
    float scale = symmetric_scale(amax, fp8 ? kFp8E4M3Max : kInt8QuantMax);
    if (!fp8 && has_symmetric_range(amax, kInt8QuantMax)) {
      double best = -1;
      for (int steps = kInt8Max; steps >= kInt8WeightMinSteps; --steps) {
        const float s = amax / static_cast<float>(steps), inv = 1.0f / s;
        double error = 0;
        for (float v : w) {
          const double d = v - static_cast<double>(s) * quantize_int8(v, inv, kInt8WeightMin);
          error += d * d;
        }
        if (best < 0 || error < best) {
          best = error;
          scale = s;
        }
      }
    }
    const float inv = 1.0f / scale;
    out.scales[static_cast<size_t>(k)] = scale;
    float* q = out.values.data() + k * per_channel;
    for (int64_t i = 0; i < per_channel; ++i)
      q[i] = fp8 ? quantize_fp8(w[static_cast<size_t>(i)], inv)
                 : static_cast<float>(quantize_int8(w[static_cast<size_t>(i)], inv, kInt8WeightMin));
  }
  return out;
}

}  // namespace gpulab
