// INT8 and FP8 plans on a small residual network, on the CPU: lowering (which steps run in 8
// bits, casts around a layer moved to FP16, scales), the interpreter against an independent
// emulation of src/core/quant.h's rules written here with plain NCHW loops (INT8: bit for bit; FP8:
// its float32 sums in another order, so within a small tolerance), against FP32, and the plan file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"
#include "core/half.h"
#include "core/quant.h"
#include "normal_tensor.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/plan.h"
#include "residual_net.h"

namespace gpulab {
namespace {

using testing::normal_tensor;
using testing::residual_net;

constexpr int64_t kBatch = 2;

struct Fixture {
  Graph graph = residual_net();
  Tensor input = normal_tensor(Shape{kBatch, 3, 8, 8}, 11, 1.0f);
  std::map<std::string, Tensor> fp32;  // every value, from the reference backend
  std::map<std::string, float> amax;   // max |x| of each value
};

Fixture make_fixture() {
  Fixture f;
  auto exec = ReferenceExecutor::create(f.graph);
  EXPECT_TRUE(exec.is_ok());
  auto run = exec->run_with_values(std::vector<Tensor>{f.input});
  EXPECT_TRUE(run.is_ok()) << run.status().to_string();
  f.fp32 = run->values;
  for (const auto& [name, t] : f.fp32) {
    float m = 0;
    for (float v : t.f32()) m = std::max(m, std::abs(v));
    f.amax[name] = m;
  }
  return f;
}

Result<Plan> lower(const Fixture& f, Precision precision, std::map<std::string, Precision> layers = {}) {
  BuildOptions options{.precision = precision, .max_batch = kBatch};
  options.activation_amax = f.amax;
  options.layer_precision = std::move(layers);
  return lower_graph(f.graph, options);
}

// --- the independent emulation (NCHW, plain loops, quant.h's rules) --------------------------

struct Q {               // a quantized NCHW tensor
  std::vector<float> q;  // quantized numbers
  float scale = 1;
  int64_t c = 0, h = 0, w = 0;
};

float quantize(float v, float scale, bool fp8) {
  return fp8 ? quantize_fp8(v, 1.0f / scale) : static_cast<float>(quantize_int8(v, 1.0f / scale));
}
float act_scale(const Fixture& f, const std::string& name, bool fp8) {
  return symmetric_scale(f.amax.at(name), fp8 ? kFp8E4M3Max : kInt8QuantMax);
}

// The convolution node `name` of the graph on quantized x, written at y's scale; epilogue in the
// order quant.h gives.
Q conv(const Fixture& f, const std::string& name, const Q& x, const Q* residual, bool fp8) {
  const Node* node = nullptr;
  for (const Node& n : f.graph.nodes)
    if (n.name == name) node = &n;
  const auto& a = node->attr<ConvAttrs>();
  const Tensor& wt = *f.graph.initializer(node->input(1));
  const int64_t k = wt.shape()[0], cg = wt.shape()[1], r = wt.shape()[2], s = wt.shape()[3];
  const QuantizedWeights w = quantize_per_channel(wt.f32(), k, fp8);
  std::vector<float> bias(static_cast<size_t>(k), 0.0f);
  if (node->has_input(2))
    bias.assign(f.graph.initializer(node->input(2))->f32().begin(),
                f.graph.initializer(node->input(2))->f32().end());
  Q y{.scale = act_scale(f, node->outputs[0], fp8), .c = k, .h = x.h, .w = x.w};
  y.q.resize(static_cast<size_t>(kBatch * k * x.h * x.w));
  for (int64_t n = 0; n < kBatch; ++n)
    for (int64_t ko = 0; ko < k; ++ko)
      for (int64_t oh = 0; oh < x.h; ++oh)
        for (int64_t ow = 0; ow < x.w; ++ow) {
          double acc = 0;  // exact for INT8; FP8's float32 sum is approximated
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ri = 0; ri < r; ++ri)
              for (int64_t si = 0; si < s; ++si) {
                const int64_t ih = oh - a.pads.top + ri, iw = ow - a.pads.left + si;
                if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                const int64_t c_in = (ko / (k / a.groups)) * cg + ci;
                acc += static_cast<double>(x.q[((n * x.c + c_in) * x.h + ih) * x.w + iw]) *
                       w.values[((ko * cg + ci) * r + ri) * s + si];
              }
          const int64_t at = ((n * k + ko) * x.h + oh) * x.w + ow;
          float v = q8_scale_bias(static_cast<float>(acc), x.scale * w.scales[ko], bias[ko]);
          if (residual) v = q8_add_residual(v, residual->q[at], residual->scale);
          if (a.activation == Activation::kRelu) v = std::max(v, 0.0f);
          if (a.activation == Activation::kClip) v = std::min(std::max(v, a.clip_min), a.clip_max);
          y.q[at] = quantize(v, y.scale, fp8);
        }
  return y;
}

// The logits (rounded to float16, the type the Gemm writes them in) of the whole network.
std::vector<float> emulate(const Fixture& f, bool fp8) {
  Q x{.scale = act_scale(f, "input", fp8), .c = 3, .h = 8, .w = 8};
  for (float v : f.input.f32()) x.q.push_back(quantize(v, x.scale, fp8));
  const Q a = conv(f, "conv1", x, nullptr, fp8);
  const Q b = conv(f, "conv2", a, nullptr, fp8);
  const Q c = conv(f, "conv3", b, &a, fp8);
  Q d{.scale = c.scale, .c = 8, .h = 4, .w = 4};  // max pool 2x2/2: the same scale
  for (int64_t n = 0; n < kBatch; ++n)
    for (int64_t ch = 0; ch < 8; ++ch)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 4; ++ow) {
          float m = -1e30f;
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j)
              m = std::max(m, c.q[((n * 8 + ch) * 8 + 2 * oh + i) * 8 + 2 * ow + j]);
          d.q.push_back(m);
        }
  const float e_scale = act_scale(f, "e", fp8);
  std::vector<float> e;  // GAP: sum, times x.scale / pixels, quantized at e's scale
  for (int64_t n = 0; n < kBatch; ++n)
    for (int64_t ch = 0; ch < 8; ++ch) {
      float sum = 0;
      for (int64_t i = 0; i < 16; ++i) sum += d.q[(n * 8 + ch) * 16 + i];
      e.push_back(quantize(sum * (d.scale / 16.0f), e_scale, fp8));
    }
  const Tensor& fw = *f.graph.initializer("fc.w");
  const QuantizedWeights w = quantize_per_channel(fw.f32(), 10, fp8);
  std::vector<float> logits;
  for (int64_t n = 0; n < kBatch; ++n)
    for (int64_t o = 0; o < 10; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < 8; ++i) acc += static_cast<double>(e[n * 8 + i]) * w.values[o * 8 + i];
      float v = static_cast<float>(acc) * (e_scale * w.scales[o]);
      v = v + f.graph.initializer("fc.b")->f32()[o];
      logits.push_back(half_bits_to_float(float_to_half_bits(v)));
    }
  return logits;
}

TEST(QuantizedPlan, Int8LowersEveryLayerTo8Bits) {
  const Fixture f = make_fixture();
  auto plan = lower(f, Precision::kInt8);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->values[0].dtype, DataType::kInt8) << "the input conversion quantizes";
  EXPECT_EQ(plan->values[0].c, 16) << "3 channels padded to 16 int8";
  EXPECT_FLOAT_EQ(plan->values[0].scale, f.amax.at("input") / 127.0f);
  for (const PlanStep& s : plan->steps) {
    EXPECT_NE(s.kind, StepKind::kCast) << s.name;
    if (s.kind == StepKind::kConv || s.kind == StepKind::kGemm) {
      EXPECT_EQ(s.precision, Precision::kInt8) << s.name;
      EXPECT_EQ(plan->weights[s.weight].dtype, DataType::kInt8) << s.name;
      ASSERT_GE(s.weight_scale, 0) << s.name;
      if (s.bias >= 0) {
        EXPECT_EQ(plan->weights[s.bias].dtype, DataType::kFloat32) << s.name;
      }
    }
    if (s.kind == StepKind::kMaxPool) {
      EXPECT_EQ(plan->values[s.output].dtype, DataType::kInt8);
      EXPECT_EQ(plan->values[s.output].scale, plan->values[s.inputs[0]].scale) << "max pool keeps the scale";
    }
    if (s.kind == StepKind::kGemm) {
      EXPECT_EQ(plan->values[s.output].dtype, DataType::kFloat16) << "logits";
    }
  }
}

TEST(QuantizedPlan, Int8InterpreterMatchesTheRulesBitForBit) {
  const Fixture f = make_fixture();
  auto plan = lower(f, Precision::kInt8);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  auto got = interpret_plan(*plan, f.input.f32(), kBatch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const std::vector<float> want = emulate(f, /*fp8=*/false);
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*got)[i], want[i]) << i;
  // Two threads give the same numbers.
  auto threaded = interpret_plan(*plan, f.input.f32(), kBatch, InterpretOptions{.num_threads = 2});
  ASSERT_TRUE(threaded.is_ok());
  EXPECT_EQ(*threaded, *got);
  // And INT8 stays close to FP32.
  const ErrorStats e = compare(*got, f.fp32.at("logits").f32());
  EXPECT_LT(e.rel_l2, 5e-2);
}

TEST(QuantizedPlan, Fp8InterpreterMatchesTheRules) {
  const Fixture f = make_fixture();
  auto plan = lower(f, Precision::kFp8);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  EXPECT_EQ(plan->values[0].dtype, DataType::kFp8E4M3);
  EXPECT_FLOAT_EQ(plan->values[0].scale, f.amax.at("input") / 448.0f);
  auto got = interpret_plan(*plan, f.input.f32(), kBatch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const std::vector<float> want = emulate(f, /*fp8=*/true);
  const ErrorStats e = compare(*got, want);
  EXPECT_LT(e.rel_l2, 1e-2) << "float32 sums in another order move a few values by one E4M3 step";
  EXPECT_LT(compare(*got, f.fp32.at("logits").f32()).rel_l2, 1e-1);
}

TEST(QuantizedPlan, LayerMovedToFp16ReadsAndWritesThroughCasts) {
  const Fixture f = make_fixture();
  auto plan = lower(f, Precision::kInt8, {{"conv2", Precision::kFp16}});
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::vector<std::string> casts;
  for (const PlanStep& s : plan->steps) {
    if (s.kind == StepKind::kCast)
      casts.push_back(plan->values[s.inputs[0]].name + ":" +
                      std::string(dtype_name(plan->values[s.inputs[0]].dtype)) + "->" +
                      std::string(dtype_name(plan->values[s.output].dtype)));
    if (s.name == "conv2") {
      EXPECT_EQ(s.precision, Precision::kFp16);
      EXPECT_EQ(plan->weights[s.weight].dtype, DataType::kFloat16);
    }
  }
  // conv1 still writes int8 (conv3 reads it as its residual); conv2 reads a dequantized copy and
  // writes float16, which conv3 reads quantized at b's calibrated scale.
  EXPECT_EQ(casts, (std::vector<std::string>{"a:int8->float16", "b:float16->int8"}));
  auto got = interpret_plan(*plan, f.input.f32(), kBatch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_LT(compare(*got, f.fp32.at("logits").f32()).rel_l2, 5e-2);
}

TEST(QuantizedPlan, LayersWhoseReadersComputeInFloatWriteFloat) {
  const Fixture f = make_fixture();
  // fc in FP16: nothing after conv3 is read in 8 bits, so conv3's epilogue writes float16 (no
  // requantization) and the pools compute in float16.
  auto plan = lower(f, Precision::kInt8, {{"fc", Precision::kFp16}});
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  for (const PlanStep& s : plan->steps) {
    if (s.name == "conv3") {
      EXPECT_EQ(s.precision, Precision::kInt8);
      EXPECT_EQ(plan->values[s.output].dtype, DataType::kFloat16);
    }
    if (s.kind == StepKind::kGlobalAveragePool || s.kind == StepKind::kMaxPool) {
      EXPECT_EQ(plan->values[s.output].dtype, DataType::kFloat16) << s.name;
    }
    EXPECT_NE(s.kind, StepKind::kCast) << s.name;
  }
  auto got = interpret_plan(*plan, f.input.f32(), kBatch);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_LT(compare(*got, f.fp32.at("logits").f32()).rel_l2, 5e-2);
}

TEST(QuantizedPlan, MissingRangeNamesTheValue) {
  Fixture f = make_fixture();
  auto bad = lower(f, Precision::kInt8, {{"conv1", Precision::kFp8}});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("conv1=fp8 in a int8 plan"), std::string::npos)
      << bad.status().message();
  f.amax.erase("b");
  auto plan = lower(f, Precision::kInt8);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("activation 'b' has no calibrated range"), std::string::npos)
      << plan.status().message();
}

TEST(QuantizedPlan, PlanFileKeepsScalesAndRefusesBadOnes) {
  const Fixture f = make_fixture();
  auto plan = lower(f, Precision::kInt8);
  ASSERT_TRUE(plan.is_ok());
  auto back = deserialize_plan(serialize_plan(*plan));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->values.size(), plan->values.size());
  for (size_t i = 0; i < plan->values.size(); ++i) EXPECT_EQ(back->values[i].scale, plan->values[i].scale);
  auto a = interpret_plan(*plan, f.input.f32(), kBatch);
  auto b = interpret_plan(*back, f.input.f32(), kBatch);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*a, *b);

  Plan no_scale = *plan;
  no_scale.values[0].scale = 0;
  EXPECT_EQ(no_scale.validate().code(), StatusCode::kInvalidFile);
  Plan no_weight_scale = *plan;
  for (PlanStep& s : no_weight_scale.steps)
    if (s.kind == StepKind::kConv) s.weight_scale = -1;
  const Status s = no_weight_scale.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidFile);
  EXPECT_NE(s.message().find("no float32 weight scales"), std::string::npos) << s.message();
}

TEST(QuantizedPlan, Fp8IsRefusedBelowAda) {
  const Fixture f = make_fixture();
  auto fp8 = lower(f, Precision::kFp8);
  auto int8 = lower(f, Precision::kInt8);
  ASSERT_TRUE(fp8.is_ok() && int8.is_ok());
  const PlanTarget a100{.gpu_name = "NVIDIA A100-SXM4-80GB", .compute_capability = 80};
  const PlanTarget l4{.gpu_name = "NVIDIA L4", .compute_capability = 89};
  const Status s = check_precision_supported(*fp8, a100);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("FP8 (E4M3) needs a GPU of compute capability 8.9 or newer"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("'NVIDIA A100-SXM4-80GB' is sm_80"), std::string::npos) << s.message();
  EXPECT_TRUE(check_precision_supported(*fp8, l4).is_ok());
  EXPECT_TRUE(check_precision_supported(*int8, a100).is_ok());
}

}  // namespace
}  // namespace gpulab
