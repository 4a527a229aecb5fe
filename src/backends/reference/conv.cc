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

// The sizes of one convolution, checked against its attributes: NCHW x, [out, in / groups, kh, kw]
// w, and the output extent.
struct ConvGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, group_in = 0, k_h = 0, k_w = 0, groups = 1;
  int64_t out_h = 0, out_w = 0;
};

Result<ConvGeometry> conv_geometry(const Node& node, const ConvAttrs& attrs, const Tensor& x,
                                   const Tensor& w) {
  if (x.shape().rank() != 4 || w.shape().rank() != 4) {
    return Status::unsupported(where(node) + ": X " + x.shape().to_string() + " and W " +
                               w.shape().to_string() + " must both be rank 4 (2-D convolution over NCHW).");
  }
  ConvGeometry g{.batch = x.shape()[0],
                 .channels = x.shape()[1],
                 .in_h = x.shape()[2],
                 .in_w = x.shape()[3],
                 .out_channels = w.shape()[0],
                 .group_in = w.shape()[1],
                 .k_h = w.shape()[2],
                 .k_w = w.shape()[3],
                 .groups = attrs.groups};
  if (g.groups < 1 || g.channels % g.groups != 0 || g.out_channels % g.groups != 0 ||
      g.group_in * g.groups != g.channels) {
    return Status::invalid_argument(where(node) + ": X has " + std::to_string(g.channels) + " channels, W " +
                                    w.shape().to_string() + ", groups " + std::to_string(g.groups) +
                                    "; need channels = W[1] * groups and W[0] divisible by groups.");
  }
  if (attrs.kernel != Hw{1, 1} && attrs.kernel != Hw{g.k_h, g.k_w}) {
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
  g.out_h = conv_out_size(g.in_h, attrs.pads.top, attrs.pads.bottom, g.k_h, attrs.stride.h, attrs.dilation.h);
  g.out_w = conv_out_size(g.in_w, attrs.pads.left, attrs.pads.right, g.k_w, attrs.stride.w, attrs.dilation.w);
  if (g.out_h < 1 || g.out_w < 1) {
    return Status::invalid_argument(where(node) + ": the " + std::to_string(g.k_h) + "x" +
                                    std::to_string(g.k_w) + " kernel (dilation " + hw_string(attrs.dilation) +
                                    ") does not fit the padded " + std::to_string(g.in_h) + "x" +
                                    std::to_string(g.in_w) + " input.");
  }
  return g;
}

// The bias, the residual and the clip range of the fused epilogue, against the output's shape.
Status check_epilogue(const Node& node, const ConvAttrs& attrs, const Tensor* bias, const Tensor* residual,
                      const Shape& out_shape) {
  if (bias) {
    GPULAB_TRY(check_dtype(node, *bias, DataType::kFloat32, "B"));
    if (bias->shape() != Shape{out_shape[1]}) {
      return Status::invalid_argument(where(node) + ": bias has shape " + bias->shape().to_string() +
                                      ", expected [" + std::to_string(out_shape[1]) + "].");
    }
  }
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
  return Status::ok();
}

// acc (one output plane, out_h x out_w) += the taps of input channel `ic` of x_plane's group.
void accumulate_channel(const ConvGeometry& g, const ConvAttrs& attrs, const float* x_plane,
                        const float* w_taps, double* acc) {
  for (int64_t ki = 0; ki < g.k_h; ++ki) {
    // Input row of output row oh: oh * stride + row_offset.
    const int64_t row_offset = ki * attrs.dilation.h - attrs.pads.top;
    const int64_t oh_begin = first_inside(row_offset, attrs.stride.h);
    const int64_t oh_end = std::min(g.out_h, end_inside(row_offset, attrs.stride.h, g.in_h));
    for (int64_t kj = 0; kj < g.k_w; ++kj) {
      const double tap = w_taps[ki * g.k_w + kj];
      const int64_t col_offset = kj * attrs.dilation.w - attrs.pads.left;
      const int64_t ow_begin = first_inside(col_offset, attrs.stride.w);
      const int64_t ow_end = std::min(g.out_w, end_inside(col_offset, attrs.stride.w, g.in_w));
      for (int64_t oh = oh_begin; oh < oh_end; ++oh) {
        const float* x_row = x_plane + (oh * attrs.stride.h + row_offset) * g.in_w;
        double* acc_row = acc + oh * g.out_w;
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

// y = act(acc + residual) over one plane.
void write_plane(const ConvAttrs& attrs, const std::vector<double>& acc, const float* r_plane,
                 float* y_plane) {
  for (size_t i = 0; i < acc.size(); ++i) {
    double v = acc[i];
    if (r_plane) v += r_plane[i];
    if (attrs.activation == Activation::kRelu) v = std::max(v, 0.0);
    if (attrs.activation == Activation::kClip)
      v = std::clamp(v, static_cast<double>(attrs.clip_min), static_cast<double>(attrs.clip_max));
    y_plane[i] = static_cast<float>(v);
  }
}

}  // namespace

Status run_conv(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const ConvAttrs attrs, attrs_or_default<ConvAttrs>(node));
  GPULAB_TRY(check_input_count(node, inputs, 2, attrs.has_residual ? 2 : 1));
  const Tensor* bias = inputs.size() > 2 ? inputs[2] : nullptr;
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
  GPULAB_ASSIGN_OR_RETURN(const ConvGeometry g, conv_geometry(node, attrs, x, w));
  const Shape out_shape{g.batch, g.out_channels, g.out_h, g.out_w};
  GPULAB_TRY(check_epilogue(node, attrs, bias, residual, out_shape));

  Tensor y(DataType::kFloat32, out_shape);
  const float* xp = x.f32().data();
  const float* wp = w.f32().data();
  const float* bp = bias ? bias->f32().data() : nullptr;
  const float* rp = residual ? residual->f32().data() : nullptr;
  float* yp = y.f32().data();
  const int64_t out_per_group = g.out_channels / g.groups;
  const int64_t plane = g.out_h * g.out_w;
  const int64_t cost = plane * g.group_in * g.k_h * g.k_w;

  parallel_for(g.batch * g.out_channels, cost, options, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(static_cast<size_t>(plane));
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.out_channels, m = nm % g.out_channels;
      const int64_t group = m / out_per_group;
      std::fill(acc.begin(), acc.end(), bp ? static_cast<double>(bp[m]) : 0.0);
      for (int64_t ic = 0; ic < g.group_in; ++ic) {
        const float* x_plane = xp + ((n * g.channels) + group * g.group_in + ic) * g.in_h * g.in_w;
        const float* w_taps = wp + ((m * g.group_in) + ic) * g.k_h * g.k_w;
        accumulate_channel(g, attrs, x_plane, w_taps, acc.data());
      }
      write_plane(attrs, acc, rp ? rp + nm * plane : nullptr, yp + nm * plane);
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
