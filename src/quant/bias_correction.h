// Bias correction for INT8/FP8 plans: the mean shift quantization gives each output channel of
// an 8-bit layer, measured on calibration images and cancelled through the layer's bias.
//
// Rounding each weight to nearest is unbiased over many weights, but one output channel sums a
// fixed set of them: their errors add to a constant times the input's mean, a shift of that
// channel's every output. Clipping an activation at its calibrated range cuts one tail and shifts
// its mean too. Both pass through the network. The correction, per Conv/Gemm layer that runs in
// 8 bits and per output channel: the shift d of its values before the activation (bias and
// residual added) that makes the channel's mean after the activation, over the images and
// pixels, equal the FP32 plan's; d is added to the bias (BuildOptions::bias_correction, float32
// in the epilogue). For a layer without activation d is the difference of the means. Matching
// the means before a ReLU6 instead moves channels by shifts that happen where the activation
// clamps: on MobileNetV2 (percentile INT8, the 800 scored photos) it made the logits' relative L2
// error worse, 0.0860 -> 0.0946, where matching after the activation brings it to 0.0693
// (bench/results/2026-12-05-77c3397).
//
// A layer's shift depends on the corrections upstream (the layers before it pass their shifts
// on), so the layers are corrected in order: the quantized plan runs over each chunk of images
// with every 8-bit layer's channels shifted as the chunk reaches it
// (InterpretOptions::pre_activation), and the correction is the shift averaged over the chunks.
// Correcting every layer at once from one measurement instead counts a shift both where it starts
// and where it arrives; repeating that to convergence diverged on MobileNetV2 (mean shifts of 30
// at the last layers after three rounds).
//
// This is the empirical form of the correction in Nagel et al., "Data-Free Quantization Through
// Weight Equalization and Bias Correction" (ICCV 2019): measured means, no assumption about the
// activations' distribution. Cost: one FP32 and one quantized pass of the plan interpreter over
// the images.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "graph/graph.h"
#include "quant/calibration.h"

namespace gpulab {

// Supplies batches of preprocessed images: float NCHW of `count` images from `first`. Called
// from one thread at a time.
using BatchSource = std::function<Result<std::vector<float>>(int64_t first, int64_t count)>;

struct BiasCorrectionOptions {
  int num_threads = 0;  // chunks interpreted at once; 0: hardware_concurrency
  int64_t batch = 16;   // images per chunk (the means a layer is moved onto are a chunk's)
  ProgressFn progress;  // (images done, 2 x images: the FP32 pass and the quantized one)
};

// The bias correction of every 8-bit Conv/Gemm layer of the plan `build` describes for `graph`
// (after run_passes; build.precision kInt8 or kFp8, build.bias_correction ignored), by node name,
// one value per output channel of the model (no channel padding). kInvalidArgument for a float
// precision; errors of lowering, interpreting and the source pass through.
Result<std::map<std::string, std::vector<float>>> bias_corrections(const Graph& graph,
                                                                   const BuildOptions& build,
                                                                   const BatchSource& source, int64_t images,
                                                                   const BiasCorrectionOptions& options = {});

}  // namespace gpulab
