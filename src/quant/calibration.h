// Post-training calibration: the activation ranges of a model, from FP32 inference over real
// images with the model's own preprocessing, and the calibration cache that keeps them.
//
// The FP32 inference is the plan interpreter's (src/plan/interpret.h) on an FP32 plan of the graph,
// with every value kept: each plan value (a node output of the graph after run_passes, or the
// input) adds its valid channels (not the channel padding) to a MagnitudeHistogram
// (histogram.h), and a calibrator turns each histogram into an amax. The GPU FP32 engine does not
// export its intermediate values, so calibration runs on the CPU even where a GPU is present.
//
// Cache file (JSON, written atomically):
//   {"schema": "gpulab.calibration", "schema_version": 1, "model": "<file name>",
//    "model_fnv1a64": "<16 hex digits: FNV-1a 64 of the ONNX file's bytes>",
//    "calibrator": "entropy|percentile|minmax", "percentile": 99.99, "images": N,
//    "tensors": {"<value name>": {"amax": a, "int8_scale": a / 127, "fp8_scale": a / 448}, ...},
//    "bias_correction": {"int8": {"<Conv/Gemm node name>": [one float per output channel], ...},
//                        "fp8": {...}}}
// A cache is reused only for the model it was made for (same hash); the scales are written for
// people and other tools, gpulab reads amax. bias_correction (schema version 2; optional) holds
// bias_correction.h's corrections per 8-bit precision, computed on the same images with these
// ranges; version 1 files (without it) are still read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"
#include "graph/graph.h"
#include "image/preprocess.h"
#include "quant/histogram.h"

namespace gpulab {

// FNV-1a 64 of a file's bytes as 16 lowercase hex digits (the cache's model key).
Result<std::string> model_file_hash(const std::filesystem::path& onnx_path);

// The images of a calibration folder: those listed in its labels.tsv when it has one (a labelled
// data set, image/dataset.h), else its image files (image/dataset.h's list_images). A missing
// folder or one without images: kNotFound saying so.
Result<std::vector<std::filesystem::path>> calibration_images(const std::filesystem::path& folder);

// `count` of `total` images spread evenly over the list: indices floor(j * total / count),
// j = 0 .. count - 1 (all of them when count >= total). Calibration takes these; `gpulab accuracy`
// scores on the others when both use one folder.
std::vector<int64_t> spread_subset(int64_t total, int64_t count);

// Decodes and preprocesses `images` into one float NCHW batch (kInvalidFile naming an image that
// does not decode).
Result<std::vector<float>> load_image_batch(std::span<const std::filesystem::path> images,
                                            const PreprocessSpec& spec);

// `requested` threads, or one per core (std::thread::hardware_concurrency, at least 1) for 0.
int thread_count(int requested);

// Progress over images: called after each batch with (images done, images in all).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct StatisticsOptions {
  int num_threads = 0;  // 0: std::thread::hardware_concurrency()
  ProgressFn progress;  // may be empty
};

// The statistics of one calibration pass: a histogram per plan value, by value name.
struct CalibrationStatistics {
  std::map<std::string, MagnitudeHistogram> tensors;
  int64_t images = 0;
  double seconds = 0;  // wall time of the pass (decode, preprocess, FP32 inference, histograms)
};

// Runs FP32 inference over `images` (decoded and preprocessed with `spec`) and gathers the
// statistics of every value. `graph` is after run_passes. kInvalidFile for an image that does not
// decode, kUnsupported when the graph has no plan (the message names the node).
Result<CalibrationStatistics> collect_statistics(const Graph& graph,
                                                 std::span<const std::filesystem::path> images,
                                                 const PreprocessSpec& spec,
                                                 const StatisticsOptions& options = {});

struct CalibrationCache {
  std::string model;       // the ONNX file's name, for people
  std::string model_hash;  // model_file_hash()
  Calibrator calibrator = Calibrator::kPercentile;
  double percentile = 99.99;
  int64_t images = 0;
  std::map<std::string, float> amax;  // by value name
  // By precision name ("int8", "fp8"), then node name: BuildOptions::bias_correction.
  std::map<std::string, std::map<std::string, std::vector<float>>> bias_correction;
};

// Every tensor's amax under `calibrator`.
CalibrationCache calibrate(const CalibrationStatistics& statistics, Calibrator calibrator, double percentile);

Status save_calibration_cache(const CalibrationCache& cache, const std::filesystem::path& path);
// A cache file's text; kInvalidFile (naming `path` and the field) when it is not a calibration cache.
Result<CalibrationCache> parse_calibration_cache(std::string_view text, const std::filesystem::path& path);
// kNotFound when absent; kInvalidFile when it is not a calibration cache; kInvalidArgument when it
// was made for another model than `model_hash` (the message says how to recalibrate).
Result<CalibrationCache> load_calibration_cache(const std::filesystem::path& path,
                                                const std::string& model_hash);

}  // namespace gpulab
