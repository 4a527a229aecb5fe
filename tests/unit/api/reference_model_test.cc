// gpulab::ReferenceModel (include/gpulab/reference_model.h) on small ONNX classifiers built here,
// checked against the arithmetic written out in the test; and Engine's factories in a build
// without CUDA.
#include "gpulab/reference_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "onnx_model_builder.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kFeatures = 12;  // 3 x 2 x 2
constexpr int64_t kClasses = 5;

std::vector<float> weights() {  // [kFeatures, kClasses], row-major
  std::vector<float> w(kFeatures * kClasses);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(static_cast<int>(i % 7) - 3);
  return w;
}
std::vector<float> bias() {
  return {0.5f, -0.25f, 0.0f, 1.0f, -1.0f};
}

// input [N, 3, 2, 2] -> Flatten -> MatMul [12, 5] -> Add [5] (-> Softmax when asked): a linear
// classifier whose logits the test computes itself.
class ModelFile {
 public:
  explicit ModelFile(bool softmax, int64_t batch = -1) {
    testing::ModelBuilder m;
    m.input("image", {batch, 3, 2, 2});
    m.floats("w", {kFeatures, kClasses}, weights());
    m.floats("b", {kClasses}, bias());
    m.node("Flatten", "flatten", {"image"}, {"flat"});
    m.node("MatMul", "project", {"flat", "w"}, {"projected"});
    m.node("Add", "add_bias", {"projected", "b"}, {softmax ? "logits" : "out"});
    if (softmax) m.node("Softmax", "probabilities", {"logits"}, {"out"});
    m.output("out");
    path_ = fs::temp_directory_path() / ("gpulab_reference_model_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++) + ".onnx");
    std::ofstream(path_, std::ios::binary) << m.bytes();
  }
  ~ModelFile() { fs::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

Tensor input(int64_t batch) {
  Tensor t(DataType::kFloat32, Shape{batch, 3, 2, 2});
  auto v = t.f32();
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i) - 1.0f;
  return t;
}

std::vector<double> expected_logits(const Tensor& x) {
  const auto w = weights();
  const auto b = bias();
  const int64_t batch = x.shape()[0];
  std::vector<double> y(batch * kClasses);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t k = 0; k < kClasses; ++k) {
      double sum = b[k];
      for (int64_t i = 0; i < kFeatures; ++i) sum += double(x.f32()[n * kFeatures + i]) * w[i * kClasses + k];
      y[n * kClasses + k] = sum;
    }
  return y;
}

TEST(ReferenceModel, RunsALinearClassifierAsWrittenOut) {
  ModelFile file(/*softmax=*/false);
  auto model = ReferenceModel::load_onnx(file.path());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(model->input_shape(), (Shape{Shape::kBatch, 3, 2, 2}));
  EXPECT_EQ(model->num_classes(), kClasses);
  EXPECT_FALSE(model->outputs_probabilities());

  const Tensor x = input(3);
  auto y = model->run(x);
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  ASSERT_EQ(y->shape(), (Shape{3, kClasses}));
  const auto want = expected_logits(x);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y->f32()[i], want[i], 1e-5) << "element " << i;
}

TEST(ReferenceModel, SoftmaxAtTheEndGivesProbabilities) {
  ModelFile file(/*softmax=*/true);
  auto model = ReferenceModel::load_onnx(file.path(), {.num_threads = 1});
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_TRUE(model->outputs_probabilities());
  const Tensor x = input(2);
  auto y = model->run(x);
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  const auto logits = expected_logits(x);
  for (int64_t n = 0; n < 2; ++n) {
    double denominator = 0;
    for (int64_t k = 0; k < kClasses; ++k) denominator += std::exp(logits[n * kClasses + k]);
    for (int64_t k = 0; k < kClasses; ++k)
      EXPECT_NEAR(y->f32()[n * kClasses + k], std::exp(logits[n * kClasses + k]) / denominator, 1e-6);
  }
}

TEST(ReferenceModel, StillRunsAfterAMove) {
  ModelFile file(/*softmax=*/false);
  auto loaded = ReferenceModel::load_onnx(file.path());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ReferenceModel model = std::move(loaded).value();
  ReferenceModel moved = std::move(model);
  auto y = moved.run(input(1));
  ASSERT_TRUE(y.is_ok()) << y.status().to_string();
  EXPECT_NEAR(y->f32()[0], expected_logits(input(1))[0], 1e-5);
}

TEST(ReferenceModel, RefusesInputOfAnotherShapeOrType) {
  ModelFile file(/*softmax=*/false, /*batch=*/2);
  auto model = ReferenceModel::load_onnx(file.path());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  for (const Tensor& bad :
       {Tensor(DataType::kFloat32, Shape{2, 3, 4, 4}), Tensor(DataType::kFloat32, Shape{1, 3, 2, 2}),
        Tensor(DataType::kFloat32, Shape{2, 12}), Tensor(DataType::kInt64, Shape{2, 3, 2, 2})}) {
    auto y = model->run(bad);
    ASSERT_FALSE(y.is_ok()) << bad.shape().to_string();
    EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(y.status().message(), HasSubstr("[2,3,2,2]"));
  }
}

TEST(ReferenceModel, MissingFileIsNotFound) {
  auto model = ReferenceModel::load_onnx("/nonexistent/model.onnx");
  ASSERT_FALSE(model.is_ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
}

TEST(ReferenceModel, RefusesAModelThatIsNotAnImageClassifier) {
  testing::ModelBuilder m;
  m.input("image", {-1, 3, 2, 2});
  m.node("Relu", "relu", {"image"}, {"out"});  // output [N, 3, 2, 2]: no class axis
  m.output("out");
  const fs::path path =
      fs::temp_directory_path() / ("gpulab_reference_model_relu_" + std::to_string(::getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << m.bytes();
  auto model = ReferenceModel::load_onnx(path.string());
  fs::remove(path);
  ASSERT_FALSE(model.is_ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(model.status().message(), HasSubstr("one output [N, classes]"));
}

#ifndef GPULAB_TEST_WITH_CUDA
// Without CUDA, engine.h still links; its factories say why there is no engine and what to use.
TEST(EngineWithoutCuda, FactoriesAnswerUnavailableAndNameTheCpuPath) {
  std::string reason;
  EXPECT_FALSE(cuda_device_available(&reason));
  EXPECT_THAT(reason, HasSubstr("ReferenceModel"));
  auto built = Engine::build_from_onnx("model.onnx", BuildOptions{});
  ASSERT_FALSE(built.is_ok());
  EXPECT_EQ(built.status().code(), StatusCode::kUnavailable);
  auto loaded = build_or_load_engine("model.plan", "", BuildOptions{});
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(loaded.status().message(), HasSubstr("model.plan"));
}
#endif

}  // namespace
}  // namespace gpulab
