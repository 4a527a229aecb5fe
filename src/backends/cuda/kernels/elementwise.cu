/* Elementwise fallbacks for what the planner did not fuse into a convolution's epilogue:
 *   binary:   y = act(a + b) or act(a * b), b of a's shape or N,1,1,C broadcast over H*W;
 *   bias_act: y = act(x + bias[c]) over NHWC;
 *   unary:    relu, clip, sigmoid, hard-sigmoid, hard-swish, gelu (erf and tanh forms), tanh, erf,
 *             sqrt, exp, neg;
 *   lcg_lanes: the bench input's pseudo-random sequence, one lane of it per thread (kernels.h).
 * Algorithm: one pass, float32 arithmetic, one rounding to the storage type at the store.
 * Layout: dense NHWC (C innermost). V = 16 bytes / sizeof(T) elements per thread and iteration
 *   (one 16-byte load per operand) when C (binary, bias_act) or the count (unary) is a multiple of
 *   V and the pointers are 16-byte aligned, else V = 1. In-place (y == a or y == x) is safe: each
 *   element is read and written by the same thread.
 * Launch: grid-stride loop over count / V items, 256 threads per block.
 * Tolerance vs the reference: float32 within 1e-6 relative (sigmoid uses expf, not __expf);
 *   float16/bfloat16 within the rounding of the stored result.
 */
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

template <typename T, int V, BinaryOp kOp>
__global__ void binary_kernel(const T* a, const T* b, T* y, int64_t vecs, int64_t hw_c, int64_t c,
                              bool broadcast, ActParams act) {
  using VecT = Vec<T, V>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * V;  // first element
    const int64_t be = broadcast ? (e / hw_c) * c + e % c : e;
    const VecT va = *reinterpret_cast<const VecT*>(a + e);
    const VecT vb = *reinterpret_cast<const VecT*>(b + be);
    VecT out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float fa = to_float(va.v[j]), fb = to_float(vb.v[j]);
      out.v[j] = from_float<T>(apply_act(kOp == BinaryOp::kAdd ? fa + fb : fa * fb, act));
    }
    *reinterpret_cast<VecT*>(y + e) = out;
  }
}

template <typename T, typename TB, int V>
__global__ void bias_act_kernel(const T* x, const TB* __restrict__ bias, T* y, int64_t vecs, int64_t c,
                                ActParams act) {
  using VecT = Vec<T, V>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * V;
    const int64_t ch = e % c;  // V divides c, so the V channels are consecutive
    const VecT vx = *reinterpret_cast<const VecT*>(x + e);
    VecT out;
#pragma unroll
    for (int j = 0; j < V; ++j)
      out.v[j] = from_float<T>(apply_act(to_float(vx.v[j]) + to_float(bias[ch + j]), act));
    *reinterpret_cast<VecT*>(y + e) = out;
  }
}

struct UnaryParams {
  float alpha, beta, lo, hi;
};

template <UnaryOp kOp>
__device__ __forceinline__ float unary_op(float v, UnaryParams p) {
  if constexpr (kOp == UnaryOp::kRelu) {
    return fmaxf(v, 0.0f);
  } else if constexpr (kOp == UnaryOp::kClip) {
    return fminf(fmaxf(v, p.lo), p.hi);
  } else if constexpr (kOp == UnaryOp::kSigmoid) {
    return 1.0f / (1.0f + expf(-v));
  } else if constexpr (kOp == UnaryOp::kHardSigmoid) {
    return fminf(fmaxf(fmaf(p.alpha, v, p.beta), 0.0f), 1.0f);
  } else if constexpr (kOp == UnaryOp::kHardSwish) {  // x * relu6(x + 3) / 6
    return v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
  } else if constexpr (kOp == UnaryOp::kGelu) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  } else if constexpr (kOp == UnaryOp::kGeluTanh) {
    return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
  } else if constexpr (kOp == UnaryOp::kTanh) {
    return tanhf(v);
  } else if constexpr (kOp == UnaryOp::kErf) {
    return erff(v);
  } else if constexpr (kOp == UnaryOp::kSqrt) {
    return sqrtf(v);
  } else if constexpr (kOp == UnaryOp::kExp) {
    return expf(v);
  } else if constexpr (kOp == UnaryOp::kNeg) {
    return -v;
  } else {  // kFakeQuantize, step for step as core/quant.h's fake_quantize
    const float q = __fadd_rn(rintf(__fdiv_rn(v, p.alpha)), p.beta);
    if (isnan(q)) return 0.0f;
    return __fmul_rn(__fsub_rn(fminf(fmaxf(q, p.lo), p.hi), p.beta), p.alpha);
  }
}

template <typename T, int V, UnaryOp kOp>
__global__ void unary_kernel(const T* x, T* y, int64_t vecs, UnaryParams p) {
  using VecT = Vec<T, V>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const VecT vx = *reinterpret_cast<const VecT*>(x + i * V);
    VecT out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(unary_op<kOp>(to_float(vx.v[j]), p));
    *reinterpret_cast<VecT*>(y + i * V) = out;
  }
}

template <typename T, int V>
Status launch_binary_typed(const BinaryDesc& d, const T* a, const T* b, T* y, cudaStream_t stream) {
  const int64_t vecs = d.n * d.hw * d.c / V;
  const bool broadcast = d.b_broadcast == Broadcast::kPerImageChannel;
  const ActParams act{d.activation, d.clip_min, d.clip_max};
  if (d.op == BinaryOp::kAdd) {
    binary_kernel<T, V, BinaryOp::kAdd>
        <<<grid_for(vecs), kThreads, 0, stream>>>(a, b, y, vecs, d.hw * d.c, d.c, broadcast, act);
    return check_launch("launch_binary", "add_kernel");
  }
  binary_kernel<T, V, BinaryOp::kMul>
      <<<grid_for(vecs), kThreads, 0, stream>>>(a, b, y, vecs, d.hw * d.c, d.c, broadcast, act);
  return check_launch("launch_binary", "mul_kernel");
}

template <typename T, int V>
Status launch_unary_typed(const UnaryDesc& d, const T* x, T* y, cudaStream_t stream) {
  const int64_t vecs = d.count / V;
  const UnaryParams p{d.alpha, d.beta, d.clip_min, d.clip_max};
  const unsigned grid = grid_for(vecs);
  switch (d.op) {
    case UnaryOp::kRelu:
      unary_kernel<T, V, UnaryOp::kRelu><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "relu_kernel");
    case UnaryOp::kClip:
      unary_kernel<T, V, UnaryOp::kClip><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "clip_kernel");
    case UnaryOp::kSigmoid:
      unary_kernel<T, V, UnaryOp::kSigmoid><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "sigmoid_kernel");
    case UnaryOp::kHardSigmoid:
      unary_kernel<T, V, UnaryOp::kHardSigmoid><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "hard_sigmoid_kernel");
    case UnaryOp::kHardSwish:
      unary_kernel<T, V, UnaryOp::kHardSwish><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "hard_swish_kernel");
    case UnaryOp::kGelu:
      unary_kernel<T, V, UnaryOp::kGelu><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "gelu_kernel");
    case UnaryOp::kGeluTanh:
      unary_kernel<T, V, UnaryOp::kGeluTanh><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "gelu_tanh_kernel");
    case UnaryOp::kTanh:
      unary_kernel<T, V, UnaryOp::kTanh><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "tanh_kernel");
    case UnaryOp::kErf:
      unary_kernel<T, V, UnaryOp::kErf><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "erf_kernel");
    case UnaryOp::kSqrt:
      unary_kernel<T, V, UnaryOp::kSqrt><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "sqrt_kernel");
    case UnaryOp::kExp:
      unary_kernel<T, V, UnaryOp::kExp><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "exp_kernel");
    case UnaryOp::kNeg:
      unary_kernel<T, V, UnaryOp::kNeg><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "neg_kernel");
    case UnaryOp::kFakeQuantize:
      unary_kernel<T, V, UnaryOp::kFakeQuantize><<<grid, kThreads, 0, stream>>>(x, y, vecs, p);
      return check_launch("launch_unary", "fake_quantize_kernel");
  }
  return Status::invalid_argument("launch_unary: unknown UnaryOp " + std::to_string(static_cast<int>(d.op)) +
                                  ".");
}

// One thread per lane; stores of neighbouring lanes are neighbouring elements (coalesced).
__global__ void lcg_lanes_kernel(float* __restrict__ y, int64_t n, const uint32_t* __restrict__ starts,
                                 int64_t lanes, uint32_t mul, uint32_t add) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= lanes) return;
  uint32_t state = starts[t];
  for (int64_t i = t; i < n; i += lanes) {
    // Exact in float32 (24 significant bits, a power-of-two scale), so no rounding to mirror.
    y[i] = static_cast<float>(state >> 8) * (1.0f / static_cast<float>(1u << 23)) - 1.0f;
    state = state * mul + add;
  }
}

}  // namespace

Status launch_lcg_lanes(float* y, int64_t n, const uint32_t* starts, int64_t lanes, uint32_t mul,
                        uint32_t add, cudaStream_t stream) {
  if (n < 0 || lanes < 1 || lanes > (int64_t{1} << 30))
    return Status::invalid_argument("launch_lcg_lanes: n must be >= 0 and lanes in 1..2^30.");
  if (n == 0) return Status::ok();
  lcg_lanes_kernel<<<static_cast<unsigned>((lanes + 255) / 256), 256, 0, stream>>>(y, n, starts, lanes, mul,
                                                                                   add);
  return check_launch("launch_lcg_lanes", "lcg_lanes_kernel");
}

Status launch_binary(const BinaryDesc& desc, const void* a, const void* b, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* at = static_cast<const T*>(a);
    const T* bt = static_cast<const T*>(b);
    T* yt = static_cast<T*>(y);
    if (desc.c % kVec<T> == 0 && is_aligned(a, 16) && is_aligned(b, 16) && is_aligned(y, 16)) {
      return launch_binary_typed<T, kVec<T>>(desc, at, bt, yt, stream);
    }
    return launch_binary_typed<T, 1>(desc, at, bt, yt, stream);
  });
}

Status launch_bias_act(const BiasActDesc& desc, const void* x, const void* bias, void* y,
                       cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const ActParams act{desc.activation, desc.clip_min, desc.clip_max};
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    const bool vec = desc.c % kVec<T> == 0 && is_aligned(x, 16) && is_aligned(y, 16);
    auto run = [&](auto bias_tag) -> Status {
      using TB = decltype(bias_tag);
      const TB* bt = static_cast<const TB*>(bias);
      if (vec) {
        constexpr int V = kVec<T>;
        const int64_t vecs = desc.count / V;
        bias_act_kernel<T, TB, V><<<grid_for(vecs), kThreads, 0, stream>>>(xt, bt, yt, vecs, desc.c, act);
      } else {
        bias_act_kernel<T, TB, 1>
            <<<grid_for(desc.count), kThreads, 0, stream>>>(xt, bt, yt, desc.count, desc.c, act);
      }
      return check_launch("launch_bias_act", "bias_act_kernel");
    };
    if (desc.bias_dtype == DataType::kFloat32) return run(float{});
    return run(T{});
  });
}

Status launch_unary(const UnaryDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (desc.count % kVec<T> == 0 && is_aligned(x, 16) && is_aligned(y, 16)) {
      return launch_unary_typed<T, kVec<T>>(desc, xt, yt, stream);
    }
    return launch_unary_typed<T, 1>(desc, xt, yt, stream);
  });
}

}  // namespace gpulab::kernels
