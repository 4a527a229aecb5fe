// One torchvision classifier exported by tests/fixtures/make_torchvision_fixtures.py, checked on the
// CPU at each fixture batch size:
//   reference      the reference backend on the graph as imported, against PyTorch's output
//   passes         the reference backend after run_passes, against PyTorch's output
//   plan_fp32      the FP32 plan (lower_graph) in the plan interpreter, against the reference
//   plan_fp16      the FP16 plan with its storage emulated, against the reference
// Each error is the relative L2 norm ||a - b|| / ||b|| over the logits. Shared by the CI test
// (torchvision_models_test.cc) and the table tool (torchvision_check.cc).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab::testing {

struct BatchErrors {
  int64_t batch = 0;
  double reference = -1, passes = -1, plan_fp32 = -1, plan_fp16 = -1;  // -1: not measured
  double reference_s = 0, plan_fp32_s = 0, plan_fp16_s = 0;            // wall time of one run
  // From the manifest: PyTorch's own output change under 16-bit storage (the fixture script's
  // torch_fp16_storage_rel_l2), the error floor of the seeded weights; -1 when not recorded.
  double torch_fp16_storage = -1;
};

// One batch of a fixture: the input and PyTorch's float64 output (stored as float32).
struct FixtureCase {
  int64_t batch = 0;
  Tensor input, expected;
  double torch_fp16_storage = -1;
};
// The cases of a manifest entry, files read from `dir`.
Result<std::vector<FixtureCase>> load_fixture_cases(const std::filesystem::path& dir,
                                                    const nlohmann::json& manifest_entry);

struct ModelCheck {
  std::string model;
  std::vector<BatchErrors> batches;
  bool plan_built = false;   // lower_graph accepted the graph
  std::string plan_refusal;  // why not, when it did not
  int64_t nodes_imported = 0, nodes_after_passes = 0, plan_steps = 0;
  double import_s = 0, passes_s = 0;
};

struct CheckOptions {
  bool reference_unpassed = true;  // also run the graph as imported (slow for big models)
  bool plan = true;                // lower and interpret (FP32 and emulated FP16)
  std::optional<int64_t> only_batch;
  int threads = 0;  // reference backend threads; 0 = all cores
};

// `manifest_entry` is the model's entry of the fixture manifest; files are read from `dir`.
Result<ModelCheck> check_model(const std::filesystem::path& dir, const std::string& model,
                               const nlohmann::json& manifest_entry, const CheckOptions& options = {});

nlohmann::json to_json(const ModelCheck& check);

// The fixture script's models, one per family of issue 26: `--set small` (what ctest generates) and
// `--set families` (the full-size representatives, made on demand).
const std::vector<std::string>& small_family_models();
const std::vector<std::string>& full_size_family_models();

}  // namespace gpulab::testing
