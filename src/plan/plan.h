// The plan: what the Planner decided for one model on one GPU, and its file format.
//
// A Plan is CUDA-free data: activation values in NHWC (per image), the ordered steps with their
// attributes and chosen tactics, and the weights already in the layout and element type the
// chosen kernels read (convolutions KRSC, GEMM [out, in] row-major). The runtime executes it;
// save_plan/load_plan move it to and from disk.
//
// File format (little-endian), version kPlanFormatVersion:
//   offset 0   8 bytes   magic "GPULABPL"
//          8   u32       format version
//         12   u32       reserved (0)
//         16   u64       header length H
//         24   H bytes   header: JSON (versions, GPU, precision, max batch, values, steps,
//                        weight table with offsets into the blob)
//     24 + H   u64       blob length B
//     32 + H   B bytes   weights, each at a 256-byte aligned offset inside the blob
//  32 + H + B  u64       FNV-1a 64 checksum of every byte before it
// Anything else (short file, bad magic, other version, wrong checksum, inconsistent header) is
// refused with kInvalidFile and a message naming what is wrong; no input makes the reader crash.
// Version 2 added: a kConv step may read x stored in another float type than its output (a
// cast folded into a depthwise layer, fold_input_casts). A gpulab that reads only version 1 refuses
// a version-2 file rather than misreading it.
// Version 3 added: a kOutput step may end in a softmax (PlanStep::softmax), which a gpulab
// reading versions 1-2 would leave out; kMul and kPointwise steps, a kAdd or kMul whose second
// input is one value per image and channel, and kConcat steps (their kind names are unknown
// there).
// Version 4 added (the transformer classifiers): kCopy, kLinear, kMatMul, kAttention, kLayerNorm
// and kEltwise steps, which read and write their values through TensorViews (PlanStep::views), and
// the pointwise functions gelu, gelu_tanh, tanh, erf, sqrt, exp, neg and identity.
// Version 5 added (issue 34): INT8 and FP8 plans. A value stored as int8 or fp8e4m3 has a scale
// (PlanValue::scale), a quantized kConv or kGemm step names its per-output-channel weight scales
// (PlanStep::weight_scale), steps and casts may read and write those types, the precisions "int8"
// and "fp8" and the pointwise function fake_quantize are new.
// Version 6 added (Swin V2): a kLayerNorm step in L2 mode (PlanStep::l2_norm, "l2" in the header),
// y = x / max(||x||, epsilon) * W + b, which a gpulab reading version 5 would run as a layer norm.
// gpulab reads versions 1 to 6: an older file has none of what the later versions added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/engine.h"
#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab {

inline constexpr uint32_t kPlanFormatVersion = 6;        // written
inline constexpr uint32_t kOldestPlanFormatVersion = 1;  // still read
inline constexpr char kPlanMagic[8] = {'G', 'P', 'U', 'L', 'A', 'B', 'P', 'L'};

// The machine a plan was built for. Versions are the libraries' own integers
// (cudaRuntimeGetVersion, cudnnGetVersion, cublasLtGetVersion).
struct PlanTarget {
  std::string gpu_name;
  int compute_capability = 0;  // major * 10 + minor
  int cuda_runtime_version = 0;
  int cudnn_version = 0;
  int cublaslt_version = 0;
  friend bool operator==(const PlanTarget&, const PlanTarget&) = default;
};
// "NVIDIA H200 (sm_90), CUDA 13000, cuDNN 91900, cuBLASLt 130100"
std::string describe_target(const PlanTarget& target);
// Ok when a plan built for `plan` may run on `current`: same compute capability and the same
// CUDA runtime, cuDNN and cuBLASLt versions (tactics and weight layouts depend on them). The GPU
// name may differ (two boards of one architecture). Otherwise kUnsupported naming both.
Status check_plan_target(const PlanTarget& plan, const PlanTarget& current);

enum class StepKind : uint8_t {
  kInput,  // float NCHW (caller's device buffer) -> NHWC storage dtype, C padded (space-to-depth)
  kConv,   // inputs {x, [residual]}; fused bias, residual and activation
  kGemm,   // input {x: 1x1xK}; y = x W^T + b (cuBLASLt, bias epilogue)
  kMaxPool,
  kAveragePool,
  kGlobalAveragePool,
  // inputs {a, b}; y = act(a + b). b has a's shape, or is [1, 1, C] per image and broadcast over
  // a's pixels (broadcasts_channels).
  kAdd,
  kActivation,  // inputs {x}; y = act(x)
  // input {x: 1x1xclasses} -> caller's float [N, classes], then softmax over the classes when
  // PlanStep::softmax
  kOutput,
  kCast,  // input {x} -> the same elements in the output value's dtype (per-layer precision)
  // The first three steps of a space-to-depth stem in one: float NCHW -> kInput's space-to-depth
  // image -> kConv (bias, ReLU) -> kMaxPool, writing only the pooled value (see fuse_stem_pool in
  // lower.h). Attributes as those steps': space_to_depth, conv, pool, weight, bias.
  kStem,
  kMul,        // inputs {a, b}; y = a * b, b as kAdd's (squeeze-and-excitation scales, x * sigmoid(x))
  kPointwise,  // inputs {x}; y = PlanStep::pointwise(x)
  // inputs {x1, x2, ...} of one pixel size and type; y holds their valid channels side by side
  // (ONNX Concat on axis 1: SqueezeNet's fire modules, GoogLeNet/Inception's branches)
  kConcat,
  // The steps of the transformer classifiers (and ShuffleNet's channel shuffle). Each reads its
  // inputs and writes its output through PlanStep::views (see TensorView), one per input and then
  // the output's, so that transposes, slices and reshapes of the graph cost no step of their own.
  // inputs {x} (or none: the source is PlanStep::weight, the same for every image); views {from,
  // to}: y[to] = x[from], element by element over the views' dims (a layout change, a slice made
  // dense, one input of a Concat along any axis: several kCopy steps may fill one value).
  kCopy,
  // inputs {x, [residual]}; views {x: [rows, K], residual: [rows, N], y: [rows, N]};
  // y = pointwise(x W^T + b) + residual, W [N, K] and b [N] (cuBLASLt, epilogue bias or bias+GELU)
  kLinear,
  // inputs {a, b}; views {a: [B, M, K], b: [B, K, N], y: [B, M, N]}; y = scale * a b (batched GEMM)
  kMatMul,
  // inputs {q, k, v}; views {q: [B, H, T, D], k: [B, H, S, D], v: [B, H, S, Dv], y: [B, H, T, Dv],
  // and when PlanStep::weight >= 0 the bias's: [B, H, T, S] over the weight, 0 strides where it
  // broadcasts}; y = softmax(scale q k^T + bias) v (cuDNN's fused SDPA or gpulab's kernel)
  kAttention,
  // inputs {x}; views {x: [rows, C], y: [rows, C]}; y = (x - mean) / sqrt(var + epsilon) * W + b over
  // each row, W and b [C] float32 weights
  kLayerNorm,
  // inputs {a, [b]} (b may instead be PlanStep::weight, the same for every image); views {a, b, y},
  // b's with 0 strides where it broadcasts; y = a (op) b, PlanStep::eltwise
  kEltwise,
};
std::string_view step_kind_name(StepKind kind);  // "input", "conv", ...

// The functions of a kPointwise step (ONNX's definitions): sigmoid 1 / (1 + e^-x); hard sigmoid
// max(0, min(1, alpha x + beta)); hard swish x * max(0, min(1, x / 6 + 1/2)); gelu x/2 (1 +
// erf(x / sqrt 2)); gelu_tanh x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); tanh, erf, sqrt, exp,
// neg; identity (a kLinear step without activation).
// fake quantize (a Q/DQ pair fold_qdq kept, per tensor; version 5): core/quant.h's fake_quantize
// with scale alpha, zero point beta and range [clip_min, clip_max].
enum class PointwiseFn : uint8_t {
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
  kIdentity,
  kFakeQuantize,
};
std::string_view pointwise_fn_name(PointwiseFn fn);  // "sigmoid", "hard_sigmoid", "hard_swish", ...
// The function at x, computed in double (the interpreter's and the reference's definition);
// kFakeQuantize in float, step for step as core/quant.h's fake_quantize (scale alpha, zero point
// beta, range [clip_min, clip_max]).
double apply_pointwise(PointwiseFn fn, double x, float alpha = 0.2f, float beta = 0.5f,
                       float clip_min = -128.0f, float clip_max = 127.0f);

// The binary operations of a kEltwise step.
enum class EltwiseOp : uint8_t { kAdd, kSub, kMul, kDiv };
std::string_view eltwise_op_name(EltwiseOp op);  // "add", "sub", "mul", "div"

// How a step reads or writes a value, per image, in elements of the value's type: element
// (i0, i1, ...) of the view is element offset + i0 * strides[0] + i1 * strides[1] + ... of the
// image's part of the value (images lie one after another, each bytes_per_image long), or of the
// weight for a view over a weight. At most kMaxViewRank dims; strides >= 0 (0: broadcast).
struct TensorView {
  int64_t offset = 0;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  int64_t numel() const;
  friend bool operator==(const TensorView&, const TensorView&) = default;
};
inline constexpr size_t kMaxViewRank = 8;
// The dense row-major view of `dims`.
TensorView contiguous_view(std::vector<int64_t> dims);

// An activation buffer: NHWC, per image. `c` includes zero padding; `c_valid` carry data.
// An int8 or fp8e4m3 value holds quantized numbers q; the real value is scale * q (src/core/quant.h).
struct PlanValue {
  std::string name;
  int64_t h = 1, w = 1, c = 1;
  int64_t c_valid = 1;
  DataType dtype = DataType::kFloat32;
  float scale = 0.0f;  // int8/fp8e4m3 values only: positive and finite
  int64_t bytes_per_image() const { return h * w * c * static_cast<int64_t>(dtype_size(dtype)); }
};

// How kInput rearranges the image for a strided stem convolution (block > 1): output pixel
// (Y, X), channel (dy * block + dx) * C + c holds input channel c at pixel
// (Y * block + dy - pad_top, X * block + dx - pad_left), zero outside the image. The stem's
// k x k / stride-block convolution then becomes a ceil(k / block)^2 stride-1 convolution over
// block^2 * C channels (ResNet's 7x7/2 over 3 channels: 4x4/1 over 12, padded to 16), which the
// tensor cores run at a far better rate. block 1 without padding: a plain NCHW -> NHWC copy.
struct SpaceToDepth {
  int64_t block = 1;
  int64_t pad_top = 0, pad_left = 0;
  bool operator==(const SpaceToDepth&) const = default;
};

struct PlanStep {
  StepKind kind = StepKind::kInput;
  std::string name;         // the graph node's name ("input"/"output" for conversions)
  std::vector<int> inputs;  // indices into Plan::values
  int output = -1;          // index into Plan::values; -1 for kOutput
  Precision precision = Precision::kFp32;
  ConvAttrs conv;                             // kConv (activation, clip and residual flags included)
  PoolAttrs pool;                             // kMaxPool, kAveragePool
  Activation activation = Activation::kNone;  // kAdd, kActivation
  float clip_min = 0.0f, clip_max = 6.0f;
  PointwiseFn pointwise = PointwiseFn::kSigmoid;  // kPointwise
  float alpha = 0.2f, beta = 0.5f;                // kPointwise kHardSigmoid
  bool softmax = false;                           // kOutput: softmax over the classes
  int weight = -1;  // index into Plan::weights: kConv [K, R, S, C/groups], kGemm [out, in]
  int bias = -1;    // index into Plan::weights: [K] / [out]; -1 when absent
  // INT8/FP8 kConv/kGemm: index into Plan::weights of the float32 [K] / [out] weight scales (real
  // weight = scale[k] * stored weight); the epilogue's multiplier is x.scale * scale[k].
  int weight_scale = -1;
  std::string tactic;  // see the runtime's tactic strings; "" = default
  double flops_per_image = 0;
  SpaceToDepth space_to_depth;  // kInput, kStem
  // kStem: the space-to-depth image and the convolution output of the steps it replaced. Their
  // shapes define the stem; they are never stored (no memory is planned for them).
  std::vector<int> fused_values;
  // kCopy, kLinear, kMatMul, kAttention, kLayerNorm, kEltwise: how each input and the output are
  // read and written (the step kinds above say which view is which).
  std::vector<TensorView> views;
  EltwiseOp eltwise = EltwiseOp::kAdd;  // kEltwise
  float epsilon = 1e-5f;                // kLayerNorm
  // kLayerNorm: y = x / max(||x||_2, epsilon) * W + b over each row (F.normalize; LpNormalization)
  // instead of LayerNorm's (x - mean) / sqrt(var + epsilon) * W + b. Plan format 6.
  bool l2_norm = false;
  float scale = 1.0f;  // kMatMul, kAttention
};

struct PlanWeight {
  std::string name;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  std::vector<std::byte> bytes;
};

struct Plan {
  PlanTarget target;
  std::string gpulab_version;
  Precision precision = Precision::kFp32;
  int64_t max_batch = 1;
  std::string input_name;  // the model's input
  int64_t input_channels = 0, input_h = 0, input_w = 0;
  std::string output_name;  // the model's output
  int64_t num_classes = 0;
  // The model's ONNX metadata_props (preprocess.* keys and the like), so that a plan alone
  // tells `classify` how to prepare images.
  std::map<std::string, std::string> metadata;
  std::vector<PlanValue> values;
  std::vector<PlanStep> steps;
  std::vector<PlanWeight> weights;

  // Structure: value/weight indices in range, weight byte counts match dtype x shape, one
  // kInput first and one kOutput last, positive sizes. kInvalidFile naming the first problem.
  Status validate() const;
  int64_t weights_bytes() const;
};

// Ok when the GPU `target` runs every precision `plan` uses: FP8 needs compute capability 8.9 or
// newer (Ada, Hopper: E4M3 tensor cores), INT8 6.1 (dp4a). Otherwise kUnsupported naming the GPU,
// its architecture and a precision that runs there.
Status check_precision_supported(const Plan& plan, const PlanTarget& target);

// int8 or fp8e4m3: a value with a scale.
bool is_quantized_dtype(DataType dtype);

// True for the step kinds that read and write through PlanStep::views (kCopy ... kEltwise).
bool is_view_step(StepKind kind);
// Plan::validate's checks of step `index`, one of those: its input count, its views (count, rank,
// dims that fit one another as the kind needs, every element inside its value or weight) and its
// weights' shapes. kInvalidFile naming the step.
Status validate_view_step(const Plan& plan, size_t index);

// True when a kAdd or kMul step's second input is [1, 1, C] per image, broadcast over the other
// input's pixels; false when both inputs have one shape.
bool broadcasts_channels(const Plan& plan, const PlanStep& step);

// 64-bit FNV-1a of `bytes` (the plan file's checksum).
uint64_t fnv1a64(std::span<const std::byte> bytes);

std::vector<std::byte> serialize_plan(const Plan& plan);
// Parses and validates (structure only; the target is checked by the runtime).
Result<Plan> deserialize_plan(std::span<const std::byte> bytes);

Status save_plan(const Plan& plan, const std::filesystem::path& path);
Result<Plan> load_plan(const std::filesystem::path& path);

}  // namespace gpulab
