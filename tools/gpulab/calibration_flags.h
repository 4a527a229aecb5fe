// The calibration flags shared by `gpulab build` and `gpulab accuracy`, and the one way both get
// activation ranges for an INT8/FP8 plan: from a calibration cache made for the model, else by
// calibrating on a folder of images (written to the cache when one is named).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "graph/graph.h"
#include "image/preprocess.h"
#include "quant/calibration.h"

namespace gpulab::cli {

struct CalibrationFlags {
  std::string data;        // --calibration-data DIR
  std::string calibrator;  // --calibrator; "" = the cache's, else entropy
  double percentile = 99.99;
  int64_t images = 500;                // --calibration-images
  std::string cache;                   // --calibration-cache FILE
  std::string bias_correction = "on";  // --bias-correction on|off
};

// Declares --calibration-data, --calibrator, --percentile, --calibration-images (default
// `default_images`), --calibration-cache and --bias-correction on `sub`.
void add_calibration_flags(CLI::App* sub, CalibrationFlags* flags, int64_t default_images);

struct Calibration {
  CalibrationCache cache;
  std::vector<std::filesystem::path> images;  // calibrated on (empty when the cache was reused)
  bool from_cache = false;
  double seconds = 0;  // of the calibration pass (0 when the cache was reused)
};

// The images --calibration-data and --calibration-images pick (spread_subset of the folder's).
Result<std::vector<std::filesystem::path>> picked_calibration_images(const CalibrationFlags& flags);

// Ranges for the model at `model_path` whose graph after run_passes is `graph`. kInvalidArgument
// when neither a usable cache nor --calibration-data is given, when the cache was made for another
// model or with another calibrator than --calibrator names; kNotFound for a missing or empty
// calibration folder. Shows progress on stderr.
Result<Calibration> calibrate_model(const CalibrationFlags& flags, const std::string& model_path,
                                    const Graph& graph, const PreprocessSpec& spec, int num_threads);

// The bias correction (quant/bias_correction.h) of `build`'s 8-bit precision for the model, with
// every Conv/Gemm in that precision (plans that move layers to float keep the corrections of
// the layers left in 8 bits): the cache's when it holds one for the precision, else computed on
// the calibration images (those `calibration` calibrated on, else --calibration-data's) and
// added to the cache file when one is named. Empty with --bias-correction off, or when there is
// neither (said on stderr). Shows progress on stderr.
Result<std::map<std::string, std::vector<float>>> model_bias_correction(
    const CalibrationFlags& flags, Calibration& calibration, const Graph& graph, const BuildOptions& build,
    const PreprocessSpec& spec, int num_threads);

// The model's preprocessing (its preprocess.* metadata), or torchvision's ImageNet transform with a
// note on stderr when it names none.
Result<PreprocessSpec> model_preprocess(const Graph& graph);

}  // namespace gpulab::cli
