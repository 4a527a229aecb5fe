// Reference MaxPool, AveragePool (2-D, NCHW) and GlobalAveragePool (any spatial rank).
//
// Output size: floor((in + pads - dilation*(kernel-1) - 1) / stride) + 1, or ceil with ceil_mode,
// in which case a last window that would start beyond the input plus the leading pad is dropped
// (PyTorch's rule, which the goldens come from).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/reference/kernels.h"

namespace gpulab::reference {
namespace {

int64_t pool_out_size(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t stride,
                      int64_t dilation, bool ceil_mode) {
  const int64_t numerator = in + pad_begin + pad_end - dilation * (kernel - 1) - 1;
  if (numerator < 0) return 0;
  int64_t out = (ceil_mode ? (numerator + stride - 1) / stride : numerator / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

struct PoolGeometry {
  int64_t batch, channels, in_h, in_w, out_h, out_w;
};

Result<PoolGeometry> check_pool(const Node& node, Inputs inputs, const PoolAttrs& attrs) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  if (node.outputs.size() > 1 && !node.outputs[1].empty()) {
    return Status::unsupported(where(node) + ": the Indices output is not supported.");
  }
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  if (x.shape().rank() != 4) {
    return Status::unsupported(where(node) + ": X has shape " + x.shape().to_string() +
                               "; only 2-D pooling over NCHW (rank 4) is supported.");
  }
  if (attrs.kernel.h < 1 || attrs.kernel.w < 1 || attrs.stride.h < 1 || attrs.stride.w < 1 ||
      attrs.dilation.h < 1 || attrs.dilation.w < 1 || attrs.pads.top < 0 || attrs.pads.left < 0 ||
      attrs.pads.bottom < 0 || attrs.pads.right < 0 ||
      std::max({attrs.kernel.h, attrs.kernel.w, attrs.stride.h, attrs.stride.w, attrs.dilation.h,
                attrs.dilation.w, attrs.pads.top, attrs.pads.left, attrs.pads.bottom, attrs.pads.right}) >
          kMaxWindowParam) {
    return Status::invalid_model(where(node) +
                                 ": kernel, strides and dilations must be >= 1 and "
                                 "pads >= 0 (all at most " +
                                 std::to_string(kMaxWindowParam) + ").");
  }
  if (attrs.pads.top >= attrs.kernel.h * attrs.dilation.h ||
      attrs.pads.bottom >= attrs.kernel.h * attrs.dilation.h ||
      attrs.pads.left >= attrs.kernel.w * attrs.dilation.w ||
      attrs.pads.right >= attrs.kernel.w * attrs.dilation.w) {
    return Status::invalid_model(where(node) +
                                 ": a pad is as large as the window, so a window could see padding "
                                 "only. Check the pads attribute.");
  }
  PoolGeometry g{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], 0, 0};
  g.out_h = pool_out_size(g.in_h, attrs.pads.top, attrs.pads.bottom, attrs.kernel.h, attrs.stride.h,
                          attrs.dilation.h, attrs.ceil_mode);
  g.out_w = pool_out_size(g.in_w, attrs.pads.left, attrs.pads.right, attrs.kernel.w, attrs.stride.w,
                          attrs.dilation.w, attrs.ceil_mode);
  if (g.out_h < 1 || g.out_w < 1) {
    return Status::invalid_argument(where(node) + ": the " + std::to_string(attrs.kernel.h) + "x" +
                                    std::to_string(attrs.kernel.w) +
                                    " window does not fit the padded input " + x.shape().to_string() + ".");
  }
  return g;
}

Result<PoolAttrs> pool_attrs(const Node& node) {
  const PoolAttrs* attrs = std::get_if<PoolAttrs>(&node.attrs);
  if (!attrs) {
    return Status::invalid_model(where(node) + ": PoolAttrs (kernel_shape) are missing.");
  }
  return *attrs;
}

}  // namespace

Status run_max_pool(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const PoolAttrs attrs, pool_attrs(node));
  GPULAB_ASSIGN_OR_RETURN(const PoolGeometry g, check_pool(node, inputs, attrs));
  Tensor y(DataType::kFloat32, Shape{g.batch, g.channels, g.out_h, g.out_w});
  const float* xp = inputs[0]->f32().data();
  float* yp = y.f32().data();
  const int64_t cost = g.out_h * g.out_w * attrs.kernel.h * attrs.kernel.w;
  parallel_for(g.batch * g.channels, cost, options, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float* x_plane = xp + nc * g.in_h * g.in_w;
      float* y_plane = yp + nc * g.out_h * g.out_w;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t ki = 0; ki < attrs.kernel.h; ++ki) {
            const int64_t ih = oh * attrs.stride.h - attrs.pads.top + ki * attrs.dilation.h;
            if (ih < 0 || ih >= g.in_h) continue;
            for (int64_t kj = 0; kj < attrs.kernel.w; ++kj) {
              const int64_t iw = ow * attrs.stride.w - attrs.pads.left + kj * attrs.dilation.w;
              if (iw < 0 || iw >= g.in_w) continue;
              const float v = x_plane[ih * g.in_w + iw];
              // NaN propagates, as in PyTorch.
              if (v > best || std::isnan(v)) best = v;
              if (std::isnan(best)) break;
            }
          }
          y_plane[oh * g.out_w + ow] = best;
        }
      }
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_average_pool(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  GPULAB_ASSIGN_OR_RETURN(const PoolAttrs attrs, pool_attrs(node));
  if (attrs.dilation != Hw{1, 1}) {
    return Status::unsupported(where(node) + ": dilated AveragePool is not supported.");
  }
  GPULAB_ASSIGN_OR_RETURN(const PoolGeometry g, check_pool(node, inputs, attrs));
  Tensor y(DataType::kFloat32, Shape{g.batch, g.channels, g.out_h, g.out_w});
  const float* xp = inputs[0]->f32().data();
  float* yp = y.f32().data();
  const int64_t cost = g.out_h * g.out_w * attrs.kernel.h * attrs.kernel.w;
  parallel_for(g.batch * g.channels, cost, options, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const float* x_plane = xp + nc * g.in_h * g.in_w;
      float* y_plane = yp + nc * g.out_h * g.out_w;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        // The window clipped to the padded input [-pad_top, in_h + pad_bottom) ...
        const int64_t h0 = oh * attrs.stride.h - attrs.pads.top;
        const int64_t h1 = std::min(h0 + attrs.kernel.h, g.in_h + attrs.pads.bottom);
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t w0 = ow * attrs.stride.w - attrs.pads.left;
          const int64_t w1 = std::min(w0 + attrs.kernel.w, g.in_w + attrs.pads.right);
          // ... and to the real input.
          const int64_t ih0 = std::max<int64_t>(h0, 0), ih1 = std::min(h1, g.in_h);
          const int64_t iw0 = std::max<int64_t>(w0, 0), iw1 = std::min(w1, g.in_w);
          double sum = 0;
          for (int64_t ih = ih0; ih < ih1; ++ih)
            for (int64_t iw = iw0; iw < iw1; ++iw) sum += x_plane[ih * g.in_w + iw];
          const int64_t count = attrs.count_include_pad ? (h1 - h0) * (w1 - w0) : (ih1 - ih0) * (iw1 - iw0);
          y_plane[oh * g.out_w + ow] = static_cast<float>(count > 0 ? sum / static_cast<double>(count) : 0.0);
        }
      }
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

Status run_global_average_pool(const Node& node, Inputs inputs, Outputs& outputs,
                               const ReferenceOptions& options) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  if (x.shape().rank() < 3) {
    return Status::invalid_argument(where(node) + ": X has shape " + x.shape().to_string() +
                                    "; expected [N, C, spatial...] (rank >= 3).");
  }
  Shape out_shape = x.shape();
  int64_t spatial = 1;
  for (size_t d = 2; d < out_shape.rank(); ++d) {
    spatial *= out_shape[d];
    out_shape[d] = 1;
  }
  if (spatial == 0) {
    return Status::invalid_argument(where(node) + ": X " + x.shape().to_string() +
                                    " has an empty spatial extent.");
  }
  Tensor y(DataType::kFloat32, out_shape);
  const float* xp = x.f32().data();
  float* yp = y.f32().data();
  parallel_for(out_shape[0] * out_shape[1], spatial, options, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      double sum = 0;
      for (int64_t i = 0; i < spatial; ++i) sum += xp[nc * spatial + i];
      yp[nc] = static_cast<float>(sum / static_cast<double>(spatial));
    }
  });
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
