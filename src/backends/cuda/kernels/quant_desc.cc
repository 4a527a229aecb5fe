#include "backends/cuda/kernels/quant_desc.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>

namespace gpulab::kernels {

namespace {

Status bad(const char* desc, const std::string& what) {
  return Status::invalid_argument(fmt::format("{}: {}", desc, what));
}

bool scale_ok(float scale) {
  return scale > 0.0f && std::isfinite(scale);
}

}  // namespace

bool is_kernel_8bit_type(DataType dtype) {
  return dtype == DataType::kInt8 || dtype == DataType::kFp8E4M3;
}

Status validate(const QuantizeInputDesc& desc) {
  SpaceToDepthDesc layout = desc.layout;
  layout.dtype = DataType::kFloat32;
  GPULAB_TRY(validate(layout));
  if (!is_kernel_8bit_type(desc.dtype))
    return bad("QuantizeInputDesc", fmt::format("dtype {} is not int8 or fp8e4m3", dtype_name(desc.dtype)));
  if (!scale_ok(desc.scale)) return bad("QuantizeInputDesc", fmt::format("scale {}", desc.scale));
  return Status::ok();
}

Status validate(const QuantCastDesc& desc) {
  if (desc.count < 1) return bad("QuantCastDesc", fmt::format("count {}", desc.count));
  const bool dequantize = is_kernel_8bit_type(desc.from) && is_kernel_float_type(desc.to);
  const bool quantize = is_kernel_float_type(desc.from) && is_kernel_8bit_type(desc.to);
  if (!dequantize && !quantize)
    return bad("QuantCastDesc", fmt::format("a cast from {} to {} is not between an 8-bit and a float type",
                                            dtype_name(desc.from), dtype_name(desc.to)));
  if (!scale_ok(desc.scale)) return bad("QuantCastDesc", fmt::format("scale {}", desc.scale));
  return Status::ok();
}

Status validate(const Q8ConvDesc& d) {
  const char* name = "Q8ConvDesc";
  if (d.n < 1 || d.h < 1 || d.w < 1 || d.c < 1 || d.k < 1 || d.r < 1 || d.s < 1 || d.out_h < 1 || d.out_w < 1)
    return bad(name, fmt::format("sizes n {} h {} w {} c {} k {} r {} s {} out {}x{} must be positive", d.n,
                                 d.h, d.w, d.c, d.k, d.r, d.s, d.out_h, d.out_w));
  if (d.stride.h < 1 || d.stride.w < 1 || d.dilation.h < 1 || d.dilation.w < 1 || d.pads.top < 0 ||
      d.pads.left < 0 || d.pads.bottom < 0 || d.pads.right < 0)
    return bad(name, "strides and dilations must be positive, pads not negative");
  if (d.groups < 1 || d.c % d.groups != 0 || d.k % d.groups != 0)
    return bad(name, fmt::format("{} groups do not divide c {} and k {}", d.groups, d.c, d.k));
  const int64_t want_h = (d.h + d.pads.top + d.pads.bottom - d.dilation.h * (d.r - 1) - 1) / d.stride.h + 1;
  const int64_t want_w = (d.w + d.pads.left + d.pads.right - d.dilation.w * (d.s - 1) - 1) / d.stride.w + 1;
  if (want_h != d.out_h || want_w != d.out_w)
    return bad(name, fmt::format("output {}x{} differs from the convolution's {}x{}", d.out_h, d.out_w,
                                 want_h, want_w));
  if (!is_kernel_8bit_type(d.x_dtype))
    return bad(name, fmt::format("x dtype {} is not int8 or fp8e4m3", dtype_name(d.x_dtype)));
  if (!is_kernel_8bit_type(d.y_dtype) && !is_kernel_float_type(d.y_dtype))
    return bad(name, fmt::format("y dtype {}", dtype_name(d.y_dtype)));
  if (is_kernel_8bit_type(d.y_dtype) && d.y_dtype != d.x_dtype)
    return bad(name, fmt::format("x is {}, y {}: one 8-bit type per plan", dtype_name(d.x_dtype),
                                 dtype_name(d.y_dtype)));
  if (!scale_ok(d.x_scale) || !scale_ok(d.y_scale) || (d.has_residual && !scale_ok(d.residual_scale)))
    return bad(name, fmt::format("scales x {} y {} residual {}", d.x_scale, d.y_scale, d.residual_scale));
  if (d.activation == Activation::kClip && !(d.clip_min <= d.clip_max))
    return bad(name, fmt::format("clip [{}, {}]", d.clip_min, d.clip_max));
  return Status::ok();
}

Status validate_q8_mma(const Q8ConvDesc& d) {
  GPULAB_TRY(validate(d));
  const auto no = [&d](const std::string& why) {
    return Status::unsupported(
        fmt::format("the tensor-core 8-bit convolution runs {}; this layer has c {}, k "
                    "{}, groups {}, {}x{} output",
                    why, d.c, d.k, d.groups, d.out_h, d.out_w));
  };
  if (d.groups != 1) return no("groups 1 only (depthwise layers run on the direct kernel)");
  if (d.c % 8 != 0) return no("a multiple of 8 input channels only");
  constexpr int64_t kMax = INT_MAX;
  const int64_t pixels = d.n * d.out_h * d.out_w;
  if (d.h * d.w * d.c > kMax || d.r * d.s * d.c > kMax || d.k > kMax ||
      d.out_h * d.stride.h + d.r * d.dilation.h > kMax || d.out_w * d.stride.w + d.s * d.dilation.w > kMax ||
      d.pads.top > kMax || d.pads.left > kMax || (pixels + 127) / 128 > kMax || (d.k + 63) / 64 > 65535)
    return no("sizes whose indices fit in int32 only");
  return Status::ok();
}

Status validate_q8_max_pool(const PoolDesc& desc) {
  PoolDesc as_float = desc;
  as_float.dtype = DataType::kFloat32;
  GPULAB_TRY(validate(as_float));
  if (desc.kind != PoolKind::kMax) return bad("PoolDesc", "8-bit pooling is max pooling only");
  if (!is_kernel_8bit_type(desc.dtype))
    return bad("PoolDesc", fmt::format("dtype {} is not int8 or fp8e4m3", dtype_name(desc.dtype)));
  return Status::ok();
}

Status validate(const Q8GlobalPoolDesc& d) {
  if (d.n < 1 || d.h < 1 || d.w < 1 || d.c < 1)
    return bad("Q8GlobalPoolDesc", fmt::format("sizes {}x{}x{}x{}", d.n, d.h, d.w, d.c));
  if (!is_kernel_8bit_type(d.x_dtype))
    return bad("Q8GlobalPoolDesc", fmt::format("x dtype {}", dtype_name(d.x_dtype)));
  if (!is_kernel_8bit_type(d.y_dtype) && !is_kernel_float_type(d.y_dtype))
    return bad("Q8GlobalPoolDesc", fmt::format("y dtype {}", dtype_name(d.y_dtype)));
  if (!scale_ok(d.x_scale) || (is_kernel_8bit_type(d.y_dtype) && !scale_ok(d.y_scale)))
    return bad("Q8GlobalPoolDesc", fmt::format("scales x {} y {}", d.x_scale, d.y_scale));
  return Status::ok();
}

}  // namespace gpulab::kernels
