// Whole models through load_onnx -> run_passes -> ReferenceExecutor, against what PyTorch on the
// CPU computed for the same seeded inputs (tests/fixtures/make_model_fixtures.py, run by ctest as
// the fixture "fixtures.generate").
//
// Error measure: max_rel = max|a - b| / max|b| over the whole output tensor (scale-free, and not
// blown up by outputs near zero), which must be <= 1e-4; rel_l2 = ||a - b|| / ||b|| is reported.
// Each model runs three ways: as imported (no passes), with every pass but the Conv epilogue
// fusion, and with every pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "backends/reference/reference_executor.h"
#include "core/file_io.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "test_support.h"

namespace gpulab::testing {
namespace {

constexpr double kMaxRelTolerance = 1e-4;

enum class Variant { kNoPasses, kNoFuse, kAllPasses };

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kNoPasses: return "no_passes";
    case Variant::kNoFuse: return "no_fuse";
    case Variant::kAllPasses: return "all_passes";
  }
  return "?";
}

struct ModelCase {
  std::string model;
  int64_t batch;
  Variant variant;
};

// ctest names the discovered tests after this ("...MatchesPyTorch/resnet18_b1_all_passes").
void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.model << "_b" << c.batch << "_" << variant_name(c.variant);
}

// The manifest, or a reason why it cannot be read.
Result<nlohmann::json> load_manifest() {
  const auto path = fixture_dir() / "manifest.json";
  GPULAB_ASSIGN_OR_RETURN(std::string text, read_file_text(path));
  nlohmann::json manifest = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.contains("models")) {
    return Status::invalid_file(path.string() + " is not a fixture manifest. Re-run fixtures.generate.");
  }
  return manifest;
}

Result<Tensor> load_f32(const std::string& file, const nlohmann::json& shape_json) {
  GPULAB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, read_file_bytes(fixture_dir() / file));
  return Tensor::from_bytes(DataType::kFloat32, Shape(shape_json.get<std::vector<int64_t>>()), bytes);
}

// One graph per (model, variant), loaded and transformed once for all batches.
Result<const Graph*> graph_for(const std::string& onnx_file, Variant variant) {
  static std::map<std::pair<std::string, Variant>, std::unique_ptr<Graph>> cache;
  auto& slot = cache[{onnx_file, variant}];
  if (!slot) {
    GPULAB_ASSIGN_OR_RETURN(Graph graph, load_onnx(fixture_dir() / onnx_file));
    if (variant != Variant::kNoPasses) {
      PassOptions options;
      options.fuse = variant == Variant::kAllPasses;
      GPULAB_TRY(run_passes(graph, options));
    }
    slot = std::make_unique<Graph>(std::move(graph));
  }
  return slot.get();
}

class ReferenceModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ReferenceModel, MatchesPyTorch) {
  const ModelCase& c = GetParam();
  auto manifest = load_manifest();
  if (!manifest.is_ok()) {
    GTEST_SKIP() << "model fixtures missing (" << manifest.status().to_string()
                 << "); run `ctest -R fixtures.generate` or tests/fixtures/make_model_fixtures.py --out "
                 << fixture_dir().string();
  }
  ASSERT_TRUE(manifest->at("models").contains(c.model)) << c.model << " is not in the manifest";
  const nlohmann::json& model = manifest->at("models").at(c.model);
  const nlohmann::json* fixture_case = nullptr;
  for (const auto& fc : model.at("cases"))
    if (fc.at("batch").get<int64_t>() == c.batch) fixture_case = &fc;
  ASSERT_NE(fixture_case, nullptr) << "no batch-" << c.batch << " case for " << c.model;

  auto graph = graph_for(model.at("file").get<std::string>(), c.variant);
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  auto input = load_f32(fixture_case->at("input").at("file"), fixture_case->at("input").at("shape"));
  ASSERT_TRUE(input.is_ok()) << input.status().to_string();
  auto expected = load_f32(fixture_case->at("output").at("file"), fixture_case->at("output").at("shape"));
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();

  if (c.variant == Variant::kAllPasses && c.model != "tiny_ops") {
    // The fused path is what this variant is for: make sure it is taken.
    const auto fused = std::count_if((*graph)->nodes.begin(), (*graph)->nodes.end(), [](const Node& n) {
      return n.op == OpType::kConv && n.attr<ConvAttrs>().activation != Activation::kNone;
    });
    EXPECT_GT(fused, 0) << "run_passes fused no Conv epilogue in " << c.model;
  }

  auto executor = ReferenceExecutor::create(**graph);
  ASSERT_TRUE(executor.is_ok()) << executor.status().to_string();
  std::vector<Tensor> inputs{*input};
  const auto start = std::chrono::steady_clock::now();
  auto outputs = executor->run(inputs);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(outputs.is_ok()) << outputs.status().to_string();
  ASSERT_EQ(outputs->size(), 1u);
  const Tensor& actual = (*outputs)[0];
  ASSERT_EQ(actual.shape(), expected->shape());

  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < actual.f32().size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(actual.f32()[i]) - expected->f32()[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(expected->f32()[i])));
  }
  const ErrorStats stats = compare(actual.f32(), expected->f32());
  ASSERT_GT(max_ref, 0.0) << "the PyTorch output is all zeros; the fixture is degenerate";
  const double max_rel = max_diff / max_ref;
  std::cout << c.model << " batch " << c.batch << " " << variant_name(c.variant) << ": max_rel " << max_rel
            << ", rel_l2 " << stats.rel_l2 << ", max_abs " << max_diff << ", reference run " << elapsed_s
            << " s\n";
  RecordProperty("max_rel", std::to_string(max_rel));
  RecordProperty("rel_l2", std::to_string(stats.rel_l2));
  RecordProperty("run_s", std::to_string(elapsed_s));
  EXPECT_EQ(stats.non_finite, 0);
  EXPECT_LE(max_rel, kMaxRelTolerance) << "rel_l2 " << stats.rel_l2;
  EXPECT_LE(stats.rel_l2, kMaxRelTolerance);
}

std::vector<ModelCase> all_cases() {
  std::vector<ModelCase> cases;
  for (const char* model :
       {"tiny_ops", "tiny_pads", "mobilenet_v2", "mobilenet_v3_small", "squeezenet1_1", "resnet18"})
    for (int64_t batch : {1, 3})
      for (Variant v : {Variant::kNoPasses, Variant::kNoFuse, Variant::kAllPasses})
        cases.push_back({model, batch, v});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceModel, ::testing::ValuesIn(all_cases()));

}  // namespace
}  // namespace gpulab::testing
