#include "plan/interpret_kernels.h"

#include <algorithm>
#include <vector>

namespace gpulab {

namespace {

// Dot products of n elements. Integer sums are exact in any order, so the plain loop may be
// vectorized as the compiler likes (pmaddwd); float sums keep a fixed order of `kLanes` partial sums
// that the compiler maps onto vector lanes.
inline int32_t dot(const int16_t* x, const int16_t* w, int64_t n) {
  int32_t sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<int32_t>(x[i]) * static_cast<int32_t>(w[i]);
  return sum;
}

template <typename Acc, int kLanes>
inline Acc dot_lanes(const float* x, const float* w, int64_t n) {
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += static_cast<Acc>(x[i + j]) * static_cast<Acc>(w[i + j]);
  Acc sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += static_cast<Acc>(x[i]) * static_cast<Acc>(w[i]);
  return sum;
}
inline float dot(const float* x, const float* w, int64_t n) {
  return dot_lanes<float, 8>(x, w, n);
}
inline double dot_f64(const float* x, const float* w, int64_t n) {
  return dot_lanes<double, 4>(x, w, n);
}

template <typename In, typename Acc, typename Dot>
void accumulate(const ConvGeometry& g, const In* x, const In* w, Acc* acc, int64_t row_begin, int64_t row_end,
                Dot dot_fn) {
  const ConvAttrs& a = g.attrs;
  const int64_t cg = g.x_c / a.groups, kg = g.y_c / a.groups;
  const int64_t R = a.kernel.h, S = a.kernel.w;
  const bool depthwise = a.groups > 1 && cg == 1 && kg == 1;
  // Depthwise: the weights as [R, S, C], so that each tap is one vector over the channels.
  std::vector<In> taps;
  if (depthwise) {
    taps.resize(static_cast<size_t>(R * S * g.y_c));
    for (int64_t k = 0; k < g.y_c; ++k)
      for (int64_t t = 0; t < R * S; ++t) taps[static_cast<size_t>(t * g.y_c + k)] = w[k * R * S + t];
  }
  if (row_end < 0) row_end = g.batch * g.y_h;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / g.y_h, oh = row % g.y_h;
    for (int64_t ow = 0; ow < g.y_w; ++ow) {
      Acc* out = acc + ((n * g.y_h + oh) * g.y_w + ow) * g.y_c;
      std::fill(out, out + g.y_c, Acc{0});
      for (int64_t r = 0; r < R; ++r) {
        const int64_t ih = oh * a.stride.h - a.pads.top + r * a.dilation.h;
        if (ih < 0 || ih >= g.x_h) continue;
        for (int64_t q = 0; q < S; ++q) {
          const int64_t iw = ow * a.stride.w - a.pads.left + q * a.dilation.w;
          if (iw < 0 || iw >= g.x_w) continue;
          const In* xp = x + ((n * g.x_h + ih) * g.x_w + iw) * g.x_c;
          if (depthwise) {
            const In* tp = taps.data() + (r * S + q) * g.y_c;
            for (int64_t k = 0; k < g.y_c; ++k) out[k] += static_cast<Acc>(xp[k]) * static_cast<Acc>(tp[k]);
            continue;
          }
          for (int64_t k = 0; k < g.y_c; ++k)
            out[k] += dot_fn(xp + (k / kg) * cg, w + ((k * R + r) * S + q) * cg, cg);
        }
      }
    }
  }
}

}  // namespace

// Each entry point is compiled for AVX-512, AVX2 and the baseline and picked at load time by the
// CPU it runs on (GCC's function multi-versioning); flatten inlines the loops into each version.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPULAB_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default"), flatten))
#else
#define GPULAB_VECTOR_CLONES
#endif

GPULAB_VECTOR_CLONES
void conv_accumulate(const ConvGeometry& g, const int16_t* x, const int16_t* w, int32_t* acc,
                     int64_t row_begin, int64_t row_end) {
  accumulate(g, x, w, acc, row_begin, row_end,
             [](const int16_t* a, const int16_t* b, int64_t n) { return dot(a, b, n); });
}

GPULAB_VECTOR_CLONES
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, float* acc, int64_t row_begin,
                     int64_t row_end) {
  accumulate(g, x, w, acc, row_begin, row_end,
             [](const float* a, const float* b, int64_t n) { return dot(a, b, n); });
}

GPULAB_VECTOR_CLONES
void conv_accumulate(const ConvGeometry& g, const float* x, const float* w, double* acc, int64_t row_begin,
                     int64_t row_end) {
  accumulate(g, x, w, acc, row_begin, row_end,
             [](const float* a, const float* b, int64_t n) { return dot_f64(a, b, n); });
}

GPULAB_VECTOR_CLONES
void conv_rows_f64(const ConvGeometry& g, const float* x, const double* wk, const float* bias,
                   const float* residual, float* y, int64_t row_begin, int64_t row_end) {
  const ConvAttrs& a = g.attrs;
  const int64_t cg = g.x_c / a.groups, kg = g.y_c / a.groups;
  const bool depthwise = cg == 1 && kg == 1;
  std::vector<double> acc(static_cast<size_t>(g.y_c));
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / g.y_h, oh = row % g.y_h;
    for (int64_t ow = 0; ow < g.y_w; ++ow) {
      for (int64_t k = 0; k < g.y_c; ++k) acc[static_cast<size_t>(k)] = bias[k];
      for (int64_t r = 0; r < a.kernel.h; ++r) {
        const int64_t ih = oh * a.stride.h - a.pads.top + r * a.dilation.h;
        if (ih < 0 || ih >= g.x_h) continue;
        for (int64_t q = 0; q < a.kernel.w; ++q) {
          const int64_t iw = ow * a.stride.w - a.pads.left + q * a.dilation.w;
          if (iw < 0 || iw >= g.x_w) continue;
          const float* xp = x + ((n * g.x_h + ih) * g.x_w + iw) * g.x_c;
          const double* wtap = wk + (r * a.kernel.w + q) * cg * g.y_c;
          if (depthwise) {  // one product per channel: the same sums, as one loop over the channels
            for (int64_t c = 0; c < g.y_c; ++c) acc[static_cast<size_t>(c)] += double{xp[c]} * wtap[c];
            continue;
          }
          for (int64_t grp = 0; grp < a.groups; ++grp)
            for (int64_t ci = 0; ci < cg; ++ci) {
              const double xv = xp[grp * cg + ci];
              const double* wr = wtap + ci * g.y_c + grp * kg;
              double* ar = acc.data() + grp * kg;
              for (int64_t kk = 0; kk < kg; ++kk) ar[kk] += xv * wr[kk];
            }
        }
      }
      const int64_t at = ((n * g.y_h + oh) * g.y_w + ow) * g.y_c;
      for (int64_t k = 0; k < g.y_c; ++k) {
        double v = acc[static_cast<size_t>(k)];
        if (residual) v += residual[at + k];
        y[at + k] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace gpulab
