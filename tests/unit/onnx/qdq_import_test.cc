// QuantizeLinear/DequantizeLinear import: the pairs it reads, what it refuses by name, and a pair
// that no INT8 plan can take over (uint8) running as its float equivalent in the reference
// backend and the plan interpreter alike.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"
#include "onnx/onnx_import.h"
#include "onnx_model_builder.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"

namespace gpulab {
namespace {

using gpulab::testing::ModelBuilder;
using ::testing::HasSubstr;

Result<Graph> load(const std::string& bytes) {
  return load_onnx_bytes(std::as_bytes(std::span(bytes.data(), bytes.size())), "qdq.onnx");
}

// A scalar initializer of ONNX type `elem` holding `value` (raw little-endian bytes).
void scalar(ModelBuilder& m, const std::string& name, int elem, int value) {
  auto* t = m.g()->add_initializer();
  t->set_name(name);
  t->set_data_type(elem);
  const int bytes = elem == onnx::TensorProto::INT16 ? 2 : 1;
  std::string raw(static_cast<size_t>(bytes), '\0');
  raw[0] = static_cast<char>(value & 0xff);
  if (bytes == 2) raw[1] = static_cast<char>((value >> 8) & 0xff);
  t->set_raw_data(raw);
}

// x [N, 16, 1, 1] -> QuantizeLinear(scale s, zero point) -> DequantizeLinear -> Relu -> y.
ModelBuilder pair_model(int zero_point_elem, int zero_point, float dq_scale = 0.1f) {
  ModelBuilder m;
  m.input("x", {-1, 16, 1, 1});
  m.floats("s", {}, {0.1f});
  m.floats("s_dq", {}, {dq_scale});
  scalar(m, "zp", zero_point_elem, zero_point);
  m.node("QuantizeLinear", "q", {"x", "s", "zp"}, {"xq"});
  m.node("DequantizeLinear", "dq", {"xq", "s_dq", "zp"}, {"xdq"});
  m.node("Relu", "relu", {"xdq"}, {"y"});
  m.output("y");
  return m;
}

TEST(QdqImport, Uint8PairRunsAsItsFloatEquivalent) {
  auto graph = load(pair_model(onnx::TensorProto::UINT8, 128).bytes());
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  ASSERT_TRUE(run_passes(*graph).is_ok());
  int pairs = 0;
  for (const Node& n : graph->nodes) pairs += n.op == OpType::kQuantizeDequantize;
  EXPECT_EQ(pairs, 1) << "a zero point of 128 cannot fold into an INT8 plan";
  EXPECT_TRUE(graph->quantization.activation_scales.empty());
  // x / 0.1 rounds half to even, + 128, saturates to [0, 255]: 12.8 and -12.9 saturate.
  const std::vector<float> x = {0.25f, 0.35f, -0.05f, 1.0f, 12.8f, -12.9f, 0.149f, -3.0f,
                                0.0f,  0.05f, 0.15f,  2.0f, -1.0f, 5.0f,   0.04f,  0.06f};
  const Tensor input = Tensor::from_floats(Shape{1, 16, 1, 1}, x);
  auto exec = ReferenceExecutor::create(*graph);
  ASSERT_TRUE(exec.is_ok());
  auto out = exec->run(std::vector<Tensor>{input});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const auto y = (*out)[0].f32();
  EXPECT_FLOAT_EQ(y[0], 0.2f);   // 2.5 -> 2
  EXPECT_FLOAT_EQ(y[1], 0.4f);   // 3.5 -> 4
  EXPECT_FLOAT_EQ(y[4], 12.7f);  // 128 + 128 saturates at 255
  EXPECT_FLOAT_EQ(y[5], 0.0f);   // relu of -12.8 (saturated at 0 - 128)
  // The plan runs it as a fake-quantize pointwise step, with the same numbers.
  BuildOptions options{.precision = Precision::kFp32, .max_batch = 1};
  auto plan = lower_graph(*graph, options);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  bool found = false;
  for (const PlanStep& s : plan->steps)
    found |= s.kind == StepKind::kPointwise && s.pointwise == PointwiseFn::kFakeQuantize;
  EXPECT_TRUE(found);
  auto got = interpret_plan(*plan, x, 1);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(*got, std::vector<float>(y.begin(), y.end()));
}

TEST(QdqImport, SymmetricInt8PairFoldsAndRecordsItsScale) {
  auto graph = load(pair_model(onnx::TensorProto::INT8, 0).bytes());
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  ASSERT_TRUE(run_passes(*graph).is_ok());
  for (const Node& n : graph->nodes) EXPECT_NE(n.op, OpType::kQuantizeDequantize);
  ASSERT_TRUE(graph->quantization.activation_scales.contains("x"));
  EXPECT_FLOAT_EQ(graph->quantization.activation_scales.at("x"), 0.1f);
}

TEST(QdqImport, RefusesWhatItCannotRead) {
  // The pair must quantize and dequantize alike.
  auto mismatch = load(pair_model(onnx::TensorProto::INT8, 0, 0.2f).bytes());
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(mismatch.status().message(),
              HasSubstr("node 'dq' (DequantizeLinear): its scale, zero point or axis"));
  // A subnormal scale (its reciprocal is infinite).
  auto subnormal = load(pair_model(onnx::TensorProto::INT8, 0, 1e-40f).bytes());
  ASSERT_FALSE(subnormal.is_ok());
  EXPECT_EQ(subnormal.status().code(), StatusCode::kInvalidModel);
  EXPECT_THAT(subnormal.status().message(), HasSubstr("is not a positive finite normal number"));
  // int16 zero points are not read.
  auto int16 = load(pair_model(onnx::TensorProto::INT16, 0).bytes());
  ASSERT_FALSE(int16.is_ok());
  EXPECT_THAT(int16.status().to_string(), HasSubstr("INT16"));
  // A quantized tensor read by anything but a DequantizeLinear.
  ModelBuilder m;
  m.input("x", {-1, 4, 2, 2});
  m.floats("s", {}, {0.1f});
  scalar(m, "zp", onnx::TensorProto::INT8, 0);
  m.node("QuantizeLinear", "q", {"x", "s", "zp"}, {"xq"});
  m.node("Relu", "relu", {"xq"}, {"y"});
  m.output("y");
  auto read = load(m.bytes());
  ASSERT_FALSE(read.is_ok());
  EXPECT_EQ(read.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(read.status().message(),
              HasSubstr("node 'q' (QuantizeLinear): its quantized output 'xq' is read by "
                        "node 'relu' (Relu), not by a DequantizeLinear"));
  // A DequantizeLinear of an activation no QuantizeLinear made.
  ModelBuilder d;
  d.input("x", {-1, 4, 2, 2});
  d.floats("s", {}, {0.1f});
  d.node("DequantizeLinear", "dq", {"x", "s"}, {"y"});
  d.output("y");
  auto lone = load(d.bytes());
  ASSERT_FALSE(lone.is_ok());
  EXPECT_THAT(lone.status().message(), HasSubstr("neither a constant nor a QuantizeLinear's output"));
}

}  // namespace
}  // namespace gpulab
