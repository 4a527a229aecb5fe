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

// Replaces every node whose int64/bool outputs shape inference knows (and that do not depend on the
// batch size: an export's shape code) by initializers, and every node whose inputs are all constants
// by its outputs computed with the reference backend (masks, relative position biases, the cast and
// power of an attention scale; outputs up to 64 MiB). Gives every Reshape whose target shape is known
// (possibly with the batch size) a constant shape initializer: the batch size is written as 0 ("copy
// this dimension", ONNX Reshape semantics) when the input has the batch at the same position, and as
// -1 where the batch is folded into another dimension (N * k), the other dimensions written out; a
// target using the batch twice is refused (kUnsupported). Dead nodes go.
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

// Identity in all but name, then dropped as drop_identity drops an Identity: a Reshape, Expand,
// Cast, Squeeze, Unsqueeze, Flatten or Slice whose output has its input's shape and type (a Slice
// only with steps of 1), a Transpose with the identity permutation, a Pad of zeros, and a Mul or
// Div by ones or an Add or Sub of zeros (a constant second input that does not broadcast the first).
Status drop_noops(Graph& graph);

// The decomposition torch.onnx writes for nn.LayerNorm below opset 17 (ReduceMean, Sub, Pow 2,
// ReduceMean, Add eps, Sqrt, Div, then Mul by gamma and Add of beta) becomes LayerNormalization over
// the same trailing axes, with gamma and beta written out over the normalized shape.
Status fuse_layer_norm(Graph& graph);

// GELU as torch.onnx writes it without a Gelu op (Div by sqrt 2 or Mul by 1/sqrt 2, Erf, Add 1, two
// Muls with x and 0.5 in any order) becomes Gelu (the exact form).
Status fuse_gelu(Graph& graph);

// F.normalize(x, dim=-1) as torch.onnx writes it (ReduceL2 over the last axis with keepdims, Clip
// to at least eps, an Expand back to x's shape or not, Div of x by it; Swin V2's cosine attention)
// becomes LpNormalization(x, axis -1, p 2) with epsilon eps.
Status fuse_l2_normalize(Graph& graph);

// Reshape(x -> [R, K]) -> Gemm -> Reshape(-> [l..., M]) with l1 ... lk = R (nn.MultiheadAttention's
// output projection over [T * N, E] rows) becomes Reshape(x -> [l..., K]) -> MatMul -> Add.
Status unflatten_gemm(Graph& graph);

// A Mul by a constant with one factor per output feature after MatMul(x, W) [+ b] (directly or
// after a Transpose: ConvNeXt's layer scale) is folded into W's columns and b.
Status fold_layer_scale(Graph& graph);

// Scaled dot-product attention: MatMul(Q, K^T) -> [Mul/Div by constants, Add of constant biases,
// Reshapes of the leading dims] -> Softmax(last axis) -> MatMul(., V) becomes one Attention node
// (scale, one summed constant bias over the finest leading dims the scores pass through; Q, K, V
// regrouped to those dims by Reshapes where needed). A scalar Mul or Div of Q or K (read only there)
// joins the scale; K^T's Transpose is composed away where possible; a constant factor that does not
// vary over the last two axes (Swin V2's per-head logit scale) moves onto Q as a Mul.
Status fuse_attention(Graph& graph);

// ShuffleNet's channel shuffle (Reshape to [N, g, C/g, H, W], Transpose(0, 2, 1, 3, 4), Reshape back)
// becomes one Gather of the channels with the constant permutation.
Status fold_channel_shuffle(Graph& graph);

struct PassOptions {
  bool fold_qdq = true;
  bool drop_identity = true;
  bool fold_constants = true;  // and drop_noops
  bool fold_batchnorm = true;  // and batchnorm_to_conv
  bool fold_flatten = true;    // and matmul_to_gemm, before it
  bool fuse = true;            // fuse_conv_epilogue
  // fuse_layer_norm, fuse_gelu, fuse_l2_normalize, unflatten_gemm, fold_layer_scale,
  // fuse_attention, fold_channel_shuffle
  bool fuse_transformer = true;
};

// Runs the enabled passes in the order above, logs (log_info) what each changed, removes dead
// code and re-runs Graph::infer_shapes after each.
Status run_passes(Graph& graph, const PassOptions& options = {});

}  // namespace gpulab
