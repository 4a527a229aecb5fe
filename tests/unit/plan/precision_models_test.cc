// BF16 storage of the bundled MobileNetV2, emulated on the CPU with the plan interpreter: the error
// of the logits against the reference backend (FP32, original graph) on the five photos of
// data/images (the model's own TF-Slim preprocessing) and on tests/gpu/engine's random input.
// The all-BF16 plan reproduces the H200's 6.3e-2 (random input); the precision policy of
// default_layer_precision() must bring it under the 3e-2 bound. The DISABLED_ tests are the
// measurements behind the policy (per-layer sensitivity, candidate policies with their extra
// bytes); run them with --gtest_also_run_disabled_tests (minutes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "backends/reference/reference_executor.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  Graph graph;  // after run_passes
  Tensor input;
  std::vector<float> ref;
};

Fixture* load_fixture(bool photos) {
  static std::map<bool, std::unique_ptr<Fixture>> cache;
  auto& slot = cache[photos];
  if (slot) return slot.get();
  const fs::path model = testing::source_dir() / "models/mobilenet_v2_1.0_224.onnx";
  if (!fs::exists(model)) return nullptr;
  auto graph = load_onnx(model);
  EXPECT_TRUE(graph.is_ok()) << graph.status().to_string();
  if (!graph.is_ok()) return nullptr;
  auto f = std::make_unique<Fixture>();
  const Graph original = *graph;
  if (photos) {
    auto spec = preprocess_from_metadata(graph->metadata);
    EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
    std::vector<Image> images;
    for (const char* name : {"cat.bmp", "grace_hopper.bmp", "hot_dog.jpg", "owl.jpg", "parrot.jpg"}) {
      auto image = decode_image(testing::source_dir() / "data/images" / name);
      EXPECT_TRUE(image.is_ok()) << image.status().to_string();
      if (!image.is_ok()) return nullptr;
      images.push_back(std::move(image).value());
    }
    auto batch = make_batch(images, *spec);
    EXPECT_TRUE(batch.is_ok());
    f->input = std::move(batch).value();
  } else {  // tests/gpu/engine's input: N(0, 1), seed 2024, batch 2
    f->input = Tensor(DataType::kFloat32, Shape{2, 3, 224, 224});
    std::mt19937 rng(2024);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : f->input.f32()) v = dist(rng);
  }
  auto exec = ReferenceExecutor::create(original);
  EXPECT_TRUE(exec.is_ok());
  auto ref = exec->run(std::vector<Tensor>{f->input});
  EXPECT_TRUE(ref.is_ok());
  f->ref.assign((*ref)[0].f32().begin(), (*ref)[0].f32().end());
  EXPECT_TRUE(run_passes(*graph).is_ok());
  f->graph = std::move(graph).value();
  slot = std::move(f);
  return slot.get();
}

double emulated_error(const Fixture& f, const Plan& plan, const InterpretOptions& options) {
  const auto in = f.input.f32();
  auto got = interpret_plan(plan, in, f.input.shape()[0], options);
  EXPECT_TRUE(got.is_ok()) << got.status().to_string();
  if (!got.is_ok()) return 1e9;
  const ErrorStats e = compare(*got, f.ref);
  EXPECT_EQ(e.non_finite, 0);
  return e.rel_l2;
}

Result<Plan> lower(const Graph& graph, Precision precision) {
  BuildOptions options;
  options.precision = precision;
  options.max_batch = 8;
  return lower_graph(graph, options);
}

// Per-layer sensitivity of BF16 storage (opt-in, minutes: --gtest_also_run_disabled_tests).
void sweep(bool photos) {
  Fixture* f = load_fixture(photos);
  if (!f) GTEST_SKIP() << "models/mobilenet_v2_1.0_224.onnx not found";
  auto plan = lower(f->graph, Precision::kFp32);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  InterpretOptions bf16;
  bf16.storage_dtype = DataType::kBFloat16;
  std::printf("fp32 plan: %.2e\n", emulated_error(*f, *plan, {}));
  const double base = emulated_error(*f, *plan, bf16);
  std::printf("bf16 everything: %.3e\n", base);
  for (const PlanStep& s : plan->steps) {
    if (s.output < 0) continue;
    InterpretOptions out = bf16;
    out.float32_outputs = {s.name};
    InterpretOptions w = bf16;
    w.float32_weights = {s.name};
    const double e_out = emulated_error(*f, *plan, out);
    const double e_w = s.weight >= 0 ? emulated_error(*f, *plan, w) : base;
    std::printf("%-50s %-6s out fp32 %.3e  weights fp32 %.3e  (%lld B/img)\n", s.name.c_str(),
                std::string(step_kind_name(s.kind)).c_str(), e_out, e_w,
                static_cast<long long>(plan->values[s.output].bytes_per_image()));
  }
}

// A BF16 plan of the model; `policy` false opts every policy layer out (all layers BF16).
Result<Plan> lower_bf16(const Graph& graph, bool policy) {
  BuildOptions options;
  options.precision = Precision::kBf16;
  options.max_batch = 8;
  if (!policy)
    for (const auto& [name, p] : default_layer_precision(graph, Precision::kBf16))
      options.layer_precision[name] = Precision::kBf16;
  return lower_graph(graph, options);
}

void check_bf16_plan(bool photos, double without_policy_min) {
  Fixture* f = load_fixture(photos);
  if (!f) GTEST_SKIP() << "models/mobilenet_v2_1.0_224.onnx not found";
  auto plain = lower_bf16(f->graph, false);
  auto mixed = lower_bf16(f->graph, true);
  ASSERT_TRUE(plain.is_ok() && mixed.is_ok());
  // Every value of the plain plan is stored in BF16: its emulated error reproduces the GPU's.
  const double e_plain = emulated_error(*f, *plain, {});
  const double e_mixed = emulated_error(*f, *mixed, {});
  int fp32_convs = 0, casts = 0;
  double fp32_flops = 0, all_flops = 0;
  for (const auto& s : mixed->steps) {
    // Policy layers run in TF32 with FP32 storage (the emulation treats them as FP32: it does not
    // round their inputs to TF32, whose 11 significant bits add little next to BF16's 8).
    const bool fp32 = s.kind == StepKind::kConv && s.precision == Precision::kTf32;
    fp32_convs += fp32;
    casts += s.kind == StepKind::kCast;
    all_flops += s.flops_per_image;
    if (fp32) fp32_flops += s.flops_per_image;
  }
  std::printf(
      "[ bf16  ] %s: all-bf16 plan rel L2 %.3e, policy plan %.3e (%d TF32 convs with %.0f%% of the FLOPs, "
      "%d casts, weights %.2f -> %.2f MiB)\n",
      photos ? "photos" : "random N(0,1)", e_plain, e_mixed, fp32_convs, 100 * fp32_flops / all_flops, casts,
      plain->weights_bytes() / 1048576.0, mixed->weights_bytes() / 1048576.0);
  EXPECT_GT(e_plain, without_policy_min);
  EXPECT_GT(e_plain, 2.5 * e_mixed);
  EXPECT_LE(e_mixed, 1.2e-2);  // the bound is 3e-2; the margin covers GPU tactics that round more
  EXPECT_EQ(fp32_convs, 35);   // 17 depthwise + 17 projections + the stem
  // The runtime folds the casts before the depthwise layers (their x is BF16, widened exactly as
  // the kernel loads it): the plan computes the same values.
  Plan folded = *mixed;
  EXPECT_EQ(fold_input_casts(folded, [](const PlanStep& conv) { return conv.conv.groups > 1; }), 16)
      << "every depthwise layer but the first, which reads the TF32 stem's float32 output";
  EXPECT_EQ(emulated_error(*f, folded, {}), e_mixed);
}

// All-BF16 plans (float32 biases) emulate at 2.6e-2 (photos) and 3.9e-2 (random input); with
// BF16 biases as well the H200 measured 6.3e-2 on the random input.
TEST(PrecisionModels, Bf16PolicyMeetsBoundOnPhotos) {
  check_bf16_plan(true, 2e-2);
}
// The input of tests/gpu/engine's BundledMobileNetV2AllPrecisions.
TEST(PrecisionModels, Bf16PolicyMeetsBoundOnRandomInput) {
  check_bf16_plan(false, 3e-2);
}

TEST(PrecisionModels, Fp16PlanWithinBound) {
  Fixture* f = load_fixture(false);
  if (!f) GTEST_SKIP() << "models/mobilenet_v2_1.0_224.onnx not found";
  auto plan = lower(f->graph, Precision::kFp16);
  ASSERT_TRUE(plan.is_ok());
  for (const auto& s : plan->steps) EXPECT_NE(s.kind, StepKind::kCast) << s.name;  // no policy for FP16
  EXPECT_LE(emulated_error(*f, *plan, {}), 1e-2);
}

// Families of steps of a lowered MobileNetV2-like plan.
struct Families {
  std::set<std::string> projection, depthwise, expand, classifier, stem, head, gap, input;
};
Families families(const Plan& plan) {
  Families f;
  const int final_value = plan.steps.back().inputs[0];
  for (const PlanStep& s : plan.steps) {
    if (s.kind == StepKind::kInput) f.input.insert(s.name);
    if (s.kind == StepKind::kGlobalAveragePool) f.gap.insert(s.name);
    if (s.kind != StepKind::kConv) continue;
    const bool one_by_one = s.conv.kernel.h == 1 && s.conv.kernel.w == 1;
    if (s.output == final_value) {
      f.classifier.insert(s.name);
    } else if (s.conv.groups > 1) {
      f.depthwise.insert(s.name);
    } else if (one_by_one && s.conv.activation == Activation::kNone) {
      f.projection.insert(s.name);
    } else if (!one_by_one) {
      f.stem.insert(s.name);
    } else if (s.name.find("expand") != std::string::npos) {
      f.expand.insert(s.name);
    } else {
      f.head.insert(s.name);
    }
  }
  return f;
}

std::set<std::string> unite(std::initializer_list<std::set<std::string>> sets) {
  std::set<std::string> out;
  for (const auto& s : sets) out.insert(s.begin(), s.end());
  return out;
}

void candidates(bool photos) {
  Fixture* f = load_fixture(photos);
  if (!f) GTEST_SKIP() << "models/mobilenet_v2_1.0_224.onnx not found";
  auto lowered = lower(f->graph, Precision::kFp32);
  ASSERT_TRUE(lowered.is_ok()) << lowered.status().to_string();
  const Plan& plan = *lowered;
  const Families fam = families(plan);
  std::set<std::string> all_steps;
  for (const auto& s : plan.steps) all_steps.insert(s.name);
  // A plan whose weights are already bfloat16-rounded except the biases (kept float32).
  Plan fp32_bias = plan;
  std::set<int> biases;
  for (const auto& s : plan.steps)
    if (s.bias >= 0) biases.insert(s.bias);
  for (size_t i = 0; i < fp32_bias.weights.size(); ++i) {
    if (biases.contains(static_cast<int>(i))) continue;
    auto v = floats_from_bytes(fp32_bias.weights[i].bytes, DataType::kFloat32);
    for (float& x : v) x = round_to_dtype(x, DataType::kBFloat16);
    fp32_bias.weights[i].bytes = convert_floats(v, DataType::kFloat32);
  }
  auto extra = [&](const std::set<std::string>& outs, const std::set<std::string>& weights) {
    int64_t values_b = 0, weights_b = 0;
    for (const auto& s : plan.steps) {
      if (s.output >= 0 && outs.contains(s.name)) values_b += plan.values[s.output].bytes_per_image() / 2;
      if (weights.contains(s.name)) {
        if (s.weight >= 0) weights_b += static_cast<int64_t>(plan.weights[s.weight].bytes.size()) / 2;
        if (s.bias >= 0) weights_b += static_cast<int64_t>(plan.weights[s.bias].bytes.size()) / 2;
      }
    }
    return std::pair{values_b, weights_b};
  };
  struct Candidate {
    std::string name;
    std::set<std::string> outs, weights;
    const Plan* plan;
  };
  const std::vector<Candidate> list = {
      {"all bf16", {}, {}, &plan},
      {"all weights fp32", {}, all_steps, &plan},
      {"all activations fp32", all_steps, {}, &plan},
      {"biases fp32", {}, all_steps, &fp32_bias},
      {"input image fp32", fam.input, {}, &plan},
      {"classifier out+weights, its input (GAP) fp32", unite({fam.classifier, fam.gap}), fam.classifier,
       &plan},
      {"projection outputs fp32", fam.projection, {}, &plan},
      {"projection outputs+weights fp32", fam.projection, fam.projection, &plan},
      {"depthwise outputs fp32", fam.depthwise, {}, &plan},
      {"depthwise weights fp32", {}, fam.depthwise, &plan},
      {"depthwise outputs+weights fp32", fam.depthwise, fam.depthwise, &plan},
      {"expand outputs fp32", fam.expand, {}, &plan},
      {"expand weights fp32", {}, fam.expand, &plan},
      {"stem+head+classifier+gap outputs+weights fp32", unite({fam.stem, fam.head, fam.classifier, fam.gap}),
       unite({fam.stem, fam.head, fam.classifier}), &plan},
      {"projection outputs + classifier/GAP fp32", unite({fam.projection, fam.classifier, fam.gap}),
       fam.classifier, &plan},
      {"projection outputs + input fp32", unite({fam.projection, fam.input}), {}, &plan},
      {"projection + depthwise outputs fp32", unite({fam.projection, fam.depthwise}), {}, &plan},
      {"projection outputs + biases fp32", fam.projection, all_steps, &fp32_bias},
      {"layers fp32: depthwise", {}, fam.depthwise, &plan},
      {"layers fp32: projection", {}, fam.projection, &plan},
      {"layers fp32: depthwise+projection", {}, unite({fam.depthwise, fam.projection}), &plan},
      {"layers fp32: depthwise+projection+stem", {}, unite({fam.depthwise, fam.projection, fam.stem}), &plan},
      {"layers fp32: depthwise+stem", {}, unite({fam.depthwise, fam.stem}), &plan},
      {"layers fp32: projection+stem", {}, unite({fam.projection, fam.stem}), &plan},
      {"layers fp32: dw+proj, proj outputs fp32", fam.projection, unite({fam.depthwise, fam.projection}),
       &plan},
      {"layers fp32: dw+proj, dw+proj outputs fp32", unite({fam.depthwise, fam.projection}),
       unite({fam.depthwise, fam.projection}), &plan},
  };
  for (const auto& c : list) {
    InterpretOptions o;
    o.storage_dtype = DataType::kBFloat16;
    o.float32_outputs = c.outs;
    o.float32_weights = c.weights;
    const auto [vb, wb] = extra(c.outs, c.plan == &fp32_bias ? std::set<std::string>{} : c.weights);
    std::printf("| %-48s | %.3e | %9lld | %9lld |\n", c.name.c_str(), emulated_error(*f, *c.plan, o),
                static_cast<long long>(vb), static_cast<long long>(wb));
  }
}

TEST(PrecisionModels, DISABLED_Bf16CandidatesPhotos) {
  candidates(true);
}
TEST(PrecisionModels, DISABLED_Bf16CandidatesRandom) {
  candidates(false);
}

TEST(PrecisionModels, DISABLED_Bf16SensitivityPhotos) {
  sweep(true);
}
TEST(PrecisionModels, DISABLED_Bf16SensitivityRandom) {
  sweep(false);
}

}  // namespace
}  // namespace gpulab
