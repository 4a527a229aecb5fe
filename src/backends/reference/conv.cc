// Reference 2-D convolution, with groups, dilation, asymmetric pads and the fused epilogue of
// ConvAttrs: y = act(conv(x, w) + b + residual).
//
// Direct convolution over NCHW float32: each output plane (n, m) is accumulated in double, one
// (input channel, kernel tap) at a time, over the output rows whose input row is inside the image
// and the output columns whose input column is; the padding contributes nothing. Planes are split
// across threads.
#include <algorithm>
#include <cmath>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

std::string hw_string(const Hw& v) {
  return std::to_string(v.h) + "x" + std::to_string(v.w);
}

// Output extent of a sliding window (floor rounding), or <= 0 when no window fits.
int64_t conv_out_size(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t stride,
                      int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t padded = in + pad_begin + pad_end;
  if (padded < span) return 0;
  return (padded - span) / stride + 1;
}

// Smallest o >= 0 with o * stride + offset >= 0, i.e. the first output whose input index is >= 0.
int64_t first_inside(int64_t offset, int64_t stride) {
  if (offset >= 0) return 0;
  return (-offset + stride - 1) / stride;
}
// One past the last output o with o * stride + offset <= in - 1.
int64_t end_inside(int64_t offset, int64_t stride, int64_t in) {
  if (in - 1 - offset < 0) return 0;
  return (in - 1 - offset) / stride + 1;
}

}  // namespace

Status run_conv(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const ConvAttrs attrs, attrs_or_default<ConvAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 2, attrs.has_residual ? 2 : 1));
  const bool has_bias = inputs.size() > 2 && inputs[2] != nullptr;
  const Tensor* residual = attrs.has_residual && inputs.size() > 3 ? inputs[3] : nullptr;
  if (attrs.has_residual && residual == nullptr) {
    return Status::invalid_model(where(node) +
                                 ": has_residual is set but input 3 (the residual) is missing. "
                                 "The fusion pass built this node wrongly.");
  }
  const Tensor& x = *inputs[0];
  const Tensor& w = *inputs[1];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  GPULAB_TRY(check_dtype(node, w, DataType::kFloat32, "W"));
  if (x.shape().rank() != 4 || w.shape().rank() != 4) {
    return Status::unsupported(where(node) + ": X " + x.shape().to_string() + " and W " +
                               w.shape().to_string() + " must both be rank 4 (2-D convolution over NCHW).");
  }
  const int64_t batch = x.shape()[0], channels = x.shape()[1], in_h = x.shape()[2], in_w = x.shape()[3];
  const int64_t out_channels = w.shape()[0], group_in = w.shape()[1], k_h = w.shape()[2], k_w = w.shape()[3];
  const int64_t groups = attrs.groups;
  if (groups < 1 || channels % groups != 0 || out_channels % groups != 0 || group_in * groups != channels) {
    return Status::invalid_argument(where(node) + ": X has " + std::to_string(channels) + " channels, W " +
                                    w.shape().to_string() + ", groups " + std::to_string(groups) +
                                    "; need channels = W[1] * groups and W[0] divisible by groups.");
  }
  if (attrs.kernel != Hw{1, 1} && attrs.kernel != Hw{k_h, k_w}) {
    return Status::invalid_model(where(node) + ": kernel_shape " + hw_string(attrs.kernel) +
                                 " disagrees with W " + w.shape().to_string() + ".");
  }
  if (attrs.stride.h < 1 || attrs.stride.w < 1 || attrs.dilation.h < 1 || attrs.dilation.w < 1 ||
      attrs.pads.top < 0 || attrs.pads.left < 0 || attrs.pads.bottom < 0 || attrs.pads.right < 0 ||
      std::max({attrs.stride.h, attrs.stride.w, attrs.dilation.h, attrs.dilation.w, attrs.pads.top,
                attrs.pads.left, attrs.pads.bottom, attrs.pads.right}) > kMaxWindowParam) {
    return Status::invalid_model(where(node) + ": stride " + hw_string(attrs.stride) + ", dilation " +
                                 hw_string(attrs.dilation) + " must be >= 1 and pads >= 0 (all at most " +
                                 std::to_string(kMaxWindowParam) + ").");
  }
  const int64_t out_h =
      conv_out_size(in_h, attrs.pads.top, attrs.pads.bottom, k_h, attrs.stride.h, attrs.dilation.h);
  const int64_t out_w =
      conv_out_size(in_w, attrs.pads.left, attrs.pads.right, k_w, attrs.stride.w, attrs.dilation.w);
  if (out_h < 1 || out_w < 1) {
    return Status::invalid_argument(where(node) + ": the " + std::to_string(k_h) + "x" + std::to_string(k_w) +
                                    " kernel (dilation " + hw_string(attrs.dilation) +
                                    ") does not fit the padded " + std::to_string(in_h) + "x" +
                                    std::to_string(in_w) + " input.");
  }
  if (has_bias) {
    GPULAB_TRY(check_dtype(node, *inputs[2], DataType::kFloat32, "B"));
    if (inputs[2]->shape() != Shape{out_channels}) {
      return Status::invalid_argument(where(node) + ": bias has shape " + inputs[2]->shape().to_string() +
                                      ", expected [" + std::to_string(out_channels) + "].");
    }
  }
  const Shape out_shape{batch, out_channels, out_h, out_w};
  if (residual) {
    GPULAB_TRY(check_dtype(node, *residual, DataType::kFloat32, "residual"));
    if (residual->shape() != out_shape) {
      return Status::invalid_argument(where(node) + ": residual has shape " + residual->shape().to_string() +
                                      ", the output is " + out_shape.to_string() + ".");
    }
  }
  if (attrs.activation == Activation::kClip && !(attrs.clip_min <= attrs.clip_max)) {
    return Status::invalid_model(where(node) + ": clip range [" + std::to_string(attrs.clip_min) + ", " +
                                 std::to_string(attrs.clip_max) + "] is empty.");
  }

  Tensor y(DataType::kFloat32, out_shape);
  const float* xp = x.f32().data();
  const float* wp = w.f32().data();
  const float* bp = has_bias ? inputs[2]->f32().data() : nullptr;
  const float* rp = residual ? residual->f32().data() : nullptr;
  float* yp = y.f32().data();
  const int64_t out_per_group = out_channels / groups;
  const int64_t plane = out_h * out_w;
  const int64_t cost = plane * group_in * k_h * k_w;

  parallel_for(batch * out_channels, cost, options, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(plane));
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / out_channels, m = nm % out_channels;
      const int64_t g = m / out_per_group;
      std::fill(acc.begin(), acc.end(), bp ? static_cast<double>(bp[m]) : 0.0);
      for (int64_t ic = 0; ic < group_in; ++ic) {
        const float* x_plane = xp + ((n * channels) + g * group_in + ic) * in_h * in_w;
        const float* w_taps = wp + ((m * group_in) + ic) * k_h * k_w;
        for (int64_t ki = 0; ki < k_h; ++ki) {
          // Input row of output row oh: oh * stride + row_offset.
          const int64_t row_offset = ki * attrs.dilation.h - attrs.pads.top;
          const int64_t oh_begin = first_inside(row_offset, attrs.stride.h);
          const int64_t oh_end = std::min(out_h, end_inside(row_offset, attrs.stride.h, in_h));
          for (int64_t kj = 0; kj < k_w; ++kj) {
            const double tap = w_taps[ki * k_w + kj];
            const int64_t col_offset = kj * attrs.dilation.w - attrs.pads.left;
            const int64_t ow_begin = first_inside(col_offset, attrs.stride.w);
            const int64_t ow_end = std::min(out_w, end_inside(col_offset, attrs.stride.w, in_w));
            for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
              const float* x_row = x_plane + (oh * attrs.stride.h + row_offset) * in_w;
              double* acc_row = acc.data() + oh * out_w;
              if (attrs.stride.w == 1) {
                for (int64_t ow = ow_begin; ow < ow_end; ++ow) acc_row[ow] += tap * x_row[ow + col_offset];
              } else {
                for (int64_t ow = ow_begin; ow < ow_end; ++ow)
                  acc_row[ow] += tap * x_row[ow * attrs.stride.w + col_offset];
              }
            }
          }
        }
      }
      const float* r_plane = rp ? rp + nm * plane : nullptr;
      float* y_plane = yp + nm * plane;
      for (int64_t i = 0; i < plane; ++i) {
        double v = acc[static_cast<size_t>(i)];
        if (r_plane) v += r_plane[i];
        if (attrs.activation == Activation::kRelu) v = std::max(v, 0.0);
        if (attrs.activation == Activation::kClip)
          v = std::clamp(v, static_cast<double>(attrs.clip_min), static_cast<double>(attrs.clip_max));
        y_plane[i] = static_cast<float>(v);
      }
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
