// The accuracy gate: how well a reduced-precision plan of a classifier agrees with FP32 on
// labelled images, where its error comes from, and which layers to move to FP16 until it agrees
// well enough. Everything runs on the CPU through the plan interpreter (src/plan/interpret.h),
// which emulates the GPU's storage and 8-bit arithmetic, so the numbers hold without a GPU.
//
//   auto set = load_labelled_set(items, spec, {});
//   auto fp32 = fp32_reference(graph, *set, {});                        // once per model and set
//   auto int8 = measure_agreement(graph, *set, *fp32, {.precision = Precision::kInt8,
//                                                      .activation_amax = cache.amax,
//                                                      .fallback = true});
//
// Definitions (docs/metrics.md, "gpulab accuracy"):
//   top-1 / top-5      share of the labelled images whose label is the plan's first / among its five
//                      largest logits
//   agreement          share of the images whose top-1 class equals the FP32 plan's
//   logits rel. L2     sqrt(sum (y - y32)^2 / sum y32^2) over all images' logits
//   SQNR               10 log10(sum x32^2 / sum (x - x32)^2) dB of one value over the per-layer
//                      images, valid channels only (no padding); infinite when equal
//   int8/fp8 FLOP share  FLOPs of the Conv and Gemm layers run in the 8-bit precision / FLOPs of all
//                      Conv and Gemm layers (per image, from the plan)
// Per-layer localisation runs on the first `per_layer_images` images of the set (a subset: it
// interprets one plan per quantizable layer): each layer's SQNR in the fully quantized plan, and,
// for a plan where only that layer is quantized (every other Conv/Gemm in FP16), the agreement and
// the SQNR of the logits. Layers are listed worst first by that logits SQNR.
// Fallback: layers move to FP16 in fallback_order (computed if not asked for) until the agreement over
// the whole set reaches the gate: one at a time for the first kLinearFallbackSteps, then the
// number moved doubles until the gate is met and bisection finds the smallest number that meets
// it (assuming the agreement grows with it; every plan scored is in fallback_steps).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "graph/graph.h"
#include "image/dataset.h"
#include "image/preprocess.h"
#include "plan/plan.h"
#include "quant/calibration.h"

namespace gpulab {

// Preprocessed images and their labels, in the order given.
struct LabelledSet {
  std::vector<std::filesystem::path> paths;
  std::vector<int64_t> labels;  // class index, -1 when unknown
  std::vector<float> inputs;    // float NCHW, size() * per_image
  int64_t per_image = 0;
  int64_t channels = 3, height = 0, width = 0;
  int64_t size() const { return static_cast<int64_t>(paths.size()); }
};

struct SetOptions {
  int num_threads = 0;  // decoding threads; 0: hardware_concurrency
  ProgressFn progress;
};
// Decodes and preprocesses every image (kInvalidFile naming one that does not decode).
Result<LabelledSet> load_labelled_set(std::span<const LabelledImage> items, const PreprocessSpec& spec,
                                      const SetOptions& options);

// One plan's predictions on a set.
struct Predictions {
  int64_t classes = 0;
  std::vector<float> logits;               // size() * classes
  std::vector<std::vector<int64_t>> top5;  // per image, largest first
};

struct RunOptions {
  int num_threads = 0;  // interpreter threads; 0: hardware_concurrency
  ProgressFn progress;
};
Result<Predictions> predict(const Plan& plan, const LabelledSet& set, const RunOptions& options);

struct Scores {
  double top1 = 0, top5 = 0;  // fractions of the labelled images; 0 when none is labelled
  double agreement = 1;       // top-1 agreement with FP32, a fraction
  double logits_rel_l2 = 0;   // against FP32
};
Scores score(const Predictions& predictions, const LabelledSet& set, const Predictions& fp32);

// FP32 plan (lower_graph, precision fp32) predictions: the reference every precision is compared
// with. Compute it once per graph and set.
Result<Predictions> fp32_reference(const Graph& graph, const LabelledSet& set, const RunOptions& options);

struct AccuracyOptions {
  Precision precision = Precision::kInt8;
  std::map<std::string, float> activation_amax;      // INT8/FP8: calibrated ranges (calibration.h)
  std::map<std::string, Precision> layer_precision;  // fixed per-layer overrides
  // INT8/FP8: BuildOptions::bias_correction of every plan built (bias_correction.h)
  std::map<std::string, std::vector<float>> bias_correction;
  double gate = 0.99;      // top-1 agreement the fallback aims for
  bool fallback = false;   // move layers to FP16 until the gate is met
  bool per_layer = false;  // per-layer localisation
  int64_t per_layer_images = 100;
  int num_threads = 0;
  // Progress of each phase: called with a short phase name, images done, images in the phase.
  std::function<void(std::string_view phase, int64_t done, int64_t total)> progress;
};

inline constexpr size_t kLinearFallbackSteps = 4;

// One plan the fallback scored: the first `layers` ranked layers in FP16.
struct FallbackStep {
  int64_t layers = 0;
  Scores scores;
  double quantized_flops_share = 0;
};

struct LayerReport {
  std::string name;
  double flops_share = 0;                                // of all Conv/Gemm FLOPs
  double sqnr_db = 0;                                    // of its output in the fully quantized plan
  double alone_agreement = 1, alone_logits_sqnr_db = 0;  // only this layer quantized
};

// The order the fallback moves layers to FP16: by the logits' noise power each adds when it alone
// is quantized (10^(-alone SQNR / 10)) per share of the FLOPs it holds, largest first: each FLOP
// given up to FP16 removes as much noise as it can (noise powers of independent layers roughly
// add). By SQNR alone, MobileNetV2's INT8 plan met the 99% gate with 55.5% of its FLOPs in
// INT8 (2026-12-05, bench/results/2026-12-05-1658618): a large layer moved for a little noise.
std::vector<std::string> fallback_order(std::vector<LayerReport> layers);

struct AccuracyResult {
  Precision precision = Precision::kInt8;
  int64_t images = 0, labelled = 0, per_layer_images = 0;
  Scores fp32;   // top-1/top-5 of FP32 (agreement 1)
  Scores plain;  // the plan with options.layer_precision only
  Scores final;  // after fallback (= plain without it)
  double plain_quantized_flops_share = 0, final_quantized_flops_share = 0;  // INT8/FP8 only
  std::vector<LayerReport> layers;                   // worst first; empty without per-layer/fallback
  std::vector<std::string> fallback_layers;          // in the order they moved
  double fallback_flops_share = 0;                   // their share of the Conv/Gemm FLOPs
  std::vector<FallbackStep> fallback_steps;          // every plan the fallback scored, by layers moved
  bool gate_met = false;                             // final.agreement >= gate
  std::map<std::string, Precision> layer_precision;  // what the final plan used
};

// Lowers `graph` (after run_passes) in options.precision and scores it against `fp32` on `set`.
Result<AccuracyResult> measure_agreement(const Graph& graph, const LabelledSet& set, const Predictions& fp32,
                                         const AccuracyOptions& options);

// The fallback's search over "the first k ranked layers in FP16", k in [1, n], given meets(k)
// (whether that plan reaches the gate; k = 0 is known to fail): k = 1, 2, ... linear_steps one at a
// time, then doubling until one meets it and bisection between the last failing and the first
// meeting k. The smallest k that meets the gate when meets() grows with k (more layers in FP16 do
// not lower the agreement), a k that meets it (or n) otherwise; n when none does. Each k is asked
// at most once; an error from meets() is returned as is.
Result<size_t> smallest_passing_prefix(size_t n, size_t linear_steps,
                                       const std::function<Result<bool>(size_t)>& meets);

// The share of the Conv/Gemm FLOPs a plan runs in 8 bits (0 for float plans).
double quantized_flops_share(const Plan& plan);

}  // namespace gpulab
