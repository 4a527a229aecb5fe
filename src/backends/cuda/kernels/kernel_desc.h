// Descriptors of gpulab's own CUDA kernels, their validation and output-size arithmetic.
//
// Plain C++ (no CUDA headers): the planner fills and validates descriptors at build time, and
// the unit tests exercise every rule here on a machine without a GPU. kernels.h declares the
// launchers that take these descriptors.
//
// Conventions for every descriptor:
// - Device activations are NHWC, densely packed (C innermost), unless a field says otherwise.
// - Sizes are element counts (int64_t), never bytes; every size must be >= 1.
// - `dtype` is the element type of the device tensors: kFloat32, kFloat16 or kBFloat16.
//   Arithmetic is done in float32 whatever the storage type.
// - validate_*() returns Status::invalid_argument naming the descriptor, the offending field and
//   its value; it never touches the device.
#pragma once

#include <array>
#include <cstdint>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab::kernels {

// True for the storage types the kernels accept: float32, float16, bfloat16.
bool is_kernel_float_type(DataType dtype);

// ---- input / output conversion ---------------------------------------------------------------

// float32 NCHW (as uploaded from the host) -> NHWC of `dtype`, channels padded with zeros from
// `c` to `c_out` (c_out >= c; tensor cores want C a multiple of 4 or 8 in the conv stem).
struct NchwToNhwcDesc {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t c_out = 0;  // channels per pixel in the output, >= c
  DataType dtype = DataType::kFloat32;
};
Status validate(const NchwToNhwcDesc& desc);

// float32 NCHW -> the space-to-depth NHWC layout of a rewritten stem (plan.h's SpaceToDepth):
// y[n, Y, X, (dy * block + dx) * c + ch] = x[n, ch, Y * block + dy - pad_top, X * block + dx -
// pad_left], zero outside the image and in channels [block^2 c, c_out).
struct SpaceToDepthDesc {
  int64_t n = 0, c = 0, h = 0, w = 0;  // the NCHW input
  int64_t block = 2, pad_top = 0, pad_left = 0;
  int64_t out_h = 0, out_w = 0, c_out = 0;  // the output's pixels and channels (c_out >= block^2 c)
  DataType dtype = DataType::kFloat32;
};
Status validate(const SpaceToDepthDesc& desc);

// Largest channel count the uint8 normalisation accepts (gray, RGB, RGBA).
inline constexpr int kMaxNormalizeChannels = 4;

// uint8 HWC images (already resized/cropped on the host, N of them back to back, i.e. NHWC
// uint8) -> y = (x / 255 - mean[c]) / std[c] as NHWC of `dtype`, channels padded with zeros to
// c_out. mean and std are on the [0, 1] scale (ImageNet: 0.485/0.456/0.406, 0.229/0.224/0.225).
struct NormalizeU8Desc {
  int64_t n = 0, h = 0, w = 0, c = 0;  // c in 1..kMaxNormalizeChannels
  int64_t c_out = 0;                   // >= c
  std::array<float, kMaxNormalizeChannels> mean{};
  std::array<float, kMaxNormalizeChannels> std{1.0f, 1.0f, 1.0f, 1.0f};  // each finite, non-zero
  DataType dtype = DataType::kFloat32;
};
Status validate(const NormalizeU8Desc& desc);

// NHWC of `dtype` -> float32 NCHW. With h == w == 1 this is NC -> NC (a plain cast).
// `c_stored` is the channel stride of the input (>= c; 0 means c), for outputs whose channels were
// padded on the device; the padding is dropped.
struct NhwcToNchwF32Desc {
  int64_t n = 0, h = 1, w = 1, c = 0;
  int64_t c_stored = 0;
  DataType dtype = DataType::kFloat32;
};
Status validate(const NhwcToNchwF32Desc& desc);

// `count` elements of one float type to another (layout unchanged), rounding to nearest even:
// the casts between FP16 and BF16 values of a BF16 plan with an FP16 layer.
struct FloatCastDesc {
  int64_t count = 0;
  DataType from = DataType::kFloat16, to = DataType::kBFloat16;
};
Status validate(const FloatCastDesc& desc);

// ---- pooling -------------------------------------------------------------------------------

// Output length of one spatial axis of a pooling window (ONNX MaxPool/AveragePool, PyTorch):
//   floor or ceil of (in + pad_begin + pad_end - dilation*(kernel-1) - 1) / stride, plus 1;
// with ceil_mode, a last window that would start inside the end padding is dropped (PyTorch's
// rule, also onnxruntime's). Returns 0 or less when no window fits.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin,
                         int64_t pad_end, bool ceil_mode);

enum class PoolKind { kMax, kAverage };

// Max or average pooling over NHWC. Average pooling divides by the number of input elements in
// the window (count_include_pad = false) or by the window clipped to the padded input
// (count_include_pad = true; PyTorch's divisor, which excludes a ceil_mode overhang).
// out_h/out_w must equal pool_output_size(). Dilation is for max pooling only (must be 1x1 for
// average). Pads must be smaller than kernel * dilation (as in the reference backend); a max
// window that holds no input at all (possible only with dilation) yields -inf.
struct PoolDesc {
  PoolKind kind = PoolKind::kMax;
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t out_h = 0, out_w = 0;
  Hw kernel;
  Hw stride{1, 1};
  Hw dilation{1, 1};
  Pads pads;
  bool ceil_mode = false;
  bool count_include_pad = false;
  DataType dtype = DataType::kFloat32;
};
Status validate(const PoolDesc& desc);
// out_h/out_w of a descriptor from its other fields (the planner's convenience).
PoolDesc with_output_size(PoolDesc desc);

// Global average pooling: NHWC -> N,1,1,C (mean over H*W, float32 accumulation).
struct GlobalAvgPoolDesc {
  int64_t n = 0, h = 0, w = 0, c = 0;
  DataType dtype = DataType::kFloat32;
};
Status validate(const GlobalAvgPoolDesc& desc);

// ---- elementwise ---------------------------------------------------------------------------

// y = act(a op b). a and y have n*hw*c elements (NHWC with hw = H*W; any dense tensor with
// n = hw = 1 works too). b has the same shape (kNone) or is N,1,1,C and broadcast over H*W
// (kPerImageChannel: the squeeze-and-excitation scale). y may alias a, or b when b is not
// broadcast (in place).
enum class BinaryOp { kAdd, kMul };
enum class Broadcast { kNone, kPerImageChannel };
struct BinaryDesc {
  BinaryOp op = BinaryOp::kAdd;
  int64_t n = 0, hw = 1, c = 0;
  Broadcast b_broadcast = Broadcast::kNone;
  Activation activation = Activation::kNone;
  float clip_min = 0.0f, clip_max = 6.0f;  // for Activation::kClip; clip_min <= clip_max
  DataType dtype = DataType::kFloat32;
};
Status validate(const BinaryDesc& desc);

// y = act(x + bias[c]) over an NHWC tensor of `count` elements, count % c == 0. bias holds c
// values of `bias_dtype` (float32 or `dtype`). y may alias x.
struct BiasActDesc {
  int64_t count = 0, c = 0;
  Activation activation = Activation::kNone;
  float clip_min = 0.0f, clip_max = 6.0f;
  DataType dtype = DataType::kFloat32;
  DataType bias_dtype = DataType::kFloat32;
};
Status validate(const BiasActDesc& desc);

// y = f(x), elementwise over `count` elements. y may alias x.
//   kRelu:        max(x, 0)
//   kClip:        min(max(x, clip_min), clip_max)
//   kSigmoid:     1 / (1 + exp(-x))
//   kHardSigmoid: max(0, min(1, alpha * x + beta))           (ONNX: alpha 0.2, beta 0.5)
//   kHardSwish:   x * max(0, min(1, x / 6 + 0.5))             (ONNX HardSwish, PyTorch hardswish)
//   kGelu:        x / 2 (1 + erf(x / sqrt 2))
//   kGeluTanh:    x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
//   kTanh, kErf, kSqrt, kExp, kNeg
//   kFakeQuantize: (clamp(round_half_even(x / alpha) + beta, clip_min, clip_max) - beta) * alpha
//                 (a Q/DQ pair's float equivalent, core/quant.h's fake_quantize; alpha > 0)
enum class UnaryOp {
  kRelu,
  kClip,
  kSigmoid,
  kHardSigmoid,
  kHardSwish,
  kGelu,
  kGeluTanh,
  kTanh,
  kErf,
  kSqrt,
  kExp,
  kNeg,
  kFakeQuantize
};
struct UnaryDesc {
  UnaryOp op = UnaryOp::kRelu;
  int64_t count = 0;
  float alpha = 0.2f, beta = 0.5f;         // kHardSigmoid; kFakeQuantize: scale, zero point
  float clip_min = 0.0f, clip_max = 6.0f;  // kClip
  DataType dtype = DataType::kFloat32;
};
Status validate(const UnaryDesc& desc);

// ---- fused stem ------------------------------------------------------------------------------

// A network's stem in one kernel: float32 NCHW image -> space-to-depth (SpaceToDepthDesc's
// rearrangement, block 2, never stored) -> 4x4/1 convolution over the space-to-depth pixels with
// bias and ReLU (the rewritten 7x7/2 stem, weights [k, 4, 4, s2d_c] KRSC) -> 3x3/2 max pool ->
// NHWC [n, out_h, out_w, k] float16. It replaces three steps (input conversion, convolution, max
// pool) and never writes the convolution's output, which at ResNet-18's batch 256 is 411 MB in
// FP16. Arithmetic: FP16 tensor cores, FP32 accumulation, the convolution's output rounded once
// to FP16 before the max (as the unfused steps round it), so the result equals theirs up to the
// order of the FP32 sums.
inline constexpr int64_t kStemBlock = 2;         // space-to-depth block (the 7x7's stride)
inline constexpr int64_t kStemTaps = 4;          // convolution window over space-to-depth pixels
inline constexpr int64_t kStemMaxChannels = 3;   // image channels (block^2 c <= 12 of the 16)
inline constexpr int64_t kStemS2dChannels = 16;  // channels per pixel of the weights' C axis
inline constexpr int64_t kStemOutChannels = 64;  // k
struct FusedStemDesc {
  int64_t n = 0, c = 0, h = 0, w = 0;         // the float32 NCHW image, c in 1..kStemMaxChannels
  int64_t pad_top = 0, pad_left = 0;          // of the space-to-depth rearrangement (< 64)
  int64_t conv_h = 0, conv_w = 0;             // the convolution's output (never stored)
  PoolAttrs pool;                             // 3x3, stride 2, dilation 1, pads begin 1 / end <= 1
  int64_t out_h = 0, out_w = 0;               // pool_output_size() of conv_h/conv_w
  Activation activation = Activation::kRelu;  // ReLU only: the pool treats missing pixels as 0
  DataType dtype = DataType::kFloat16;        // float16 only (weights, the convolution's output)
  bool bias_float32 = false;                  // bias float32 instead of float16
  // y: float16, or bfloat16 rounded from the float16 result (what the FP16 stem followed by a cast
  // to BF16 computes: a BF16 plan's stem, default_layer_precision), or int8 / fp8e4m3 quantized
  // from the float16 result at out_scale as a cast to that type does (quant.h: an INT8 or FP8
  // plan's stem, whose cast was 3.3% of ResNet-18's INT8 time at batch 256 on an H100).
  DataType out_dtype = DataType::kFloat16;
  float out_scale = 1.0f;  // an 8-bit y's scale (positive and finite)
};
Status validate(const FusedStemDesc& desc);

// How the sm_90 kernel (stem_rows_sm90.cu) divides a launch into work items: strips of
// kStemStripPooled pooled columns, each image's pooled rows cut into `chunks` runs of `chunk_rows`
// (the last may be shorter); items = n x chunks x strips, taken by `consumers` warpgroups. A
// consumer's time is about its items' convolution rows, and every run costs 4 rows more than its
// own (the pool's top row and 3 space-to-depth rows of halo), so the run length minimises (items
// per consumer) x (2 chunk_rows + 4); ties go to longer runs. desc must be valid.
inline constexpr int64_t kStemStripPooled = 56;
struct StemRowPlan {
  int64_t strips = 0, chunk_rows = 0, chunks = 0, items = 0;
};
StemRowPlan plan_stem_rows(const FusedStemDesc& desc, int64_t consumers);

// ---- classifier tail -----------------------------------------------------------------------

// Softmax over the last dimension of a float32 [rows, cols] matrix, max-subtracted (numerically
// stable). y may alias x.
struct SoftmaxDesc {
  int64_t rows = 0, cols = 0;
};
Status validate(const SoftmaxDesc& desc);

// Largest k launch_topk accepts.
inline constexpr int kMaxTopK = 32;

// The k largest values of each row of a float32 [rows, cols] matrix, in descending order; ties
// go to the lower index, NaN ranks below every number. Outputs: indices [rows, k] of
// `index_dtype` (kInt32 or kInt64) and values [rows, k] float32.
struct TopKDesc {
  int64_t rows = 0, cols = 0;
  int k = 0;  // 1..min(kMaxTopK, cols)
  DataType index_dtype = DataType::kInt32;
};
Status validate(const TopKDesc& desc);

// A small fully connected layer for tiny batches, where a GEMM library's launch overhead or tile
// waste dominates: y[r, o] = sum_k x[r, k] * w[o, k] + bias[o] (ONNX Gemm with transB = 1, the
// layout of a classifier's weight). x and w are of `dtype`; bias (optional, may be null at
// launch) is float32; y is of `out_dtype` (float32 or `dtype`). Accumulates in float32.
struct LinearDesc {
  int64_t rows = 0;  // batch
  int64_t in_features = 0;
  int64_t out_features = 0;
  DataType dtype = DataType::kFloat32;
  DataType out_dtype = DataType::kFloat32;
};
Status validate(const LinearDesc& desc);

}  // namespace gpulab::kernels
