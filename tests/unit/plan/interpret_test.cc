// The plan interpreter's storage emulation and the BF16 precision policy of the lowering, on small
// hand-built graphs (CPU, milliseconds).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "normal_tensor.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/memory_plan.h"

namespace gpulab {
namespace {

using testing::normal_tensor;

Node conv_node(std::string name, std::string in, std::string w, std::string b, std::string out,
               int64_t kernel, int64_t groups, Activation act, std::string residual = "") {
  ConvAttrs a;
  a.kernel = {kernel, kernel};
  const int64_t pad = kernel / 2;
  a.pads = {pad, pad, pad, pad};
  a.groups = groups;
  a.activation = act;
  a.has_residual = !residual.empty();
  Node n{std::move(name), OpType::kConv, {std::move(in), std::move(w), std::move(b)}, {std::move(out)}, a};
  if (a.has_residual) n.inputs.push_back(std::move(residual));
  return n;
}

// An inverted-residual block: input [N,3,8,8] -> stem 3x3 (16) relu6 -> expand 1x1 (32) relu6
// -> depthwise 3x3 (32) relu6 -> project 1x1 (16) + stem output -> GAP -> Flatten -> Gemm(10).
Graph block_classifier() {
  Graph g;
  g.name = "block";
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, 3, 8, 8}, std::nullopt};
  uint32_t seed = 1;
  auto init = [&](const std::string& n, Shape s, float scale) {
    g.initializers[n] = normal_tensor(s, seed++, scale);
  };
  init("stem.w", Shape{16, 3, 3, 3}, 0.3f);
  init("stem.b", Shape{16}, 0.1f);
  init("expand.w", Shape{32, 16, 1, 1}, 0.3f);
  init("expand.b", Shape{32}, 0.1f);
  init("dw.w", Shape{32, 1, 3, 3}, 0.3f);
  init("dw.b", Shape{32}, 0.1f);
  init("project.w", Shape{16, 32, 1, 1}, 0.2f);
  init("project.b", Shape{16}, 0.1f);
  init("fc.w", Shape{10, 16}, 0.3f);
  init("fc.b", Shape{10}, 0.1f);
  g.nodes = {conv_node("stem", "input", "stem.w", "stem.b", "s", 3, 1, Activation::kClip),
             conv_node("expand", "s", "expand.w", "expand.b", "e", 1, 1, Activation::kClip),
             conv_node("dw", "e", "dw.w", "dw.b", "d", 3, 32, Activation::kClip),
             conv_node("project", "d", "project.w", "project.b", "p", 1, 1, Activation::kNone, "s"),
             Node{"gap", OpType::kGlobalAveragePool, {"p"}, {"g"}, {}},
             Node{"flat", OpType::kFlatten, {"g"}, {"f"}, FlattenAttrs{1}}};
  GemmAttrs ga;
  ga.trans_b = true;
  g.nodes.push_back(Node{"fc", OpType::kGemm, {"f", "fc.w", "fc.b"}, {"logits"}, ga});
  g.outputs = {"logits"};
  EXPECT_TRUE(g.infer_shapes().is_ok());
  return g;
}

Plan lower_or_die(const Graph& g, Precision p, std::map<std::string, Precision> layers = {}) {
  BuildOptions options;
  options.precision = p;
  options.max_batch = 2;
  options.layer_precision = std::move(layers);
  auto plan = lower_graph(g, options);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  return plan.is_ok() ? std::move(plan).value() : Plan{};
}

std::vector<float> input_floats(int64_t batch) {
  const Tensor t = normal_tensor(Shape{batch, 3, 8, 8}, 77, 1.0f);
  return {t.f32().begin(), t.f32().end()};
}

bool is_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return (bits & 0xffffu) == 0;
}

TEST(PlanConversions, RoundToDtypeAndBack) {
  EXPECT_EQ(round_to_dtype(1.0f + 1.0f / 256, DataType::kBFloat16), 1.0f);  // tie -> even
  EXPECT_EQ(round_to_dtype(1.0f + 3.0f / 256, DataType::kBFloat16), 1.0f + 4.0f / 256);
  EXPECT_EQ(round_to_dtype(1.0f + 1.0f / 2048, DataType::kFloat16), 1.0f);
  EXPECT_EQ(round_to_dtype(0.1f, DataType::kFloat32), 0.1f);
  const std::vector<float> v = {0.1f, -3.5f, 65504.0f, 1e-6f};
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32}) {
    const auto back = floats_from_bytes(convert_floats(v, t), t);
    ASSERT_EQ(back.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], round_to_dtype(v[i], t)) << dtype_name(t);
  }
  EXPECT_TRUE(floats_from_bytes(std::vector<std::byte>(4), DataType::kInt32).empty());
  // 8-bit types hold quantized numbers: int8 integers, E4M3 values.
  const std::vector<float> q = {-128.0f, -1.0f, 0.0f, 127.0f};
  EXPECT_EQ(floats_from_bytes(convert_floats(q, DataType::kInt8), DataType::kInt8), q);
  const std::vector<float> e4m3 = {-448.0f, 0.001953125f, 1.125f, 240.0f};
  EXPECT_EQ(floats_from_bytes(convert_floats(e4m3, DataType::kFp8E4M3), DataType::kFp8E4M3), e4m3);
}

// A BF16 plan interpreted with its own dtypes and an FP32 plan interpreted with BF16 storage
// emulation round the same numbers at the same places: identical logits, every stored value a
// bfloat16, and an error against FP32 of bfloat16's size.
TEST(PlanInterpreter, StorageEmulationMatchesBf16Plan) {
  const Graph g = block_classifier();
  const std::map<std::string, Precision> all_bf16 = {
      {"stem", Precision::kBf16}, {"dw", Precision::kBf16}, {"project", Precision::kBf16}};
  const Plan bf16 = lower_or_die(g, Precision::kBf16, all_bf16);
  const Plan fp32 = lower_or_die(g, Precision::kFp32);
  for (const auto& v : bf16.values) EXPECT_EQ(v.dtype, DataType::kBFloat16) << v.name;
  const auto in = input_floats(2);
  auto exact = interpret_plan(fp32, in, 2);
  ASSERT_TRUE(exact.is_ok()) << exact.status().to_string();
  std::vector<std::vector<float>> stored;
  InterpretOptions emulate;
  emulate.storage_dtype = DataType::kBFloat16;
  emulate.values = &stored;
  auto emulated = interpret_plan(fp32, in, 2, emulate);
  auto own = interpret_plan(bf16, in, 2);
  ASSERT_TRUE(emulated.is_ok() && own.is_ok());
  EXPECT_EQ(*emulated, *own);
  ASSERT_EQ(stored.size(), fp32.values.size());
  for (const auto& v : stored)
    for (float x : v) ASSERT_TRUE(is_bf16(x)) << x;
  const double e = compare(*own, *exact).rel_l2;
  EXPECT_GT(e, 1e-4);
  EXPECT_LT(e, 5e-2);
  // Exempting every step restores the FP32 result exactly.
  InterpretOptions none = emulate;
  none.values = nullptr;
  for (const auto& s : fp32.steps) {
    none.float32_outputs.insert(s.name);
    none.float32_weights.insert(s.name);
  }
  auto restored = interpret_plan(fp32, in, 2, none);
  ASSERT_TRUE(restored.is_ok());
  EXPECT_EQ(*restored, *exact);
}

TEST(PlanInterpreter, RefusesBadInput) {
  const Plan plan = lower_or_die(block_classifier(), Precision::kFp32);
  auto short_input = interpret_plan(plan, std::vector<float>(10), 1);
  ASSERT_FALSE(short_input.is_ok());
  EXPECT_EQ(short_input.status().code(), StatusCode::kInvalidArgument);
  InterpretOptions int8;
  int8.storage_dtype = DataType::kInt8;
  auto bad_dtype = interpret_plan(plan, input_floats(1), 1, int8);
  ASSERT_FALSE(bad_dtype.is_ok());
  EXPECT_NE(bad_dtype.status().message().find("int8"), std::string::npos);
}

TEST(PrecisionPolicy, Bf16KeepsStemDepthwiseAndLinearProjectionsInTf32) {
  const Graph g = block_classifier();
  const auto policy = default_layer_precision(g, Precision::kBf16);
  EXPECT_EQ(policy,
            (std::map<std::string, Precision>{
                {"stem", Precision::kTf32}, {"dw", Precision::kTf32}, {"project", Precision::kTf32}}));
  EXPECT_TRUE(default_layer_precision(g, Precision::kFp16).empty());
  EXPECT_TRUE(default_layer_precision(g, Precision::kFp32).empty());

  const Plan plan = lower_or_die(g, Precision::kBf16);
  std::map<std::string, const PlanStep*> by_name;
  for (const auto& s : plan.steps) by_name[s.name] = &s;
  ASSERT_TRUE(by_name.contains("dw") && by_name.contains("project") && by_name.contains("expand"));
  EXPECT_EQ(by_name["expand"]->precision, Precision::kBf16);
  // A BF16 layer keeps BF16 weights and a float32 bias.
  EXPECT_EQ(plan.weights[by_name["expand"]->weight].dtype, DataType::kBFloat16);
  EXPECT_EQ(plan.weights[by_name["expand"]->bias].dtype, DataType::kFloat32);
  // The stem, the input's only reader, runs in TF32, so the input is float32: no cast before it.
  EXPECT_EQ(plan.values[0].dtype, DataType::kFloat32);
  EXPECT_EQ(by_name["stem"]->inputs[0], 0);
  for (const char* name : {"stem", "dw", "project"}) {
    const PlanStep& s = *by_name[name];
    EXPECT_EQ(s.precision, Precision::kTf32) << name;
    EXPECT_EQ(plan.weights[s.weight].dtype, DataType::kFloat32) << name;
    EXPECT_EQ(plan.weights[s.bias].dtype, DataType::kFloat32) << name;
    EXPECT_EQ(plan.values[s.output].dtype, DataType::kFloat32) << name;
    for (int v : s.inputs) EXPECT_EQ(plan.values[v].dtype, DataType::kFloat32) << name;
  }
  // The depthwise output is read by the projection as written (no round trip through BF16), and
  // the stem's by the projection's residual; the casts are: stem output -> bf16 (expand), expand
  // output -> fp32 (depthwise), project output -> bf16 (pooling).
  EXPECT_EQ(by_name["project"]->inputs[0], by_name["dw"]->output);
  int casts = 0;
  for (const auto& s : plan.steps) {
    if (s.kind != StepKind::kCast) continue;
    ++casts;
    EXPECT_NE(plan.values[s.inputs[0]].dtype, plan.values[s.output].dtype);
  }
  EXPECT_EQ(casts, 3);
  EXPECT_EQ(plan.values[by_name["gap"]->inputs[0]].dtype, DataType::kBFloat16);
  EXPECT_TRUE(plan.validate().is_ok());

  // NAME=bf16 opts a layer out of the policy.
  const Plan opted = lower_or_die(g, Precision::kBf16, {{"project", Precision::kBf16}});
  for (const auto& s : opted.steps) {
    if (s.name == "project") {
      EXPECT_EQ(s.precision, Precision::kBf16);
    }
  }
}

// With the policy the emulated BF16 plan is closer to FP32 than without it, and still runs.
TEST(PrecisionPolicy, Bf16PlanWithPolicyInterprets) {
  const Graph g = block_classifier();
  const auto in = input_floats(2);
  auto exact = interpret_plan(lower_or_die(g, Precision::kFp32), in, 2);
  auto mixed = interpret_plan(lower_or_die(g, Precision::kBf16), in, 2);
  ASSERT_TRUE(exact.is_ok() && mixed.is_ok());
  const ErrorStats e = compare(*mixed, *exact);
  EXPECT_EQ(e.non_finite, 0);
  EXPECT_LT(e.rel_l2, 2e-2);
}

// fold_input_casts: the BF16 policy's depthwise layer reads the BF16 expansion itself, and the
// plan computes bitwise what it did with the float32 copy (BF16 -> FP32 is exact).
TEST(FoldInputCasts, DepthwiseReadsTheBf16ValueWithTheSameResults) {
  const Graph g = block_classifier();
  const Plan before = lower_or_die(g, Precision::kBf16);
  Plan after = before;
  const auto grouped = [](const PlanStep& conv) { return conv.conv.groups > 1; };
  EXPECT_EQ(fold_input_casts(after, grouped), 1);
  EXPECT_EQ(after.steps.size(), before.steps.size() - 1);
  const auto step_named = [](const Plan& plan, const std::string& name) -> const PlanStep& {
    for (const auto& s : plan.steps)
      if (s.name == name) return s;
    ADD_FAILURE() << "no step " << name;
    return plan.steps.front();
  };
  const PlanStep& expand = step_named(after, "expand");
  const PlanStep& dw = step_named(after, "dw");
  EXPECT_EQ(dw.inputs[0], expand.output);
  EXPECT_EQ(after.values[dw.inputs[0]].dtype, DataType::kBFloat16);
  EXPECT_EQ(after.values[dw.output].dtype, DataType::kFloat32);
  EXPECT_TRUE(after.validate().is_ok());
  const auto in = input_floats(2);
  auto y_before = interpret_plan(before, in, 2);
  auto y_after = interpret_plan(after, in, 2);
  ASSERT_TRUE(y_before.is_ok() && y_after.is_ok());
  EXPECT_EQ(*y_after, *y_before);
  // A plan file keeps the folded form (plan format version 2).
  auto reloaded = deserialize_plan(serialize_plan(after));
  ASSERT_TRUE(reloaded.is_ok()) << reloaded.status().to_string();
  auto y_reloaded = interpret_plan(*reloaded, in, 2);
  ASSERT_TRUE(y_reloaded.is_ok());
  EXPECT_EQ(*y_reloaded, *y_before);
  // The copy takes no memory once no step writes it.
  const std::vector<BufferRequest> life = value_lifetimes(after, 2);
  EXPECT_EQ(life[step_named(before, "dw").inputs[0]].bytes, 0);
  // Nothing to fold the second time, and nothing when the runtime cannot read 16-bit x.
  EXPECT_EQ(fold_input_casts(after, grouped), 0);
  Plan refused = before;
  EXPECT_EQ(fold_input_casts(refused, [](const PlanStep&) { return false; }), 0);
  EXPECT_EQ(refused.steps.size(), before.steps.size());
}

// Only casts to float32 whose every reader is a convolution's x are folded: in an FP16 plan with
// the depthwise layer and the projection overridden to FP32, the expansion's copy goes, the stem
// output's copy (the projection's residual) stays, and so does the projection output's cast back
// to FP16 (a rounding, not an exact widening).
TEST(FoldInputCasts, KeepsCastsOtherReadersNeed) {
  const Graph g = block_classifier();
  const Plan before =
      lower_or_die(g, Precision::kFp16, {{"dw", Precision::kFp32}, {"project", Precision::kFp32}});
  int casts_before = 0;
  for (const auto& s : before.steps) casts_before += s.kind == StepKind::kCast;
  EXPECT_EQ(casts_before, 3);
  Plan after = before;
  EXPECT_EQ(fold_input_casts(after, [](const PlanStep&) { return true; }), 1);
  int casts_after = 0, stem_output = -1, expand_output = -1;
  for (const auto& s : after.steps) {
    casts_after += s.kind == StepKind::kCast;
    if (s.name == "stem") stem_output = s.output;
    if (s.name == "expand") expand_output = s.output;
  }
  for (const auto& s : after.steps) {
    if (s.name == "dw") {
      EXPECT_EQ(s.inputs[0], expand_output);
    }
    if (s.kind == StepKind::kCast && after.values[s.output].dtype == DataType::kFloat32) {
      EXPECT_EQ(s.inputs[0], stem_output) << s.name;
    }
  }
  EXPECT_EQ(casts_after, 2);
  auto y_before = interpret_plan(before, input_floats(2), 2);
  auto y_after = interpret_plan(after, input_floats(2), 2);
  ASSERT_TRUE(y_before.is_ok() && y_after.is_ok());
  EXPECT_EQ(*y_after, *y_before);
}

}  // namespace
}  // namespace gpulab
