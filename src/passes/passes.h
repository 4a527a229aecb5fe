// Graph-to-graph rewrites, one per file. Each pass takes a Graph whose shapes can be inferred,
// changes it in place, and leaves it valid (Graph::validate) with the same outputs, bit for bit
// up to float rounding where weights are folded. A pass that finds nothing to do returns ok and
// leaves the graph unchanged. Passes never throw and never allocate device memory.
#pragma once

#include "graph/graph.h"

namespace gpulab {

// QuantizeLinear -> DequantizeLinear pairs (kQuantizeDequantize) that an INT8 plan takes over:
// a symmetric, signed, per-tensor pair (zero point 0, [-128, 127]) on an activation is removed and
// its scale recorded in graph.quantization.activation_scales under the value it quantized, which an
// INT8 plan then stores at that scale (a float plan runs without the rounding). Any other pair
// (uint8, a zero point other than 0, per channel) stays and runs as its float equivalent, with a
// warning naming it. Runs first, so that the other passes see the float network.
Status fold_qdq(Graph& graph);

// Removes Identity and Dropout (inference: identity on its first output). When the removed
// node's output is a graph output, the producer of its input writes that name instead, so graph
// output names never change; an Identity from a graph input or initializer straight to a graph
// output is kept.
Status drop_identity(Graph& graph);

// Replaces Shape/Gather/Unsqueeze/Concat chains whose values are known ahead (and contain no batch
// size) by int64 initializers, and gives every Reshape whose target shape is known (possibly with
// the batch size) a constant shape initializer: the batch size is written as 0 ("copy this
// dimension", ONNX Reshape semantics) when the input has the batch at the same position; any
// other use of the batch size in a Reshape target is refused (kUnsupported). Dead nodes go.
Status fold_constants(Graph& graph);

// Conv followed by BatchNormalization (the Conv output read by nothing else) becomes one Conv
// with weights W*s/sqrt(var+eps) and bias (B-mean)*s/sqrt(var+eps)+beta (computed in double).
// A standalone BatchNormalization stays.
Status fold_batchnorm(Graph& graph);

// A BatchNormalization of a 4-D tensor left after fold_batchnorm (one not after a Conv, as in
// DenseNet's pre-activation layers) becomes the same per-channel scale and shift as a 1x1
// depthwise Conv (weights s/sqrt(var+eps), bias beta-mean*s/sqrt(var+eps), in double), which
// fuse_conv_epilogue can give the Relu after it and the GPU engine runs as a convolution.
Status batchnorm_to_conv(Graph& graph);

// MatMul of a [N, K] activation by a constant float [K, M] matrix becomes a Gemm (how other
// exporters write a dense layer); an Add of a constant vector of the M outputs after it, read by
// nothing else, becomes the Gemm's C. Other MatMuls stay.
Status matmul_to_gemm(Graph& graph);

// Canonicalizes the flatten in front of a Gemm: a Reshape to [N, -1] (or [0, -1], or any target
// that keeps dimension 0 and makes the rest one) feeding a Gemm's A becomes Flatten(axis=1), and a
// Flatten whose input is already rank 2 is removed. Backends then only see Flatten(axis=1) ->
// Gemm, which is a view of contiguous NCHW data; the Gemm's A stays rank 2.
Status fold_flatten_into_gemm(Graph& graph);

// Conv (+bias) [+ Add of a same-shaped tensor as residual] [+ Relu or Clip] -> one Conv with
// ConvAttrs{activation, clip_min, clip_max, has_residual} and inputs X, W, B ("" if none),
// residual. Only where each intermediate value has exactly one use, and the residual is defined
// before the Conv.
Status fuse_conv_epilogue(Graph& graph);

struct PassOptions {
  bool fold_qdq = true;
  bool drop_identity = true;
  bool fold_constants = true;
  bool fold_batchnorm = true;  // and batchnorm_to_conv
  bool fold_flatten = true;    // and matmul_to_gemm, before it
  bool fuse = true;            // fuse_conv_epilogue
};

// Runs the enabled passes in the order above, logs (log_info) what each changed, removes dead
// code and re-runs Graph::infer_shapes after each.
Status run_passes(Graph& graph, const PassOptions& options = {});

}  // namespace gpulab
