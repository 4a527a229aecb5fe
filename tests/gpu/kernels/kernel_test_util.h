// Helpers for the kernel tests: GPU presence, device buffers, seeded inputs and the per-dtype
// tolerances. Host-side float16/bfloat16 rounding comes from core/half.h, which does not use
// CUDA's headers, so the expected values share no code with the kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.h"
#include "gpulab/tensor.h"

namespace gpulab::testing {

// Empty when a CUDA device is usable, else the reason it is not.
inline std::string gpu_unavailable_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device present";
  return {};
}

// Whether the current device is compute capability 9.0, the only one that runs gpulab's sm_90a
// (wgmma) kernels.
inline bool is_sm90() {
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
}

#define GPULAB_SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                             \
    if (const std::string reason = ::gpulab::testing::gpu_unavailable_reason(); !reason.empty()) { \
      GTEST_SKIP() << reason;                                                                      \
    }                                                                                              \
  } while (0)

// Bytes of `values` stored as `dtype` (float32, float16, bfloat16).
inline std::vector<std::byte> encode(const std::vector<float>& values, DataType dtype) {
  std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DataType::kFloat32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits =
          dtype == DataType::kFloat16 ? float_to_half_bits(values[i]) : float_to_bf16_bits(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

inline std::vector<float> decode(const std::vector<std::byte>& bytes, DataType dtype) {
  const size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DataType::kFloat32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = dtype == DataType::kFloat16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
    }
  }
  return values;
}

// `values` rounded to what `dtype` can hold (the inputs the kernels actually see).
inline std::vector<float> round_to(const std::vector<float>& values, DataType dtype) {
  return decode(encode(values, dtype), dtype);
}

// Seeded values in [-range, -range/40] U [range/40, range]: no zeros, so a skipped element shows.
inline std::vector<float> random_values(size_t count, uint32_t seed, float range = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(range / 40.0f, range);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(count);
  for (auto& x : v) x = negative(rng) ? -dist(rng) : dist(rng);
  return v;
}

// Relative L2 error allowed for a kernel's output in `dtype` (the brief's budget).
inline double tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 1e-2;
    case DataType::kBFloat16: return 3e-2;
    default: return 1e-5;
  }
}

inline const std::vector<DataType>& float_types() {
  static const std::vector<DataType> kTypes = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
  return kTypes;
}

// A device allocation of `bytes`, poisoned with 0xFF bytes (NaN in every float type, -1 in every
// integer type) so that an element the kernel forgets to write shows up. Test-only: allocates.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_ + kSlack), cudaSuccess);
    poison();
  }
  // Uploads `bytes`, at `offset_bytes` into the allocation (to test unaligned pointers).
  DeviceBuffer(const std::vector<std::byte>& bytes, size_t offset_bytes = 0)
      : bytes_(bytes.size()), offset_(offset_bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_ + kSlack), cudaSuccess);
    poison();
    EXPECT_EQ(cudaMemcpy(get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  void* get() const { return static_cast<std::byte*>(ptr_) + offset_; }
  void poison() { EXPECT_EQ(cudaMemset(ptr_, 0xFF, bytes_ + kSlack), cudaSuccess); }
  std::vector<std::byte> download() const {
    std::vector<std::byte> out(bytes_);
    EXPECT_EQ(cudaMemcpy(out.data(), get(), bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  // True when the kSlack bytes after the tensor still hold the poison (nothing wrote past the end).
  bool tail_untouched() const {
    std::vector<unsigned char> tail(kSlack - offset_);
    EXPECT_EQ(
        cudaMemcpy(tail.data(), static_cast<std::byte*>(get()) + bytes_, tail.size(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (unsigned char b : tail) {
      if (b != 0xFF) return false;
    }
    return true;
  }

 private:
  static constexpr size_t kSlack = 64;
  size_t bytes_ = 0;
  size_t offset_ = 0;
  void* ptr_ = nullptr;
};

// Waits for the kernels and reports an asynchronous fault as a test failure.
inline void expect_synced() {
  const cudaError_t err = cudaDeviceSynchronize();
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorName(err) << ": " << cudaGetErrorString(err);
}

// Asserts that `actual` matches `expected` within the dtype's relative L2 tolerance and that
// every element was written (no NaN left from the poison).
inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                         DataType dtype) {
  ASSERT_EQ(actual.size(), expected.size());
  const ErrorStats stats = compare(actual, expected);
  EXPECT_EQ(stats.non_finite, 0) << "elements left unwritten or non-finite";
  EXPECT_LE(stats.rel_l2, tolerance(dtype))
      << dtype_name(dtype) << ": rel_l2 " << stats.rel_l2 << ", max_abs " << stats.max_abs;
}

// Asserts bit-for-bit equal floats (conversions, max pooling, top-k values); reports the first
// mismatch and the count rather than printing whole tensors.
inline void expect_exact(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::bit_cast<uint32_t>(actual[i]) != std::bit_cast<uint32_t>(expected[i])) {
      if (mismatches++ == 0) first = i;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "first at element " << first << ": got " << actual[first] << ", expected "
                            << expected[first];
}

}  // namespace gpulab::testing
