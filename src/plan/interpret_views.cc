#include "plan/interpret_views.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

namespace gpulab {
namespace {

int64_t elements(const PlanValue& v) {
  return v.h * v.w * v.c;
}

// Calls fn(offset) for the element offset of every index of `view`, row-major over its dims.
template <typename Fn>
void for_each_offset(const TensorView& view, Fn&& fn) {
  const size_t rank = view.dims.size();
  const int64_t n = view.numel();
  std::vector<int64_t> idx(rank, 0);
  int64_t at = view.offset;
  for (int64_t e = 0; e < n; ++e) {
    fn(e, at);
    for (size_t d = rank; d-- > 0;) {
      at += view.strides[d];
      if (++idx[d] < view.dims[d]) break;
      at -= view.strides[d] * view.dims[d];
      idx[d] = 0;
    }
  }
}

// The floats a view reads: one input value's buffer with its image stride, or a weight (the same
// for every image, image stride 0).
struct Source {
  const float* data = nullptr;
  int64_t image_stride = 0;
};

class Runner {
 public:
  Runner(const PlanStep& s, ViewStepContext& ctx) : s_(s), ctx_(ctx) {}

  Status run() {
    switch (s_.kind) {
      case StepKind::kCopy: return copy();
      case StepKind::kEltwise: return eltwise();
      case StepKind::kLinear: return linear();
      case StepKind::kMatMul: return matmul();
      case StepKind::kAttention: return attention();
      case StepKind::kLayerNorm: return layer_norm();
      default: return Status::internal(fmt::format("interpret: step '{}' is not a view step", s_.name));
    }
  }

 private:
  Source value_source(int v) const {
    return {ctx_.values[static_cast<size_t>(v)].data(), elements(ctx_.plan.values[static_cast<size_t>(v)])};
  }

  std::vector<float>& output() {
    std::vector<float>& y = ctx_.values[static_cast<size_t>(s_.output)];
    if (y.empty())
      y.assign(static_cast<size_t>(elements(ctx_.plan.values[static_cast<size_t>(s_.output)]) * ctx_.batch),
               0.0f);
    return y;
  }
  int64_t out_stride() const { return elements(ctx_.plan.values[static_cast<size_t>(s_.output)]); }

  Status copy() {
    std::vector<float> w;
    Source src;
    if (s_.inputs.empty()) {
      GPULAB_ASSIGN_OR_RETURN(w, ctx_.weight(s_, s_.weight));
      src = {w.data(), 0};
    } else {
      src = value_source(s_.inputs[0]);
    }
    std::vector<float>& y = output();
    std::vector<int64_t> from(static_cast<size_t>(s_.views[0].numel()));
    for_each_offset(s_.views[0], [&](int64_t e, int64_t at) { from[static_cast<size_t>(e)] = at; });
    for (int64_t n = 0; n < ctx_.batch; ++n)
      for_each_offset(s_.views[1], [&](int64_t e, int64_t at) {
        y[static_cast<size_t>(n * out_stride() + at)] =
            src.data[n * src.image_stride + from[static_cast<size_t>(e)]];
      });
    return Status::ok();
  }

  Status eltwise() {
    std::vector<float> w;
    const Source a = value_source(s_.inputs[0]);
    Source b;
    if (s_.inputs.size() > 1) {
      b = value_source(s_.inputs[1]);
    } else {
      GPULAB_ASSIGN_OR_RETURN(w, ctx_.weight(s_, s_.weight));
      b = {w.data(), 0};
    }
    std::vector<float>& y = output();
    std::vector<int64_t> ao, bo;
    for_each_offset(s_.views[0], [&](int64_t, int64_t at) { ao.push_back(at); });
    for_each_offset(s_.views[1], [&](int64_t, int64_t at) { bo.push_back(at); });
    for (int64_t n = 0; n < ctx_.batch; ++n)
      for_each_offset(s_.views[2], [&](int64_t e, int64_t at) {
        const double p = a.data[n * a.image_stride + ao[static_cast<size_t>(e)]];
        const double q = b.data[n * b.image_stride + bo[static_cast<size_t>(e)]];
        double r = 0;
        switch (s_.eltwise) {
          case EltwiseOp::kAdd: r = p + q; break;
          case EltwiseOp::kSub: r = p - q; break;
          case EltwiseOp::kMul: r = p * q; break;
          case EltwiseOp::kDiv: r = p / q; break;
        }
        y[static_cast<size_t>(n * out_stride() + at)] = static_cast<float>(r);
      });
    return Status::ok();
  }

  Status linear() {
    const TensorView& xv = s_.views[0];
    const TensorView& yv = s_.views.back();
    const int64_t rows = xv.dims[0], k = xv.dims[1], m = yv.dims[1];
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> w, ctx_.weight(s_, s_.weight));
    std::vector<float> bias(static_cast<size_t>(m), 0.0f);
    if (s_.bias >= 0) {
      GPULAB_ASSIGN_OR_RETURN(bias, ctx_.weight(s_, s_.bias));
    }
    // W^T [K, M]: one input value updates M contiguous accumulators (the loop vectorizes).
    std::vector<double> wt(static_cast<size_t>(k * m));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t kk = 0; kk < k; ++kk)
        wt[static_cast<size_t>(kk * m + j)] = w[static_cast<size_t>(j * k + kk)];
    const Source x = value_source(s_.inputs[0]);
    const Source r = s_.inputs.size() > 1 ? value_source(s_.inputs[1]) : Source{};
    std::vector<float>& y = output();
    parallel_rows(ctx_.batch * rows, [&](int64_t begin, int64_t end) {
      std::vector<double> acc(static_cast<size_t>(m));
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / rows, i = row % rows;
        for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] = bias[static_cast<size_t>(j)];
        const float* xr = x.data + n * x.image_stride + xv.offset + i * xv.strides[0];
        for (int64_t kk = 0; kk < k; ++kk) {
          const double xval = xr[kk * xv.strides[1]];
          const double* wr = wt.data() + kk * m;
          for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] += xval * wr[j];
        }
        for (int64_t j = 0; j < m; ++j) {
          double v = apply_pointwise(s_.pointwise, acc[static_cast<size_t>(j)], s_.alpha, s_.beta);
          if (r.data) {
            const TensorView& rv = s_.views[1];
            v += r.data[n * r.image_stride + rv.offset + i * rv.strides[0] + j * rv.strides[1]];
          }
          y[static_cast<size_t>(n * out_stride() + yv.offset + i * yv.strides[0] + j * yv.strides[1])] =
              static_cast<float>(v);
        }
      }
    });
    return Status::ok();
  }

  Status matmul() {
    const TensorView &av = s_.views[0], &bv = s_.views[1], &yv = s_.views[2];
    const int64_t batches = av.dims[0], m = av.dims[1], k = av.dims[2], ncols = bv.dims[2];
    const Source a = value_source(s_.inputs[0]), b = value_source(s_.inputs[1]);
    std::vector<float>& y = output();
    for (int64_t n = 0; n < ctx_.batch; ++n)
      for (int64_t bi = 0; bi < batches; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ncols; ++j) {
            double acc = 0;
            for (int64_t kk = 0; kk < k; ++kk)
              acc += static_cast<double>(a.data[n * a.image_stride + av.offset + bi * av.strides[0] +
                                                i * av.strides[1] + kk * av.strides[2]]) *
                     b.data[n * b.image_stride + bv.offset + bi * bv.strides[0] + kk * bv.strides[1] +
                            j * bv.strides[2]];
            y[static_cast<size_t>(n * out_stride() + yv.offset + bi * yv.strides[0] + i * yv.strides[1] +
                                  j * yv.strides[2])] = static_cast<float>(s_.scale * acc);
          }
    return Status::ok();
  }

  Status attention() {
    const TensorView &qv = s_.views[0], &kv = s_.views[1], &vv = s_.views[2], &yv = s_.views[3];
    const int64_t bs = qv.dims[0], hs = qv.dims[1], t_len = qv.dims[2], d = qv.dims[3], s_len = kv.dims[2],
                  dv = vv.dims[3];
    const Source q = value_source(s_.inputs[0]), k = value_source(s_.inputs[1]),
                 v = value_source(s_.inputs[2]);
    std::vector<float> bias;
    if (s_.weight >= 0) {
      GPULAB_ASSIGN_OR_RETURN(bias, ctx_.weight(s_, s_.weight));
    }
    const TensorView* biasv = s_.weight >= 0 ? &s_.views[4] : nullptr;
    std::vector<float>& y = output();
    parallel_rows(ctx_.batch * bs * hs, [&](int64_t begin, int64_t end) {
      std::vector<double> p(static_cast<size_t>(s_len)), acc(static_cast<size_t>(dv));
      for (int64_t item = begin; item < end; ++item) {
        const int64_t n = item / (bs * hs), b = (item / hs) % bs, h = item % hs;
        for (int64_t t = 0; t < t_len; ++t) {
          const float* qrow = q.data + n * q.image_stride + qv.offset + b * qv.strides[0] +
                              h * qv.strides[1] + t * qv.strides[2];
          double max_score = -std::numeric_limits<double>::infinity();
          for (int64_t s = 0; s < s_len; ++s) {
            const float* krow = k.data + n * k.image_stride + kv.offset + b * kv.strides[0] +
                                h * kv.strides[1] + s * kv.strides[2];
            double dot = 0;
            for (int64_t i = 0; i < d; ++i)
              dot += static_cast<double>(qrow[i * qv.strides[3]]) * krow[i * kv.strides[3]];
            double score = s_.scale * dot;
            if (biasv)
              score +=
                  bias[static_cast<size_t>(biasv->offset + b * biasv->strides[0] + h * biasv->strides[1] +
                                           t * biasv->strides[2] + s * biasv->strides[3])];
            p[static_cast<size_t>(s)] = score;
            max_score = std::max(max_score, score);
          }
          double sum = 0;
          for (double& x : p) sum += (x = std::exp(x - max_score));
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t s = 0; s < s_len; ++s) {
            const float* vrow = v.data + n * v.image_stride + vv.offset + b * vv.strides[0] +
                                h * vv.strides[1] + s * vv.strides[2];
            const double wgt = p[static_cast<size_t>(s)] / sum;
            for (int64_t i = 0; i < dv; ++i) acc[static_cast<size_t>(i)] += wgt * vrow[i * vv.strides[3]];
          }
          for (int64_t i = 0; i < dv; ++i)
            y[static_cast<size_t>(n * out_stride() + yv.offset + b * yv.strides[0] + h * yv.strides[1] +
                                  t * yv.strides[2] + i * yv.strides[3])] =
                static_cast<float>(acc[static_cast<size_t>(i)]);
        }
      }
    });
    return Status::ok();
  }

  Status layer_norm() {
    const TensorView &xv = s_.views[0], &yv = s_.views[1];
    const int64_t rows = xv.dims[0], c = xv.dims[1];
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> gamma, ctx_.weight(s_, s_.weight));
    std::vector<float> beta(static_cast<size_t>(c), 0.0f);
    if (s_.bias >= 0) {
      GPULAB_ASSIGN_OR_RETURN(beta, ctx_.weight(s_, s_.bias));
    }
    const Source x = value_source(s_.inputs[0]);
    std::vector<float>& y = output();
    for (int64_t n = 0; n < ctx_.batch; ++n)
      for (int64_t i = 0; i < rows; ++i) {
        const float* row = x.data + n * x.image_stride + xv.offset + i * xv.strides[0];
        double mean = 0, var = 0, inv = 0;
        if (s_.l2_norm) {  // x / max(||x||, epsilon); a zero denominator gives zeros
          double sum = 0;
          for (int64_t j = 0; j < c; ++j) sum += double{row[j * xv.strides[1]]} * row[j * xv.strides[1]];
          const double d = std::max(std::sqrt(sum), static_cast<double>(s_.epsilon));
          inv = d > 0 ? 1.0 / d : 0.0;
        } else {
          for (int64_t j = 0; j < c; ++j) mean += row[j * xv.strides[1]];
          mean /= static_cast<double>(c);
          for (int64_t j = 0; j < c; ++j)
            var += (row[j * xv.strides[1]] - mean) * (row[j * xv.strides[1]] - mean);
          var /= static_cast<double>(c);
          inv = 1.0 / std::sqrt(var + s_.epsilon);
        }
        for (int64_t j = 0; j < c; ++j)
          y[static_cast<size_t>(n * out_stride() + yv.offset + i * yv.strides[0] + j * yv.strides[1])] =
              static_cast<float>((row[j * xv.strides[1]] - mean) * inv * gamma[static_cast<size_t>(j)] +
                                 beta[static_cast<size_t>(j)]);
      }
    return Status::ok();
  }

  const PlanStep& s_;
  ViewStepContext& ctx_;
};

}  // namespace

Status interpret_view_step(const PlanStep& step, ViewStepContext& ctx) {
  return Runner(step, ctx).run();
}

void parallel_rows(int64_t count, const std::function<void(int64_t begin, int64_t end)>& fn) {
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), count);
  if (threads <= 1) {
    if (count > 0) fn(0, count);
    return;
  }
  std::vector<std::thread> workers;
  const int64_t chunk = (count + threads - 1) / threads;
  for (int64_t begin = chunk; begin < count; begin += chunk)
    workers.emplace_back(fn, begin, std::min(count, begin + chunk));
  fn(0, std::min(chunk, count));
  for (std::thread& w : workers) w.join();
}

}  // namespace gpulab
