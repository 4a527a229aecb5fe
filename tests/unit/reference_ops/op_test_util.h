// Helpers for the reference-op tests: build a one-node graph, run it, make seeded tensors.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"

namespace gpulab::testing {

// A node named "<op>_test" with inputs "in0", "in1", ... ("" for nullptr entries of `present`) and
// `num_outputs` outputs "out0", ...
inline Node make_node(OpType op, NodeAttrs attrs = {}, size_t num_inputs = 1, size_t num_outputs = 1) {
  Node node;
  node.name = std::string(op_name(op)) + "_test";
  node.op = op;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < num_inputs; ++i) node.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < num_outputs; ++i) node.outputs.push_back("out" + std::to_string(i));
  return node;
}

// Runs `node` on `inputs` (nullptr = absent optional input) and returns its first output.
inline Result<Tensor> run_op(const Node& node, std::vector<const Tensor*> inputs, int num_threads = 2) {
  std::vector<Tensor> outputs;
  ReferenceOptions options;
  options.num_threads = num_threads;
  Status s = run_reference_node(node, inputs, outputs, options);
  if (!s.is_ok()) return s;
  return std::move(outputs[0]);
}

inline Tensor floats(Shape shape, std::vector<float> values) {
  return Tensor::from_floats(std::move(shape), values);
}

inline Tensor int64s(Shape shape, std::vector<int64_t> values) {
  return Tensor::from_int64s(std::move(shape), values);
}

// Uniform in [-1, 1), seeded, so a failure reproduces.
inline Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t(DataType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : t.f32()) v = dist(rng);
  return t;
}

inline std::vector<float> values_of(const Tensor& t) {
  return {t.f32().begin(), t.f32().end()};
}

// Element-wise |a - b| <= tol, with the first mismatch named.
inline ::testing::AssertionResult all_near(const Tensor& actual, const std::vector<float>& expected,
                                           double tol = 1e-5) {
  if (actual.dtype() != DataType::kFloat32) return ::testing::AssertionFailure() << "not float32";
  auto a = actual.f32();
  if (a.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << a.size() << " vs expected " << expected.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(static_cast<double>(a[i]) - expected[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a[i] << " vs expected " << expected[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gpulab::testing
