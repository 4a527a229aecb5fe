// `gpulab classify` end to end on the CPU path: the bundled default, JSON output, and every kind
// of bad input ending in one clear line and the documented exit code.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "onnx_model_builder.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using gpulab::testing::run_gpulab;
using ::testing::HasSubstr;

class ClassifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpulab_classify_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static fs::path golden(const std::string& name) {
    const char* dir = std::getenv("GPULAB_IMAGE_GOLDEN_DIR");
    return fs::path(dir ? dir : "") / name;
  }
  static std::string cat() { return (gpulab::testing::source_dir() / "data/images/cat.bmp").string(); }

  fs::path dir_;
};

TEST_F(ClassifyCli, DefaultRunFindsTheEgyptianCat) {
  const auto r = run_gpulab("classify --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cat.bmp"));
  EXPECT_THAT(r.output, HasSubstr("Egyptian Mau"));
  EXPECT_THAT(r.output, HasSubstr("5 image(s)"));
}

TEST_F(ClassifyCli, JsonHasTopKWithLabelsAndProbabilities) {
  const auto r = run_gpulab("classify --device cpu --json --top-k 3 " + cat());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["images"].size(), 1u);
  const auto& top = j["images"][0]["top"];
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0]["index"], 285);
  EXPECT_EQ(top[0]["label"], "Egyptian Mau");
  EXPECT_NEAR(top[0]["probability"].get<double>(), 0.786, 0.01);
  EXPECT_GE(top[0]["probability"].get<double>(), top[1]["probability"].get<double>());
  EXPECT_EQ(j["output"], "logits");
  EXPECT_NEAR(top[0]["logit"].get<double>(), 12.23, 0.01);
}

// A classifier that ends in Softmax already outputs probabilities; classify must not take a
// second softmax of them. Its Gemm ignores the image (zero weights): the model's probabilities
// are softmax(0, 2, 5, 10) = 0.99293 for class 3 (a second softmax would give 0.47).
TEST_F(ClassifyCli, ModelEndingInSoftmaxKeepsItsProbabilities) {
  gpulab::testing::ModelBuilder m;
  m.input("input", {-1, 3, 8, 8});
  m.floats("fc.w", {4, 3}, std::vector<float>(12, 0.0f));
  m.floats("fc.b", {4}, {0.0f, 2.0f, 5.0f, 10.0f});
  m.node("GlobalAveragePool", "gap", {"input"}, {"g"});
  m.node("Flatten", "flatten", {"g"}, {"f"});
  auto* fc = m.node("Gemm", "fc", {"f", "fc.w", "fc.b"}, {"logits"});
  auto* trans_b = fc->add_attribute();
  trans_b->set_name("transB");
  trans_b->set_type(onnx::AttributeProto::INT);
  trans_b->set_i(1);
  m.node("Softmax", "softmax", {"logits"}, {"prob"});
  m.node("Identity", "id", {"prob"}, {"out"});
  m.output("out");
  const fs::path p = write("softmax.onnx", m.bytes());

  const auto r = run_gpulab("classify --device cpu --json --top-k 4 --model " + p.string() + " " + cat());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["output"], "probabilities");
  const auto& top = j["images"][0]["top"];
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0]["index"], 3);
  EXPECT_NEAR(top[0]["probability"].get<double>(), 0.99293, 1e-4);
  EXPECT_NEAR(top[3]["probability"].get<double>(), 4.508e-5, 1e-6);
  EXPECT_FALSE(top[0].contains("logit")) << "a probability is not a logit";

  const auto text = run_gpulab("classify --device cpu --top-k 2 --model " + p.string() + " " + cat());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.out, HasSubstr(" 99.29%"));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("logit")));
}

TEST_F(ClassifyCli, MissingModelFile) {
  const auto r = run_gpulab("classify --device cpu --model " + (dir_ / "nope.onnx").string() + " " + cat());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("nope.onnx"));
}

TEST_F(ClassifyCli, EmptyTruncatedAndRandomModelFiles) {
  const fs::path empty = write("empty.onnx", "");
  std::ifstream in(gpulab::testing::source_dir() / "models/mobilenet_v2_1.0_224.onnx", std::ios::binary);
  std::string model((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path truncated = write("truncated.onnx", model.substr(0, model.size() / 2));
  std::string noise(4096, '\0');
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
  const fs::path random = write("random.onnx", noise);
  for (const fs::path& p : {empty, truncated, random}) {
    const auto r = run_gpulab("classify --device cpu --model " + p.string() + " " + cat());
    EXPECT_EQ(r.exit_code, 4) << p << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(p.filename().string()));
  }
}

TEST_F(ClassifyCli, UnsupportedOpNamesNodeAndOp) {
  gpulab::testing::ModelBuilder m;
  m.input("input", {-1, 3, 8, 8});
  m.node("LRN", "norm0", {"input"}, {"logits"});
  m.output("logits");
  const fs::path p = write("lrn.onnx", m.bytes());
  const auto r = run_gpulab("classify --device cpu --model " + p.string() + " " + cat());
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_THAT(r.output, HasSubstr("norm0"));
  EXPECT_THAT(r.output, HasSubstr("LRN"));
}

TEST_F(ClassifyCli, ModelWhoseInputIsNotAnImage) {
  gpulab::testing::ModelBuilder m;
  m.input("features", {-1, 16});
  m.floats("w", {16, 4});
  m.node("MatMul", "fc", {"features", "w"}, {"logits"});
  m.output("logits");
  const fs::path p = write("vector_input.onnx", m.bytes());
  const auto r = run_gpulab("classify --device cpu --model " + p.string() + " " + cat());
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[N,16]"));
  EXPECT_THAT(r.output, HasSubstr("image input"));
}

TEST_F(ClassifyCli, TruncatedJpegAndBadCrcPng) {
  for (const char* name : {"truncated.jpg", "bad_crc.png"}) {
    const fs::path p = golden(name);
    ASSERT_TRUE(fs::exists(p)) << p << " (generated by the image_goldens fixture)";
    const auto r = run_gpulab("classify --device cpu " + p.string());
    EXPECT_EQ(r.exit_code, 4) << name << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(name));
  }
}

// A corrupt file among good ones: named on stderr, skipped; the good ones are classified and the
// exit code (9) says that some inputs failed.
TEST_F(ClassifyCli, CorruptFileAmongGoodOnesIsSkippedWithExitCode9) {
  const fs::path bad = golden("truncated.jpg");
  ASSERT_TRUE(fs::exists(bad)) << bad << " (generated by the image_goldens fixture)";
  const auto r = run_gpulab("classify --device cpu --json " + cat() + " " + bad.string());
  EXPECT_EQ(r.exit_code, 9) << r.output;
  EXPECT_THAT(r.err, HasSubstr("skipped '" + bad.string() + "'"));
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["images"].size(), 1u);
  EXPECT_EQ(j["images"][0]["top"][0]["index"], 285);
  ASSERT_EQ(j["skipped"].size(), 1u);
  EXPECT_EQ(j["skipped"][0]["file"], bad.string());
}

// `gpulab pipeline` on the CPU path gives classify's predictions (full-size decodes: the DCT
// scaling changes the pixels of the bundled JPEGs, which are larger than 256 pixels) and its JSON
// follows the gpulab.pipeline schema.
TEST_F(ClassifyCli, PipelinePredictionsEqualClassify) {
  const auto c = run_gpulab("classify --device cpu --json");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto p = run_gpulab("pipeline --device cpu --json --predictions --no-dct-scaling --loop 2 --batch 2");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto cj = nlohmann::json::parse(c.out, nullptr, false);
  const auto pj = nlohmann::json::parse(p.out, nullptr, false);
  ASSERT_FALSE(cj.is_discarded() || pj.is_discarded()) << c.out << p.out;
  EXPECT_EQ(pj["schema"], "gpulab.pipeline");
  EXPECT_EQ(pj["schema_version"], 1);
  EXPECT_EQ(pj["images"], 10);
  EXPECT_EQ(pj["passes"], 2);
  EXPECT_EQ(pj["files_cached_in_ram"], true);
  EXPECT_EQ(pj["stages"].size(), 3u);
  EXPECT_EQ(pj["limiting_stage"]["name"], "infer");
  ASSERT_TRUE(pj["setup_s"].is_number());  // before the clock, so not part of wall_s
  EXPECT_GE(pj["setup_s"].get<double>(), 0.0);
  EXPECT_GT(pj["wall_s"].get<double>(), 0.0);
  ASSERT_EQ(cj["images"].size(), pj["predictions"].size());
  for (size_t i = 0; i < cj["images"].size(); ++i) {
    const auto& a = cj["images"][i];
    const auto& b = pj["predictions"][i];
    EXPECT_EQ(a["file"], b["file"]);
    ASSERT_EQ(a["top"].size(), b["top"].size());
    for (size_t k = 0; k < a["top"].size(); ++k) {
      EXPECT_EQ(a["top"][k]["index"], b["top"][k]["index"]) << a["file"];
      EXPECT_EQ(a["top"][k]["probability"].get<double>(), b["top"][k]["probability"].get<double>());
    }
  }
}

TEST_F(ClassifyCli, PipelineErrors) {
  auto r = run_gpulab("pipeline --device cpu " + (dir_ / "missing").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  r = run_gpulab("pipeline --device cpu --queue-depth 1 " + cat());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  write("notes.txt", "not an image");
  r = run_gpulab("pipeline --device cpu " + dir_.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no images"));
  // A plan was built with its own options: the flags that change how --model is built are refused.
  for (const char* flag : {"--timing-cache t.json", "--no-tactic-timing", "--tactic-batch 8"}) {
    r = run_gpulab(std::string("pipeline --plan p.gpl ") + flag + " " + cat());
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("the plan 'p.gpl' was built already")) << flag;
  }
  r = run_gpulab("pipeline --device cpu --max-workspace-mib -1 " + cat());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--max-workspace-mib"));
}

TEST_F(ClassifyCli, FolderWithoutImages) {
  write("notes.txt", "not an image");
  const auto r = run_gpulab("classify --device cpu " + dir_.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no images"));
}

TEST_F(ClassifyCli, BadFlagValues) {
  auto r = run_gpulab("classify --device cpu --top-k 0 " + cat());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--top-k"));
  r = run_gpulab("classify --device tpu " + cat());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--device"));
}

}  // namespace
}  // namespace gpulab
