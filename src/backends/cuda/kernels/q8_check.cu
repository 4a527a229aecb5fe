// What the 8-bit tactic search runs on the device beside the kernels it times (quant_kernels.h):
// seeded random input codes, and counting where two kernels' 8-bit outputs disagree, so that
// outputs of hundreds of MB (ResNet-18's layer1 at batch 1024: 205 MB) are neither made on the host
// nor copied back to it per candidate.
#include <cstdint>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant_kernels.h"

namespace gpulab::kernels {
namespace {

// SplitMix64's finalizer: a well-mixed 64-bit value per counter.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ uint8_t random_code(uint64_t word, int byte, bool fp8) {
  auto v = static_cast<uint8_t>(word >> (8 * byte));
  if (fp8 && (v & 0x7f) == 0x7f) v &= 0xfe;  // E4M3's NaN (0x7f, 0xff) -> 448 (0x7e, 0xfe)
  return v;
}

// Bytes [8 i, 8 i + 8) from the hash of (seed, i).
__global__ void random_q8_kernel(uint8_t* y, int64_t count, bool fp8, uint64_t seed) {
  const int64_t words = (count + 7) / 8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t word = mix64(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));
    if (8 * i + 8 <= count && (reinterpret_cast<uintptr_t>(y) % 8) == 0) {
      uint64_t out = 0;
      for (int b = 0; b < 8; ++b) out |= uint64_t{random_code(word, b, fp8)} << (8 * b);
      reinterpret_cast<uint64_t*>(y)[i] = out;
    } else {
      for (int b = 0; b < 8 && 8 * i + b < count; ++b) y[8 * i + b] = random_code(word, b, fp8);
    }
  }
}

// E4M3 codes in order of value: sign-magnitude -> a signed rank (q8_difference in tactics.cc).
__device__ __forceinline__ int e4m3_rank(uint8_t v) {
  return (v & 0x80) ? -(v & 0x7f) : (v & 0x7f);
}

__global__ void count_q8_differences_kernel(const uint8_t* a, const uint8_t* b, int64_t count, bool fp8,
                                            Q8Differences* differ) {
  unsigned long long far = 0;
  unsigned int widest = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint8_t x = a[i], y = b[i];
    const int apart = fp8 ? abs(e4m3_rank(x) - e4m3_rank(y))
                          : abs(int{static_cast<int8_t>(x)} - int{static_cast<int8_t>(y)});
    far += fp8 ? apart > 1 : apart > 0;
    widest = max(widest, static_cast<unsigned int>(apart));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    far += __shfl_down_sync(0xffffffffu, far, offset);
    widest = max(widest, __shfl_down_sync(0xffffffffu, widest, offset));
  }
  if ((threadIdx.x & 31) == 0 && widest > 0) {
    if (far > 0) atomicAdd(&differ->far, far);
    atomicMax(&differ->widest, static_cast<unsigned long long>(widest));
  }
}

}  // namespace

Status launch_random_q8(void* y, int64_t count, bool fp8, uint32_t seed, cudaStream_t stream) {
  if (count < 0 || (count > 0 && y == nullptr))
    return Status::invalid_argument("launch_random_q8: a negative count or a null output");
  if (count == 0) return Status::ok();
  random_q8_kernel<<<grid_for((count + 7) / 8), kThreads, 0, stream>>>(static_cast<uint8_t*>(y), count, fp8,
                                                                       uint64_t{seed} << 32);
  return check_launch("launch_random_q8", "random_q8_kernel");
}

Status launch_count_q8_differences(const void* a, const void* b, int64_t count, bool fp8,
                                   Q8Differences* differ, cudaStream_t stream) {
  if (count < 0 || differ == nullptr || (count > 0 && (a == nullptr || b == nullptr)))
    return Status::invalid_argument("launch_count_q8_differences: a negative count or a null pointer");
  if (count == 0) return Status::ok();
  count_q8_differences_kernel<<<grid_for(count), kThreads, 0, stream>>>(
      static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), count, fp8, differ);
  return check_launch("launch_count_q8_differences", "count_q8_differences_kernel");
}

}  // namespace gpulab::kernels
