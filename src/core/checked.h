// Overflow-checked integer arithmetic, for every size computed from numbers read from a file
// (dimensions, attributes, counts, offsets): a hostile file must get a clear refusal, never a
// signed overflow (undefined behaviour) or a wrapped size that is then allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace gpulab {

// a + b, a - b, a * b; nullopt when the exact result does not fit in int64_t.
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of `values` (1 when empty); nullopt when a partial product overflows.
inline std::optional<int64_t> checked_product(std::span<const int64_t> values) {
  int64_t p = 1;
  for (int64_t v : values) {
    if (__builtin_mul_overflow(p, v, &p)) return std::nullopt;
  }
  return p;
}

}  // namespace gpulab
