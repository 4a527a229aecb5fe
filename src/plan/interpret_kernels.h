// The plan interpreter's convolution loops (CPU, used by interpret.cc), written so that the
// compiler vectorizes them: NHWC activations, weights [K, R, S, C/groups], one output pixel at a
// time, each tap's channels a contiguous dot product. Three accumulations:
//   int16 x int16 -> int32   INT8 layers: exact, so the order does not matter
//   float x float -> float   FP8 layers (E4M3 products are exact in float32; the sum is float32 in
//                            a fixed order of eight interleaved partial sums)
//   float x float -> double  float layers (the interpreter's float64 emulation)
// Each call computes the output rows [row_begin, row_end) (a row: one image's output row, index
// n * y_h + oh; row_end < 0: to the last), so that the interpreter can give rows to several threads;
// an output's sum does not depend on how the rows are split.
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
void conv_accumulate(const ConvGeometry& g, const int16_t* x, const int16_t* w, int32_t* acc,
                     int64_t row_begin = 0, int64_t row_end = -1);
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, float* acc, int64_t row_begin = 0,
                     int64_t row_end = -1);
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, double* acc,
                     int64_t row_begin = 0, int64_t row_end = -1);

// A float layer's output rows [row_begin, row_end) as the interpreter's float64 emulation computes
// them: each output starts at its bias, adds x * w (in float64, each product and sum rounded, no
// fused multiply-add) tap by tap, input channel by input channel, then the residual (when not
// null; y's layout), and is rounded to float32 into y. wk: the weights as [tap][x_c / groups][y_c],
// output channels innermost, in float64.
void conv_rows_f64(const ConvGeometry& g, const float* x, const double* wk, const float* bias,
                   const float* residual, float* y, int64_t row_begin, int64_t row_end);

}  // namespace gpulab
