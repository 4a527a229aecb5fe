// The CPU reference backend as the oracle of the kernel tests (ggml's test-backend-ops pattern):
// NHWC device layout <-> the reference's NCHW float32 tensors, and one node run on the reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "backends/reference/reference_executor.h"
#include "gpulab/tensor.h"

namespace gpulab::testing {

struct Nhwc {
  int64_t n, h, w, c;
  int64_t count() const { return n * h * w * c; }
};

inline Tensor to_nchw_tensor(const std::vector<float>& nhwc, Nhwc s) {
  std::vector<float> nchw(nhwc.size());
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t p = 0; p < s.h * s.w; ++p)
      for (int64_t c = 0; c < s.c; ++c)
        nchw[(n * s.c + c) * s.h * s.w + p] = nhwc[(n * s.h * s.w + p) * s.c + c];
  return Tensor::from_floats(Shape{s.n, s.c, s.h, s.w}, nchw);
}

inline std::vector<float> to_nhwc(const Tensor& nchw) {
  const Shape& sh = nchw.shape();
  const int64_t n = sh[0], c = sh[1], h = sh.rank() > 2 ? sh[2] : 1, w = sh.rank() > 3 ? sh[3] : 1;
  const std::span<const float> x = nchw.f32();
  std::vector<float> y(x.size());
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t p = 0; p < h * w; ++p) y[(in * h * w + p) * c + ic] = x[(in * c + ic) * h * w + p];
  return y;
}

// Runs `node` on the reference backend; fails the test on error.
inline Tensor run_reference(const Node& node, std::vector<const Tensor*> inputs) {
  std::vector<Tensor> outputs;
  const Status s = run_reference_node(node, inputs, outputs);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return outputs.empty() ? Tensor() : outputs[0];
}

}  // namespace gpulab::testing
