#include "plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/checked.h"
#include "core/file_io.h"
#include "core/quant.h"

namespace gpulab {

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
    case Precision::kInt8: return "int8";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

Result<Precision> parse_precision(std::string_view name) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16,
                      Precision::kInt8, Precision::kFp8})
    if (precision_name(p) == name) return p;
  return Status::invalid_argument(
      fmt::format("precision '{}' is not known. Use fp32, tf32, fp16, bf16, int8 or fp8.", name));
}

std::string_view batch_chunks_name(BatchChunks mode) {
  switch (mode) {
    case BatchChunks::kOff: return "off";
    case BatchChunks::kFallback: return "fallback";
    case BatchChunks::kSearch: return "search";
  }
  return "?";
}

Result<BatchChunks> parse_batch_chunks(std::string_view name) {
  for (BatchChunks m : {BatchChunks::kOff, BatchChunks::kFallback, BatchChunks::kSearch})
    if (batch_chunks_name(m) == name) return m;
  return Status::invalid_argument(
      fmt::format("batch chunks '{}' is not known. Use off, fallback or search.", name));
}

DataType storage_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp16: return DataType::kFloat16;
    case Precision::kBf16: return DataType::kBFloat16;
    case Precision::kInt8: return DataType::kInt8;
    case Precision::kFp8: return DataType::kFp8E4M3;
    default: return DataType::kFloat32;
  }
}

bool is_quantized_dtype(DataType dtype) {
  return dtype == DataType::kInt8 || dtype == DataType::kFp8E4M3;
}

bool is_quantized(Precision precision) {
  return precision == Precision::kInt8 || precision == Precision::kFp8;
}

Precision fallback_precision(Precision precision) {
  return is_quantized(precision) ? Precision::kFp16 : precision;
}

std::string describe_target(const PlanTarget& t) {
  return fmt::format("{} (sm_{}), CUDA runtime {}, cuDNN {}, cuBLASLt {}", t.gpu_name, t.compute_capability,
                     t.cuda_runtime_version, t.cudnn_version, t.cublaslt_version);
}

Status check_plan_target(const PlanTarget& plan, const PlanTarget& current) {
  if (plan.compute_capability != current.compute_capability)
    return Status::unsupported(fmt::format(
        "plan: built for GPU architecture sm_{} ({}), this GPU is sm_{} ({}). Rebuild the plan on this GPU "
        "with `gpulab build`.",
        plan.compute_capability, plan.gpu_name, current.compute_capability, current.gpu_name));
  if (plan.cuda_runtime_version != current.cuda_runtime_version ||
      plan.cudnn_version != current.cudnn_version || plan.cublaslt_version != current.cublaslt_version)
    return Status::unsupported(fmt::format(
        "plan: built with other library versions (plan: {}; here: {}). Rebuild the plan with `gpulab build`.",
        describe_target(plan), describe_target(current)));
  return Status::ok();
}

Status check_precision_supported(const Plan& plan, const PlanTarget& target) {
  bool fp8 = plan.precision == Precision::kFp8, int8 = plan.precision == Precision::kInt8;
  for (const PlanStep& s : plan.steps) {
    fp8 |= s.precision == Precision::kFp8;
    int8 |= s.precision == Precision::kInt8;
  }
  if (fp8 && target.compute_capability < 89)
    return Status::unsupported(
        fmt::format("plan: FP8 (E4M3) needs a GPU of compute capability 8.9 or newer (Ada: RTX 40, L4, L40; "
                    "Hopper: H100, "
                    "H200); '{}' is sm_{}. Build with --precision int8 or fp16 instead.",
                    target.gpu_name, target.compute_capability));
  if (int8 && target.compute_capability < 61)
    return Status::unsupported(
        fmt::format("plan: INT8 needs a GPU of compute capability 6.1 or newer; '{}' is sm_{}. Build with "
                    "--precision fp16 or fp32 instead.",
                    target.gpu_name, target.compute_capability));
  return Status::ok();
}

std::string_view step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::kInput: return "input";
    case StepKind::kConv: return "conv";
    case StepKind::kGemm: return "gemm";
    case StepKind::kMaxPool: return "maxpool";
    case StepKind::kAveragePool: return "avgpool";
    case StepKind::kGlobalAveragePool: return "global_avgpool";
    case StepKind::kAdd: return "add";
    case StepKind::kActivation: return "activation";
    case StepKind::kOutput: return "output";
    case StepKind::kCast: return "cast";
    case StepKind::kStem: return "stem";
    case StepKind::kMul: return "mul";
    case StepKind::kPointwise: return "pointwise";
    case StepKind::kConcat: return "concat";
    case StepKind::kCopy: return "copy";
    case StepKind::kLinear: return "linear";
    case StepKind::kMatMul: return "matmul";
    case StepKind::kAttention: return "attention";
    case StepKind::kLayerNorm: return "layer_norm";
    case StepKind::kEltwise: return "eltwise";
  }
  return "?";
}

std::string_view pointwise_fn_name(PointwiseFn fn) {
  switch (fn) {
    case PointwiseFn::kSigmoid: return "sigmoid";
    case PointwiseFn::kHardSigmoid: return "hard_sigmoid";
    case PointwiseFn::kHardSwish: return "hard_swish";
    case PointwiseFn::kGelu: return "gelu";
    case PointwiseFn::kGeluTanh: return "gelu_tanh";
    case PointwiseFn::kTanh: return "tanh";
    case PointwiseFn::kErf: return "erf";
    case PointwiseFn::kSqrt: return "sqrt";
    case PointwiseFn::kExp: return "exp";
    case PointwiseFn::kNeg: return "neg";
    case PointwiseFn::kIdentity: return "identity";
    case PointwiseFn::kFakeQuantize: return "fake_quantize";
  }
  return "?";
}

double apply_pointwise(PointwiseFn fn, double x, float alpha, float beta, float clip_min, float clip_max) {
  switch (fn) {
    case PointwiseFn::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case PointwiseFn::kHardSigmoid: return std::clamp(alpha * x + beta, 0.0, 1.0);
    case PointwiseFn::kHardSwish: return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0);
    case PointwiseFn::kGelu: return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
    case PointwiseFn::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case PointwiseFn::kTanh: return std::tanh(x);
    case PointwiseFn::kErf: return std::erf(x);
    case PointwiseFn::kSqrt: return std::sqrt(x);
    case PointwiseFn::kExp: return std::exp(x);
    case PointwiseFn::kNeg: return -x;
    case PointwiseFn::kIdentity: return x;
    case PointwiseFn::kFakeQuantize:
      return fake_quantize(static_cast<float>(x), alpha, beta, clip_min, clip_max);
  }
  return x;
}

std::string_view eltwise_op_name(EltwiseOp op) {
  switch (op) {
    case EltwiseOp::kAdd: return "add";
    case EltwiseOp::kSub: return "sub";
    case EltwiseOp::kMul: return "mul";
    case EltwiseOp::kDiv: return "div";
  }
  return "?";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

TensorView contiguous_view(std::vector<int64_t> dims) {
  TensorView v;
  v.strides.assign(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) v.strides[i - 1] = v.strides[i] * dims[i];
  v.dims = std::move(dims);
  return v;
}

bool broadcasts_channels(const Plan& plan, const PlanStep& step) {
  if (step.kind != StepKind::kAdd && step.kind != StepKind::kMul) return false;
  const PlanValue& a = plan.values[step.inputs[0]];
  const PlanValue& b = plan.values[step.inputs[1]];
  return b.h == 1 && b.w == 1 && (a.h != 1 || a.w != 1);
}

int64_t Plan::weights_bytes() const {
  int64_t total = 0;
  for (const auto& w : weights) total += static_cast<int64_t>(w.bytes.size());
  return total;
}

namespace {

// Every validation failure reads the same way: the plan file is damaged or foreign.
Status corrupt(const std::string& what) {
  return Status::invalid_file("plan: " + what +
                              ". The file is corrupt or was not written by gpulab; rebuild it.");
}

bool value_ok(const Plan& plan, int v) {
  return v >= 0 && static_cast<size_t>(v) < plan.values.size();
}
bool weight_ok(const Plan& plan, int w) {
  return w >= -1 && w < static_cast<int>(plan.weights.size());
}

// The sizes the runtime multiplies (a value's bytes per image times the max batch, the input image,
// a weight's elements times its element size) must be computable: checked first, before any
// other check or the runtime multiplies them. Beyond kMaxPlanBatch images or kMaxPlanValueBytes
// for a value at the max batch, no GPU could hold the plan anyway.
constexpr int64_t kMaxPlanBatch = 65536;
constexpr int64_t kMaxPlanValueBytes = int64_t{1} << 47;
constexpr int64_t kMaxPlanTotalBytes = int64_t{1} << 56;

Status check_sizes(const Plan& plan) {
  if (plan.max_batch > kMaxPlanBatch)
    return corrupt(fmt::format("max batch {} is above {}", plan.max_batch, kMaxPlanBatch));
  auto at_max_batch = [&](int64_t h, int64_t w, int64_t c, size_t elem) -> std::optional<int64_t> {
    if (h < 1 || w < 1 || c < 1) return std::nullopt;
    const std::array<int64_t, 5> dims{h, w, c, static_cast<int64_t>(elem),
                                      std::max<int64_t>(plan.max_batch, 1)};
    const std::optional<int64_t> bytes = checked_product(dims);
    if (!bytes || *bytes > kMaxPlanValueBytes) return std::nullopt;
    return bytes;
  };
  if (!at_max_batch(plan.input_h, plan.input_w, plan.input_channels, sizeof(float)))
    return corrupt(fmt::format("the input [{},{},{}] at batch {} is not a positive size below {} bytes",
                               plan.input_channels, plan.input_h, plan.input_w, plan.max_batch,
                               kMaxPlanValueBytes));
  if (plan.num_classes > kMaxTensorElements)
    return corrupt(fmt::format("{} classes are more than {}", plan.num_classes, kMaxTensorElements));
  int64_t total_bytes = 0;  // the memory planner's arena never exceeds the sum
  for (size_t i = 0; i < plan.values.size(); ++i) {
    const PlanValue& v = plan.values[i];
    const std::optional<int64_t> bytes = at_max_batch(v.h, v.w, v.c, dtype_size(v.dtype));
    const std::optional<int64_t> total = bytes ? checked_add(total_bytes, *bytes) : std::nullopt;
    if (total && *total <= kMaxPlanTotalBytes) {
      total_bytes = *total;
      continue;
    }
    if (bytes)
      return corrupt(
          fmt::format("its values take more than {} bytes at batch {}", kMaxPlanTotalBytes, plan.max_batch));
    return corrupt(fmt::format("value {} '{}' [{},{},{}] at batch {} is not a positive size below {} bytes",
                               i, v.name, v.h, v.w, v.c, plan.max_batch, kMaxPlanValueBytes));
  }
  for (const PlanWeight& w : plan.weights) {
    const std::optional<int64_t> numel = checked_product(w.shape.dims);
    if (!numel || std::any_of(w.shape.dims.begin(), w.shape.dims.end(), [](int64_t d) { return d < 0; }) ||
        !checked_mul(*numel, static_cast<int64_t>(dtype_size(w.dtype))))
      return corrupt(fmt::format("weight '{}' has an invalid shape {}", w.name, w.shape.to_string()));
  }
  return Status::ok();
}

// Batch, image and class counts, and the input ... output frame of the steps.
Status check_header(const Plan& plan) {
  if (plan.max_batch < 1) return corrupt(fmt::format("max batch {} is not positive", plan.max_batch));
  if (plan.input_channels < 1 || plan.input_h < 1 || plan.input_w < 1 || plan.num_classes < 1)
    return corrupt(fmt::format("input [{},{},{}] or classes {} not positive", plan.input_channels,
                               plan.input_h, plan.input_w, plan.num_classes));
  const auto& steps = plan.steps;
  if (steps.size() < 2 || (steps.front().kind != StepKind::kInput && steps.front().kind != StepKind::kStem) ||
      steps.back().kind != StepKind::kOutput)
    return corrupt("the steps do not start with an input conversion and end with an output conversion");
  return Status::ok();
}

// Positive shapes, small enough that the runtime's index arithmetic cannot overflow.
Status check_values(const Plan& plan) {
  for (size_t i = 0; i < plan.values.size(); ++i) {
    const auto& v = plan.values[i];
    if (v.h < 1 || v.w < 1 || v.c < 1 || v.c_valid < 1 || v.c_valid > v.c || v.h > (1 << 20) ||
        v.w > (1 << 20) || v.c > (1 << 24))
      return corrupt(fmt::format("value {} '{}' has a bad shape [{},{},{} ({} valid)]", i, v.name, v.h, v.w,
                                 v.c, v.c_valid));
    if (is_quantized_dtype(v.dtype) && !(v.scale > 0.0f && std::isfinite(v.scale)))
      return corrupt(fmt::format("value {} '{}' ({}) has scale {}", i, v.name, dtype_name(v.dtype), v.scale));
  }
  return Status::ok();
}

// Every value and weight index the step holds points into the plan.
Status check_step_indices(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  for (int in : s.inputs)
    if (!value_ok(plan, in))
      return corrupt(fmt::format("step {} '{}' reads value {} of {}", i, s.name, in, plan.values.size()));
  if (s.kind != StepKind::kOutput && !value_ok(plan, s.output))
    return corrupt(
        fmt::format("step {} '{}' writes value {} of {}", i, s.name, s.output, plan.values.size()));
  if (!weight_ok(plan, s.weight) || !weight_ok(plan, s.bias) || !weight_ok(plan, s.weight_scale))
    return corrupt(fmt::format("step {} '{}' uses weight {} / bias {} / weight scales {} of {}", i, s.name,
                               s.weight, s.bias, s.weight_scale, plan.weights.size()));
  return Status::ok();
}

// The number of inputs each kind reads (concat reads any number: check_concat).
Status check_input_count(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  size_t want_inputs = 1;
  switch (s.kind) {
    case StepKind::kInput:
    case StepKind::kStem: want_inputs = 0; break;
    case StepKind::kConv: want_inputs = s.conv.has_residual ? 2 : 1; break;
    case StepKind::kAdd:
    case StepKind::kMul: want_inputs = 2; break;
    default: break;
  }
  if (s.inputs.size() != want_inputs)
    return corrupt(fmt::format("step {} '{}' ({}) has {} inputs, expected {}", i, s.name,
                               step_kind_name(s.kind), s.inputs.size(), want_inputs));
  return Status::ok();
}

// Each input's valid channels are copied into a slice of y's: they must add up to y's.
Status check_concat(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  const PlanValue& y = plan.values[s.output];
  int64_t channels = 0;
  for (int in : s.inputs) {
    const PlanValue& x = plan.values[in];
    channels += x.c_valid;
    if (x.h != y.h || x.w != y.w || x.dtype != y.dtype)
      return corrupt(
          fmt::format("step {} '{}' (concat) reads value '{}' of another size or type", i, s.name, x.name));
  }
  if (s.inputs.empty() || channels != y.c)
    return corrupt(fmt::format("step {} '{}' (concat) joins {} channels into {}", i, s.name, channels, y.c));
  return Status::ok();
}

// Elementwise steps index their inputs by the output's shape: a, and x of the unary ones, have
// it; b has it or is one value per image and channel (broadcasts_channels, as the runtime and
// the interpreter decide it).
Status check_elementwise(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  const bool binary = s.kind == StepKind::kAdd || s.kind == StepKind::kMul;
  const PlanValue& y = plan.values[s.output];
  const auto same = [&y](const PlanValue& v) {
    return v.h == y.h && v.w == y.w && v.c == y.c && v.dtype == y.dtype;
  };
  const PlanValue& b = plan.values[s.inputs[binary ? 1 : 0]];
  if (!same(plan.values[s.inputs[0]]) ||
      !(same(b) || (broadcasts_channels(plan, s) && b.c == y.c && b.dtype == y.dtype)))
    return corrupt(fmt::format("step {} '{}' ({}) reads values whose shapes or types do not fit its output",
                               i, s.name, step_kind_name(s.kind)));
  return Status::ok();
}

// Conv, gemm and stem steps need a weight; cuBLASLt reads a gemm's as [out, h * w * c].
Status check_weighted(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  if (s.weight < 0) return corrupt(fmt::format("step {} '{}' has no weight", i, s.name));
  if (s.kind == StepKind::kGemm) {
    const PlanValue &x = plan.values[s.inputs[0]], &y = plan.values[s.output];
    if (plan.weights[s.weight].shape != Shape{y.c, x.h * x.w * x.c})
      return corrupt(fmt::format("step {} '{}' has weight {} for {} features in and {} out", i, s.name,
                                 plan.weights[s.weight].shape.to_string(), x.h * x.w * x.c, y.c));
  }
  return Status::ok();
}

// A quantized kConv/kGemm step: 8-bit weights of its precision with float32 scales, one per output
// channel, a float32 bias and 8-bit inputs; no other step names weight scales.
Status check_quantized(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  const auto bad = [&](const std::string& what) {
    return corrupt(fmt::format("step {} '{}' ({}, {}) {}", i, s.name, step_kind_name(s.kind),
                               precision_name(s.precision), what));
  };
  const bool layer = s.kind == StepKind::kConv || s.kind == StepKind::kGemm;
  if (!layer || !is_quantized(s.precision)) {
    if (s.weight_scale >= 0) return bad("names weight scales");
    return Status::ok();
  }
  const DataType q = storage_dtype(s.precision);
  if (s.weight < 0 || plan.weights[s.weight].dtype != q) return bad("has no weight of its 8-bit type");
  const int64_t out_channels = plan.weights[s.weight].shape.rank() > 0 ? plan.weights[s.weight].shape[0] : 0;
  if (s.weight_scale < 0 || plan.weights[s.weight_scale].dtype != DataType::kFloat32 ||
      plan.weights[s.weight_scale].shape != Shape{out_channels})
    return bad(fmt::format("has no float32 weight scales of its {} output channels", out_channels));
  if (s.bias >= 0 && plan.weights[s.bias].dtype != DataType::kFloat32)
    return bad("has a bias not in float32");
  for (int in : s.inputs)
    if (plan.values[in].dtype != q)
      return bad(fmt::format("reads value '{}' of type {}", plan.values[in].name,
                             dtype_name(plan.values[in].dtype)));
  return Status::ok();
}

// The input (or stem) step comes first and writes the image, space-to-depth rearranged when its
// block is above 1, into a value of the right size.
Status check_image_step(const Plan& plan, size_t i) {
  const PlanStep& s = plan.steps[i];
  if (i != 0)
    return corrupt(fmt::format("step {} '{}' ({}) is not the first step", i, s.name, step_kind_name(s.kind)));
  if (s.kind == StepKind::kStem && (s.fused_values.size() != 2 || !value_ok(plan, s.fused_values[0]) ||
                                    !value_ok(plan, s.fused_values[1])))
    return corrupt(fmt::format(
        "the stem step '{}' does not name its space-to-depth image and convolution output", s.name));
  const SpaceToDepth& sd = s.space_to_depth;
  const PlanValue& y = plan.values[s.kind == StepKind::kStem ? s.fused_values[0] : s.output];
  if (sd.block < 1 || sd.block > 16 || sd.pad_top < 0 || sd.pad_left < 0 || sd.pad_top >= 64 ||
      sd.pad_left >= 64)
    return corrupt(fmt::format("the input step's space-to-depth (block {}, pads {},{}) is out of range",
                               sd.block, sd.pad_top, sd.pad_left));
  const bool plain = sd.block == 1 && sd.pad_top == 0 && sd.pad_left == 0;
  if (y.c_valid != sd.block * sd.block * plan.input_channels ||
      (plain && (y.h != plan.input_h || y.w != plan.input_w)))
    return corrupt(
        fmt::format("the input value [{},{},{} ({} valid)] does not hold a {}x{}x{} image (space-to-depth "
                    "block {})",
                    y.h, y.w, y.c, y.c_valid, plan.input_channels, plan.input_h, plan.input_w, sd.block));
  return Status::ok();
}

// The checks of one step, in this order (the first failure is the one reported).
Status check_step(const Plan& plan, size_t i) {
  const StepKind kind = plan.steps[i].kind;
  GPULAB_TRY(check_step_indices(plan, i));
  if (is_view_step(kind)) return validate_view_step(plan, i);  // plan_views.cc
  GPULAB_TRY(kind == StepKind::kConcat ? check_concat(plan, i) : check_input_count(plan, i));
  if (kind == StepKind::kAdd || kind == StepKind::kMul || kind == StepKind::kActivation ||
      kind == StepKind::kPointwise)
    GPULAB_TRY(check_elementwise(plan, i));
  if (kind == StepKind::kConv || kind == StepKind::kGemm || kind == StepKind::kStem)
    GPULAB_TRY(check_weighted(plan, i));
  if (kind == StepKind::kInput || kind == StepKind::kStem) GPULAB_TRY(check_image_step(plan, i));
  GPULAB_TRY(check_quantized(plan, i));
  return Status::ok();
}

// Non-negative shapes whose element count matches the stored bytes.
Status check_weights(const Plan& plan) {
  for (const auto& w : plan.weights) {
    for (int64_t d : w.shape.dims)
      if (d < 0) return corrupt(fmt::format("weight '{}' has shape {}", w.name, w.shape.to_string()));
    const int64_t want = w.shape.numel() * static_cast<int64_t>(dtype_size(w.dtype));
    if (want != static_cast<int64_t>(w.bytes.size()))
      return corrupt(fmt::format("weight '{}' {} {} holds {} bytes, expected {}", w.name, dtype_name(w.dtype),
                                 w.shape.to_string(), w.bytes.size(), want));
  }
  return Status::ok();
}

}  // namespace

Status Plan::validate() const {
  GPULAB_TRY(check_sizes(*this));
  GPULAB_TRY(check_header(*this));
  GPULAB_TRY(check_values(*this));
  for (size_t i = 0; i < steps.size(); ++i) GPULAB_TRY(check_step(*this, i));
  return check_weights(*this);
}

uint64_t fnv1a64(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (std::byte b : bytes) {
    h ^= static_cast<uint8_t>(b);
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return h;
}

namespace {

using nlohmann::json;

constexpr size_t kBlobAlignment = 256;

void put_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void put_u64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
uint64_t get_u64(std::span<const std::byte> b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}
uint32_t get_u32(std::span<const std::byte> b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}

// An integer field: get<int>() of a JSON float beyond the type's range is undefined behaviour, so
// only JSON integers that fit are taken.
template <typename T>
T integer(const json& j) {
  if (!j.is_number_integer()) throw std::runtime_error("an integer field holds " + j.dump());
  if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                             : (j.get<int64_t>() < std::numeric_limits<T>::min() ||
                                j.get<int64_t>() > std::numeric_limits<T>::max()))
    throw std::runtime_error("an integer field is out of range: " + j.dump());
  return static_cast<T>(j.get<int64_t>());
}

// A list of integer fields, each as integer<T> reads it.
template <typename T>
std::vector<T> integers(const json& j) {
  if (!j.is_array()) throw std::runtime_error("an integer list field holds " + j.dump());
  std::vector<T> v;
  for (const json& e : j) v.push_back(integer<T>(e));
  return v;
}

// A float field: converting a JSON number beyond float's range to float is undefined behaviour.
float real32(const json& j) {
  if (!j.is_number()) throw std::runtime_error("a number field holds " + j.dump());
  const double d = j.get<double>();
  if (std::abs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    throw std::runtime_error("a number field is out of float's range: " + j.dump());
  return static_cast<float>(d);
}

json hw_json(const Hw& hw) {
  return json::array({hw.h, hw.w});
}
Hw hw_from(const json& j) {
  return Hw{integer<int64_t>(j.at(0)), integer<int64_t>(j.at(1))};
}
json pads_json(const Pads& p) {
  return json::array({p.top, p.left, p.bottom, p.right});
}
Pads pads_from(const json& j) {
  return Pads{integer<int64_t>(j.at(0)), integer<int64_t>(j.at(1)), integer<int64_t>(j.at(2)),
              integer<int64_t>(j.at(3))};
}

json header_json(const Plan& plan, const std::vector<size_t>& offsets) {
  json j;
  j["gpulab_version"] = plan.gpulab_version;
  j["target"] = {{"gpu_name", plan.target.gpu_name},
                 {"compute_capability", plan.target.compute_capability},
                 {"cuda_runtime_version", plan.target.cuda_runtime_version},
                 {"cudnn_version", plan.target.cudnn_version},
                 {"cublaslt_version", plan.target.cublaslt_version}};
  j["precision"] = std::string(precision_name(plan.precision));
  j["max_batch"] = plan.max_batch;
  j["input"] = {
      {"name", plan.input_name}, {"c", plan.input_channels}, {"h", plan.input_h}, {"w", plan.input_w}};
  j["output"] = {{"name", plan.output_name}, {"classes", plan.num_classes}};
  j["metadata"] = plan.metadata;
  json values = json::array();
  for (const auto& v : plan.values) {
    json jv = {{"name", v.name},
               {"h", v.h},
               {"w", v.w},
               {"c", v.c},
               {"c_valid", v.c_valid},
               {"dtype", std::string(dtype_name(v.dtype))}};
    if (is_quantized_dtype(v.dtype)) jv["scale"] = v.scale;
    values.push_back(std::move(jv));
  }
  j["values"] = std::move(values);
  json steps = json::array();
  for (const auto& s : plan.steps) {
    json js = {{"kind", std::string(step_kind_name(s.kind))},
               {"name", s.name},
               {"inputs", s.inputs},
               {"output", s.output},
               {"precision", std::string(precision_name(s.precision))},
               {"weight", s.weight},
               {"bias", s.bias},
               {"weight_scale", s.weight_scale},
               {"tactic", s.tactic},
               {"flops_per_image", s.flops_per_image},
               {"activation", static_cast<int>(s.activation)},
               {"clip", {s.clip_min, s.clip_max}}};
    if (s.kind == StepKind::kConv || s.kind == StepKind::kStem) {
      const auto& c = s.conv;
      js["conv"] = {{"kernel", hw_json(c.kernel)},
                    {"stride", hw_json(c.stride)},
                    {"pads", pads_json(c.pads)},
                    {"dilation", hw_json(c.dilation)},
                    {"groups", c.groups},
                    {"activation", static_cast<int>(c.activation)},
                    {"clip", {c.clip_min, c.clip_max}},
                    {"has_residual", c.has_residual}};
    }
    if ((s.kind == StepKind::kInput || s.kind == StepKind::kStem) && !(s.space_to_depth == SpaceToDepth{})) {
      const auto& sd = s.space_to_depth;
      js["space_to_depth"] = {{"block", sd.block}, {"pad_top", sd.pad_top}, {"pad_left", sd.pad_left}};
    }
    if (s.kind == StepKind::kStem) js["fused_values"] = s.fused_values;
    if (s.kind == StepKind::kPointwise || s.kind == StepKind::kLinear)
      js["pointwise"] = {
          {"fn", std::string(pointwise_fn_name(s.pointwise))}, {"alpha", s.alpha}, {"beta", s.beta}};
    if (is_view_step(s.kind)) {
      json views = json::array();
      for (const TensorView& v : s.views)
        views.push_back({{"offset", v.offset}, {"dims", v.dims}, {"strides", v.strides}});
      js["views"] = std::move(views);
    }
    if (s.kind == StepKind::kEltwise) js["eltwise"] = std::string(eltwise_op_name(s.eltwise));
    if (s.kind == StepKind::kLayerNorm) js["epsilon"] = s.epsilon;
    if (s.kind == StepKind::kLayerNorm && s.l2_norm) js["l2"] = true;
    if (s.kind == StepKind::kMatMul || s.kind == StepKind::kAttention) js["scale"] = s.scale;
    if (s.kind == StepKind::kOutput && s.softmax) js["softmax"] = true;
    if (s.kind == StepKind::kMaxPool || s.kind == StepKind::kAveragePool || s.kind == StepKind::kStem) {
      const auto& p = s.pool;
      js["pool"] = {{"kernel", hw_json(p.kernel)}, {"stride", hw_json(p.stride)},
                    {"pads", pads_json(p.pads)},   {"dilation", hw_json(p.dilation)},
                    {"ceil_mode", p.ceil_mode},    {"count_include_pad", p.count_include_pad}};
    }
    steps.push_back(std::move(js));
  }
  j["steps"] = std::move(steps);
  json weights = json::array();
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const auto& w = plan.weights[i];
    weights.push_back({{"name", w.name},
                       {"dtype", std::string(dtype_name(w.dtype))},
                       {"shape", w.shape.dims},
                       {"offset", offsets[i]},
                       {"bytes", w.bytes.size()}});
  }
  j["weights"] = std::move(weights);
  return j;
}

StepKind step_kind_from(const std::string& name) {
  for (StepKind k : {StepKind::kInput,     StepKind::kConv,        StepKind::kGemm,
                     StepKind::kMaxPool,   StepKind::kAveragePool, StepKind::kGlobalAveragePool,
                     StepKind::kAdd,       StepKind::kActivation,  StepKind::kOutput,
                     StepKind::kCast,      StepKind::kStem,        StepKind::kMul,
                     StepKind::kPointwise, StepKind::kConcat,      StepKind::kCopy,
                     StepKind::kLinear,    StepKind::kMatMul,      StepKind::kAttention,
                     StepKind::kLayerNorm, StepKind::kEltwise})
    if (step_kind_name(k) == name) return k;
  throw std::runtime_error("unknown step kind '" + name + "'");
}

PointwiseFn pointwise_fn_from(const std::string& name) {
  for (PointwiseFn f :
       {PointwiseFn::kSigmoid, PointwiseFn::kHardSigmoid, PointwiseFn::kHardSwish, PointwiseFn::kGelu,
        PointwiseFn::kGeluTanh, PointwiseFn::kTanh, PointwiseFn::kErf, PointwiseFn::kSqrt, PointwiseFn::kExp,
        PointwiseFn::kNeg, PointwiseFn::kIdentity, PointwiseFn::kFakeQuantize})
    if (pointwise_fn_name(f) == name) return f;
  throw std::runtime_error("unknown pointwise function '" + name + "'");
}

EltwiseOp eltwise_op_from(const std::string& name) {
  for (EltwiseOp op : {EltwiseOp::kAdd, EltwiseOp::kSub, EltwiseOp::kMul, EltwiseOp::kDiv})
    if (eltwise_op_name(op) == name) return op;
  throw std::runtime_error("unknown elementwise operation '" + name + "'");
}

Activation activation_from(int v) {
  if (v < 0 || v > static_cast<int>(Activation::kClip)) throw std::runtime_error("bad activation");
  return static_cast<Activation>(v);
}

// A Clip bound: JSON has no infinity, and nlohmann writes one (a Clip with only a min or only a
// max) as null, which reads back as the missing bound's infinity (`sign` -1: min, +1: max).
float clip_bound(const json& j, int sign) {
  if (j.is_null()) return sign * std::numeric_limits<float>::infinity();
  return real32(j);
}

template <typename T>
T value_or_throw(Result<T> r) {
  if (!r.is_ok()) throw std::runtime_error(r.status().message());
  return std::move(r).value();
}

// The format version that added INT8/FP8 plans: int8/fp8e4m3 values and weights, value scales,
// weight scales, the precisions int8 and fp8, the pointwise function fake_quantize.
constexpr uint32_t kQuantizedPlanFormatVersion = 5;

// The format version that added the L2 mode of kLayerNorm steps ("l2": F.normalize, Swin V2).
constexpr uint32_t kL2NormPlanFormatVersion = 6;

// Throws when a file of format `version` holds `what`, which only kQuantizedPlanFormatVersion added:
// such a file was not written by a gpulab, and reading it as if it were newer would misread it.
void require_quantized_version(uint32_t version, const std::string& what) {
  if (version < kQuantizedPlanFormatVersion)
    throw std::runtime_error(fmt::format("{}, which plan format version {} added, in a version-{} file", what,
                                         kQuantizedPlanFormatVersion, version));
}

Precision precision_from(const std::string& name, uint32_t version, const std::string& where) {
  const Precision p = value_or_throw(parse_precision(name));
  if (is_quantized(p)) require_quantized_version(version, where + " has precision " + name);
  return p;
}

DataType dtype_from(const std::string& name, uint32_t version, const std::string& where) {
  const DataType t = value_or_throw(parse_dtype(name));
  if (is_quantized_dtype(t)) require_quantized_version(version, where + " has type " + name);
  return t;
}

// Throws (nlohmann or std::runtime_error) on any missing or mistyped field; the caller turns it
// into a Status. What a later format version added is read only from files of that version.
Plan plan_from_header(const json& j, std::span<const std::byte> blob, uint32_t version) {
  Plan plan;
  plan.gpulab_version = j.at("gpulab_version").get<std::string>();
  const auto& t = j.at("target");
  plan.target.gpu_name = t.at("gpu_name").get<std::string>();
  plan.target.compute_capability = integer<int>(t.at("compute_capability"));
  plan.target.cuda_runtime_version = integer<int>(t.at("cuda_runtime_version"));
  plan.target.cudnn_version = integer<int>(t.at("cudnn_version"));
  plan.target.cublaslt_version = integer<int>(t.at("cublaslt_version"));
  plan.precision = precision_from(j.at("precision").get<std::string>(), version, "the plan");
  plan.max_batch = integer<int64_t>(j.at("max_batch"));
  plan.input_name = j.at("input").at("name").get<std::string>();
  plan.input_channels = integer<int64_t>(j.at("input").at("c"));
  plan.input_h = integer<int64_t>(j.at("input").at("h"));
  plan.input_w = integer<int64_t>(j.at("input").at("w"));
  plan.output_name = j.at("output").at("name").get<std::string>();
  plan.num_classes = integer<int64_t>(j.at("output").at("classes"));
  if (j.contains("metadata")) plan.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
  for (const auto& jv : j.at("values")) {
    PlanValue v;
    v.name = jv.at("name").get<std::string>();
    v.h = integer<int64_t>(jv.at("h"));
    v.w = integer<int64_t>(jv.at("w"));
    v.c = integer<int64_t>(jv.at("c"));
    v.c_valid = integer<int64_t>(jv.at("c_valid"));
    v.dtype = dtype_from(jv.at("dtype").get<std::string>(), version, "value '" + v.name + "'");
    if (is_quantized_dtype(v.dtype)) v.scale = real32(jv.at("scale"));
    plan.values.push_back(std::move(v));
  }
  for (const auto& js : j.at("steps")) {
    PlanStep s;
    s.kind = step_kind_from(js.at("kind").get<std::string>());
    s.name = js.at("name").get<std::string>();
    s.inputs = integers<int>(js.at("inputs"));
    s.output = integer<int>(js.at("output"));
    s.precision = precision_from(js.at("precision").get<std::string>(), version, "step '" + s.name + "'");
    s.weight = integer<int>(js.at("weight"));
    s.bias = integer<int>(js.at("bias"));
    if (version >= kQuantizedPlanFormatVersion) s.weight_scale = integer<int>(js.at("weight_scale"));
    s.tactic = js.at("tactic").get<std::string>();
    s.flops_per_image = js.at("flops_per_image").get<double>();
    s.activation = activation_from(integer<int>(js.at("activation")));
    s.clip_min = clip_bound(js.at("clip").at(0), -1);
    s.clip_max = clip_bound(js.at("clip").at(1), +1);
    if (s.kind == StepKind::kConv || s.kind == StepKind::kStem) {
      const auto& c = js.at("conv");
      s.conv.kernel = hw_from(c.at("kernel"));
      s.conv.stride = hw_from(c.at("stride"));
      s.conv.pads = pads_from(c.at("pads"));
      s.conv.dilation = hw_from(c.at("dilation"));
      s.conv.groups = integer<int64_t>(c.at("groups"));
      s.conv.activation = activation_from(integer<int>(c.at("activation")));
      s.conv.clip_min = clip_bound(c.at("clip").at(0), -1);
      s.conv.clip_max = clip_bound(c.at("clip").at(1), +1);
      s.conv.has_residual = c.at("has_residual").get<bool>();
      if (s.conv.groups < 1 || s.conv.kernel.h < 1 || s.conv.kernel.w < 1 || s.conv.stride.h < 1 ||
          s.conv.stride.w < 1 || s.conv.dilation.h < 1 || s.conv.dilation.w < 1)
        throw std::runtime_error("step '" + s.name + "' has bad convolution attributes");
    }
    if ((s.kind == StepKind::kInput || s.kind == StepKind::kStem) && js.contains("space_to_depth")) {
      const auto& sd = js.at("space_to_depth");
      s.space_to_depth = {integer<int64_t>(sd.at("block")), integer<int64_t>(sd.at("pad_top")),
                          integer<int64_t>(sd.at("pad_left"))};
    }
    if (s.kind == StepKind::kStem) s.fused_values = integers<int>(js.at("fused_values"));
    if (is_view_step(s.kind)) {
      for (const auto& jv : js.at("views")) {
        TensorView v;
        v.offset = integer<int64_t>(jv.at("offset"));
        v.dims = integers<int64_t>(jv.at("dims"));
        v.strides = integers<int64_t>(jv.at("strides"));
        s.views.push_back(std::move(v));
      }
    }
    if (s.kind == StepKind::kEltwise) s.eltwise = eltwise_op_from(js.at("eltwise").get<std::string>());
    if (s.kind == StepKind::kLayerNorm) s.epsilon = real32(js.at("epsilon"));
    if (s.kind == StepKind::kLayerNorm && js.contains("l2")) {
      if (version < kL2NormPlanFormatVersion)
        throw std::runtime_error(
            fmt::format("step '{}' has the L2 mode, which plan format version {} added, in a "
                        "version-{} file",
                        s.name, kL2NormPlanFormatVersion, version));
      s.l2_norm = js.at("l2").get<bool>();
    }
    if (s.kind == StepKind::kMatMul || s.kind == StepKind::kAttention) s.scale = real32(js.at("scale"));
    if (s.kind == StepKind::kPointwise || s.kind == StepKind::kLinear) {
      const auto& pw = js.at("pointwise");
      s.pointwise = pointwise_fn_from(pw.at("fn").get<std::string>());
      s.alpha = real32(pw.at("alpha"));
      s.beta = real32(pw.at("beta"));
      if (s.pointwise == PointwiseFn::kFakeQuantize)
        require_quantized_version(version, "step '" + s.name + "' fake-quantizes");
      if (s.pointwise == PointwiseFn::kFakeQuantize && !(s.alpha > 0.0f))
        throw std::runtime_error("step '" + s.name + "' fake-quantizes with scale " +
                                 std::to_string(s.alpha));
      if (!std::isfinite(s.alpha) || !std::isfinite(s.beta))
        throw std::runtime_error("step '" + s.name + "' has a non-finite hard-sigmoid alpha or beta");
    }
    if (s.kind == StepKind::kOutput) s.softmax = js.value("softmax", false);
    if (s.kind == StepKind::kMaxPool || s.kind == StepKind::kAveragePool || s.kind == StepKind::kStem) {
      const auto& p = js.at("pool");
      s.pool.kernel = hw_from(p.at("kernel"));
      s.pool.stride = hw_from(p.at("stride"));
      s.pool.pads = pads_from(p.at("pads"));
      s.pool.dilation = hw_from(p.at("dilation"));
      s.pool.ceil_mode = p.at("ceil_mode").get<bool>();
      s.pool.count_include_pad = p.at("count_include_pad").get<bool>();
      if (s.pool.kernel.h < 1 || s.pool.kernel.w < 1 || s.pool.stride.h < 1 || s.pool.stride.w < 1)
        throw std::runtime_error("step '" + s.name + "' has bad pooling attributes");
    }
    plan.steps.push_back(std::move(s));
  }
  for (const auto& jw : j.at("weights")) {
    PlanWeight w;
    w.name = jw.at("name").get<std::string>();
    w.dtype = dtype_from(jw.at("dtype").get<std::string>(), version, "weight '" + w.name + "'");
    w.shape = Shape(integers<int64_t>(jw.at("shape")));
    const auto offset = jw.at("offset").get<uint64_t>();
    const auto size = jw.at("bytes").get<uint64_t>();
    if (offset > blob.size() || size > blob.size() - offset)
      throw std::runtime_error(fmt::format("weight '{}' lies outside the weights block ({} + {} > {} bytes)",
                                           w.name, offset, size, blob.size()));
    auto part = blob.subspan(offset, size);
    w.bytes.assign(part.begin(), part.end());
    plan.weights.push_back(std::move(w));
  }
  return plan;
}

}  // namespace

std::vector<std::byte> serialize_plan(const Plan& plan) {
  std::vector<size_t> offsets;
  size_t blob_size = 0;
  for (const auto& w : plan.weights) {
    blob_size = (blob_size + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment;
    offsets.push_back(blob_size);
    blob_size += w.bytes.size();
  }
  // Names come from the model: one that is not UTF-8 (the importer refuses those) would make
  // dump() throw; it is written with U+FFFD in its place instead.
  const std::string header = header_json(plan, offsets).dump(-1, ' ', false, json::error_handler_t::replace);
  std::vector<std::byte> out;
  out.reserve(48 + header.size() + blob_size);
  for (char c : kPlanMagic) out.push_back(static_cast<std::byte>(c));
  put_u32(out, kPlanFormatVersion);
  put_u32(out, 0);
  put_u64(out, header.size());
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  put_u64(out, blob_size);
  const size_t blob_start = out.size();
  out.resize(blob_start + blob_size);
  for (size_t i = 0; i < plan.weights.size(); ++i)
    if (!plan.weights[i].bytes.empty())
      std::memcpy(out.data() + blob_start + offsets[i], plan.weights[i].bytes.data(),
                  plan.weights[i].bytes.size());
  put_u64(out, fnv1a64(out));
  return out;
}

Result<Plan> deserialize_plan(std::span<const std::byte> bytes) {
  auto bad = [&](std::string what) {
    return Status::invalid_file("plan: " + what +
                                ". The file is truncated, corrupt or not a gpulab plan; rebuild it "
                                "with `gpulab build`.");
  };
  constexpr size_t kFixed = 8 + 4 + 4 + 8;
  if (bytes.size() < kFixed + 8 + 8) return bad(fmt::format("only {} bytes", bytes.size()));
  if (std::memcmp(bytes.data(), kPlanMagic, sizeof(kPlanMagic)) != 0)
    return bad("no GPULABPL magic at the start");
  const uint32_t version = get_u32(bytes, 8);
  if (version < kOldestPlanFormatVersion || version > kPlanFormatVersion)
    return Status::unsupported(fmt::format(
        "plan: file format version {}, this gpulab reads versions {} to {}. Rebuild the plan with "
        "this gpulab.",
        version, kOldestPlanFormatVersion, kPlanFormatVersion));
  const uint64_t header_size = get_u64(bytes, 16);
  if (header_size > bytes.size() - kFixed - 16)
    return bad(
        fmt::format("header of {} bytes does not fit in a file of {} bytes", header_size, bytes.size()));
  const size_t blob_size_at = kFixed + header_size;
  const uint64_t blob_size = get_u64(bytes, blob_size_at);
  const size_t blob_at = blob_size_at + 8;
  if (blob_size != bytes.size() - blob_at - 8)
    return bad(fmt::format("weights block of {} bytes, but {} bytes follow the header", blob_size,
                           bytes.size() - blob_at - 8));
  const uint64_t stored = get_u64(bytes, bytes.size() - 8);
  const uint64_t computed = fnv1a64(bytes.first(bytes.size() - 8));
  if (stored != computed)
    return bad(fmt::format("checksum mismatch (stored {:016x}, computed {:016x})", stored, computed));
  Plan plan;
  try {
    const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + kFixed), header_size);
    const json header = json::parse(header_text);
    plan = plan_from_header(header, bytes.subspan(blob_at, blob_size), version);
  } catch (const std::exception& e) {
    return bad(std::string("header: ") + e.what());
  }
  GPULAB_TRY(plan.validate());
  return plan;
}

Status save_plan(const Plan& plan, const std::filesystem::path& path) {
  return write_file_atomic(path, serialize_plan(plan)).with_context("saving plan");
}

Result<Plan> load_plan(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(auto bytes, read_file_bytes(path));
  auto plan = deserialize_plan(bytes);
  if (!plan.is_ok()) return plan.status().with_context("'" + path.string() + "'");
  return plan;
}

}  // namespace gpulab
