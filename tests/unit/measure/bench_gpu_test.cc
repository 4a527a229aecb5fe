// `gpulab bench` end to end on a GPU: runs the built executable on the shared MobileNetV2 and
// checks that every reported number is finite and positive and that the JSON and CSV agree.
// Skipped with the reason when the build has no CUDA runtime or no GPU is usable.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"
#include "test_support.h"

namespace gpulab {
namespace {

using gpulab::testing::CliRun;
using gpulab::testing::run_gpulab;

void expect_positive_summary(const nlohmann::json& m, const char* name, int64_t iterations) {
  ASSERT_TRUE(m.is_object()) << name;
  EXPECT_EQ(m.at("count").get<int64_t>(), iterations) << name;
  for (const char* key : {"min", "max", "mean", "median"}) {
    const double v = m.at(key).get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << name << "." << key << " = " << v;
  }
  EXPECT_LE(m.at("min").get<double>(), m.at("median").get<double>()) << name;
  EXPECT_LE(m.at("median").get<double>(), m.at("max").get<double>()) << name;
  EXPECT_GE(m.at("cov").get<double>(), 0) << name;
}

class BenchGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    // The bundled model travels with the checkout (the GPU host has no shared folder).
    model_ = (gpulab::testing::source_dir() / "models" / "mobilenet_v2_1.0_224.onnx").string();
    if (!std::filesystem::exists(model_)) GTEST_SKIP() << model_ << " is absent";
    dir_ = std::filesystem::temp_directory_path() / ("gpulab_bench_gpu_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Runs bench; skips the test when no GPU runtime is usable.
  nlohmann::json bench(const std::string& flags, const std::string& name) {
    const std::string json = (dir_ / (name + ".json")).string();
    const CliRun run = run_gpulab("bench --model " + model_ + " " + flags + " --json " + json +
                                  " --export-times " + (dir_ / (name + ".csv")).string());
    if (run.exit_code == exit_code_for(StatusCode::kUnavailable)) {
      skipped_ = run.output;
      return nullptr;
    }
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("Throughput:"), std::string::npos) << run.output;
    std::ifstream in(json);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  }

  std::string model_;
  std::filesystem::path dir_;
  std::string skipped_;
};

TEST_F(BenchGpu, GraphWithTransfersOnTwoStreams) {
  const nlohmann::json j = bench(
      "--batch 4 --precision fp16 --warmup-ms 50 --min-duration-s 0.2 --min-iterations 20 "
      "--streams 2 --percentiles 50,99",
      "graph");
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("schema"), "gpulab.bench");
  const int64_t iterations = j.at("iterations").get<int64_t>();
  EXPECT_GE(iterations, 20);
  const double ips = j.at("throughput_ips").get<double>();
  EXPECT_TRUE(std::isfinite(ips) && ips > 0) << ips;
  for (const char* m : {"gpu_compute_ms", "latency_ms", "enqueue_ms", "h2d_ms", "d2h_ms"}) {
    expect_positive_summary(j.at("metrics").at(m), m, iterations);
  }
  EXPECT_FALSE(j.at("environment").at("gpu_name").is_null());
  EXPECT_TRUE(j.at("environment").at("cudnn_version").is_number());
  std::ifstream csv(dir_ / "graph.csv");
  std::string line;
  int64_t rows = -1;  // header
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, iterations);
}

TEST_F(BenchGpu, EagerWithoutTransfers) {
  const nlohmann::json j = bench(
      "--batch 2 --precision fp32 --warmup-ms 20 --min-duration-s 0.1 --min-iterations 10 "
      "--no-cuda-graph --no-include-transfers",
      "eager");
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  ASSERT_TRUE(j.is_object());
  const int64_t iterations = j.at("iterations").get<int64_t>();
  expect_positive_summary(j.at("metrics").at("gpu_compute_ms"), "gpu_compute_ms", iterations);
  EXPECT_TRUE(j.at("metrics").at("h2d_ms").is_null());
  EXPECT_DOUBLE_EQ(j.at("metrics").at("latency_ms").at("median").get<double>(),
                   j.at("metrics").at("gpu_compute_ms").at("median").get<double>());
  EXPECT_FALSE(j.at("options").at("cuda_graph").get<bool>());
}

// The logits of a .npy file that --save-output wrote (format 1.0, float32, 2-D), and its shape.
std::vector<float> read_npy(const std::filesystem::path& path, std::string* header) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return {};
  const size_t len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  *header = bytes.substr(10, len);
  std::vector<float> out((bytes.size() - 10 - len) / sizeof(float));
  std::memcpy(out.data(), bytes.data() + 10 + len, out.size() * sizeof(float));
  return out;
}

TEST_F(BenchGpu, SavedOutputIsTheSameWithAndWithoutCudaGraph) {
  const std::string common =
      "--batch 2 --precision fp32 --warmup-ms 20 --min-duration-s 0.05 --min-iterations 5 "
      "--no-include-transfers ";
  bench(common + "--cuda-graph --save-output " + (dir_ / "graph.npy").string(), "graph_out");
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  bench(common + "--no-cuda-graph --save-output " + (dir_ / "eager.npy").string(), "eager_out");
  std::string graph_header, eager_header;
  const std::vector<float> graph = read_npy(dir_ / "graph.npy", &graph_header);
  const std::vector<float> eager = read_npy(dir_ / "eager.npy", &eager_header);
  EXPECT_NE(graph_header.find("'shape': (2, 1000)"), std::string::npos) << graph_header;
  ASSERT_EQ(graph.size(), 2u * 1000u);
  ASSERT_EQ(eager.size(), graph.size());
  double diff = 0, norm = 0, between_images = 0;
  for (size_t i = 0; i < graph.size(); ++i) {
    ASSERT_TRUE(std::isfinite(graph[i])) << i;
    diff += (graph[i] - eager[i]) * (graph[i] - eager[i]);
    norm += graph[i] * graph[i];
    if (i < 1000) between_images += (graph[i] - graph[i + 1000]) * (graph[i] - graph[i + 1000]);
  }
  EXPECT_GT(norm, 0);
  EXPECT_LE(std::sqrt(diff / norm), 1e-6);            // the same kernels, replayed or launched
  EXPECT_GT(std::sqrt(between_images / norm), 1e-3);  // two different images of the input
}

}  // namespace
}  // namespace gpulab
