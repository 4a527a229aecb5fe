// Reference element-wise ops: Relu, Clip, Sigmoid, HardSigmoid, HardSwish, the binary ops (numpy
// broadcasting, float32 or int64), BatchNormalization (inference form) and Softmax (opset-13
// form: one axis). Every value is computed in double and rounded to float32 when stored.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

// Reads an optional scalar float input (Clip's min/max at opset >= 11), nullopt when absent.
Result<std::optional<float>> optional_scalar(const Node& node, Inputs inputs, size_t index,
                                             std::string_view role) {
  if (index >= inputs.size() || inputs[index] == nullptr) return std::optional<float>();
  const Tensor& t = *inputs[index];
  GPULAB_TRY(check_dtype(node, t, DataType::kFloat32, role));
  if (t.numel() != 1) {
    return Status::invalid_model(where(node) + ": " + std::string(role) + " has shape " +
                                 t.shape().to_string() + ", expected a scalar.");
  }
  return std::optional<float>(t.f32()[0]);
}

template <typename T, typename Op>
void broadcast_apply(const Tensor& a, const Tensor& b, Tensor& y, Op op) {
  const auto* ap = reinterpret_cast<const T*>(a.data());
  const auto* bp = reinterpret_cast<const T*>(b.data());
  auto* yp = reinterpret_cast<T*>(y.data());
  const int64_t total = y.numel();
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < total; ++i) yp[i] = op(ap[i], bp[i]);
    return;
  }
  // Strides of each operand over the output's dims; 0 where the operand broadcasts.
  const size_t rank = y.shape().rank();
  std::vector<int64_t> a_stride(rank, 0), b_stride(rank, 0);
  auto fill = [rank](const Shape& s, std::vector<int64_t>& stride) {
    int64_t step = 1;
    for (size_t i = s.rank(); i-- > 0;) {
      const size_t out_i = i + (rank - s.rank());
      stride[out_i] = s[i] == 1 ? 0 : step;
      step *= s[i];
    }
  };
  fill(a.shape(), a_stride);
  fill(b.shape(), b_stride);
  for (int64_t e = 0; e < total; ++e) {
    int64_t rest = e, ao = 0, bo = 0;
    for (size_t i = rank; i-- > 0;) {
      const int64_t idx = rest % y.shape()[i];
      rest /= y.shape()[i];
      ao += idx * a_stride[i];
      bo += idx * b_stride[i];
    }
    yp[e] = op(ap[ao], bp[bo]);
  }
}

}  // namespace

Status run_unary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions&) {
  GPULAB_TRY(check_input_count(node, inputs, 1, node.op == OpType::kClip ? 2 : 0));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  Tensor y(DataType::kFloat32, x.shape());
  std::span<const float> in = x.f32();
  std::span<float> out = y.f32();
  switch (node.op) {
    case OpType::kRelu:
      for (size_t i = 0; i < in.size(); ++i)
        out[i] = in[i] > 0.0f ? in[i] : (std::isnan(in[i]) ? in[i] : 0.0f);
      break;
    case OpType::kClip: {
      GPULAB_ASSIGN_OR_RETURN(ClipAttrs attrs, attrs_or_default<ClipAttrs>(node));
      GPULAB_ASSIGN_OR_RETURN(const std::optional<float> lo, optional_scalar(node, inputs, 1, "min"));
      GPULAB_ASSIGN_OR_RETURN(const std::optional<float> hi, optional_scalar(node, inputs, 2, "max"));
      if (lo) attrs.min = *lo;
      if (hi) attrs.max = *hi;
      if (!(attrs.min <= attrs.max)) {
        return Status::invalid_model(where(node) + ": min " + std::to_string(attrs.min) + " is above max " +
                                     std::to_string(attrs.max) + ".");
      }
      for (size_t i = 0; i < in.size(); ++i)
        out[i] = std::isnan(in[i]) ? in[i] : std::clamp(in[i], attrs.min, attrs.max);
      break;
    }
    case OpType::kSigmoid:
      for (size_t i = 0; i < in.size(); ++i)
        out[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(in[i]))));
      break;
    case OpType::kHardSigmoid: {
      GPULAB_ASSIGN_OR_RETURN(const HardSigmoidAttrs attrs, attrs_or_default<HardSigmoidAttrs>(node));
      for (size_t i = 0; i < in.size(); ++i) {
        const double v = static_cast<double>(attrs.alpha) * in[i] + static_cast<double>(attrs.beta);
        out[i] = static_cast<float>(std::clamp(v, 0.0, 1.0));
      }
      break;
    }
    case OpType::kHardSwish:
      // ONNX: x * max(0, min(1, x / 6 + 1 / 2)).
      for (size_t i = 0; i < in.size(); ++i) {
        const double v = in[i];
        out[i] = static_cast<float>(v * std::clamp(v / 6.0 + 0.5, 0.0, 1.0));
      }
      break;
    default: return Status::internal(where(node) + ": not a unary op.");
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

namespace {

// The function of a binary op on two doubles (float32 data) or two int64s.
Result<double> float_op(const Node& node, double p, double q) {
  switch (node.op) {
    case OpType::kAdd: return p + q;
    case OpType::kSub: return p - q;
    case OpType::kMul: return p * q;
    case OpType::kDiv: return p / q;
    case OpType::kPow: return std::pow(p, q);
    case OpType::kMax: return std::isnan(p) || std::isnan(q) ? std::nan("") : std::max(p, q);
    case OpType::kMin: return std::isnan(p) || std::isnan(q) ? std::nan("") : std::min(p, q);
    case OpType::kMod: {
      const double r = std::fmod(p, q);
      if (std::get<ModAttrs>(node.attrs).fmod || r == 0 || (r < 0) == (q < 0)) return r;
      return r + q;  // Python's %: the sign of the divisor
    }
    default: return Status::internal(where(node) + ": not a binary op.");
  }
}

Result<int64_t> int_op(const Node& node, int64_t p, int64_t q) {
  switch (node.op) {
    case OpType::kAdd: return p + q;
    case OpType::kSub: return p - q;
    case OpType::kMul: return p * q;
    case OpType::kMax: return std::max(p, q);
    case OpType::kMin: return std::min(p, q);
    case OpType::kPow: return static_cast<int64_t>(std::pow(static_cast<double>(p), static_cast<double>(q)));
    case OpType::kDiv:
    case OpType::kMod: {
      if (q == 0) return Status::invalid_argument(where(node) + ": integer division by zero.");
      if (node.op == OpType::kDiv) return p / q;  // ONNX: truncates
      const int64_t r = p % q;
      if (std::get<ModAttrs>(node.attrs).fmod || r == 0 || (r < 0) == (q < 0)) return r;
      return r + q;
    }
    default: return Status::internal(where(node) + ": not a binary op.");
  }
}

}  // namespace

// Add, Sub, Mul, Div, Pow, Mod, Max, Min and Equal with numpy broadcasting: float32 (computed in
// double, rounded once), int64 (shape arithmetic; Div truncates as ONNX says) and, for Equal, bool.
Status run_binary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions&) {
  GPULAB_TRY(check_input_count(node, inputs, 2));
  if (node.op == OpType::kMod && !std::holds_alternative<ModAttrs>(node.attrs))
    return Status::invalid_model(where(node) + ": ModAttrs are missing.");
  const Tensor& a = *inputs[0];
  const Tensor& b = *inputs[1];
  const bool equal = node.op == OpType::kEqual;
  const bool types_ok = a.dtype() == DataType::kFloat32 || a.dtype() == DataType::kInt64 ||
                        (equal && a.dtype() == DataType::kBool);
  if (a.dtype() != b.dtype() || !types_ok) {
    return Status::unsupported(where(node) + ": inputs are " + std::string(dtype_name(a.dtype())) + " and " +
                               std::string(dtype_name(b.dtype())) +
                               "; the reference backend needs both float32 or both int64" +
                               (equal ? " (or bool)." : "."));
  }
  GPULAB_ASSIGN_OR_RETURN(const Shape shape, broadcast_shape(node, a.shape(), b.shape()));
  Tensor y(equal ? DataType::kBool : a.dtype(), shape);
  Status status;
  if (equal) {
    const size_t elem = dtype_size(a.dtype());
    const std::vector<int64_t> as = broadcast_strides(a.shape(), shape.rank());
    const std::vector<int64_t> bs = broadcast_strides(b.shape(), shape.rank());
    for_each_index(shape.dims, [&](int64_t e, const std::vector<int64_t>& c) {
      int64_t ao = 0, bo = 0;
      for (size_t i = 0; i < c.size(); ++i) ao += c[i] * as[i], bo += c[i] * bs[i];
      bool same;
      if (a.dtype() == DataType::kFloat32)
        same = a.f32()[static_cast<size_t>(ao)] == b.f32()[static_cast<size_t>(bo)];
      else
        same = std::memcmp(a.data() + ao * elem, b.data() + bo * elem, elem) == 0;
      y.data()[e] = static_cast<std::byte>(same);
    });
  } else if (a.dtype() == DataType::kFloat32) {
    broadcast_apply<float>(a, b, y, [&](float p, float q) {
      auto v = float_op(node, p, q);
      if (!v.is_ok()) {
        status = v.status();
        return 0.0f;
      }
      return static_cast<float>(*v);
    });
  } else {
    broadcast_apply<int64_t>(a, b, y, [&](int64_t p, int64_t q) {
      auto v = int_op(node, p, q);
      if (!v.is_ok()) {
        if (status.is_ok()) status = v.status();
        return int64_t{0};
      }
      return *v;
    });
  }
  GPULAB_TRY(status);
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_batch_norm(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const BatchNormAttrs attrs, attrs_or_default<BatchNormAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 5));
  for (size_t o = 1; o < node.outputs.size(); ++o) {
    if (!node.outputs[o].empty()) {
      return Status::unsupported(where(node) +
                                 ": the training-mode outputs (running mean/var) are not supported. "
                                 "Export the model in eval mode.");
    }
  }
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  if (x.shape().rank() < 2) {
    return Status::invalid_argument(where(node) + ": X has shape " + x.shape().to_string() +
                                    "; expected [N, C, ...].");
  }
  const int64_t batch = x.shape()[0], channels = x.shape()[1];
  const char* roles[] = {"", "scale", "B", "mean", "var"};
  for (size_t i = 1; i < 5; ++i) {
    GPULAB_TRY(check_dtype(node, *inputs[i], DataType::kFloat32, roles[i]));
    if (inputs[i]->shape() != Shape{channels}) {
      return Status::invalid_argument(where(node) + ": " + roles[i] + " has shape " +
                                      inputs[i]->shape().to_string() + ", expected [" +
                                      std::to_string(channels) + "].");
    }
  }
  const int64_t inner = batch * channels == 0 ? 0 : x.numel() / (batch * channels);
  Tensor y(DataType::kFloat32, x.shape());
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  const auto scale = inputs[1]->f32(), bias = inputs[2]->f32(), mean = inputs[3]->f32(),
             var = inputs[4]->f32();
  parallel_for(batch * channels, inner, options, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const int64_t c = nc % channels;
      const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[c]) + attrs.epsilon);
      for (int64_t i = nc * inner; i < (nc + 1) * inner; ++i)
        yp[i] = static_cast<float>((xp[i] - static_cast<double>(mean[c])) * inv_std * scale[c] + bias[c]);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_softmax(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions&) {
  GPULAB_ASSIGN_OR_RETURN(AxisAttrs attrs, attrs_or_default<AxisAttrs>(node));
  // A node without attributes gets ONNX's (opset 13) default axis, -1, not AxisAttrs' 0.
  if (std::holds_alternative<std::monostate>(node.attrs)) attrs.axis = -1;
  GPULAB_TRY(check_input_count(node, inputs, 1));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  if (rank == 0) return Status::invalid_argument(where(node) + ": X is a scalar; expected rank >= 1.");
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, attrs.axis, rank));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  const int64_t len = x.shape()[static_cast<size_t>(axis)];
  Tensor y(DataType::kFloat32, x.shape());
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * len * inner + in;
      double max_v = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < len; ++i) max_v = std::max(max_v, static_cast<double>(xp[base + i * inner]));
      double sum = 0;
      for (int64_t i = 0; i < len; ++i) sum += std::exp(xp[base + i * inner] - max_v);
      for (int64_t i = 0; i < len; ++i)
        yp[base + i * inner] = static_cast<float>(std::exp(xp[base + i * inner] - max_v) / sum);
    }
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
