#include "core/math.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gpulab {

std::vector<float> softmax(std::span<const float> logits) {
  std::vector<float> out(logits.size());
  if (logits.empty()) return out;
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(std::exp(static_cast<double>(logits[i]) - max) / sum);
  return out;
}

std::vector<int64_t> top_k(std::span<const float> values, int64_t k) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(values.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

}  // namespace gpulab
