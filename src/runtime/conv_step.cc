#include "runtime/conv_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <span>

#include "backends/cuda/cutlass_conv.h"
#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/quant_kernels.h"
#include "backends/cuda/wgmma_conv.h"
#include "gpulab/tensor.h"
#include "runtime/step_problems.h"

namespace gpulab {

std::optional<ChunkedTactic> parse_chunked_tactic(std::string_view tactic) {
  if (!tactic.starts_with(kChunkTacticPrefix)) return std::nullopt;
  const std::string_view rest = tactic.substr(kChunkTacticPrefix.size());
  const size_t colon = rest.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  ChunkedTactic parsed;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + colon, parsed.chunk);
  if (error != std::errc() || end != rest.data() + colon || parsed.chunk < 1) return std::nullopt;
  parsed.inner = rest.substr(colon + 1);
  if (!parsed.inner.starts_with("cudnn:") && !parsed.inner.starts_with("cudnn-unfused:")) return std::nullopt;
  return parsed;
}

std::string chunked_tactic(int64_t chunk, std::string_view inner) {
  return fmt::format("{}{}:{}", kChunkTacticPrefix, chunk, inner);
}

Q8BatchTactics split_q8_tactic(std::string_view tactic) {
  const size_t mark = tactic.find(kQ8SmallBatchMark);
  if (mark == std::string_view::npos) return {tactic, 0, {}};
  Q8BatchTactics out{tactic.substr(0, mark), -1, {}};
  const std::string_view rest = tactic.substr(mark + kQ8SmallBatchMark.size());
  const size_t colon = rest.find(':');
  int64_t limit = 0;
  if (colon == std::string_view::npos) return out;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + colon, limit);
  if (error != std::errc() || end != rest.data() + colon || limit < 1) return out;
  out.small_limit = limit;
  out.small = rest.substr(colon + 1);
  return out;
}

std::string q8_tactic_with_small_batch(std::string_view main, int64_t small_limit, std::string_view small) {
  return fmt::format("{}{}{}:{}", main, kQ8SmallBatchMark, small_limit, small);
}

std::string_view q8_tactic_for_batch(std::string_view tactic, int64_t batch) {
  const Q8BatchTactics t = split_q8_tactic(tactic);
  return t.small_limit > 0 && batch <= t.small_limit ? t.small : t.main;
}

ConvKernel conv_kernel_of_tactic(std::string_view full) {
  // An 8-bit tactic with a small-batch tactic is of its main tactic's kind.
  const std::string_view tactic = split_q8_tactic(full).main;
  if (tactic == kDirectTactic) return ConvKernel::kDirect;
  if (tactic == kDepthwiseTactic) return ConvKernel::kDepthwise;
  if (tactic == kQ8DirectTactic) return ConvKernel::kQ8Direct;
  if (is_q8_mma_tactic(tactic)) return ConvKernel::kQ8Mma;
  if (is_q8_cudnn_tactic(tactic)) return ConvKernel::kQ8Cudnn;
  if (tactic.starts_with(kCutlassTacticPrefix)) return ConvKernel::kCutlass;
  if (tactic.starts_with(cuda::kWgmmaConvTacticPrefix)) return ConvKernel::kWgmma3x3;
  return ConvKernel::kCudnn;
}

Status check_conv_tactic(std::string_view tactic) {
  const auto known = [](std::span<const std::string_view> names, std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const ConvKernel kernel = conv_kernel_of_tactic(tactic);
  const Q8BatchTactics q8 = split_q8_tactic(tactic);
  if (q8.small_limit != 0) {
    const bool small_known = q8.small == kQ8DirectTactic || known(kernels::q8_mma_tactics(), q8.small);
    if (q8.small_limit < 0 || !small_known || !is_q8_single_tactic(q8.main))
      return Status::unsupported(fmt::format(
          "conv: tactic \"{}\" is not \"<8-bit tactic>{}<images>:<tile or {}>\" with a tile this gpulab has.",
          tactic, kQ8SmallBatchMark, kQ8DirectTactic));
    return check_conv_tactic(q8.main);
  }
  if ((kernel == ConvKernel::kCutlass && !known(cuda::cutlass_conv_tactics(), tactic)) ||
      (kernel == ConvKernel::kWgmma3x3 && !known(cuda::wgmma_conv_tactics(), tactic)) ||
      (kernel == ConvKernel::kQ8Mma && !known(kernels::q8_mma_tactics(), tactic)))
    return Status::unsupported(fmt::format(
        "conv: tactic \"{}\" is not a kernel this gpulab has (chosen by another gpulab version).", tactic));
  if (tactic.starts_with(kChunkTacticPrefix) && !parse_chunked_tactic(tactic))
    return Status::unsupported(fmt::format(
        "conv: tactic \"{}\" is not \"chunk<images>:<cuDNN tactic>\" (a damaged plan or timing cache?).",
        tactic));
  return Status::ok();
}

ConvKernel conv_kernel_for(std::string_view tactic, const cuda::CudnnConv* conv) {
  const ConvKernel kernel = conv_kernel_of_tactic(tactic);
  return kernel == ConvKernel::kCudnn && !conv ? ConvKernel::kDirect : kernel;
}

Result<std::unique_ptr<cuda::CudnnConv>> prepare_cudnn_conv(cudnnHandle_t handle,
                                                            const cuda::ConvProblem& problem,
                                                            std::string_view tactic) {
  Result<std::unique_ptr<cuda::CudnnConv>> conv = Status::unsupported("no tactic");
  if (tactic.starts_with("cudnn")) conv = cuda::CudnnConv::with_tactic(handle, problem, std::string(tactic));
  const bool unfused = tactic.starts_with("cudnn-unfused:");
  if (!conv.is_ok()) {
    auto form = problem;
    form.fused = !unfused;
    conv = cuda::CudnnConv::with_heuristic_choice(handle, form);
  }
  if (!conv.is_ok() && !unfused) {
    auto form = problem;
    form.fused = false;
    conv = cuda::CudnnConv::with_heuristic_choice(handle, form);
  }
  return conv;
}

Status launch_conv_step(const cuda::ConvProblem& p, ConvKernel kernel, std::string_view tactic,
                        const cuda::CudnnConv* conv, cudnnHandle_t handle, const cuda::ConvPointers& ptrs,
                        void* workspace, cudaStream_t stream) {
  const void* bias = p.has_bias ? ptrs.bias : nullptr;  // the own kernels add a non-null bias
  switch (kernel) {
    case ConvKernel::kDirect:
      return cuda::launch_direct_conv(direct_conv_desc(p), ptrs.x, ptrs.w, bias, ptrs.residual, ptrs.y,
                                      stream);
    case ConvKernel::kDepthwise:
      return cuda::launch_depthwise_conv(direct_conv_desc(p), ptrs.x, ptrs.w, bias, ptrs.residual, ptrs.y,
                                         stream);
    case ConvKernel::kCutlass:
      return cuda::launch_cutlass_conv(tactic, direct_conv_desc(p), ptrs.x, ptrs.w, bias, ptrs.y, stream);
    case ConvKernel::kWgmma3x3:
      return cuda::launch_wgmma_conv(tactic, direct_conv_desc(p), ptrs.x, ptrs.w, bias, ptrs.residual, ptrs.y,
                                     stream);
    case ConvKernel::kQ8Direct:
    case ConvKernel::kQ8Mma:
    case ConvKernel::kQ8Cudnn:
      return Status::internal("launch_conv_step: an INT8/FP8 step runs through enqueue_q8_layer, not here.");
    case ConvKernel::kCudnn: break;
  }
  if (!conv) return Status::internal("launch_conv_step: a cuDNN step without a cuDNN plan.");
  GPULAB_TRY(conv->launch(handle, ptrs, workspace));
  if (conv->fused()) return Status::ok();
  // y = act(conv + bias + residual), one kernel per term in place on y.
  const auto& a = p.attrs;
  const int64_t count = p.n * p.out_h * p.out_w * p.k;
  if (p.has_bias) {
    kernels::BiasActDesc d;
    d.count = count;
    d.c = p.k;
    d.activation = a.has_residual ? Activation::kNone : a.activation;
    d.clip_min = a.clip_min;
    d.clip_max = a.clip_max;
    d.dtype = p.dtype;
    d.bias_dtype = p.bias_float32 ? DataType::kFloat32 : p.dtype;
    GPULAB_TRY(kernels::launch_bias_act(d, ptrs.y, ptrs.bias, ptrs.y, stream));
  }
  if (a.has_residual) {
    kernels::BinaryDesc d;
    d.op = kernels::BinaryOp::kAdd;
    d.n = p.n;
    d.hw = p.out_h * p.out_w;
    d.c = p.k;
    d.activation = a.activation;
    d.clip_min = a.clip_min;
    d.clip_max = a.clip_max;
    d.dtype = p.dtype;
    GPULAB_TRY(kernels::launch_binary(d, ptrs.y, ptrs.residual, ptrs.y, stream));
  } else if (!p.has_bias && a.activation != Activation::kNone) {
    kernels::UnaryDesc d;
    d.op = a.activation == Activation::kClip ? kernels::UnaryOp::kClip : kernels::UnaryOp::kRelu;
    d.count = count;
    d.clip_min = a.clip_min;
    d.clip_max = a.clip_max;
    d.dtype = p.dtype;
    GPULAB_TRY(kernels::launch_unary(d, ptrs.y, ptrs.y, stream));
  }
  return Status::ok();
}

Status launch_chunked_conv_step(const cuda::ConvProblem& problem, int64_t chunk, const cuda::CudnnConv& full,
                                const cuda::CudnnConv* tail, cudnnHandle_t handle,
                                const cuda::ConvPointers& ptrs, void* workspace, cudaStream_t stream) {
  const ChunkSplit split = split_batch(problem.n, chunk);
  if (split.tail > 0 && !tail)
    return Status::internal("launch_chunked_conv_step: a remainder without a cuDNN plan for it.");
  const int64_t x_image_bytes = problem.c * problem.h * problem.w *
                                static_cast<int64_t>(dtype_size(problem.x_dtype.value_or(problem.dtype)));
  const int64_t y_image_bytes =
      problem.k * problem.out_h * problem.out_w * static_cast<int64_t>(dtype_size(problem.dtype));
  cuda::ConvProblem part = problem;
  for (int64_t i = 0, first = 0; i <= split.full; ++i, first += chunk) {
    part.n = i < split.full ? chunk : split.tail;
    if (part.n == 0) break;
    cuda::ConvPointers p = ptrs;
    p.x = static_cast<const char*>(ptrs.x) + first * x_image_bytes;
    if (ptrs.residual) p.residual = static_cast<const char*>(ptrs.residual) + first * y_image_bytes;
    p.y = static_cast<char*>(ptrs.y) + first * y_image_bytes;
    GPULAB_TRY(launch_conv_step(part, ConvKernel::kCudnn, {}, i < split.full ? &full : tail, handle, p,
                                workspace, stream));
  }
  return Status::ok();
}

std::string q8_shape_key(const kernels::Q8ConvDesc& d, bool gemm, bool has_bias) {
  return fmt::format(
      "{} n{} {}x{}x{} k{} {}x{} out {}x{} stride {}x{} dilation {}x{} pads {},{},{},{} groups {} {}->{} "
      "residual {} activation {} bias {}",
      gemm ? "gemm" : "conv", d.n, d.h, d.w, d.c, d.k, d.r, d.s, d.out_h, d.out_w, d.stride.h, d.stride.w,
      d.dilation.h, d.dilation.w, d.pads.top, d.pads.left, d.pads.bottom, d.pads.right, d.groups,
      dtype_name(d.x_dtype), dtype_name(d.y_dtype), d.has_residual, static_cast<int>(d.activation), has_bias);
}

}  // namespace gpulab
