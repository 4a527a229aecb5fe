#include "quant/bias_correction.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

#include "plan/interpret.h"
#include "plan/interpret_views.h"
#include "plan/lower.h"
#include "plan/plan.h"

namespace gpulab {

namespace {

using LayerMeans = std::map<std::string, std::vector<double>>;

// The range a step's activation clamps to: ReLU [0, inf), Clip [min, max], none (-inf, inf).
struct Clamp {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  double operator()(double v) const { return std::min(std::max(v, lo), hi); }
  bool linear() const { return std::isinf(lo) && std::isinf(hi); }
};
Clamp clamp_of(const PlanStep& s) {
  if (s.kind != StepKind::kConv || s.conv.activation == Activation::kNone) return {};
  if (s.conv.activation == Activation::kRelu) return {.lo = 0.0};
  return {.lo = s.conv.clip_min, .hi = s.conv.clip_max};
}

// The first `valid` channels of an NHWC span with `channels` innermost, channel by channel: plane k
// is channel k's values in their order in `values`. A layer's channels are then visited one after
// another in contiguous memory, on several threads (parallel_rows), instead of each walking the
// whole tensor at a stride of `channels`; the sums below run in the same order either way.
struct Planes {
  std::vector<float> data;
  size_t count = 0;  // values per channel
  std::span<const float> plane(size_t k) const { return {data.data() + k * count, count}; }
};
Planes channel_planes(std::span<const float> values, int64_t channels, int64_t valid) {
  Planes p;
  p.count = values.size() / static_cast<size_t>(channels);
  p.data.resize(p.count * static_cast<size_t>(valid));
  const auto c = static_cast<size_t>(channels), v = static_cast<size_t>(valid);
  // Blocks of 16 pixels: each channel's 16 values fill one cache line of its plane.
  constexpr size_t kBlock = 16;
  parallel_rows(static_cast<int64_t>((p.count + kBlock - 1) / kBlock), [&](int64_t begin, int64_t end) {
    for (size_t i0 = static_cast<size_t>(begin) * kBlock;
         i0 < std::min(p.count, static_cast<size_t>(end) * kBlock); i0 += kBlock) {
      const size_t i1 = std::min(p.count, i0 + kBlock);
      for (size_t k = 0; k < v; ++k)
        for (size_t i = i0; i < i1; ++i) p.data[k * p.count + i] = values[i * c + k];
    }
  });
  return p;
}

// The mean of a channel's values after the activation.
double activated_mean(std::span<const float> plane, const Clamp& clamp) {
  double sum = 0;
  for (const float v : plane) sum += clamp(v);
  return sum / static_cast<double>(plane.size());
}

// The shift d of a channel's values before the activation that makes their mean after it
// `target`: mean(clamp(v + d)) grows with d, so a bracketed Newton iteration (bisection where a
// step would leave the bracket) finds it. 0 when no shift reaches the target (the FP32 channel's
// mean sits at a bound of the clamp: a dead or saturated channel stays as it is).
double matching_shift(std::span<const float> plane, const Clamp& clamp, double target) {
  double lo_v = std::numeric_limits<double>::infinity(), hi_v = -lo_v, sum = 0;
  for (const float v : plane) {
    lo_v = std::min<double>(lo_v, v);
    hi_v = std::max<double>(hi_v, v);
    sum += v;
  }
  const double mean = sum / static_cast<double>(plane.size());
  if (clamp.linear()) return target - mean;
  if (!(target > clamp.lo && target < clamp.hi)) return 0.0;
  // At a every value is at or below lo (mean lo < target); at b the mean is at least target.
  double a = clamp.lo - hi_v, b = std::isinf(clamp.hi) ? target - lo_v : clamp.hi - lo_v;
  double d = std::clamp(target - mean, a, b);
  const double tolerance = 1e-7 * (1.0 + std::abs(target));
  for (int iteration = 0; iteration < 60; ++iteration) {
    double f = 0, slope = 0;
    for (const float v : plane) {
      const double x = v + d;
      f += clamp(x);
      slope += x > clamp.lo && x < clamp.hi ? 1.0 : 0.0;
    }
    const double n = static_cast<double>(plane.size());
    f = f / n - target;
    if (std::abs(f) <= tolerance) break;
    (f > 0 ? b : a) = d;
    const double newton = slope > 0 ? d - f / (slope / n) : std::numeric_limits<double>::quiet_NaN();
    d = newton > a && newton < b ? newton : 0.5 * (a + b);
  }
  return d;
}

// `images` images in chunks of `batch` (the last one shorter).
struct Chunking {
  int64_t images, batch;
  size_t size() const { return static_cast<size_t>((images + batch - 1) / batch); }
  int64_t first(size_t j) const { return static_cast<int64_t>(j) * batch; }
  int64_t count(size_t j) const { return std::min(batch, images - first(j)); }
};

// Interprets `plan` over the chunks, each chunk on one thread of its own (up to `threads` at
// once), calling visit(chunk, step, values, channels) at every Conv/Gemm step before its
// activation. The chunks and what visit records per chunk do not depend on `threads`.
using Visit =
    std::function<void(size_t chunk, const PlanStep& step, std::span<float> values, int64_t channels)>;
Status for_each_chunk(const Plan& plan, const BatchSource& source, const Chunking& chunks, int threads,
                      const Visit& visit, const std::function<void(int64_t)>& done) {
  std::atomic<size_t> next{0};
  std::mutex mutex;  // the source and the progress
  std::vector<Status> failed(chunks.size(), Status::ok());
  const auto work = [&] {
    for (size_t j = next++; j < chunks.size(); j = next++) {
      const int64_t count = chunks.count(j);
      Result<std::vector<float>> input = std::vector<float>{};  // replaced under the lock
      {
        std::lock_guard lock(mutex);
        input = source(chunks.first(j), count);
      }
      if (!input.is_ok()) {
        failed[j] = input.status();
        continue;
      }
      InterpretOptions run;
      run.pre_activation = [&, j](const PlanStep& step, std::span<float> values, int64_t channels) {
        visit(j, step, values, channels);
      };
      failed[j] = interpret_plan(plan, *input, count, run).status();
      std::lock_guard lock(mutex);
      done(count);
    }
  };
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < std::min<int64_t>(threads, static_cast<int64_t>(chunks.size())); ++t)
    workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  for (const Status& s : failed)
    if (!s.is_ok()) return s;
  return Status::ok();
}

}  // namespace

Result<std::map<std::string, std::vector<float>>> bias_corrections(const Graph& graph,
                                                                   const BuildOptions& build,
                                                                   const BatchSource& source, int64_t images,
                                                                   const BiasCorrectionOptions& options) {
  if (!is_quantized(build.precision))
    return Status::invalid_argument(
        fmt::format("bias correction is for INT8/FP8 plans, not {}.", precision_name(build.precision)));
  std::map<std::string, std::vector<float>> corrections;
  if (images <= 0) return corrections;
  const int threads = thread_count(options.num_threads);
  const int64_t batch = std::max<int64_t>(options.batch, 1);
  const Chunking chunks{images, batch};
  int64_t done = 0;
  const auto progress = [&](int64_t count) {
    done += count;
    if (options.progress) options.progress(done, 2 * images);
  };

  // The FP32 plan's channel means after each layer's activation, per chunk.
  BuildOptions fp32 = build;  // the ranges and corrections do not apply to float layers
  fp32.precision = Precision::kFp32;
  fp32.max_batch = batch;
  fp32.layer_precision.clear();
  GPULAB_ASSIGN_OR_RETURN(const Plan fp32_plan, lower_graph(graph, fp32));
  std::vector<LayerMeans> reference(chunks.size());
  GPULAB_TRY(for_each_chunk(
      fp32_plan, source, chunks, threads,
      [&](size_t j, const PlanStep& step, std::span<float> values, int64_t channels) {
        const Clamp clamp = clamp_of(step);
        const int64_t valid = fp32_plan.values[step.output].c_valid;
        const Planes planes = channel_planes(values, channels, valid);
        std::vector<double>& means = reference[j][step.name];
        means.assign(static_cast<size_t>(valid), 0.0);
        parallel_rows(valid, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k)
            means[static_cast<size_t>(k)] = activated_mean(planes.plane(static_cast<size_t>(k)), clamp);
        });
      },
      progress));

  // The quantized plan, each 8-bit layer's channels shifted as the chunk reaches it so that their
  // means after the activation are the FP32 plan's: the layers after it see inputs whose shift is
  // already corrected.
  BuildOptions quantized = build;
  quantized.max_batch = batch;
  quantized.bias_correction.clear();
  GPULAB_ASSIGN_OR_RETURN(const Plan plan, lower_graph(graph, quantized));
  std::vector<LayerMeans> shifts(chunks.size());
  GPULAB_TRY(for_each_chunk(
      plan, source, chunks, threads,
      [&](size_t j, const PlanStep& step, std::span<float> values, int64_t channels) {
        if (!is_quantized(step.precision)) return;
        const auto ref = reference[j].find(step.name);
        const int64_t valid = plan.values[step.output].c_valid;
        if (ref == reference[j].end() || static_cast<int64_t>(ref->second.size()) != valid) return;
        const Clamp clamp = clamp_of(step);
        const Planes planes = channel_planes(values, channels, valid);
        std::vector<double>& shift = shifts[j][step.name];
        shift.assign(static_cast<size_t>(valid), 0.0);
        parallel_rows(valid, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k)
            shift[static_cast<size_t>(k)] = matching_shift(planes.plane(static_cast<size_t>(k)), clamp,
                                                           ref->second[static_cast<size_t>(k)]);
        });
        const auto c = static_cast<size_t>(channels);
        parallel_rows(static_cast<int64_t>(values.size() / c), [&](int64_t begin, int64_t end) {
          for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i)
            for (size_t k = 0; k < shift.size(); ++k)
              values[i * c + k] = static_cast<float>(values[i * c + k] + shift[k]);
        });
      },
      progress));

  // The correction: the shifts averaged over the images.
  std::map<std::string, std::vector<double>> sums;
  for (size_t j = 0; j < chunks.size(); ++j) {
    const double count = static_cast<double>(chunks.count(j));
    for (const auto& [name, shift] : shifts[j]) {
      std::vector<double>& sum = sums[name];
      sum.resize(shift.size(), 0.0);
      for (size_t k = 0; k < shift.size(); ++k) sum[k] += count * shift[k];
    }
  }
  for (const auto& [name, sum] : sums) {
    std::vector<float>& c = corrections[name];
    for (double v : sum) c.push_back(static_cast<float>(v / static_cast<double>(images)));
  }
  return corrections;
}

}  // namespace gpulab
