// The INT8 convolution through CUTLASS's Hopper implicit GEMM (tactics "cutlass-q8:<M>x<N>";
// compiled for sm_90a alone): TMA im2col loads of the activations and the KRSC weights, wgmma
// (s8 x s8 into int32) in a warp-specialized pipeline, and core/quant.h's epilogue written as a
// CUTLASS epilogue visitor tree, so that the bytes are the direct kernel's.
//
// Why: on the H100 quant_mma.cu's mma.sync tiles ran ResNet-18's INT8 3x3 layers at 295-448 TOP/s
// against 1,437 TOP/s for cuBLASLt's INT8 GEMM on wgmma (bench/results/2026-12-06-4feb628), and our
// own wgmma tiles (quant_wgmma_sm90.cu) were slower than mma.sync in their first form
// (bench/results/2026-12-06-58f49a2). CUTLASS's kernels keep the tensor cores fed with TMA and a
// producer warp; tactic timing decides per layer whether they win.
//
// The GEMM, as CUTLASS maps a forward convolution: M = the output pixels (N, P, Q), N = the output
// channels, K = the filter's (C, S, R). The epilogue tree, per output (quant.h's order, every step
// rounded to nearest with __fmul_rn/__fmaf_rn):
//   scaled = fma(float(acc), x_scale * w_scale[k], bias[k])         Q8Scale (w_scale and bias as
//                                                                   per-channel row broadcasts)
//   out    = quantize(act(fma(float(residual), residual_scale, scaled)), 1 / y_scale)   Q8Finish
// the residual is CUTLASS's C operand (the output's shape, int8), loaded only for a layer that has
// one (Q8ResidualFetch). Q8Finish returns the quantized value as an integral float in [-128, 127],
// so the conversion to int8 that follows is exact.
//
// What it runs: INT8 x, weights, residual and y; groups 1; c and k multiples of 16 (TMA wants
// 16-byte rows); any stride, dilation and padding (the TMA im2col unit masks the border). Every
// tile is checked by CUTLASS's can_implement before launch.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/kernels/quant.cuh"
#include "backends/cuda/kernels/quant_mma.cuh"
// First, in a block of its own: CUTLASS 4.2's conv collective builder uses
// cutlass::KernelHardwareInfo without including its header.
#include "cutlass/kernel_hardware_info.hpp"

#include "cute/tensor.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp"

namespace gpulab::kernels::q8mma {
namespace {

using namespace cute;
using cutlass::epilogue::fusion::Sm90AccFetch;
using cutlass::epilogue::fusion::Sm90Compute;
using cutlass::epilogue::fusion::Sm90EVT;
using cutlass::epilogue::fusion::Sm90RowBroadcast;

constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// fma(float(acc), x_scale * w_scale, bias), elementwise: q8_epilogue's first step.
struct Q8ScaleArgs {
  float x_scale = 1.0f;
};
template <class T>
struct Q8Scale {
  using Arguments = Q8ScaleArgs;
  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& w_scale,
                                                     cutlass::Array<float, N> const& bias,
                                                     Arguments const& a) const {
    cutlass::Array<float, N> v;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) v[i] = __fmaf_rn(acc[i], __fmul_rn(a.x_scale, w_scale[i]), bias[i]);
    return v;
  }
};

// + residual * residual_scale (when the layer has one), the activation, then quantize_int8 at
// inv_y, as an integral float.
struct Q8FinishArgs {
  bool has_residual = false;
  float residual_scale = 1.0f;
  ActParams act{Activation::kNone, 0.0f, 0.0f};
  float inv_y = 1.0f;
};
template <class T>
struct Q8Finish {
  using Arguments = Q8FinishArgs;
  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& scaled,
                                                     cutlass::Array<float, N> const& residual,
                                                     Arguments const& a) const {
    cutlass::Array<float, N> q;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      float v = scaled[i];
      if (a.has_residual) v = __fmaf_rn(residual[i], a.residual_scale, v);
      q[i] = static_cast<float>(quantize_int8(apply_act(v, a.act), a.inv_y));
    }
    return q;
  }
};

// The C operand (the residual), loaded only when `load` is set: a layer without a residual reads
// nothing (CUTLASS's own source fetch loads C whenever its type is not void).
struct Q8ResidualFetch {
  struct SharedStorage {};
  struct Arguments {
    bool load = false;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Q8ResidualFetch() {}
  CUTLASS_HOST_DEVICE Q8ResidualFetch(Params const& params, SharedStorage const&) : params(params) {}
  Params params;

  CUTLASS_DEVICE bool is_producer_load_needed() const { return params.load; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return params.load; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(
      cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class SrcTensor>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE explicit ConsumerStoreCallbacks(SrcTensor const& tCrC) : tCrC(tCrC) {}
    SrcTensor const& tCrC;  // (CPY, CPY_M, CPY_N): the C tile in registers (zeros when not loaded)
    template <typename ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<typename SrcTensor::value_type, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int, int) {
      return recast<cutlass::Array<typename SrcTensor::value_type, FragmentSize>>(tCrC)(epi_v);
    }
  };
  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    if (!params.load) cute::clear(args.tCrC);
    return ConsumerStoreCallbacks<cute::remove_cvref_t<decltype(args.tCrC)>>(args.tCrC);
  }
};

template <int BM, int BN>
struct CutlassQ8Conv {
  // K: 128 bytes (four k32 wgmma steps), a one-mode shape as CUTLASS tiles the (C, S, R) mode.
  using TileShape = cute::Shape<Int<BM>, Int<BN>, cute::Shape<_128>>;
  using ClusterShape = cute::Shape<_1, _1, _1>;
  static constexpr auto kOp = cutlass::conv::Operator::kFprop;
  using Layout = cutlass::layout::TensorNHWC;

  // Per-channel vectors along the GEMM's N (a null bias reads as 0, q8_epilogue's bias of a layer
  // without one).
  using ChannelVector = Sm90RowBroadcast<0, TileShape, float, float, cute::Stride<_0, _1, int64_t>>;
  using Scaled =
      Sm90EVT<Sm90Compute<Q8Scale, float, float, kRound>, Sm90AccFetch, ChannelVector, ChannelVector>;
  using Tree = Sm90EVT<Sm90Compute<Q8Finish, int8_t, float, kRound>, Scaled, Q8ResidualFetch>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, int8_t, Layout, 16, int8_t, Layout, 16,
      cutlass::epilogue::TmaWarpSpecialized, Tree>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, kOp, int8_t, Layout, 16, int8_t, Layout, 16,
      int32_t, TileShape, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
  using Problem = cutlass::conv::ConvProblemShape<kOp, 2>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
  using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
};

template <class T>
Status launch_as(const Q8ConvDesc& d, const MmaParams& p, const uint8_t* x, const uint8_t* w,
                 const float* w_scale, const float* bias, const uint8_t* residual, uint8_t* y,
                 cudaStream_t stream) {
  using Conv = typename T::Conv;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  const typename T::Problem problem(cutlass::conv::Mode::kCrossCorrelation, {i(d.n), i(d.h), i(d.w), i(d.c)},
                                    {i(d.k), i(d.r), i(d.s), i(d.c)}, {i(d.pads.top), i(d.pads.left)},
                                    {i(d.pads.bottom), i(d.pads.right)}, {i(d.stride.h), i(d.stride.w)},
                                    {i(d.dilation.h), i(d.dilation.w)}, 1);
  if (problem.shape_C[1] != d.out_h || problem.shape_C[2] != d.out_w)
    return Status::unsupported("launch_q8_mma_conv: the CUTLASS tiles' output size from the pads differs.");

  typename Conv::Arguments args{};
  args.problem_shape = problem;
  args.mainloop.ptr_A = reinterpret_cast<const int8_t*>(x);
  args.mainloop.ptr_B = reinterpret_cast<const int8_t*>(w);
  // C (the residual) and D share the output's NHWC strides. Without a residual C points at y and
  // is never read (Q8ResidualFetch).
  args.epilogue.ptr_C = reinterpret_cast<const int8_t*>(residual ? residual : y);
  args.epilogue.ptr_D = reinterpret_cast<int8_t*>(y);
  using Stride = typename Conv::ConvKernel::StrideC;
  static_assert(std::is_same_v<Stride, typename Conv::ConvKernel::StrideD>);
  Stride stride{};
  cute::for_each(cute::make_seq<cute::rank<0>(Stride{})>{},
                 [&](auto r) { cute::get<0, r>(stride) = problem.stride_C[T::Problem::RankT - 2 - r]; });
  args.epilogue.dC = stride;
  args.epilogue.dD = stride;
  // The tree's arguments, nested as the tree: {{acc, w_scale, bias, Q8Scale}, residual, Q8Finish}.
  args.epilogue.thread = {
      {{}, {w_scale}, {bias}, Q8ScaleArgs{p.x_scale}},
      {residual != nullptr},
      Q8FinishArgs{residual != nullptr, p.residual_scale, p.act, p.inv_y},
  };

  Conv conv;
  if (conv.can_implement(args) != cutlass::Status::kSuccess)
    return Status::unsupported("launch_q8_mma_conv: CUTLASS's kernel cannot run this layer (can_implement).");
  if (Conv::get_workspace_size(args) != 0)
    return Status::unsupported("launch_q8_mma_conv: the CUTLASS tile would need a workspace.");
  if (conv.initialize(args, nullptr, stream) != cutlass::Status::kSuccess)
    return Status::internal("launch_q8_mma_conv: CUTLASS's initialize failed.");
  const cutlass::Status ran = conv.run(stream);
  GPULAB_TRY(check_launch("launch_q8_mma_conv", "CUTLASS's INT8 implicit GEMM"));
  if (ran != cutlass::Status::kSuccess)
    return Status::internal(std::string("launch_q8_mma_conv: CUTLASS's run failed: ") +
                            cutlassGetStatusString(ran));
  return Status::ok();
}

using Tile64x128 = CutlassQ8Conv<64, 128>;
using Tile128x128 = CutlassQ8Conv<128, 128>;
using Tile64x256 = CutlassQ8Conv<64, 256>;

}  // namespace

Status launch_q8_cutlass(size_t tile, const Q8ConvDesc& d, const MmaParams& p, const uint8_t* x,
                         const uint8_t* w, const float* w_scale, const float* bias, const uint8_t* residual,
                         uint8_t* y, cudaStream_t stream) {
  GPULAB_TRY(check_sm90("the CUTLASS tiles"));
  switch (tile) {
    case 0: return launch_as<Tile64x128>(d, p, x, w, w_scale, bias, residual, y, stream);
    case 1: return launch_as<Tile128x128>(d, p, x, w, w_scale, bias, residual, y, stream);
    default: return launch_as<Tile64x256>(d, p, x, w, w_scale, bias, residual, y, stream);
  }
}

}  // namespace gpulab::kernels::q8mma
