#include "backends/cuda/kernels/kernel_desc.h"

#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace gpulab::kernels {
namespace {

// "<desc>: <field> must be >= 1 (got <value>). <fix>"
Status check_positive(std::string_view where, std::string_view field, int64_t value) {
  if (value >= 1) return Status::ok();
  return Status::invalid_argument(
      fmt::format("{}: {} must be >= 1 (got {}). Pass the tensor's actual size.", where, field, value));
}

Status check_float_type(std::string_view where, DataType dtype) {
  if (is_kernel_float_type(dtype)) return Status::ok();
  return Status::invalid_argument(fmt::format(
      "{}: dtype {} is not supported. Use float32, float16 or bfloat16.", where, dtype_name(dtype)));
}

Status check_activation(std::string_view where, Activation act, float clip_min, float clip_max) {
  if (act != Activation::kClip) return Status::ok();
  if (std::isnan(clip_min) || std::isnan(clip_max) || clip_min > clip_max) {
    return Status::invalid_argument(
        fmt::format("{}: clip range is empty or NaN (clip_min {}, clip_max {}). Pass clip_min <= clip_max.",
                    where, clip_min, clip_max));
  }
  return Status::ok();
}

}  // namespace

bool is_kernel_float_type(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

Status validate(const NchwToNhwcDesc& d) {
  constexpr std::string_view kWhere = "NchwToNhwcDesc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  GPULAB_TRY(check_positive(kWhere, "h", d.h));
  GPULAB_TRY(check_positive(kWhere, "w", d.w));
  if (d.c_out < d.c) {
    return Status::invalid_argument(
        fmt::format("{}: c_out must be >= c (c_out {}, c {}). Pass c_out = c for no channel padding.", kWhere,
                    d.c_out, d.c));
  }
  return check_float_type(kWhere, d.dtype);
}

Status validate(const SpaceToDepthDesc& d) {
  constexpr std::string_view kWhere = "SpaceToDepthDesc";
  for (auto [name, v] : {std::pair{"n", d.n},
                         {"c", d.c},
                         {"h", d.h},
                         {"w", d.w},
                         {"block", d.block},
                         {"out_h", d.out_h},
                         {"out_w", d.out_w}})
    GPULAB_TRY(check_positive(kWhere, name, v));
  if (d.pad_top < 0 || d.pad_left < 0)
    return Status::invalid_argument(
        fmt::format("{}: pads must be >= 0 (top {}, left {}).", kWhere, d.pad_top, d.pad_left));
  if (d.c_out < d.block * d.block * d.c)
    return Status::invalid_argument(
        fmt::format("{}: c_out must hold block^2 * c channels (c_out {}, block {}, c {}).", kWhere, d.c_out,
                    d.block, d.c));
  return check_float_type(kWhere, d.dtype);
}

Status validate(const NormalizeU8Desc& d) {
  constexpr std::string_view kWhere = "NormalizeU8Desc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "h", d.h));
  GPULAB_TRY(check_positive(kWhere, "w", d.w));
  if (d.c < 1 || d.c > kMaxNormalizeChannels) {
    return Status::invalid_argument(fmt::format(
        "{}: c must be 1..{} (got {}). Pass gray, RGB or RGBA images.", kWhere, kMaxNormalizeChannels, d.c));
  }
  if (d.c_out < d.c) {
    return Status::invalid_argument(
        fmt::format("{}: c_out must be >= c (c_out {}, c {}). Pass c_out = c for no channel padding.", kWhere,
                    d.c_out, d.c));
  }
  for (int64_t i = 0; i < d.c; ++i) {
    if (!std::isfinite(d.mean[i]) || !std::isfinite(d.std[i]) || d.std[i] == 0.0f) {
      return Status::invalid_argument(
          fmt::format("{}: channel {} has mean {} and std {}; both must be finite and std non-zero. "
                      "Check the model's preprocessing parameters.",
                      kWhere, i, d.mean[i], d.std[i]));
    }
  }
  return check_float_type(kWhere, d.dtype);
}

Status validate(const FloatCastDesc& d) {
  constexpr std::string_view kWhere = "FloatCastDesc";
  GPULAB_TRY(check_positive(kWhere, "count", d.count));
  GPULAB_TRY(check_float_type(kWhere, d.from));
  return check_float_type(kWhere, d.to);
}

Status validate(const NhwcToNchwF32Desc& d) {
  constexpr std::string_view kWhere = "NhwcToNchwF32Desc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "h", d.h));
  GPULAB_TRY(check_positive(kWhere, "w", d.w));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  if (d.c_stored != 0 && d.c_stored < d.c) {
    return Status::invalid_argument(
        fmt::format("{}: c_stored must be 0 or >= c (c_stored {}, c {}). Pass the input's channel stride.",
                    kWhere, d.c_stored, d.c));
  }
  return check_float_type(kWhere, d.dtype);
}

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin,
                         int64_t pad_end, bool ceil_mode) {
  if (stride < 1 || kernel < 1 || dilation < 1) return 0;
  const int64_t span = in + pad_begin + pad_end - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // A ceil_mode window must start inside the input or the begin padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

PoolDesc with_output_size(PoolDesc d) {
  d.out_h =
      pool_output_size(d.h, d.kernel.h, d.stride.h, d.dilation.h, d.pads.top, d.pads.bottom, d.ceil_mode);
  d.out_w =
      pool_output_size(d.w, d.kernel.w, d.stride.w, d.dilation.w, d.pads.left, d.pads.right, d.ceil_mode);
  return d;
}

Status validate(const PoolDesc& d) {
  constexpr std::string_view kWhere = "PoolDesc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "h", d.h));
  GPULAB_TRY(check_positive(kWhere, "w", d.w));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  GPULAB_TRY(check_positive(kWhere, "kernel.h", d.kernel.h));
  GPULAB_TRY(check_positive(kWhere, "kernel.w", d.kernel.w));
  GPULAB_TRY(check_positive(kWhere, "stride.h", d.stride.h));
  GPULAB_TRY(check_positive(kWhere, "stride.w", d.stride.w));
  GPULAB_TRY(check_positive(kWhere, "dilation.h", d.dilation.h));
  GPULAB_TRY(check_positive(kWhere, "dilation.w", d.dilation.w));
  // As the reference backend: a pad must be smaller than the dilated kernel's extent.
  const int64_t extent_h = d.kernel.h * d.dilation.h, extent_w = d.kernel.w * d.dilation.w;
  if (d.pads.top < 0 || d.pads.left < 0 || d.pads.bottom < 0 || d.pads.right < 0 || d.pads.top >= extent_h ||
      d.pads.bottom >= extent_h || d.pads.left >= extent_w || d.pads.right >= extent_w) {
    return Status::invalid_argument(fmt::format(
        "{}: pads (top {}, left {}, bottom {}, right {}) must be >= 0 and smaller than kernel x dilation "
        "({}x{}). Check the pooling node's attributes.",
        kWhere, d.pads.top, d.pads.left, d.pads.bottom, d.pads.right, extent_h, extent_w));
  }
  if (d.kind == PoolKind::kAverage && (d.dilation.h != 1 || d.dilation.w != 1)) {
    return Status::invalid_argument(
        fmt::format("{}: average pooling has no dilation (got {}x{}). Pass dilation 1x1.", kWhere,
                    d.dilation.h, d.dilation.w));
  }
  const PoolDesc expected = with_output_size(d);
  if (expected.out_h < 1 || expected.out_w < 1) {
    return Status::invalid_argument(
        fmt::format("{}: the {}x{} window (dilation {}x{}) does not fit the padded {}x{} input. Check the "
                    "model's shapes.",
                    kWhere, d.kernel.h, d.kernel.w, d.dilation.h, d.dilation.w, d.h, d.w));
  }
  if (expected.out_h != d.out_h || expected.out_w != d.out_w) {
    return Status::invalid_argument(
        fmt::format("{}: output is {}x{} but the window arithmetic gives {}x{} (input {}x{}, ceil_mode {}). "
                    "Fill out_h/out_w with with_output_size().",
                    kWhere, d.out_h, d.out_w, expected.out_h, expected.out_w, d.h, d.w, d.ceil_mode));
  }
  return check_float_type(kWhere, d.dtype);
}

Status validate(const FusedStemDesc& d) {
  constexpr std::string_view kWhere = "FusedStemDesc";
  for (auto [name, v] : {std::pair{"n", d.n},
                         {"c", d.c},
                         {"h", d.h},
                         {"w", d.w},
                         {"conv_h", d.conv_h},
                         {"conv_w", d.conv_w},
                         {"out_h", d.out_h},
                         {"out_w", d.out_w}})
    GPULAB_TRY(check_positive(kWhere, name, v));
  if (d.c > kStemMaxChannels)
    return Status::invalid_argument(
        fmt::format("{}: {} image channels; the fused stem takes 1..{}.", kWhere, d.c, kStemMaxChannels));
  if (d.pad_top < 0 || d.pad_left < 0 || d.pad_top >= 64 || d.pad_left >= 64)
    return Status::invalid_argument(
        fmt::format("{}: space-to-depth pads {},{} must be in 0..63.", kWhere, d.pad_top, d.pad_left));
  const PoolAttrs& p = d.pool;
  if (p.kernel != Hw{3, 3} || p.stride != Hw{2, 2} || p.dilation != Hw{1, 1} || p.pads.top != 1 ||
      p.pads.left != 1 || p.pads.bottom < 0 || p.pads.bottom > 1 || p.pads.right < 0 || p.pads.right > 1)
    return Status::invalid_argument(fmt::format(
        "{}: the fused stem pools 3x3, stride 2, pads 1 (end 0 or 1), got {}x{}, stride {}x{}, pads "
        "{},{},{},{}.",
        kWhere, p.kernel.h, p.kernel.w, p.stride.h, p.stride.w, p.pads.top, p.pads.left, p.pads.bottom,
        p.pads.right));
  if (d.out_h != pool_output_size(d.conv_h, 3, 2, 1, 1, p.pads.bottom, p.ceil_mode) ||
      d.out_w != pool_output_size(d.conv_w, 3, 2, 1, 1, p.pads.right, p.ceil_mode))
    return Status::invalid_argument(fmt::format("{}: output {}x{} is not the pooled size of {}x{}.", kWhere,
                                                d.out_h, d.out_w, d.conv_h, d.conv_w));
  if (d.activation != Activation::kRelu)
    return Status::invalid_argument(fmt::format(
        "{}: the fused stem needs a ReLU epilogue (the max pool counts missing pixels as 0).", kWhere));
  if (d.dtype != DataType::kFloat16)
    return Status::invalid_argument(
        fmt::format("{}: dtype {}; the fused stem runs float16 only.", kWhere, dtype_name(d.dtype)));
  const bool q8_out = d.out_dtype == DataType::kInt8 || d.out_dtype == DataType::kFp8E4M3;
  if (d.out_dtype != DataType::kFloat16 && d.out_dtype != DataType::kBFloat16 && !q8_out)
    return Status::invalid_argument(
        fmt::format("{}: output dtype {}; the fused stem writes float16, bfloat16, int8 or fp8e4m3.", kWhere,
                    dtype_name(d.out_dtype)));
  if (q8_out && !(std::isfinite(d.out_scale) && d.out_scale > 0.0f))
    return Status::invalid_argument(fmt::format(
        "{}: output scale {} of an 8-bit output; it must be positive and finite.", kWhere, d.out_scale));
  // 32-bit element offsets inside one image; the batch index is 64-bit.
  if (d.c * d.h * d.w >= (int64_t{1} << 31) || d.out_h * d.out_w * kStemOutChannels >= (int64_t{1} << 31))
    return Status::invalid_argument(fmt::format("{}: an image of 2^31 elements or more.", kWhere));
  // Tiles (at most one per pooled pixel) are numbered in 32 bits, with room for the grid stride.
  if (d.n * d.out_h * d.out_w >= (int64_t{1} << 30))
    return Status::invalid_argument(
        fmt::format("{}: {} pooled pixels over the batch; the fused stem takes fewer than 2^30.", kWhere,
                    d.n * d.out_h * d.out_w));
  return Status::ok();
}

StemRowPlan plan_stem_rows(const FusedStemDesc& d, int64_t consumers) {
  StemRowPlan plan;
  plan.strips = (d.out_w + kStemStripPooled - 1) / kStemStripPooled;
  int64_t best_cost = INT64_MAX;
  for (int64_t chunk_rows = d.out_h; chunk_rows >= 1; --chunk_rows) {
    const int64_t chunks = (d.out_h + chunk_rows - 1) / chunk_rows;
    const int64_t per_consumer = (d.n * plan.strips * chunks + consumers - 1) / consumers;
    if (const int64_t cost = per_consumer * (2 * chunk_rows + 4); cost < best_cost) {
      best_cost = cost;
      plan.chunk_rows = chunk_rows;
    }
  }
  plan.chunks = (d.out_h + plan.chunk_rows - 1) / plan.chunk_rows;
  plan.items = d.n * plan.strips * plan.chunks;
  return plan;
}

Status validate(const GlobalAvgPoolDesc& d) {
  constexpr std::string_view kWhere = "GlobalAvgPoolDesc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "h", d.h));
  GPULAB_TRY(check_positive(kWhere, "w", d.w));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  return check_float_type(kWhere, d.dtype);
}

Status validate(const BinaryDesc& d) {
  constexpr std::string_view kWhere = "BinaryDesc";
  GPULAB_TRY(check_positive(kWhere, "n", d.n));
  GPULAB_TRY(check_positive(kWhere, "hw", d.hw));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  GPULAB_TRY(check_activation(kWhere, d.activation, d.clip_min, d.clip_max));
  return check_float_type(kWhere, d.dtype);
}

Status validate(const BiasActDesc& d) {
  constexpr std::string_view kWhere = "BiasActDesc";
  GPULAB_TRY(check_positive(kWhere, "count", d.count));
  GPULAB_TRY(check_positive(kWhere, "c", d.c));
  if (d.count % d.c != 0) {
    return Status::invalid_argument(
        fmt::format("{}: count {} is not a multiple of c {}. Pass the NHWC tensor's element count.", kWhere,
                    d.count, d.c));
  }
  GPULAB_TRY(check_activation(kWhere, d.activation, d.clip_min, d.clip_max));
  GPULAB_TRY(check_float_type(kWhere, d.dtype));
  if (d.bias_dtype != DataType::kFloat32 && d.bias_dtype != d.dtype) {
    return Status::invalid_argument(fmt::format("{}: bias_dtype {} must be float32 or the tensor's dtype {}.",
                                                kWhere, dtype_name(d.bias_dtype), dtype_name(d.dtype)));
  }
  return Status::ok();
}

Status validate(const UnaryDesc& d) {
  constexpr std::string_view kWhere = "UnaryDesc";
  GPULAB_TRY(check_positive(kWhere, "count", d.count));
  if (d.op == UnaryOp::kClip || d.op == UnaryOp::kFakeQuantize)
    GPULAB_TRY(check_activation(kWhere, Activation::kClip, d.clip_min, d.clip_max));
  if (d.op == UnaryOp::kFakeQuantize && !(d.alpha > 0.0f && std::isfinite(d.alpha) && std::isfinite(d.beta)))
    return Status::invalid_argument(
        fmt::format("{}: fake-quantize scale {} must be positive and finite, zero point "
                    "{} finite.",
                    kWhere, d.alpha, d.beta));
  if (d.op == UnaryOp::kHardSigmoid && (!std::isfinite(d.alpha) || !std::isfinite(d.beta))) {
    return Status::invalid_argument(
        fmt::format("{}: hard-sigmoid alpha {} and beta {} must be finite.", kWhere, d.alpha, d.beta));
  }
  return check_float_type(kWhere, d.dtype);
}

Status validate(const SoftmaxDesc& d) {
  constexpr std::string_view kWhere = "SoftmaxDesc";
  GPULAB_TRY(check_positive(kWhere, "rows", d.rows));
  return check_positive(kWhere, "cols", d.cols);
}

Status validate(const TopKDesc& d) {
  constexpr std::string_view kWhere = "TopKDesc";
  GPULAB_TRY(check_positive(kWhere, "rows", d.rows));
  GPULAB_TRY(check_positive(kWhere, "cols", d.cols));
  if (d.cols > INT32_MAX) {
    return Status::invalid_argument(
        fmt::format("{}: cols {} exceeds the int32 index range. Split the row.", kWhere, d.cols));
  }
  if (d.k < 1 || d.k > kMaxTopK || d.k > d.cols) {
    return Status::invalid_argument(fmt::format(
        "{}: k must be 1..min({}, cols {}) (got {}). Ask for fewer results.", kWhere, kMaxTopK, d.cols, d.k));
  }
  if (d.index_dtype != DataType::kInt32 && d.index_dtype != DataType::kInt64) {
    return Status::invalid_argument(fmt::format("{}: index_dtype {} is not supported. Use int32 or int64.",
                                                kWhere, dtype_name(d.index_dtype)));
  }
  return Status::ok();
}

Status validate(const LinearDesc& d) {
  constexpr std::string_view kWhere = "LinearDesc";
  GPULAB_TRY(check_positive(kWhere, "rows", d.rows));
  GPULAB_TRY(check_positive(kWhere, "in_features", d.in_features));
  GPULAB_TRY(check_positive(kWhere, "out_features", d.out_features));
  GPULAB_TRY(check_float_type(kWhere, d.dtype));
  if (d.out_dtype != DataType::kFloat32 && d.out_dtype != d.dtype) {
    return Status::invalid_argument(fmt::format("{}: out_dtype {} must be float32 or the input dtype {}.",
                                                kWhere, dtype_name(d.out_dtype), dtype_name(d.dtype)));
  }
  return Status::ok();
}

}  // namespace gpulab::kernels
