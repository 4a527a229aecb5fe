// The plan interpreter's convolution loops (CPU, used by interpret.cc), written so that the
// compiler vectorizes them: NHWC activations, weights [K, R, S, C/groups], one output pixel at a
// time, each tap's channels a contiguous dot product. Three accumulations:
//   int16 x int16 -> int32   INT8 layers: exact, so the order does not matter
//   float x float -> float   FP8 layers (E4M3 products are exact in float32; the sum is float32 in
//                            a fixed order of eight interleaved partial sums)
//   float x float -> double  float layers (the interpreter's float64 emulation)
// Single-threaded; the interpreter runs images on several threads (InterpretOptions::num_threads).
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace gpulab {

struct ConvGeometry {
  int64_t batch = 1;
  int64_t x_h = 1, x_w = 1, x_c = 1;  // input value, stored channels
  int64_t y_h = 1, y_w = 1, y_c = 1;  // output value, stored channels
  ConvAttrs attrs;                    // kernel, stride, pads, dilation, groups
};

// acc[((n * y_h + oh) * y_w + ow) * y_c + k] = sum over the window of x * w, nothing else (no
// bias). x: [batch, x_h, x_w, x_c]; w: [y_c, R, S, x_c / groups].
void conv_accumulate(const ConvGeometry& g, const int16_t* x, const int16_t* w, int32_t* acc);
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, float* acc);
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, double* acc);

}  // namespace gpulab
