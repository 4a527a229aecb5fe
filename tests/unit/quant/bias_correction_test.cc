// Bias correction on the small residual network (tests/residual_net.h): the interpreter shows
// (and lets change) the values before the activation, the correction cancels the mean shift an
// INT8 plan gives each channel, lowering adds it to the 8-bit layers' biases only, and the
// calibration cache keeps it.
#include "quant/bias_correction.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "normal_tensor.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "quant/calibration.h"
#include "residual_net.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using testing::normal_tensor;
using testing::residual_net;

constexpr int64_t kImages = 12;

// Random NCHW images of the residual network's input, and their largest magnitude per value.
struct Fixture {
  Graph graph = residual_net();
  Tensor images = normal_tensor(Shape{kImages, 3, 8, 8}, 21, 1.0f);
  std::map<std::string, float> amax;
  BatchSource source = [this](int64_t first, int64_t count) -> Result<std::vector<float>> {
    const auto all = images.f32();
    const size_t per_image = 3 * 8 * 8;
    return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(first * per_image),
                              all.begin() + static_cast<std::ptrdiff_t>((first + count) * per_image));
  };
  Fixture() {
    BuildOptions fp32{.precision = Precision::kFp32, .max_batch = kImages};
    const Plan plan = *lower_graph(graph, fp32);
    std::vector<std::vector<float>> values;
    EXPECT_TRUE(interpret_plan(plan, images.f32(), kImages, {.values = &values}).is_ok());
    for (size_t i = 0; i < plan.values.size(); ++i) {
      float m = 0;
      for (float v : values[i]) m = std::max(m, std::abs(v));
      amax[plan.values[i].name] = m;
    }
  }
  BuildOptions int8(std::map<std::string, std::vector<float>> corrections = {}) const {
    BuildOptions b{.precision = Precision::kInt8, .max_batch = kImages};
    b.activation_amax = amax;
    b.bias_correction = std::move(corrections);
    return b;
  }
};

// Each Conv/Gemm step's per-channel sums before its activation, through the interpreter's hook,
// or with `activated` after it.
std::map<std::string, std::vector<double>> sums_of(const Plan& plan, const Tensor& images, int threads = 1,
                                                   bool activated = false) {
  std::map<std::string, std::vector<double>> sums;
  InterpretOptions run{.num_threads = threads};
  run.pre_activation = [&](const PlanStep& step, std::span<float> values, int64_t channels) {
    std::vector<double>& s = sums[step.name];
    s.assign(static_cast<size_t>(channels), 0.0);
    const bool relu = step.kind == StepKind::kConv && step.conv.activation == Activation::kRelu;
    const bool clip = step.kind == StepKind::kConv && step.conv.activation == Activation::kClip;
    for (size_t i = 0; i < values.size(); ++i) {
      double v = values[i];
      if (activated && relu) v = std::max(v, 0.0);
      if (activated && clip) v = std::clamp<double>(v, step.conv.clip_min, step.conv.clip_max);
      s[i % static_cast<size_t>(channels)] += v;
    }
  };
  EXPECT_TRUE(interpret_plan(plan, images.f32(), kImages, run).is_ok());
  return sums;
}

int value_index(const Plan& plan, const std::string& name) {
  for (size_t i = 0; i < plan.values.size(); ++i)
    if (plan.values[i].name == name) return static_cast<int>(i);
  return -1;
}

TEST(BiasCorrection, TheInterpreterShowsTheValuesBeforeTheActivation) {
  const Fixture f;
  BuildOptions fp32{.precision = Precision::kFp32, .max_batch = kImages};
  const Plan plan = *lower_graph(f.graph, fp32);
  std::vector<std::vector<float>> values;
  ASSERT_TRUE(interpret_plan(plan, f.images.f32(), kImages, {.values = &values}).is_ok());
  const auto sums = sums_of(plan, f.images);
  for (const char* layer : {"conv1", "conv2", "conv3", "fc"}) ASSERT_TRUE(sums.contains(layer)) << layer;
  // conv3 (residual, no activation) and fc: the sums are those of the stored outputs.
  for (const auto& [layer, value] : {std::pair<std::string, std::string>{"conv3", "c"}, {"fc", "logits"}}) {
    const int index = value_index(plan, value);
    ASSERT_GE(index, 0) << value;
    const int64_t c = plan.values[static_cast<size_t>(index)].c;
    std::vector<double> expected(static_cast<size_t>(c), 0.0);
    for (size_t i = 0; i < values[static_cast<size_t>(index)].size(); ++i)
      expected[i % static_cast<size_t>(c)] += values[static_cast<size_t>(index)][i];
    for (size_t k = 0; k < expected.size(); ++k)
      EXPECT_NEAR(sums.at(layer)[k], expected[k], 1e-4 * (1 + std::abs(expected[k]))) << layer << " " << k;
  }
  // conv1 (ReLU): the same sums as with its activation removed, some of them negative.
  Graph linear = f.graph;
  for (Node& n : linear.nodes)
    if (n.name == "conv1") n.attr<ConvAttrs>().activation = Activation::kNone;
  EXPECT_EQ(sums.at("conv1"), sums_of(*lower_graph(linear, fp32), f.images).at("conv1"));
  EXPECT_TRUE(std::any_of(sums.at("conv1").begin(), sums.at("conv1").end(), [](double v) { return v < 0; }))
      << "ReLU's input has negative channel means here, its output cannot";
  // With the hook the batch runs on one thread, whatever num_threads says: the same sums.
  EXPECT_EQ(sums_of(plan, f.images, 3), sums);
  // What the hook changes is what the activation and the next steps see: conv3 writes c.
  InterpretOptions shifted;
  shifted.values = &values;
  shifted.pre_activation = [](const PlanStep& step, std::span<float> v, int64_t) {
    if (step.name == "conv3")
      for (float& x : v) x += 1.0f;
  };
  std::vector<std::vector<float>> plain;
  ASSERT_TRUE(interpret_plan(plan, f.images.f32(), kImages, {.values = &plain}).is_ok());
  ASSERT_TRUE(interpret_plan(plan, f.images.f32(), kImages, shifted).is_ok());
  const size_t c = static_cast<size_t>(value_index(plan, "c"));
  for (size_t i = 0; i < plain[c].size(); ++i) EXPECT_NEAR(values[c][i], plain[c][i] + 1.0f, 1e-5);
}

TEST(BiasCorrection, CancelsTheMeanShiftOfAnInt8Plan) {
  const Fixture f;
  BuildOptions fp32{.precision = Precision::kFp32, .max_batch = kImages};
  const auto reference = sums_of(*lower_graph(f.graph, fp32), f.images, 1, true);
  // The largest shift of a channel's sum after the activation, over the images.
  const auto worst_shift = [&](const Plan& plan) {
    const auto got = sums_of(plan, f.images, 1, true);
    double worst = 0;
    for (const char* layer : {"conv1", "conv2", "conv3", "fc"})
      for (size_t k = 0; k < reference.at(layer).size() && k < got.at(layer).size(); ++k)
        worst = std::max(worst, std::abs(got.at(layer)[k] - reference.at(layer)[k]));
    return worst;
  };
  auto corrections = bias_corrections(f.graph, f.int8(), f.source, kImages, {.num_threads = 2, .batch = 4});
  ASSERT_TRUE(corrections.is_ok()) << corrections.status().to_string();
  for (const char* layer : {"conv1", "conv2", "conv3", "fc"}) {
    ASSERT_TRUE(corrections->contains(layer)) << layer;
    EXPECT_EQ(corrections->at(layer).size(), std::string(layer) == "fc" ? 10u : 8u) << layer;
  }
  const double before = worst_shift(*lower_graph(f.graph, f.int8()));
  const double after = worst_shift(*lower_graph(f.graph, f.int8(*corrections)));
  EXPECT_GT(before, 0.0);
  // In chunks of 4 images the shift that matches a chunk's mean after a ReLU is not the one that
  // matches all 12 images' (the clamp is not linear): most of it, not all.
  EXPECT_LT(after, 0.25 * before) << "before " << before << ", after " << after;
  // Measured on all the images in one chunk, the layers are corrected in order on exactly the
  // images they are checked on: what is left is float rounding and the 8-bit outputs' rounding.
  auto whole = bias_corrections(f.graph, f.int8(), f.source, kImages, {.batch = kImages});
  ASSERT_TRUE(whole.is_ok());
  const double exact = worst_shift(*lower_graph(f.graph, f.int8(*whole)));
  EXPECT_LT(exact, 0.02 * before) << "before " << before << ", after " << exact;

  // The chunks do not depend on the threads that run them.
  auto one_thread = bias_corrections(f.graph, f.int8(), f.source, kImages, {.num_threads = 1, .batch = 4});
  ASSERT_TRUE(one_thread.is_ok());
  EXPECT_EQ(*one_thread, *corrections);
  // No images: nothing measured. A float precision has nothing to correct.
  auto none = bias_corrections(f.graph, f.int8(), f.source, 0);
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
  BuildOptions fp16 = f.int8();
  fp16.precision = Precision::kFp16;
  EXPECT_EQ(bias_corrections(f.graph, fp16, f.source, kImages).status().code(), StatusCode::kInvalidArgument);
  // A source that fails stops it with its error.
  const BatchSource broken = [](int64_t, int64_t) -> Result<std::vector<float>> {
    return Status::invalid_file("image 3 does not decode");
  };
  EXPECT_EQ(bias_corrections(f.graph, f.int8(), broken, kImages).status().code(), StatusCode::kInvalidFile);
}

TEST(BiasCorrection, LoweringAddsItToTheEightBitLayersOnly) {
  const Fixture f;
  const std::vector<float> shift1(8, 0.25f), shift3(8, -0.5f);
  const auto bias_of = [](const Plan& plan, const std::string& layer) {
    for (const PlanStep& s : plan.steps)
      if (s.name == layer && s.bias >= 0)
        return floats_from_bytes(plan.weights[s.bias].bytes, plan.weights[s.bias].dtype);
    return std::vector<float>{};
  };
  const Plan plain = *lower_graph(f.graph, f.int8());
  const Plan corrected =
      *lower_graph(f.graph, f.int8({{"conv1", shift1}, {"conv3", shift3}, {"fc", {1.0f}}}));
  const std::vector<float> b1 = bias_of(plain, "conv1"), c1 = bias_of(corrected, "conv1");
  ASSERT_EQ(c1.size(), 8u);
  for (size_t k = 0; k < 8; ++k) EXPECT_FLOAT_EQ(c1[k], b1[k] + 0.25f);
  // conv3 has no bias in the model: the correction becomes one.
  EXPECT_TRUE(bias_of(plain, "conv3").empty());
  EXPECT_EQ(bias_of(corrected, "conv3"), shift3);
  // A correction of another length than the layer's outputs is not used.
  EXPECT_EQ(bias_of(corrected, "fc"), bias_of(plain, "fc"));
  // A layer moved to FP16 keeps its own bias.
  BuildOptions moved = f.int8({{"conv1", shift1}});
  moved.layer_precision = {{"conv1", Precision::kFp16}};
  const Plan fp16_layer = *lower_graph(f.graph, moved);
  BuildOptions moved_plain = f.int8();
  moved_plain.layer_precision = moved.layer_precision;
  EXPECT_EQ(bias_of(fp16_layer, "conv1"), bias_of(*lower_graph(f.graph, moved_plain), "conv1"));
}

TEST(BiasCorrection, TheCalibrationCacheKeepsIt) {
  const fs::path dir = fs::temp_directory_path() / ("gpulab-bias-correction-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  CalibrationCache cache;
  cache.model = "residual.onnx";
  cache.model_hash = "0123456789abcdef";
  cache.amax = {{"input", 2.5f}};
  cache.bias_correction["int8"] = {{"conv1", {0.125f, -0.5f}}, {"fc", {}}};
  cache.bias_correction["fp8"] = {{"conv1", {1.0f, 2.0f}}};
  const fs::path path = dir / "cache.json";
  ASSERT_TRUE(save_calibration_cache(cache, path).is_ok());
  auto back = load_calibration_cache(path, cache.model_hash);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->bias_correction, cache.bias_correction);
  // A version 1 file (no bias_correction) is still read.
  std::string text = *read_file_text(path);
  text.replace(text.find("\"schema_version\": 2"), 19, "\"schema_version\": 1");
  text.replace(text.find("\"bias_correction\""), 17, "\"unused\"");
  ASSERT_TRUE(write_file_atomic(dir / "v1.json", std::string_view(text)).is_ok());
  auto v1 = load_calibration_cache(dir / "v1.json", cache.model_hash);
  ASSERT_TRUE(v1.is_ok()) << v1.status().to_string();
  EXPECT_TRUE(v1->bias_correction.empty());
  EXPECT_EQ(v1->amax, cache.amax);
  // Corrections that are not arrays of finite numbers are refused by name.
  const std::string saved = *read_file_text(path);
  const size_t fp8 = saved.find("\"fp8\"");
  ASSERT_NE(fp8, std::string::npos) << saved;
  const size_t open = saved.find('[', fp8), close = saved.find(']', fp8);
  ASSERT_LT(open, close) << saved;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"0.125", "\"x\""},
                                 {"0.125", "1e300"},
                                 {saved.substr(open, close + 1 - open), "3"}}) {
    std::string edited = saved;
    const size_t at = edited.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << edited;
    edited.replace(at, from.size(), to);
    ASSERT_TRUE(write_file_atomic(dir / "bad.json", std::string_view(edited)).is_ok());
    const auto bad = load_calibration_cache(dir / "bad.json", cache.model_hash);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidFile) << to;
    EXPECT_NE(bad.status().message().find("bias_correction."), std::string::npos) << bad.status().message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpulab
