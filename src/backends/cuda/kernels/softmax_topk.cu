/* The classifier tail: softmax and top-k over the rows of a float32 [rows, cols] matrix.
 *
 * Softmax algorithm: one pass computes each thread's running (max, sum of exp(x - max)) over
 *   its strided share of the row (the "online softmax" recurrence), the block merges the pairs
 *   (warp shuffles, then shared memory), a second pass writes exp(x - max) / sum. Numerically
 *   stable for any finite input; a row of -inf only yields NaN, as the definition does.
 * Top-k algorithm: each thread keeps its own k best (value, index) pairs sorted in local memory
 *   while it scans a strided share of the row; then k rounds of a block-wide arg-max over the
 *   threads' current heads pick the row's k best in order, the winning thread advancing its head.
 *   Order: larger value first, ties to the lower index; NaN compares as -inf (its value is still
 *   reported as NaN). k <= 32 (kMaxTopK); the cost per row is O(cols + k * log(threads)) and
 *   rows of ~21k classes take one pass.
 * Layout: row-major [rows, cols]; outputs [rows, k].
 * Launch: one block per row (grid.x = rows); softmax 256 threads, top-k 128 threads.
 * Tolerance vs the reference (double accumulation): softmax float32 within 1e-6 relative (expf);
 *   top-k indices identical, values bit-identical (copied from the input).
 */
#include <cfloat>
#include <climits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

constexpr int kSoftmaxThreads = 256;
constexpr int kTopKThreads = 128;
constexpr int kWarp = 32;

// (max, sum of exp(x - max)) of a set of values; the empty set and an all -inf set are (-inf, 0).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -CUDART_INF_F) return {m, 0.0f};
  const float sa = a.m == -CUDART_INF_F ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.m == -CUDART_INF_F ? 0.0f : b.s * expf(b.m - m);
  return {m, sa + sb};
}

__global__ void softmax_kernel(const float* x, float* y, int64_t cols) {
  __shared__ MaxSum warp_partial[kSoftmaxThreads / kWarp];
  __shared__ MaxSum row_total;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * cols;

  MaxSum acc{-CUDART_INF_F, 0.0f};
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc = merge(acc, MaxSum{xr[j], 1.0f});
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_down_sync(0xffffffffu, acc.m, offset),
                       __shfl_down_sync(0xffffffffu, acc.s, offset)};
    acc = merge(acc, other);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) warp_partial[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total = warp_partial[0];
    for (int w = 1; w < kSoftmaxThreads / kWarp; ++w) total = merge(total, warp_partial[w]);
    row_total = total;
  }
  __syncthreads();
  const float m = row_total.m;
  const float inv_s = 1.0f / row_total.s;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv_s;
}

struct Candidate {
  float key;  // the value, NaN replaced by -inf
  int index;
};

// a ranks before b: larger key, or equal key and lower index.
__device__ __forceinline__ bool ranks_before(Candidate a, Candidate b) {
  return a.key > b.key || (a.key == b.key && a.index < b.index);
}

__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
  return ranks_before(a, b) ? a : b;
}

template <typename TIndex>
__global__ void topk_kernel(const float* __restrict__ x, TIndex* __restrict__ indices,
                            float* __restrict__ values, int cols, int k) {
  __shared__ Candidate warp_best[kTopKThreads / kWarp];
  __shared__ Candidate round_best;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  const Candidate sentinel{-CUDART_INF_F, INT_MAX};

  // This thread's k best of x[threadIdx.x], x[threadIdx.x + blockDim.x], ..., sorted.
  Candidate best[kMaxTopK];
  for (int i = 0; i < k; ++i) best[i] = sentinel;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = xr[j];
    const Candidate c{isnan(v) ? -CUDART_INF_F : v, j};
    if (!ranks_before(c, best[k - 1])) continue;
    int pos = k - 1;
    while (pos > 0 && ranks_before(c, best[pos - 1])) {
      best[pos] = best[pos - 1];
      --pos;
    }
    best[pos] = c;
  }

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int head = 0;
  for (int r = 0; r < k; ++r) {
    Candidate c = head < k ? best[head] : sentinel;
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const Candidate other{__shfl_down_sync(0xffffffffu, c.key, offset),
                            __shfl_down_sync(0xffffffffu, c.index, offset)};
      c = better(c, other);
    }
    if (lane == 0) warp_best[warp] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
      Candidate total = warp_best[0];
      for (int w = 1; w < kTopKThreads / kWarp; ++w) total = better(total, warp_best[w]);
      round_best = total;
      const int64_t out = static_cast<int64_t>(blockIdx.x) * k + r;
      indices[out] = static_cast<TIndex>(total.index);
      values[out] = xr[total.index];
    }
    __syncthreads();
    // Indices are unique, so exactly one thread holds the winner.
    if (head < k && best[head].index == round_best.index) ++head;
  }
}

Status check_rows(const char* launcher, int64_t rows) {
  if (rows <= INT32_MAX) return Status::ok();
  return Status::invalid_argument(std::string(launcher) + ": rows " + std::to_string(rows) +
                                  " exceed one grid dimension (2^31 - 1). Split the batch.");
}

}  // namespace

Status launch_softmax(const SoftmaxDesc& desc, const void* x, void* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  GPULAB_TRY(check_rows("launch_softmax", desc.rows));
  softmax_kernel<<<static_cast<unsigned>(desc.rows), kSoftmaxThreads, 0, stream>>>(
      static_cast<const float*>(x), static_cast<float*>(y), desc.cols);
  return check_launch("launch_softmax", "softmax_kernel");
}

Status launch_topk(const TopKDesc& desc, const void* x, void* indices, void* values, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  GPULAB_TRY(check_rows("launch_topk", desc.rows));
  const unsigned grid = static_cast<unsigned>(desc.rows);
  const int cols = static_cast<int>(desc.cols);
  if (desc.index_dtype == DataType::kInt64) {
    topk_kernel<int64_t><<<grid, kTopKThreads, 0, stream>>>(static_cast<const float*>(x),
                                                            static_cast<int64_t*>(indices),
                                                            static_cast<float*>(values), cols, desc.k);
  } else {
    topk_kernel<int32_t><<<grid, kTopKThreads, 0, stream>>>(static_cast<const float*>(x),
                                                            static_cast<int32_t*>(indices),
                                                            static_cast<float*>(values), cols, desc.k);
  }
  return check_launch("launch_topk", "topk_kernel");
}

}  // namespace gpulab::kernels
