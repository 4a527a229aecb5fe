// Seeded float32 tensors of normally distributed values, for tests that need weights or inputs
// whose failures reproduce.
#pragma once

#include <cstdint>
#include <random>
#include <utility>

#include "gpulab/tensor.h"

namespace gpulab::testing {

// Values from N(0, scale^2), drawn in element order from std::mt19937(seed).
inline Tensor normal_tensor(Shape shape, uint32_t seed, float scale = 1.0f) {
  Tensor t(DataType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (float& x : t.f32()) x = dist(rng);
  return t;
}

}  // namespace gpulab::testing
