// The bundled MobileNetV2 through the whole CPU path (decode, TF-Slim preprocessing chosen by the
// model's metadata, ONNX import, passes, reference executor) against the expected top-5 in
// tests/goldens/mobilenet_v2_expected.json, which an independent numpy executor produced from the
// same model file and photos.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/reference/reference_executor.h"
#include "core/math.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "test_support.h"

namespace gpulab {
namespace {

struct ExpectedImage {
  std::string file;  // name under data/images
  std::vector<int64_t> top5;
  std::vector<double> logits;
  double input_sum = 0, input_sumsq = 0;
};

std::vector<ExpectedImage> load_expected() {
  std::ifstream in(testing::source_dir() / "tests/goldens/mobilenet_v2_expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<ExpectedImage> out;
  for (const auto& img : j.at("images")) {
    const std::string file = img.at("file");
    if (file.rfind("shared/images/", 0) != 0) continue;  // the sample-set images are not bundled
    ExpectedImage e{.file = file.substr(std::string("shared/images/").size())};
    for (const auto& t : img.at("top5")) {
      e.top5.push_back(t.at("index"));
      e.logits.push_back(t.at("logit"));
    }
    e.input_sum = img.at("input_sum");
    e.input_sumsq = img.at("input_sumsq");
    out.push_back(e);
  }
  return out;
}

class MobileNetReal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto g = load_onnx(testing::source_dir() / "models/mobilenet_v2_1.0_224.onnx");
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    graph_ = new Graph(std::move(g).value());
    ASSERT_TRUE(run_passes(*graph_, PassOptions{}).is_ok());
  }
  static void TearDownTestSuite() {
    delete graph_;
    graph_ = nullptr;
  }
  static Graph* graph_;
};
Graph* MobileNetReal::graph_ = nullptr;

TEST_F(MobileNetReal, MetadataChoosesTfSlimPreprocessing) {
  auto spec = preprocess_from_metadata(graph_->metadata);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(spec->preset, PreprocessSpec::Preset::kTfSlim);
  EXPECT_EQ(spec->output_size, 224);
  EXPECT_FLOAT_EQ(spec->central_fraction, 0.875f);
}

TEST_F(MobileNetReal, Top5MatchesIndependentExecutor) {
  const std::vector<ExpectedImage> expected = load_expected();
  ASSERT_EQ(expected.size(), 5u);
  auto spec = preprocess_from_metadata(graph_->metadata);
  ASSERT_TRUE(spec.is_ok());
  std::vector<Image> images;
  for (const ExpectedImage& e : expected) {
    auto img = decode_image(testing::source_dir() / "data/images" / e.file);
    ASSERT_TRUE(img.is_ok()) << img.status().to_string();
    images.push_back(std::move(img).value());
  }
  auto batch = make_batch(images, *spec);
  ASSERT_TRUE(batch.is_ok()) << batch.status().to_string();
  auto exec = ReferenceExecutor::create(*graph_);
  ASSERT_TRUE(exec.is_ok()) << exec.status().to_string();
  auto out = exec->run(std::span<const Tensor>(&batch.value(), 1));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const Tensor& logits = out->front();
  ASSERT_EQ(logits.shape(), (Shape{5, 1000}));

  const int64_t per_image = spec->image_numel();
  for (size_t i = 0; i < expected.size(); ++i) {
    const ExpectedImage& e = expected[i];
    SCOPED_TRACE(e.file);
    // Preprocessing: the expected file records the input tensor's sum and sum of squares.
    // BMPs decode identically everywhere; JPEG decoders may differ by one level per pixel.
    double sum = 0, sumsq = 0;
    for (float v : batch->f32().subspan(i * per_image, per_image)) {
      sum += v;
      sumsq += double{v} * v;
    }
    const bool jpeg = e.file.ends_with(".jpg");
    EXPECT_NEAR(sum, e.input_sum, jpeg ? 0.01 * per_image / 128 : 1.0) << "input checksum";
    EXPECT_NEAR(sumsq, e.input_sumsq, std::abs(e.input_sumsq) * (jpeg ? 2e-3 : 1e-4)) << "input checksum";

    std::span<const float> row = logits.f32().subspan(i * 1000, 1000);
    EXPECT_EQ(top_k(row, 5), e.top5);
    // The file's tolerance hint: logits within ~1e-3 for an FP32 engine with identical input.
    for (size_t k = 0; k < e.top5.size(); ++k)
      EXPECT_NEAR(row[e.top5[k]], e.logits[k], jpeg ? 0.05 : 2e-3) << "class " << e.top5[k];
  }
  // The brief's anchor: cat.bmp is an Egyptian cat (class 285).
  EXPECT_EQ(top_k(logits.f32().subspan(0, 1000), 1).front(), 285);
}

}  // namespace
}  // namespace gpulab
