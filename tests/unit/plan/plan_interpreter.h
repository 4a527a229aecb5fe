// A plain CPU interpreter of FP32 plans, for tests: runs every step on host NHWC float buffers
// exactly as the plan describes (values, channel padding, KRSC weights, views). Comparing it with
// the reference backend checks the lowering (layouts, padding, attribute mapping) without a GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "plan/plan.h"

namespace gpulab::testing {

inline std::vector<float> weight_floats(const PlanWeight& w) {
  std::vector<float> out(w.bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), w.bytes.data(), w.bytes.size());
  return out;
}

inline float activate(float v, Activation a, float lo, float hi) {
  if (a == Activation::kRelu) return std::max(v, 0.0f);
  if (a == Activation::kClip) return std::min(std::max(v, lo), hi);
  return v;
}

// input: float NCHW [batch, C, H, W]; returns [batch, classes]. The plan must be FP32/TF32.
inline std::vector<float> interpret_plan(const Plan& plan, const std::vector<float>& input, int64_t batch) {
  std::vector<std::vector<float>> v(plan.values.size());
  auto alloc = [&](int i) {
    v[i].assign(static_cast<size_t>(plan.values[i].h * plan.values[i].w * plan.values[i].c * batch), 0.0f);
  };
  std::vector<float> logits;
  for (const PlanStep& s : plan.steps) {
    switch (s.kind) {
      case StepKind::kInput: {
        alloc(s.output);
        const auto& y = plan.values[s.output];
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t c = 0; c < plan.input_channels; ++c)
            for (int64_t h = 0; h < y.h; ++h)
              for (int64_t w = 0; w < y.w; ++w)
                v[s.output][((n * y.h + h) * y.w + w) * y.c + c] =
                    input[((n * plan.input_channels + c) * y.h + h) * y.w + w];
        break;
      }
      case StepKind::kConv: {
        alloc(s.output);
        const auto& x = plan.values[s.inputs[0]];
        const auto& y = plan.values[s.output];
        const auto wt = weight_floats(plan.weights[s.weight]);
        const auto bias = s.bias >= 0 ? weight_floats(plan.weights[s.bias]) : std::vector<float>(y.c, 0.0f);
        const auto& a = s.conv;
        const int64_t cg = x.c / a.groups, kg = y.c / a.groups;
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t oh = 0; oh < y.h; ++oh)
            for (int64_t ow = 0; ow < y.w; ++ow)
              for (int64_t k = 0; k < y.c; ++k) {
                const int64_t g = k / kg;
                double acc = bias[k];
                for (int64_t r = 0; r < a.kernel.h; ++r) {
                  const int64_t ih = oh * a.stride.h - a.pads.top + r * a.dilation.h;
                  if (ih < 0 || ih >= x.h) continue;
                  for (int64_t q = 0; q < a.kernel.w; ++q) {
                    const int64_t iw = ow * a.stride.w - a.pads.left + q * a.dilation.w;
                    if (iw < 0 || iw >= x.w) continue;
                    for (int64_t ci = 0; ci < cg; ++ci)
                      acc += static_cast<double>(
                                 v[s.inputs[0]][((n * x.h + ih) * x.w + iw) * x.c + g * cg + ci]) *
                             wt[((k * a.kernel.h + r) * a.kernel.w + q) * cg + ci];
                  }
                }
                const int64_t at = ((n * y.h + oh) * y.w + ow) * y.c + k;
                if (a.has_residual) acc += v[s.inputs[1]][at];
                v[s.output][at] = activate(static_cast<float>(acc), a.activation, a.clip_min, a.clip_max);
              }
        break;
      }
      case StepKind::kGemm: {
        alloc(s.output);
        const auto& x = plan.values[s.inputs[0]];
        const auto& y = plan.values[s.output];
        const auto wt = weight_floats(plan.weights[s.weight]);
        const auto bias = s.bias >= 0 ? weight_floats(plan.weights[s.bias]) : std::vector<float>(y.c, 0.0f);
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t o = 0; o < y.c; ++o) {
            double acc = bias[o];
            for (int64_t i = 0; i < x.c; ++i)
              acc += static_cast<double>(v[s.inputs[0]][n * x.c + i]) * wt[o * x.c + i];
            v[s.output][n * y.c + o] = static_cast<float>(acc);
          }
        break;
      }
      case StepKind::kMaxPool:
      case StepKind::kAveragePool: {
        alloc(s.output);
        const auto& x = plan.values[s.inputs[0]];
        const auto& y = plan.values[s.output];
        const auto& p = s.pool;
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t oh = 0; oh < y.h; ++oh)
            for (int64_t ow = 0; ow < y.w; ++ow)
              for (int64_t c = 0; c < y.c; ++c) {
                double acc = s.kind == StepKind::kMaxPool ? -1e300 : 0.0;
                int64_t count = 0, padded = 0;
                for (int64_t r = 0; r < p.kernel.h; ++r)
                  for (int64_t q = 0; q < p.kernel.w; ++q) {
                    const int64_t ih = oh * p.stride.h - p.pads.top + r * p.dilation.h;
                    const int64_t iw = ow * p.stride.w - p.pads.left + q * p.dilation.w;
                    if (ih < x.h + p.pads.bottom && iw < x.w + p.pads.right) ++padded;
                    if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                    const float val = v[s.inputs[0]][((n * x.h + ih) * x.w + iw) * x.c + c];
                    acc = s.kind == StepKind::kMaxPool ? std::max<double>(acc, val) : acc + val;
                    ++count;
                  }
                if (s.kind == StepKind::kAveragePool) acc /= p.count_include_pad ? padded : count;
                v[s.output][((n * y.h + oh) * y.w + ow) * y.c + c] = static_cast<float>(acc);
              }
        break;
      }
      case StepKind::kGlobalAveragePool: {
        alloc(s.output);
        const auto& x = plan.values[s.inputs[0]];
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t c = 0; c < x.c; ++c) {
            double acc = 0;
            for (int64_t i = 0; i < x.h * x.w; ++i) acc += v[s.inputs[0]][(n * x.h * x.w + i) * x.c + c];
            v[s.output][n * x.c + c] = static_cast<float>(acc / (x.h * x.w));
          }
        break;
      }
      case StepKind::kAdd:
      case StepKind::kActivation:
      case StepKind::kCast: {
        alloc(s.output);
        for (size_t i = 0; i < v[s.output].size(); ++i) {
          float val = v[s.inputs[0]][i];
          if (s.kind == StepKind::kAdd) val += v[s.inputs[1]][i];
          v[s.output][i] =
              s.kind == StepKind::kCast ? val : activate(val, s.activation, s.clip_min, s.clip_max);
        }
        break;
      }
      case StepKind::kOutput: {
        const auto& x = plan.values[s.inputs[0]];
        logits.resize(static_cast<size_t>(batch * plan.num_classes));
        for (int64_t n = 0; n < batch; ++n)
          for (int64_t c = 0; c < plan.num_classes; ++c)
            logits[n * plan.num_classes + c] = v[s.inputs[0]][n * x.c + c];
        break;
      }
    }
  }
  return logits;
}

}  // namespace gpulab::testing
