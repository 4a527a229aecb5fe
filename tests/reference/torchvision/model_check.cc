#include "model_check.h"

#include <chrono>

#include "backends/reference/reference_executor.h"
#include "core/file_io.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/interpret.h"
#include "plan/lower.h"

namespace gpulab::testing {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<Tensor> load_f32(const std::filesystem::path& dir, const nlohmann::json& spec) {
  GPULAB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                          read_file_bytes(dir / spec.at("file").get<std::string>()));
  return Tensor::from_bytes(DataType::kFloat32, Shape(spec.at("shape").get<std::vector<int64_t>>()), bytes);
}

Result<Tensor> run_reference(const Graph& graph, const Tensor& input, int threads) {
  ReferenceOptions options;
  options.num_threads = threads;
  GPULAB_ASSIGN_OR_RETURN(ReferenceExecutor exec, ReferenceExecutor::create(graph, options));
  GPULAB_ASSIGN_OR_RETURN(std::vector<Tensor> out, exec.run(std::vector<Tensor>{input}));
  return std::move(out[0]);
}

double rel_l2(std::span<const float> actual, std::span<const float> expected) {
  const ErrorStats e = compare(actual, expected);
  return e.non_finite > 0 ? std::numeric_limits<double>::infinity() : e.rel_l2;
}

}  // namespace

Result<std::vector<FixtureCase>> load_fixture_cases(const std::filesystem::path& dir,
                                                    const nlohmann::json& entry) {
  std::vector<FixtureCase> cases;
  for (const auto& c : entry.at("cases")) {
    FixtureCase fc;
    fc.batch = c.at("batch").get<int64_t>();
    GPULAB_ASSIGN_OR_RETURN(fc.input, load_f32(dir, c.at("input")));
    GPULAB_ASSIGN_OR_RETURN(fc.expected, load_f32(dir, c.at("output")));
    fc.torch_fp16_storage = c.at("output").value("torch_fp16_storage_rel_l2", -1.0);
    cases.push_back(std::move(fc));
  }
  return cases;
}

Result<ModelCheck> check_model(const std::filesystem::path& dir, const std::string& model,
                               const nlohmann::json& entry, const CheckOptions& options) {
  ModelCheck check;
  check.model = model;
  auto start = std::chrono::steady_clock::now();
  GPULAB_ASSIGN_OR_RETURN(const Graph imported, load_onnx(dir / entry.at("file").get<std::string>()));
  check.import_s = seconds_since(start);
  check.nodes_imported = static_cast<int64_t>(imported.nodes.size());
  start = std::chrono::steady_clock::now();
  Graph passed = imported;
  GPULAB_TRY(run_passes(passed));
  check.passes_s = seconds_since(start);
  check.nodes_after_passes = static_cast<int64_t>(passed.nodes.size());

  std::optional<Plan> fp32, fp16;
  if (options.plan) {
    BuildOptions build;
    build.max_batch = 3;
    build.precision = Precision::kFp32;
    auto plan = lower_graph(passed, build);
    check.plan_built = plan.is_ok();
    if (!plan.is_ok()) {
      check.plan_refusal = plan.status().message();
    } else {
      check.plan_steps = static_cast<int64_t>(plan->steps.size());
      fp32 = std::move(plan).value();
      build.precision = Precision::kFp16;
      GPULAB_ASSIGN_OR_RETURN(fp16, lower_graph(passed, build));
    }
  }
  GPULAB_ASSIGN_OR_RETURN(const std::vector<FixtureCase> cases, load_fixture_cases(dir, entry));
  for (const FixtureCase& c : cases) {
    BatchErrors b;
    b.batch = c.batch;
    b.torch_fp16_storage = c.torch_fp16_storage;
    if (options.only_batch && *options.only_batch != b.batch) continue;
    const Tensor& input = c.input;
    const Tensor& expected = c.expected;
    if (options.reference_unpassed) {
      start = std::chrono::steady_clock::now();
      GPULAB_ASSIGN_OR_RETURN(const Tensor out, run_reference(imported, input, options.threads));
      b.reference_s = seconds_since(start);
      b.reference = rel_l2(out.f32(), expected.f32());
    }
    start = std::chrono::steady_clock::now();
    GPULAB_ASSIGN_OR_RETURN(const Tensor ref, run_reference(passed, input, options.threads));
    if (!options.reference_unpassed) b.reference_s = seconds_since(start);
    b.passes = rel_l2(ref.f32(), expected.f32());
    if (fp32) {
      const std::span<const float> in = input.f32();
      start = std::chrono::steady_clock::now();
      GPULAB_ASSIGN_OR_RETURN(const std::vector<float> y32, interpret_plan(*fp32, in, b.batch));
      b.plan_fp32_s = seconds_since(start);
      b.plan_fp32 = rel_l2(y32, ref.f32());
      start = std::chrono::steady_clock::now();
      GPULAB_ASSIGN_OR_RETURN(const std::vector<float> y16, interpret_plan(*fp16, in, b.batch));
      b.plan_fp16_s = seconds_since(start);
      b.plan_fp16 = rel_l2(y16, ref.f32());
    }
    check.batches.push_back(b);
  }
  return check;
}

const std::vector<std::string>& small_family_models() {
  static const std::vector<std::string> models{
      "small_shufflenet_v2", "small_convnext", "small_efficientnet_v2", "small_vit",
      "small_swin",          "small_swin_v2",  "small_maxvit"};
  return models;
}

const std::vector<std::string>& full_size_family_models() {
  static const std::vector<std::string> models{
      "shufflenet_v2_x0_5", "convnext_tiny", "efficientnet_v2_s", "vit_b_32", "swin_t",
      "swin_v2_t",          "maxvit_t"};
  return models;
}

nlohmann::json to_json(const ModelCheck& check) {
  nlohmann::json j;
  j["model"] = check.model;
  j["plan_built"] = check.plan_built;
  if (!check.plan_refusal.empty()) j["plan_refusal"] = check.plan_refusal;
  j["nodes_imported"] = check.nodes_imported;
  j["nodes_after_passes"] = check.nodes_after_passes;
  j["plan_steps"] = check.plan_steps;
  j["import_s"] = check.import_s;
  j["passes_s"] = check.passes_s;
  nlohmann::json batches = nlohmann::json::array();
  for (const BatchErrors& b : check.batches)
    batches.push_back({{"batch", b.batch},
                       {"reference_rel_l2", b.reference},
                       {"passes_rel_l2", b.passes},
                       {"plan_fp32_rel_l2", b.plan_fp32},
                       {"plan_fp16_rel_l2", b.plan_fp16},
                       {"torch_fp16_storage_rel_l2", b.torch_fp16_storage},
                       {"reference_s", b.reference_s},
                       {"plan_fp32_s", b.plan_fp32_s},
                       {"plan_fp16_s", b.plan_fp16_s}});
  j["batches"] = batches;
  return j;
}

}  // namespace gpulab::testing
