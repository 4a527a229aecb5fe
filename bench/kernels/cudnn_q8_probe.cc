// cudnn_q8_probe: what cuDNN's graph API (through the cuDNN frontend) offers for 8-bit convolutions
// on the GPU in use, as evidence for whether it can be one of the 8-bit tactics (issue "INT8 and FP8
// plans", item 6). For three ResNet-18 layer shapes it builds these graphs, all NHWC:
//   int8-conv-int32   INT8 x and w, INT32 sum, INT32 output (the form the frontend's samples show)
//   int8-fused-int8   the same sum, then gpulab's epilogue (src/core/quant.h): x float multiplier[k],
//                     + bias[k], ReLU, x 1/y_scale, INT8 output
//   int8-fused-float  the same without the last step, float output (a dequantizing epilogue)
//   int8-residual-float  int8-fused-float with gpulab's residual term before the ReLU:
//                     + float(q_residual) x residual_scale (a ResNet block's second convolution)
//   int8-ties-int8    int8-fused-int8 on data made of rounding ties: codes in [-2, 2], multiplier
//                     0.5, bias 0, 1/y_scale 1, so every odd sum lands on .5 and quant.h's
//                     round-half-to-even and a round-half-away-from-zero conversion differ on half
//                     of them (whether the INT8 output conversion, not the epilogue, differs)
//   int8-ties-rne-int8  the same with two more pointwise adds before the conversion, + 1.5 x 2^23
//                     then - 1.5 x 2^23: in float32 that rounds to an integer, ties to even, so
//                     the conversion gets no tie (whether the graph can carry quant.h's rounding
//                     itself where cuDNN's conversion rounds otherwise)
//   fp8-fused-fp8     E4M3 x and w, float sum, the same epilogue, E4M3 output (sm_89+)
// and reports, for each, how far cuDNN gets (validate, operation graph, heuristics, support, plan
// build) with its message where it stops, how many engine configurations build, the fastest one's
// median time at --batch (CUDA events, 5 warm-up launches, median of 20 per configuration), and
// how its output compares with gpulab's rule on a batch of 2 (the same graph built for n = 2):
// INT8/INT32 outputs byte for byte, float outputs by their largest relative difference, E4M3
// outputs in codes apart. For the float outputs every configuration that builds is also compared,
// output for output, with candidate rounding rules ("rounding"): each multiply and add rounded on
// its own, and with a multiply and the following add contracted into one fused multiply-add
// (quant.h's rule: both pairs contracted); the rule a configuration matches on every output is the
// one its INT8 outputs follow. On an H100 with cuDNN 9.19 every configuration matched the fused
// multiply-adds (bench/results/2026-12-07-9df951c), which is why quant.h's rule is that. The inputs
// are seeded random codes; the multipliers and biases are in the range of a calibrated layer's.
//
// Usage: cudnn_q8_probe [--batch N] [--graphs NAME,...] [--json FILE]
//   --batch   the timed batch (default 1024, tactic timing's)
//   --graphs  only these graphs (names as above; default all)
//   --json    the report, rewritten whole after each graph so a run cut short keeps what it measured
// Exit 0 when it ran (whatever cuDNN supports), 1 when there is no GPU, a CUDA call failed or the
// JSON file cannot be written, 2 for a bad argument.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

// The frontend's headers after the standard ones: they use std types without including them all.
#include <cudnn_frontend.h>

#include "core/file_io.h"
#include "core/quant.h"

namespace gpulab::bench {
namespace {

namespace fe = cudnn_frontend;

struct Shape {
  const char* name;
  int64_t c, k, h, w, r, stride, pad;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - r) / stride + 1; }
};

constexpr Shape kShapes[] = {
    {"layer1.0.conv1 (3x3, 64 -> 64, 56x56)", 64, 64, 56, 56, 3, 1, 1},
    {"layer3.1.conv1 (3x3, 256 -> 256, 14x14)", 256, 256, 14, 14, 3, 1, 1},
    {"layer3.0.downsample (1x1/2, 128 -> 256, 28x28)", 128, 256, 28, 28, 1, 2, 0},
};

enum class Variant {
  kInt8ConvInt32,
  kInt8FusedInt8,
  kInt8FusedFloat,
  kInt8ResidualFloat,
  kInt8TiesInt8,
  kInt8TiesRneInt8,
  kFp8FusedFp8
};
constexpr Variant kVariants[] = {
    Variant::kInt8ConvInt32, Variant::kInt8FusedInt8,   Variant::kInt8FusedFloat, Variant::kInt8ResidualFloat,
    Variant::kInt8TiesInt8,  Variant::kInt8TiesRneInt8, Variant::kFp8FusedFp8};

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kInt8ConvInt32: return "int8-conv-int32";
    case Variant::kInt8FusedInt8: return "int8-fused-int8";
    case Variant::kInt8TiesInt8: return "int8-ties-int8";
    case Variant::kInt8TiesRneInt8: return "int8-ties-rne-int8";
    case Variant::kInt8FusedFloat: return "int8-fused-float";
    case Variant::kInt8ResidualFloat: return "int8-residual-float";
    case Variant::kFp8FusedFp8: return "fp8-fused-fp8";
  }
  return "?";
}
bool is_fp8(Variant v) {
  return v == Variant::kFp8FusedFp8;
}
bool is_fused(Variant v) {
  return v != Variant::kInt8ConvInt32;
}
bool is_ties(Variant v) {
  return v == Variant::kInt8TiesInt8 || v == Variant::kInt8TiesRneInt8;
}
bool is_int8_out(Variant v) {
  return v == Variant::kInt8FusedInt8 || is_ties(v);
}
bool is_float_out(Variant v) {
  return v == Variant::kInt8FusedFloat || v == Variant::kInt8ResidualFloat;
}
size_t out_bytes(Variant v) {
  return v == Variant::kInt8ConvInt32 || is_float_out(v) ? 4 : 1;
}

enum Uid : int64_t {
  kX = 1,
  kW,
  kMultiplier,
  kBias,
  kInvScale,
  kY,
  kResidual,
  kResidualScale,
  kMagic,
  kMinusMagic
};
constexpr float kRneMagic = 12582912.0f;  // 1.5 x 2^23 (core/quant.h's round_half_even_small)

// The layer's data on the host: codes, per-channel multipliers and biases, the output's 1/scale.
struct Layer {
  std::vector<uint8_t> x, w, residual;  // int8 or E4M3 codes
  std::vector<float> multiplier, bias;
  float inv_y_scale = 0, residual_scale = 0;
};

Layer make_layer(const Shape& s, int64_t n, Variant v) {
  const bool fp8 = is_fp8(v);
  std::mt19937 rng(20261207);
  Layer l;
  l.x.resize(static_cast<size_t>(n * s.h * s.w * s.c));
  l.w.resize(static_cast<size_t>(s.k * s.r * s.r * s.c));
  // E4M3 codes of magnitude below 0x70 (|v| < 256), so that the sums stay far from saturation.
  std::uniform_int_distribution<int> code(fp8 ? 0 : -128, fp8 ? 0x6f : 127), sign(0, 1);
  for (auto* v : {&l.x, &l.w})
    for (uint8_t& b : *v) b = static_cast<uint8_t>(fp8 ? (code(rng) | (sign(rng) << 7)) : code(rng));
  std::uniform_real_distribution<float> mult(1e-5f, 4e-5f), bias(-0.5f, 0.5f);
  for (int64_t k = 0; k < s.k; ++k) {
    l.multiplier.push_back(fp8 ? mult(rng) * 1e-2f : mult(rng));
    l.bias.push_back(bias(rng));
  }
  l.inv_y_scale = 1.0f / 0.05f;
  l.residual.resize(static_cast<size_t>(n * s.out_h() * s.out_w() * s.k));
  for (uint8_t& b : l.residual) b = static_cast<uint8_t>(code(rng));
  l.residual_scale = 0.043f;
  if (is_ties(v)) {  // every odd sum a tie: acc x 0.5 x 1
    std::uniform_int_distribution<int> small(-2, 2);
    for (auto* codes : {&l.x, &l.w})
      for (uint8_t& b : *codes) b = static_cast<uint8_t>(small(rng));
    std::fill(l.multiplier.begin(), l.multiplier.end(), 0.5f);
    std::fill(l.bias.begin(), l.bias.end(), 0.0f);
    l.inv_y_scale = 1.0f;
  }
  return l;
}

// gpulab's rule (core/quant.h) on the host: the exact sum, then the epilogue step by step.
// `sums` (INT8 only, when not null): the int32 sums, one per output.
std::vector<uint8_t> reference(const Shape& s, int64_t n, Variant v, const Layer& l,
                               std::vector<int32_t>* sums = nullptr) {
  if (sums) sums->assign(static_cast<size_t>(n * s.out_h() * s.out_w() * s.k), 0);
  const int64_t oh = s.out_h(), ow = s.out_w();
  std::vector<uint8_t> out(static_cast<size_t>(n * oh * ow * s.k) * out_bytes(v));
  const auto value = [v](uint8_t b) {
    return is_fp8(v) ? e4m3_to_float(b) : static_cast<float>(static_cast<int8_t>(b));
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t x = 0; x < ow; ++x)
        for (int64_t k = 0; k < s.k; ++k) {
          int32_t iacc = 0;
          float facc = 0;
          for (int64_t r = 0; r < s.r; ++r)
            for (int64_t q = 0; q < s.r; ++q) {
              const int64_t iy = y * s.stride - s.pad + r, ix = x * s.stride - s.pad + q;
              if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
              const uint8_t* xp = &l.x[static_cast<size_t>(((i * s.h + iy) * s.w + ix) * s.c)];
              const uint8_t* wp = &l.w[static_cast<size_t>(((k * s.r + r) * s.r + q) * s.c)];
              for (int64_t c = 0; c < s.c; ++c) {
                if (is_fp8(v))
                  facc += value(xp[c]) * value(wp[c]);
                else
                  iacc += static_cast<int8_t>(xp[c]) * static_cast<int8_t>(wp[c]);
              }
            }
          const size_t at = static_cast<size_t>(((i * oh + y) * ow + x) * s.k + k);
          if (sums) (*sums)[at] = iacc;
          if (v == Variant::kInt8ConvInt32) {
            std::memcpy(&out[at * 4], &iacc, 4);
            continue;
          }
          float t = q8_scale_bias(is_fp8(v) ? facc : static_cast<float>(iacc),
                                  l.multiplier[static_cast<size_t>(k)], l.bias[static_cast<size_t>(k)]);
          if (v == Variant::kInt8ResidualFloat)
            t = q8_add_residual(t, static_cast<float>(static_cast<int8_t>(l.residual[at])), l.residual_scale);
          t = std::max(t, 0.0f);
          if (is_float_out(v))
            std::memcpy(&out[at * 4], &t, 4);
          else if (is_int8_out(v))
            out[at] = static_cast<uint8_t>(quantize_int8(t, l.inv_y_scale));
          else
            out[at] = float_to_e4m3(t * l.inv_y_scale);
        }
  return out;
}

// How cuDNN's bytes compare with the rule's: "bit for bit", or what differs.
nlohmann::json compare(Variant v, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got) {
  const size_t count = want.size() / out_bytes(v);
  size_t differ = 0;
  double worst = 0;
  nlohmann::json first;  // the first output that differs: index, the rule's value and cuDNN's
  const auto note_first = [&first](size_t i, auto want_value, auto got_value) {
    if (first.is_null()) first = {{"index", i}, {"want", want_value}, {"got", got_value}};
  };
  for (size_t i = 0; i < count; ++i) {
    if (is_float_out(v)) {
      float a, b;
      std::memcpy(&a, &want[i * 4], 4);
      std::memcpy(&b, &got[i * 4], 4);
      if (a != b) ++differ, note_first(i, a, b);
      worst = std::max(worst, static_cast<double>(std::fabs(a - b) / std::max(std::fabs(a), 1e-6f)));
    } else if (v == Variant::kInt8ConvInt32) {
      int32_t a, b;
      std::memcpy(&a, &want[i * 4], 4);
      std::memcpy(&b, &got[i * 4], 4);
      if (a != b) ++differ, note_first(i, a, b);
      worst = std::max(worst, static_cast<double>(std::abs(int64_t{a} - int64_t{b})));
    } else if (is_int8_out(v)) {
      const int d = std::abs(static_cast<int8_t>(want[i]) - static_cast<int8_t>(got[i]));
      if (d != 0) ++differ, note_first(i, static_cast<int8_t>(want[i]), static_cast<int8_t>(got[i]));
      worst = std::max(worst, static_cast<double>(d));
    } else {  // E4M3 codes apart (sign-magnitude: both are >= 0 after ReLU)
      const int d = std::abs((want[i] & 0x7f) - (got[i] & 0x7f)) + ((want[i] ^ got[i]) & 0x80 ? 1 : 0);
      if (d != 0) ++differ, note_first(i, want[i], got[i]);
      worst = std::max(worst, static_cast<double>(d));
    }
  }
  return {{"outputs", count},
          {"differing", differ},
          {"first_difference", first},
          {"worst", worst},
          {"worst_unit", is_float_out(v)              ? "relative"
                         : v == Variant::kFp8FusedFp8 ? "e4m3 codes"
                                                      : "int steps"}};
}

std::shared_ptr<fe::graph::Graph> make_graph(const Shape& s, int64_t n, Variant v) {
  auto g = std::make_shared<fe::graph::Graph>();
  const auto io = is_fp8(v) ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::INT8;
  g->set_io_data_type(io)
      .set_intermediate_data_type(v == Variant::kInt8ConvInt32 ? fe::DataType_t::INT32
                                                               : fe::DataType_t::FLOAT)
      .set_compute_data_type(is_fp8(v) ? fe::DataType_t::FLOAT : fe::DataType_t::INT32);
  const auto nhwc = [](int64_t c, int64_t h, int64_t w) {
    return std::vector<int64_t>{c * h * w, 1, c * w, c};
  };
  auto X = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("x")
                         .set_uid(kX)
                         .set_data_type(io)
                         .set_dim({n, s.c, s.h, s.w})
                         .set_stride(nhwc(s.c, s.h, s.w)));
  auto W = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("w")
                         .set_uid(kW)
                         .set_data_type(io)
                         .set_dim({s.k, s.c, s.r, s.r})
                         .set_stride(nhwc(s.c, s.r, s.r)));
  auto y =
      g->conv_fprop(X, W,
                    fe::graph::Conv_fprop_attributes()
                        .set_padding({s.pad, s.pad})
                        .set_stride({s.stride, s.stride})
                        .set_dilation({1, 1})
                        .set_compute_data_type(is_fp8(v) ? fe::DataType_t::FLOAT : fe::DataType_t::INT32));
  if (is_fused(v)) {
    // Float32 operands of the epilogue: one per output channel, or one for the whole tensor.
    const auto float_tensor = [&g](const char* name, int64_t uid, int64_t k) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_data_type(fe::DataType_t::FLOAT)
                           .set_dim({1, k, 1, 1})
                           .set_stride({k, 1, k, k}));
    };
    const auto per_channel = [&](const char* name, int64_t uid) { return float_tensor(name, uid, s.k); };
    const auto scalar = [&](const char* name, int64_t uid) { return float_tensor(name, uid, 1); };
    const auto op = [](fe::PointwiseMode_t mode) {
      return fe::graph::Pointwise_attributes().set_mode(mode).set_compute_data_type(fe::DataType_t::FLOAT);
    };
    y = g->pointwise(y, per_channel("multiplier", kMultiplier), op(fe::PointwiseMode_t::MUL));
    y = g->pointwise(y, per_channel("bias", kBias), op(fe::PointwiseMode_t::ADD));
    if (v == Variant::kInt8ResidualFloat) {
      auto R = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("residual")
                             .set_uid(kResidual)
                             .set_data_type(io)
                             .set_dim({n, s.k, s.out_h(), s.out_w()})
                             .set_stride(nhwc(s.k, s.out_h(), s.out_w())));
      auto rs = scalar("residual_scale", kResidualScale);
      y = g->pointwise(y, g->pointwise(R, rs, op(fe::PointwiseMode_t::MUL)), op(fe::PointwiseMode_t::ADD));
    }
    y = g->pointwise(y, op(fe::PointwiseMode_t::RELU_FWD));
    if (!is_float_out(v)) {
      y = g->pointwise(y, scalar("inv_y_scale", kInvScale), op(fe::PointwiseMode_t::MUL));
      if (v == Variant::kInt8TiesRneInt8) {
        y = g->pointwise(y, scalar("magic", kMagic), op(fe::PointwiseMode_t::ADD));
        y = g->pointwise(y, scalar("minus_magic", kMinusMagic), op(fe::PointwiseMode_t::ADD));
      }
    }
  }
  const auto out_type = v == Variant::kInt8ConvInt32 ? fe::DataType_t::INT32
                        : is_float_out(v)            ? fe::DataType_t::FLOAT
                                                     : io;
  y->set_output(true).set_uid(kY).set_data_type(out_type);
  y->set_dim({n, s.k, s.out_h(), s.out_w()}).set_stride(nhwc(s.k, s.out_h(), s.out_w()));
  return g;
}

#define PROBE_CUDA(call)                                                              \
  do {                                                                                \
    if (const cudaError_t e_ = (call); e_ != cudaSuccess)                             \
      throw std::runtime_error(fmt::format("{}: {}", #call, cudaGetErrorString(e_))); \
  } while (0)

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { PROBE_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The buffers of one layer at batch n, filled from `l`.
struct Bound {
  DeviceBuffer x, w, multiplier, bias, inv, residual, residual_scale, magic, minus_magic, y;
  std::unordered_map<int64_t, void*> pack;
  Bound(const Layer& l, size_t y_bytes)
      : x(l.x.size()),
        w(l.w.size()),
        multiplier(l.multiplier.size() * 4),
        bias(l.bias.size() * 4),
        inv(4),
        residual(l.residual.size()),
        residual_scale(4),
        magic(4),
        minus_magic(4),
        y(y_bytes) {
    PROBE_CUDA(cudaMemcpy(x.p, l.x.data(), l.x.size(), cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(w.p, l.w.data(), l.w.size(), cudaMemcpyHostToDevice));
    PROBE_CUDA(
        cudaMemcpy(multiplier.p, l.multiplier.data(), l.multiplier.size() * 4, cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(bias.p, l.bias.data(), l.bias.size() * 4, cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(inv.p, &l.inv_y_scale, 4, cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(residual.p, l.residual.data(), l.residual.size(), cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(residual_scale.p, &l.residual_scale, 4, cudaMemcpyHostToDevice));
    const float m[2] = {kRneMagic, -kRneMagic};
    PROBE_CUDA(cudaMemcpy(magic.p, &m[0], 4, cudaMemcpyHostToDevice));
    PROBE_CUDA(cudaMemcpy(minus_magic.p, &m[1], 4, cudaMemcpyHostToDevice));
    pack = {{kX, x.p},
            {kW, w.p},
            {kMultiplier, multiplier.p},
            {kBias, bias.p},
            {kInvScale, inv.p},
            {kY, y.p},
            {kResidual, residual.p},
            {kResidualScale, residual_scale.p},
            {kMagic, magic.p},
            {kMinusMagic, minus_magic.p}};
  }
  // Only the tensors variant v's graph has.
  void keep_only(Variant v) {
    if (!is_fused(v)) pack.erase(kMultiplier), pack.erase(kBias);
    if (!is_fused(v) || is_float_out(v)) pack.erase(kInvScale);
    if (v != Variant::kInt8ResidualFloat) pack.erase(kResidual), pack.erase(kResidualScale);
    if (v != Variant::kInt8TiesRneInt8) pack.erase(kMagic), pack.erase(kMinusMagic);
  }
};

// Runs the graph through cuDNN's stages; fills `report` and returns the built configurations.
std::vector<int64_t> prepare(cudnnHandle_t handle, fe::graph::Graph& g, nlohmann::json& report) {
  const auto stage = [&report](const char* name, fe::error_t e) {
    if (e.is_good()) return true;
    report["stopped_at"] = name;
    report["message"] = e.get_message();
    return false;
  };
  if (!stage("validate", g.validate())) return {};
  if (!stage("operation graph", g.build_operation_graph(handle))) return {};
  if (!stage("heuristics", g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})))
    return {};
  report["candidates"] = g.get_execution_plan_count();
  if (!stage("support", g.check_support())) return {};
  std::vector<int64_t> built;
  std::string last_error;
  for (int64_t i = 0; i < g.get_execution_plan_count() && built.size() < 8; ++i) {
    if (auto e = g.build_plan_at_index(i); e.is_good())
      built.push_back(i);
    else
      last_error = e.get_message();
  }
  report["built"] = built.size();
  if (built.empty()) {
    report["stopped_at"] = "plan build";
    report["message"] = last_error;
  }
  return built;
}

// The float epilogue of a float-output variant under candidate rounding rules, from the int32 sums:
// each multiply and add rounded on its own (quant.h's rule until 2026-12-07), or pairs contracted
// into fused multiply-adds (both pairs: quant.h's rule since, the one cuDNN was found to follow).
std::vector<std::pair<std::string, std::vector<float>>> rounding_rules(const Shape& s, Variant v,
                                                                       const Layer& l,
                                                                       const std::vector<int32_t>& sums) {
  const bool residual = v == Variant::kInt8ResidualFloat;
  std::vector<std::pair<std::string, std::vector<float>>> rules;
  const auto add_rule = [&](std::string name, bool fma_bias, bool fma_residual) {
    std::vector<float> out(sums.size());
    for (size_t at = 0; at < sums.size(); ++at) {
      const size_t k = at % static_cast<size_t>(s.k);
      const float acc = static_cast<float>(sums[at]);
      float t = fma_bias ? std::fma(acc, l.multiplier[k], l.bias[k]) : acc * l.multiplier[k] + l.bias[k];
      if (residual) {
        const float r = static_cast<float>(static_cast<int8_t>(l.residual[at]));
        t = fma_residual ? std::fma(r, l.residual_scale, t) : t + r * l.residual_scale;
      }
      out[at] = std::max(t, 0.0f);
    }
    rules.emplace_back(std::move(name), std::move(out));
  };
  add_rule("acc*m, +bias" + std::string(residual ? ", +r*rs" : ""), false, false);
  if (residual) {
    add_rule("fma(acc, m, bias), +r*rs", true, false);
    add_rule("acc*m, +bias, fma(r, rs, v)", false, true);
    add_rule("quant.h: fma(acc, m, bias), fma(r, rs, v)", true, true);
  } else {
    add_rule("quant.h: fma(acc, m, bias)", true, false);
  }
  return rules;
}

// Every built configuration of `g` (the graph at the check batch, bound in `cb`) against each rule
// of rounding_rules, from `sums` (reference's int32 sums of `l`): how many float outputs differ.
nlohmann::json rounding(cudnnHandle_t handle, const Shape& s, Variant v, const Layer& l,
                        const std::vector<int32_t>& sums, fe::graph::Graph& g,
                        const std::vector<int64_t>& built, const Bound& cb) {
  const auto rules = rounding_rules(s, v, l, sums);
  nlohmann::json out = nlohmann::json::array();
  std::vector<float> got(sums.size());
  for (const int64_t i : built) {
    std::string name;
    (void)g.get_plan_name_at_index(i, name);
    int64_t ws_bytes = 0;
    (void)g.get_workspace_size_plan_at_index(i, ws_bytes);
    DeviceBuffer ws(static_cast<size_t>(ws_bytes));
    auto pack = cb.pack;
    if (auto e = g.execute_plan_at_index(handle, pack, ws.p, i); e.is_bad()) {
      out.push_back({{"name", name}, {"failed", e.get_message()}});
      continue;
    }
    PROBE_CUDA(cudaMemcpy(got.data(), cb.y.p, got.size() * 4, cudaMemcpyDeviceToHost));
    nlohmann::json differing;
    for (const auto& [rule, want] : rules) {
      size_t differ = 0;
      for (size_t at = 0; at < want.size(); ++at) differ += std::memcmp(&want[at], &got[at], 4) != 0;
      differing[rule] = differ;
    }
    out.push_back({{"name", name}, {"outputs", got.size()}, {"differing", differing}});
  }
  return out;
}

nlohmann::json probe(cudnnHandle_t handle, const Shape& s, Variant v, int64_t batch) {
  nlohmann::json report{{"layer", s.name}, {"graph", variant_name(v)}, {"batch", batch}};
  auto g = make_graph(s, batch, v);
  const std::vector<int64_t> built = prepare(handle, *g, report);
  if (built.empty()) return report;
  const Layer layer = make_layer(s, batch, v);
  const size_t y_bytes = static_cast<size_t>(batch * s.out_h() * s.out_w() * s.k) * out_bytes(v);
  Bound b(layer, y_bytes);
  b.keep_only(v);
  cudaEvent_t e0, e1;
  PROBE_CUDA(cudaEventCreate(&e0));
  PROBE_CUDA(cudaEventCreate(&e1));
  double best_ms = -1;
  std::string best_name;
  nlohmann::json configs = nlohmann::json::array();
  for (const int64_t i : built) {
    int64_t ws_bytes = 0;
    (void)g->get_workspace_size_plan_at_index(i, ws_bytes);
    DeviceBuffer ws(static_cast<size_t>(ws_bytes));
    std::string name;
    (void)g->get_plan_name_at_index(i, name);
    std::vector<float> ms;
    std::string failed;
    for (int it = 0; it < 25 && failed.empty(); ++it) {
      PROBE_CUDA(cudaEventRecord(e0));
      if (auto e = g->execute_plan_at_index(handle, b.pack, ws.p, i); e.is_bad()) failed = e.get_message();
      PROBE_CUDA(cudaEventRecord(e1));
      PROBE_CUDA(cudaEventSynchronize(e1));
      float t = 0;
      PROBE_CUDA(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 5) ms.push_back(t);
    }
    if (!failed.empty()) {
      configs.push_back({{"name", name}, {"failed", failed}});
      continue;
    }
    std::nth_element(ms.begin(), ms.begin() + static_cast<long>(ms.size() / 2), ms.end());
    const double median = ms[ms.size() / 2];
    configs.push_back({{"name", name}, {"median_ms", median}});
    if (best_ms < 0 || median < best_ms) best_ms = median, best_name = name;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  report["configurations"] = configs;
  if (best_ms > 0) {
    const double ops = 2.0 * static_cast<double>(batch * s.out_h() * s.out_w() * s.k * s.c * s.r * s.r);
    report["best"] = {{"name", best_name}, {"median_ms", best_ms}, {"tops", ops / best_ms * 1e-9}};
  }
  // Agreement with gpulab's rule on two images, the heuristics' first configuration that builds.
  constexpr int64_t kCheckBatch = 2;
  auto small = make_graph(s, kCheckBatch, v);
  nlohmann::json small_report;
  const std::vector<int64_t> small_built = prepare(handle, *small, small_report);
  if (small_built.empty()) {
    report["agreement"] = {{"skipped", small_report}};
    return report;
  }
  const Layer check = make_layer(s, kCheckBatch, v);
  std::vector<int32_t> sums;  // for the rounding comparisons below
  const std::vector<uint8_t> want = reference(s, kCheckBatch, v, check, &sums);
  Bound cb(check, want.size());
  cb.keep_only(v);
  int64_t ws_bytes = 0;
  (void)small->get_workspace_size_plan_at_index(small_built.front(), ws_bytes);
  DeviceBuffer ws(static_cast<size_t>(ws_bytes));
  if (auto e = small->execute_plan_at_index(handle, cb.pack, ws.p, small_built.front()); e.is_bad()) {
    report["agreement"] = {{"failed", e.get_message()}};
    return report;
  }
  std::vector<uint8_t> got(want.size());
  PROBE_CUDA(cudaMemcpy(got.data(), cb.y.p, got.size(), cudaMemcpyDeviceToHost));
  report["agreement"] = compare(v, want, got);
  if (is_float_out(v)) report["rounding"] = rounding(handle, s, v, check, sums, *small, small_built, cb);
  if (is_ties(v)) {
    // The same outputs against a conversion that rounds ties away from zero (after ReLU, up).
    size_t differ = 0;
    for (size_t at = 0; at < sums.size(); ++at) {
      const size_t k = at % static_cast<size_t>(s.k);
      const float t =
          std::max(q8_scale_bias(static_cast<float>(sums[at]), check.multiplier[k], check.bias[k]), 0.0f);
      const float q =
          std::clamp(std::round(t * check.inv_y_scale), -128.0f, 127.0f);  // std::round: half away
      differ += static_cast<int8_t>(got[at]) != static_cast<int8_t>(q);
    }
    report["differing_from_round_half_away"] = differ;
  }
  return report;
}

// One result's line: how far cuDNN got, its best time, the agreement with quant.h's rule, and for
// the float graphs the outputs each rounding rule misses (fewest across configurations), for the
// ties graphs the outputs a round-half-away conversion would have given otherwise.
std::string summary_line(const Shape& s, Variant v, const nlohmann::json& r) {
  std::string line = fmt::format("{:<48} {:<17} ", s.name, variant_name(v));
  if (r.contains("stopped_at"))
    return line + fmt::format("stops at {}: {}", r["stopped_at"].get<std::string>(),
                              r.value("message", std::string()).substr(0, 120));
  if (!r.contains("best"))
    return line + "built, but no configuration ran: " + r.value("configurations", nlohmann::json()).dump();
  line += fmt::format("{} of {} configurations build; best {:.4f} ms ({:.0f} TOP/s); agreement: {}",
                      r.value("built", 0), r.value("candidates", 0), r["best"]["median_ms"].get<double>(),
                      r["best"]["tops"].get<double>(), r.value("agreement", nlohmann::json()).dump());
  if (r.contains("rounding")) {
    std::map<std::string, std::pair<size_t, size_t>> fewest;  // rule -> (fewest differing, configurations)
    for (const auto& c : r["rounding"]) {
      if (!c.contains("differing")) continue;
      for (const auto& [rule, n] : c["differing"].items()) {
        auto [it, fresh] = fewest.try_emplace(rule, n.get<size_t>(), 0);
        it->second.first = std::min(it->second.first, n.get<size_t>());
        ++it->second.second;
      }
    }
    for (const auto& [rule, f] : fewest)
      line += fmt::format("\n    rule '{}': {} outputs differ (fewest over {} configurations)", rule, f.first,
                          f.second);
  }
  if (r.contains("differing_from_round_half_away"))
    line += fmt::format("; against round-half-away: {} differ",
                        r["differing_from_round_half_away"].get<size_t>());
  return line;
}

int run(int argc, char** argv) {
  int64_t batch = 1024;
  std::string json_path;
  std::vector<Variant> variants(std::begin(kVariants), std::end(kVariants));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      const std::string v = argv[++i];
      char* end = nullptr;
      batch = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || batch < 1 || batch > 65536) {
        std::fprintf(stderr, "cudnn_q8_probe: --batch '%s' is not a batch size from 1 to 65536\n", v.c_str());
        return 2;
      }
    } else if (a == "--graphs" && i + 1 < argc) {
      variants.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        const auto* v = std::find_if(std::begin(kVariants), std::end(kVariants),
                                     [&](Variant x) { return name == variant_name(x); });
        if (v == std::end(kVariants)) {
          std::fprintf(stderr, "cudnn_q8_probe: --graphs: no graph named '%s'\n", name.c_str());
          return 2;
        }
        variants.push_back(*v);
        at = comma + 1;
      }
    } else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: cudnn_q8_probe [--batch N] [--graphs NAME,...] [--json FILE]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cudnn_q8_probe: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  PROBE_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnn_q8_probe: cudnnCreate failed\n");
    return 1;
  }
  nlohmann::json out{{"device", prop.name},
                     {"compute_capability", fmt::format("{}.{}", prop.major, prop.minor)},
                     {"cudnn_version", cudnnGetVersion()},
                     {"cudnn_frontend_version", CUDNN_FRONTEND_VERSION},
                     {"batch", batch},
                     {"results", nlohmann::json::array()}};
  for (const Shape& s : kShapes)
    for (const Variant v : variants) {
      nlohmann::json r = probe(handle, s, v, batch);
      std::printf("%s\n", summary_line(s, v, r).c_str());
      std::fflush(stdout);
      out["results"].push_back(std::move(r));
      // Whole or absent, never half-written; rewritten after each graph.
      if (json_path.empty()) continue;
      if (const Status st = write_file_atomic(json_path, out.dump(2) + "\n"); !st.is_ok()) {
        std::fprintf(stderr, "cudnn_q8_probe: %s\n", st.to_string().c_str());
        cudnnDestroy(handle);
        return 1;
      }
    }
  cudnnDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace gpulab::bench

int main(int argc, char** argv) {
  try {
    return gpulab::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudnn_q8_probe: %s\n", e.what());
    return 1;
  }
}
