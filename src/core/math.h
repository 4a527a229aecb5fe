// Small host-side numerics shared by the CLI and the tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gpulab {

// Numerically stable softmax (max subtracted, FP64 sum).
std::vector<float> softmax(std::span<const float> logits);

// Indices of the k largest values, largest first; ties keep the lower index first.
// k is clamped to values.size().
std::vector<int64_t> top_k(std::span<const float> values, int64_t k);

}  // namespace gpulab
