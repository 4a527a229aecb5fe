// The QDQ fixture (tests/fixtures/make_qdq_fixture.py): a residual CNN with int8 weights behind
// DequantizeLinear, int32 biases, symmetric int8 Q/DQ pairs on its activations and one uint8 pair
// with zero point 128, which an INT8 plan cannot take over.
//  - Imported and run by the reference backend as its float semantics (every pair rounds), it
//    matches numpy's evaluation of the same graph and onnxruntime CPU's output (1.16.3, when the
//    generator found it; the manifest says).
//  - fold_qdq folds the symmetric pairs (their scales recorded) and keeps the uint8 one.
//  - The INT8 plan lowered with no calibration at all takes the model's scales for every 8-bit
//    value and the weights' own per-channel scales (reproduced exactly), and its emulated logits
//    stay close to onnxruntime's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

fs::path fixture() {
  return testing::fixture_dir() / "qdq";
}

std::vector<float> read_f32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::vector<float> out(static_cast<size_t>(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  return out;
}

struct Fixture {
  nlohmann::json manifest;
  Tensor input;
  std::vector<float> numpy, onnxruntime;  // onnxruntime empty when the generator did not find it
};

std::optional<Fixture> load() {
  std::ifstream in(fixture() / "manifest.json");
  if (!in) return std::nullopt;
  Fixture f;
  f.manifest = nlohmann::json::parse(in);
  f.input = Tensor::from_floats(Shape{3, 3, 16, 16}, read_f32(fixture() / "qdq_net.b3.input.f32"));
  f.numpy = read_f32(fixture() / "qdq_net.b3.numpy.f32");
  if (f.manifest["references"].contains("onnxruntime"))
    f.onnxruntime = read_f32(fixture() / "qdq_net.b3.onnxruntime.f32");
  return f;
}

#define REQUIRE_FIXTURE(f)                                                                                 \
  auto f##_opt = load();                                                                                   \
  if (!f##_opt) GTEST_SKIP() << "no QDQ fixture in " << fixture() << "; run through ctest (fixtures.qdq)"; \
  const Fixture& f = *f##_opt

int count(const Graph& g, OpType op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == op;
  return n;
}

TEST(Qdq, ImportedGraphComputesTheModelsFloatSemantics) {
  REQUIRE_FIXTURE(f);
  auto graph = load_onnx(fixture() / "qdq_net.onnx");
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  EXPECT_EQ(count(*graph, OpType::kQuantizeDequantize), 7) << "one node per activation pair";
  EXPECT_EQ(graph->quantization.weight_scales.size(), 4u)
      << "conv1, conv2, conv3 and fc weights (int8, axis 0)";
  EXPECT_EQ(graph->quantization.weight_scales.at("conv1_weight_dq").size(), 8u);
  auto exec = ReferenceExecutor::create(*graph);
  ASSERT_TRUE(exec.is_ok());
  auto out = exec->run(std::vector<Tensor>{f.input});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const auto got = (*out)[0].f32();
  EXPECT_LT(compare(got, f.numpy).rel_l2, 1e-5) << "numpy evaluates the same float semantics";
  if (f.onnxruntime.empty()) {
    std::printf(
        "[ qdq ] onnxruntime was not installed when the fixture was generated: numpy reference only\n");
  } else {
    std::printf("[ qdq ] reference backend vs onnxruntime %s: rel L2 %.2e\n",
                f.manifest["onnxruntime"].get<std::string>().c_str(), compare(got, f.onnxruntime).rel_l2);
    EXPECT_LT(compare(got, f.onnxruntime).rel_l2, 1e-5);
  }
}

TEST(Qdq, FoldsSymmetricPairsAndKeepsTheUint8One) {
  REQUIRE_FIXTURE(f);
  auto graph = load_onnx(fixture() / "qdq_net.onnx");
  ASSERT_TRUE(graph.is_ok());
  ASSERT_TRUE(run_passes(*graph).is_ok());
  ASSERT_EQ(count(*graph, OpType::kQuantizeDequantize), 1);
  for (const Node& n : graph->nodes)
    if (n.op == OpType::kQuantizeDequantize) {
      EXPECT_EQ(n.name, "e_DequantizeLinear");
      EXPECT_EQ(n.attr<QuantizeAttrs>().zero_point[0], 128);
    }
  const auto& scales = graph->quantization.activation_scales;
  EXPECT_EQ(scales.size(), 6u);  // input, a, b, c, d, f
  const auto& want = f.manifest["activation_scales"];
  EXPECT_FLOAT_EQ(scales.at("input"), want["input"].get<float>());
  EXPECT_FLOAT_EQ(scales.at("relu1_out"), want["a"].get<float>());
  EXPECT_FLOAT_EQ(scales.at("gap_out"), want["f"].get<float>());
}

TEST(Qdq, Int8PlanTakesTheModelsScales) {
  REQUIRE_FIXTURE(f);
  auto graph = load_onnx(fixture() / "qdq_net.onnx");
  ASSERT_TRUE(graph.is_ok());
  ASSERT_TRUE(run_passes(*graph).is_ok());
  BuildOptions options{.precision = Precision::kInt8, .max_batch = 3};  // no calibrated ranges at all
  auto plan = lower_graph(*graph, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  const auto& want = f.manifest["activation_scales"];
  int fake_quantize = 0;
  for (const PlanStep& s : plan->steps) {
    if (s.kind == StepKind::kPointwise && s.pointwise == PointwiseFn::kFakeQuantize) ++fake_quantize;
    if (s.kind != StepKind::kConv && s.kind != StepKind::kGemm) continue;
    EXPECT_EQ(s.precision, Precision::kInt8) << s.name;
    // The weights keep the model's grid: their per-channel scales are the model's.
    const auto w_scales = floats_from_bytes(plan->weights[s.weight_scale].bytes, DataType::kFloat32);
    const auto& model_scales = graph->quantization.weight_scales.at(plan->weights[s.weight].name);
    EXPECT_EQ(w_scales, model_scales) << s.name;
  }
  EXPECT_EQ(fake_quantize, 1) << "the uint8 pair runs as its float equivalent";
  for (const PlanValue& v : plan->values)
    if (v.name == "input" || v.name == "relu1_out") {
      EXPECT_EQ(v.dtype, DataType::kInt8);
      EXPECT_FLOAT_EQ(v.scale, want[v.name == "input" ? "input" : "a"].get<float>());
    }
  auto got = interpret_plan(*plan, f.input.f32(), 3);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const std::vector<float>& reference = f.onnxruntime.empty() ? f.numpy : f.onnxruntime;
  const ErrorStats e = compare(*got, reference);
  std::printf("[ qdq ] INT8 plan (emulated) vs %s: rel L2 %.2e\n",
              f.onnxruntime.empty() ? "numpy" : "onnxruntime", e.rel_l2);
  // The plan rounds where the model's pairs do, but for conv3's output, whose pair sits before the
  // residual Add that the INT8 epilogue fuses (one rounding fewer), and in the FP16 steps.
  EXPECT_LT(e.rel_l2, 2e-2);
  for (int64_t n = 0; n < 3; ++n) {
    const auto row = std::span<const float>(*got).subspan(static_cast<size_t>(n * 10), 10);
    const auto ref = std::span<const float>(reference).subspan(static_cast<size_t>(n * 10), 10);
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(),
              std::max_element(ref.begin(), ref.end()) - ref.begin())
        << "image " << n;
  }
}

}  // namespace
}  // namespace gpulab
