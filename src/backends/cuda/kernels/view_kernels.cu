/* The kernels behind the plan's view steps (view_kernel_desc.h):
 *   copy:       y[view] = x[view] element by element, converting between float32/float16/bfloat16
 *               (layout changes, slices made dense, parts of a Concat, weights broadcast per image);
 *   eltwise:    y = a (op) b over strided views, b's 0 strides broadcasting;
 *   layer_norm: per row, mean and biased variance in float32 (two passes over the row held in
 *               registers/L1), y = (x - mean) * rsqrt(var + eps) * gamma + beta; or (desc.l2, F.normalize)
 *               the row's sum of squares, y = x / max(sqrt(sum), eps) * gamma + beta;
 *   attention:  gpulab's plain scaled dot-product attention: one block per (image, b, h, t) output
 *               row; the scores of the row in shared memory (float32), max-subtracted softmax, then
 *               the weighted sum of V. For the FP32/TF32 plans (cuDNN's fused SDPA takes FP16/BF16)
 *               and shapes cuDNN refuses.
 * Layouts: any strides (views of plan values, plan.h TensorView); offsets and sizes in elements.
 * Launch: copy and eltwise are grid-stride loops over n x numel(view) elements, 256 threads per
 *   block; each element's coordinates come from divisions by the view's dims (rank <= 8).
 *   layer_norm: one 256-thread block per row; attention: one 128-thread block per output row with
 *   S floats of dynamic shared memory.
 * Tolerance vs the reference: float32 arithmetic with one rounding at the store; float32 within
 *   1e-6 relative for copy/eltwise (exact for copy), ~1e-6 for layer_norm and attention (float32 sums
 *   of up to a few thousand terms).
 */
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/view_kernels.h"

namespace gpulab::kernels {
namespace {

// A view's dims and strides by value in kernel parameters.
struct DeviceView {
  int rank;
  int64_t dims[kMaxStridedRank];
  int64_t strides[kMaxStridedRank];
  int64_t offset, image_stride;
};

DeviceView device_view(const StridedView& v) {
  DeviceView d{};
  d.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) {
    d.dims[i] = v.dims[i];
    d.strides[i] = v.strides[i];
  }
  d.offset = v.offset;
  d.image_stride = v.image_stride;
  return d;
}

// The offset (elements) of element `e` of image `n`, e in row-major order over `shape`'s dims (the
// output's, which every operand shares).
__device__ __forceinline__ int64_t offset_of(const DeviceView& shape, const DeviceView& v, int64_t n,
                                             int64_t e) {
  int64_t at = v.offset + n * v.image_stride;
  for (int i = shape.rank - 1; i >= 0; --i) {
    const int64_t c = e % shape.dims[i];
    e /= shape.dims[i];
    at += c * v.strides[i];
  }
  return at;
}

template <typename TX, typename TY>
__global__ void copy_kernel(const TX* x, TY* y, DeviceView xv, DeviceView yv, int64_t per_image,
                            int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / per_image, e = i % per_image;
    y[offset_of(yv, yv, n, e)] = from_float<TY>(to_float(x[offset_of(yv, xv, n, e)]));
  }
}

template <typename T>
__global__ void eltwise_kernel(const T* a, const T* b, T* y, DeviceView av, DeviceView bv, DeviceView yv,
                               EltwiseKernelOp op, int64_t per_image, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / per_image, e = i % per_image;
    const float p = to_float(a[offset_of(yv, av, n, e)]), q = to_float(b[offset_of(yv, bv, n, e)]);
    float r;
    switch (op) {
      case EltwiseKernelOp::kAdd: r = p + q; break;
      case EltwiseKernelOp::kSub: r = p - q; break;
      case EltwiseKernelOp::kMul: r = p * q; break;
      default: r = p / q; break;
    }
    y[offset_of(yv, yv, n, e)] = from_float<T>(r);
  }
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -CUDART_INF_F;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, const float* gamma, const float* beta, T* y, LayerNormDesc d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;  // over n * rows
  const int64_t n = row / d.rows, r = row % d.rows;
  const T* xr = x + n * d.x_image_stride + d.x_offset + r * d.x_row_stride;
  T* yr = y + n * d.y_image_stride + d.y_offset + r * d.y_row_stride;
  // The L2 mode (F.normalize) is the layer norm without the mean: x / max(||x||, epsilon), and a
  // zero denominator gives zeros.
  float mean = 0.0f;
  if (!d.l2) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < d.c; i += blockDim.x) sum += to_float(xr[i]);
    mean = block_sum(sum, scratch) / static_cast<float>(d.c);
  }
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < d.c; i += blockDim.x) {
    const float v = to_float(xr[i]) - mean;
    sq += v * v;
  }
  const float total = block_sum(sq, scratch);
  float inv;
  if (d.l2) {
    const float norm = fmaxf(sqrtf(total), d.epsilon);
    inv = norm > 0.0f ? 1.0f / norm : 0.0f;
  } else {
    inv = rsqrtf(total / static_cast<float>(d.c) + d.epsilon);
  }
  for (int64_t i = threadIdx.x; i < d.c; i += blockDim.x)
    yr[i] = from_float<T>((to_float(xr[i]) - mean) * inv * gamma[i] + (beta ? beta[i] : 0.0f));
}

template <typename T>
__global__ void attention_kernel(const T* q, const T* k, const T* v, const T* bias, T* y, DeviceView qv,
                                 DeviceView kv, DeviceView vv, DeviceView bv, DeviceView yv, float scale) {
  extern __shared__ float scores[];  // S of them
  __shared__ float scratch[32];
  // blockIdx.x over n * B * H * T, row-major.
  int64_t idx = blockIdx.x;
  const int64_t t = idx % qv.dims[2];
  idx /= qv.dims[2];
  const int64_t h = idx % qv.dims[1];
  idx /= qv.dims[1];
  const int64_t b = idx % qv.dims[0];
  const int64_t n = idx / qv.dims[0];
  const int64_t s_len = kv.dims[2], d = qv.dims[3], dv = vv.dims[3];
  const T* qr =
      q + n * qv.image_stride + qv.offset + b * qv.strides[0] + h * qv.strides[1] + t * qv.strides[2];
  float local_max = -CUDART_INF_F;
  for (int64_t s = threadIdx.x; s < s_len; s += blockDim.x) {
    const T* kr =
        k + n * kv.image_stride + kv.offset + b * kv.strides[0] + h * kv.strides[1] + s * kv.strides[2];
    float dot = 0.0f;
    for (int64_t i = 0; i < d; ++i) dot += to_float(qr[i * qv.strides[3]]) * to_float(kr[i * kv.strides[3]]);
    float score = scale * dot;
    if (bias)
      score += to_float(
          bias[bv.offset + b * bv.strides[0] + h * bv.strides[1] + t * bv.strides[2] + s * bv.strides[3]]);
    scores[s] = score;
    local_max = fmaxf(local_max, score);
  }
  const float max_score = block_max(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t s = threadIdx.x; s < s_len; s += blockDim.x) {
    const float e = expf(scores[s] - max_score);
    scores[s] = e;
    local_sum += e;
  }
  const float inv_sum = 1.0f / block_sum(local_sum, scratch);  // also orders the writes to scores
  T* yr = y + n * yv.image_stride + yv.offset + b * yv.strides[0] + h * yv.strides[1] + t * yv.strides[2];
  for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s < s_len; ++s)
      acc += scores[s] * to_float(v[n * vv.image_stride + vv.offset + b * vv.strides[0] + h * vv.strides[1] +
                                    s * vv.strides[2] + i * vv.strides[3]]);
    yr[i * yv.strides[3]] = from_float<T>(acc * inv_sum);
  }
}

template <typename TX>
Status copy_from(const CopyDesc& d, const TX* x, void* y, cudaStream_t stream) {
  const int64_t per_image = d.y.numel(), total = d.n * per_image;
  return dispatch_float_type(d.y_dtype, [&](auto tag) -> Status {
    using TY = decltype(tag);
    copy_kernel<TX, TY><<<grid_for(total), kThreads, 0, stream>>>(x, static_cast<TY*>(y), device_view(d.x),
                                                                  device_view(d.y), per_image, total);
    return check_launch("launch_copy", "copy_kernel");
  });
}

}  // namespace

Status launch_copy(const CopyDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  return dispatch_float_type(desc.x_dtype, [&](auto tag) -> Status {
    using TX = decltype(tag);
    return copy_from<TX>(desc, static_cast<const TX*>(x), y, stream);
  });
}

Status launch_eltwise(const EltwiseDesc& desc, const void* a, const void* b, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const int64_t per_image = desc.y.numel(), total = desc.n * per_image;
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    eltwise_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), device_view(desc.a),
        device_view(desc.b), device_view(desc.y), desc.op, per_image, total);
    return check_launch("launch_eltwise", "eltwise_kernel");
  });
}

Status launch_layer_norm(const LayerNormDesc& desc, const void* x, const float* gamma, const float* beta,
                         void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  if (desc.n * desc.rows > (int64_t{1} << 31) - 1)
    return Status::invalid_argument("launch_layer_norm: more than 2^31 rows.");
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(desc.n * desc.rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), gamma, beta, static_cast<T*>(y), desc);
    return check_launch("launch_layer_norm", "layer_norm_kernel");
  });
}

Status launch_attention(const AttentionDesc& desc, const void* q, const void* k, const void* v,
                        const void* bias, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  const int64_t rows = desc.n * desc.q.dims[0] * desc.q.dims[1] * desc.q.dims[2];
  if (rows > (int64_t{1} << 31) - 1)
    return Status::invalid_argument("launch_attention: more than 2^31 rows.");
  // kMaxAttentionKeys floats fit the default 48 KiB of shared memory.
  const size_t shared = static_cast<size_t>(desc.k.dims[2]) * sizeof(float);
  return dispatch_float_type(desc.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    attention_kernel<T><<<static_cast<unsigned>(rows), 128, shared, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        desc.has_bias ? static_cast<const T*>(bias) : nullptr, static_cast<T*>(y), device_view(desc.q),
        device_view(desc.k), device_view(desc.v), device_view(desc.bias), device_view(desc.y), desc.scale);
    return check_launch("launch_attention", "attention_kernel");
  });
}

}  // namespace gpulab::kernels
