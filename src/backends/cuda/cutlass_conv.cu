#include "backends/cuda/cutlass_conv.h"

#include <algorithm>
#include <array>
#include <climits>
#include <limits>
#include <string>

#include "backends/cuda/kernels/kernel_desc.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination_relu.h"

namespace gpulab::cuda {
namespace {

using Half = cutlass::half_t;
using Nhwc = cutlass::layout::TensorNHWC;

// D = max(threshold, acc + C) with C the bias broadcast over pixels; threshold -inf when the
// layer has no activation, 0 for ReLU. Eight halves (16 bytes) per access.
using Epilogue = cutlass::epilogue::thread::LinearCombinationRelu<Half, 8, float, float>;

// Ampere-style mma.sync kernels (they run on sm_80 and every later GPU) with the few-channels
// activation iterator; only the threadblock tile, warp tile and pipeline depth vary.
template <int M, int N, int K, int WarpM, int WarpN, int Stages>
using FewChannelsConv =
    cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
        Half, Nhwc, Half, Nhwc, Half, Nhwc, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
        cutlass::gemm::GemmShape<M, N, K>, cutlass::gemm::GemmShape<WarpM, WarpN, K>,
        cutlass::gemm::GemmShape<16, 8, 16>, Epilogue,
        cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>, Stages, cutlass::arch::OpMultiplyAdd,
        cutlass::conv::IteratorAlgorithm::kFewChannels, cutlass::conv::StrideSupport::kStrided, 8,
        8>::Kernel>;

using Tile128x64x32 = FewChannelsConv<128, 64, 32, 64, 32, 4>;
using Tile128x64x64 = FewChannelsConv<128, 64, 64, 64, 32, 3>;
using Tile256x64x32 = FewChannelsConv<256, 64, 32, 64, 64, 3>;

constexpr std::array<std::string_view, 3> kTactics = {"cutlass:128x64x32_s4", "cutlass:128x64x64_s3",
                                                      "cutlass:256x64x32_s3"};

cutlass::conv::Conv2dProblemSize problem_of(const DirectConvDesc& d) {
  const auto& a = d.attrs;
  // CUTLASS pads symmetrically: with the begin pads and the real output size, reads past the end
  // (pads.bottom/right <= top/left, checked) fall outside the input and are masked to zero.
  return cutlass::conv::Conv2dProblemSize(
      static_cast<int>(d.n), static_cast<int>(d.h), static_cast<int>(d.w), static_cast<int>(d.c),
      static_cast<int>(d.k), static_cast<int>(a.kernel.h), static_cast<int>(a.kernel.w),
      static_cast<int>(d.out_h), static_cast<int>(d.out_w), static_cast<int>(a.pads.top),
      static_cast<int>(a.pads.left), static_cast<int>(a.stride.h), static_cast<int>(a.stride.w), 1, 1,
      cutlass::conv::Mode::kCrossCorrelation);
}

template <typename Conv>
Status run(const DirectConvDesc& d, const void* x, const void* weight, const void* bias, void* y,
           cudaStream_t stream) {
  const cutlass::conv::Conv2dProblemSize problem = problem_of(d);
  const float threshold =
      d.attrs.activation == Activation::kRelu ? 0.0f : -std::numeric_limits<float>::infinity();
  auto* x_ptr = static_cast<Half*>(const_cast<void*>(x));
  auto* w_ptr = static_cast<Half*>(const_cast<void*>(weight));
  auto* y_ptr = static_cast<Half*>(y);
  // The bias as C with every stride 0: the epilogue reads the same k values for every pixel.
  // Without a bias, beta 0 makes the epilogue skip C.
  auto* c_ptr = bias ? static_cast<Half*>(const_cast<void*>(bias)) : y_ptr;
  const Nhwc c_layout =
      bias ? Nhwc(Nhwc::Stride(0)) : Nhwc::packed({problem.N, problem.P, problem.Q, problem.K});
  typename Conv::Arguments args(problem, {x_ptr, Nhwc::packed({problem.N, problem.H, problem.W, problem.C})},
                                {w_ptr, Nhwc::packed({problem.K, problem.R, problem.S, problem.C})},
                                {c_ptr, c_layout},
                                {y_ptr, Nhwc::packed({problem.N, problem.P, problem.Q, problem.K})},
                                typename Epilogue::Params(1.0f, bias ? 1.0f : 0.0f, threshold));
  Conv conv;
  cutlass::Status s = Conv::can_implement(args);
  if (s != cutlass::Status::kSuccess)
    return Status::unsupported(std::string("cutlass_conv: CUTLASS cannot run ") + describe(d) + ": " +
                               cutlass::cutlassGetStatusString(s) + ".");
  s = conv.initialize(args, nullptr, stream);
  if (s == cutlass::Status::kSuccess) s = conv.run(stream);
  if (s != cutlass::Status::kSuccess) {
    const cudaError_t e = cudaGetLastError();
    return Status::internal(std::string("cutlass_conv: launch failed for ") + describe(d) + ": " +
                            cutlass::cutlassGetStatusString(s) + " (" + cudaGetErrorString(e) + ").");
  }
  return Status::ok();
}

}  // namespace

std::span<const std::string_view> cutlass_conv_tactics() {
  return kTactics;
}

Status validate_cutlass_conv(const DirectConvDesc& d) {
  const auto& a = d.attrs;
  if (d.dtype != DataType::kFloat16 || d.bias_float32 || input_dtype(d) != d.dtype)
    return Status::unsupported("cutlass_conv: float16 storage (x too) with a float16 bias only, not " +
                               std::string(dtype_name(d.dtype)) +
                               (d.bias_float32 ? " with a float32 bias" : "") + ".");
  if (a.groups != 1 || a.dilation.h != 1 || a.dilation.w != 1)
    return Status::unsupported("cutlass_conv: groups and dilation must be 1 " + describe(d) + ".");
  if (d.c % 8 || d.k % 8 || d.c > kCutlassMaxChannels)
    return Status::unsupported("cutlass_conv: needs c and k multiples of 8 and c <= " +
                               std::to_string(kCutlassMaxChannels) + " " + describe(d) + ".");
  if (a.has_residual || (a.activation != Activation::kNone && a.activation != Activation::kRelu))
    return Status::unsupported("cutlass_conv: no residual, activation none or ReLU only " + describe(d) +
                               ".");
  const int64_t sizes[] = {d.n, d.h, d.w, d.out_h, d.out_w, a.kernel.h, a.kernel.w, a.stride.h, a.stride.w};
  for (int64_t v : sizes)
    if (v < 1 || v > INT_MAX)
      return Status::invalid_argument("cutlass_conv: every size and stride must be in 1.." +
                                      std::to_string(INT_MAX) + " " + describe(d) + ".");
  if (a.pads.top < 0 || a.pads.left < 0 || a.pads.bottom > a.pads.top || a.pads.right > a.pads.left)
    return Status::unsupported("cutlass_conv: pads must be >= 0 and no larger at the end than at the start " +
                               describe(d) + ".");
  // A convolution's output size is a floor-mode pooling window's.
  if (d.out_h !=
          kernels::pool_output_size(d.h, a.kernel.h, a.stride.h, 1, a.pads.top, a.pads.bottom, false) ||
      d.out_w != kernels::pool_output_size(d.w, a.kernel.w, a.stride.w, 1, a.pads.left, a.pads.right, false))
    return Status::invalid_argument("cutlass_conv: output size differs from the convolution's " +
                                    describe(d) + ".");
  // CUTLASS indexes each tensor with 32-bit byte offsets.
  constexpr double kLimit = static_cast<double>(1u << 31);
  const double bytes[] = {2.0 * d.n * d.h * d.w * d.c, 2.0 * d.n * d.out_h * d.out_w * d.k,
                          2.0 * d.k * a.kernel.h * a.kernel.w * d.c};
  if (*std::max_element(std::begin(bytes), std::end(bytes)) >= kLimit)
    return Status::unsupported("cutlass_conv: a tensor of 2 GiB or more " + describe(d) + ".");
  return Status::ok();
}

bool cutlass_conv_supports(const DirectConvDesc& desc) {
  return validate_cutlass_conv(desc).is_ok();
}

Status launch_cutlass_conv(std::string_view tactic, const DirectConvDesc& d, const void* x,
                           const void* weight, const void* bias, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate_cutlass_conv(d));
  if (tactic == kTactics[0]) return run<Tile128x64x32>(d, x, weight, bias, y, stream);
  if (tactic == kTactics[1]) return run<Tile128x64x64>(d, x, weight, bias, y, stream);
  if (tactic == kTactics[2]) return run<Tile256x64x32>(d, x, weight, bias, y, stream);
  return Status::invalid_argument("cutlass_conv: unknown tactic \"" + std::string(tactic) + "\".");
}

}  // namespace gpulab::cuda
