// `gpulab accuracy` and the calibration flags of `gpulab build` on bad input: each ends in one
// clear line and the README's exit code, before any long work starts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using gpulab::testing::run_gpulab;
using ::testing::HasSubstr;

class AccuracyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpulab_accuracy_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "empty");
    fs::create_directories(dir_ / "photos");
    fs::create_directories(dir_ / "calibration");
    fs::copy_file(gpulab::testing::source_dir() / "data/images/cat.bmp", dir_ / "photos/cat.bmp");
    fs::copy_file(gpulab::testing::source_dir() / "data/images/owl.jpg", dir_ / "calibration/owl.jpg");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string model() const {
    return (gpulab::testing::source_dir() / "models/mobilenet_v2_1.0_224.onnx").string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(AccuracyCli, MissingCalibrationFolder) {
  const auto r = run_gpulab("accuracy --model '" + model() + "' --dataset '" + path("photos") +
                            "' --calibration-data '" + path("nowhere") + "'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.err, HasSubstr("calibration data '" + path("nowhere") + "': no such folder"));
}

TEST_F(AccuracyCli, EmptyCalibrationFolder) {
  const auto r = run_gpulab("build '" + model() + "' -o '" + path("m.plan") +
                            "' --precision int8 --calibration-data '" + path("empty") + "'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.err, HasSubstr("no images in"));
  EXPECT_FALSE(fs::exists(path("m.plan")));
}

TEST_F(AccuracyCli, Int8BuildWithoutCalibration) {
  const auto r = run_gpulab("build '" + model() + "' -o '" + path("m.plan") + "' --precision fp8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.err, HasSubstr("give --calibration-data DIR"));
}

TEST_F(AccuracyCli, CacheOfAnotherModel) {
  std::ofstream(path("other.json"))
      << R"({"schema": "gpulab.calibration", "schema_version": 1, "model": "resnet18.onnx",
             "model_fnv1a64": "0123456789abcdef", "calibrator": "entropy", "percentile": 99.99,
             "images": 500, "tensors": {"input": {"amax": 2.6}}})";
  const auto r = run_gpulab("accuracy --model '" + model() + "' --dataset '" + path("photos") +
                            "' --calibration-data '" + path("calibration") + "' --calibration-cache '" +
                            path("other.json") + "'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.err, HasSubstr("was made for another model ('resnet18.onnx'"));
  std::ofstream(path("broken.json")) << "{\"schema\": ";
  const auto b = run_gpulab("accuracy --model '" + model() + "' --dataset '" + path("photos") +
                            "' --calibration-data '" + path("calibration") + "' --calibration-cache '" +
                            path("broken.json") + "'");
  EXPECT_EQ(b.exit_code, 4) << b.output;
  EXPECT_THAT(b.err, HasSubstr("Delete it to calibrate again"));
}

// The bias correction is measured on the calibration images, kept in the cache beside the ranges,
// and reused from it; --bias-correction off measures none.
TEST_F(AccuracyCli, BiasCorrectionIsMeasuredAndCached) {
  const std::string common = "accuracy --model '" + model() + "' --dataset '" + path("photos") +
                             "' --calibration-data '" + path("calibration") +
                             "' --json --calibration-cache '";
  const auto off = run_gpulab(common + path("off.json") + "' --bias-correction off");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  std::ifstream off_cache(path("off.json"));
  const std::string off_text((std::istreambuf_iterator<char>(off_cache)), std::istreambuf_iterator<char>());
  EXPECT_THAT(off_text, HasSubstr("\"bias_correction\": {}"));
  const auto on = run_gpulab(common + path("on.json") + "' -v");
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_THAT(on.err, HasSubstr("bias correction: 53 layers on 1 images"));
  EXPECT_THAT(on.out, HasSubstr("\"agreement\""));
  std::ifstream on_cache(path("on.json"));
  const std::string on_text((std::istreambuf_iterator<char>(on_cache)), std::istreambuf_iterator<char>());
  EXPECT_THAT(on_text, HasSubstr("\"int8\": {"));
  EXPECT_THAT(on_text, HasSubstr("MobilenetV2/Logits/Conv2d_1c_1x1/Conv2D"));
  const auto again = run_gpulab(common + path("on.json") + "' -v");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.err,
              HasSubstr("bias correction: the corrections of 53 layers from '" + path("on.json") + "'"));
  // A cache without corrections and no images to measure them on: said, and the plan is built
  // uncorrected (here the build stops later where there is no GPU engine).
  const auto uncorrected = run_gpulab("build '" + model() + "' -o '" + path("m.plan") +
                                      "' --precision int8 --calibration-cache '" + path("off.json") + "'");
  EXPECT_THAT(uncorrected.err,
              HasSubstr("warning: no bias correction: the calibration cache '" + path("off.json") +
                        "' holds none for int8 and no --calibration-data was given"));
}

TEST_F(AccuracyCli, BadBiasCorrectionValue) {
  const auto r = run_gpulab("accuracy --dataset '" + path("photos") + "' --bias-correction maybe");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.err, HasSubstr("--bias-correction: maybe not in {on,off}"));
}

TEST_F(AccuracyCli, BadPrecisionAndDataset) {
  const auto p = run_gpulab("accuracy --dataset '" + path("photos") + "' --precision fp32");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_THAT(p.err, HasSubstr("FP32 is the reference"));
  const auto d = run_gpulab("accuracy --precision fp16 --dataset '" + path("nowhere") + "'");
  EXPECT_EQ(d.exit_code, 3) << d.output;
  const auto all = run_gpulab("accuracy --model '" + model() + "' --dataset '" + path("photos") +
                              "' --calibration-images 5");
  EXPECT_EQ(all.exit_code, 2) << all.output;
  EXPECT_THAT(all.err, HasSubstr("none is left to score"));
}

}  // namespace
}  // namespace gpulab
