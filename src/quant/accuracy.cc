#include "quant/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "core/math.h"
#include "image/decode.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/plan.h"

namespace gpulab {

namespace {

double sqnr_db(double signal, double noise) {
  if (noise <= 0) return std::numeric_limits<double>::infinity();
  if (signal <= 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

bool is_layer(const PlanStep& s) {
  return s.kind == StepKind::kConv || s.kind == StepKind::kGemm;
}

// A set of the first `count` images of `set` (sharing nothing: the inputs are copied).
LabelledSet first_images(const LabelledSet& set, int64_t count) {
  LabelledSet out = set;
  count = std::min(count, set.size());
  out.paths.resize(static_cast<size_t>(count));
  out.labels.resize(static_cast<size_t>(count));
  out.inputs.resize(static_cast<size_t>(count * set.per_image));
  return out;
}

Predictions first_predictions(const Predictions& p, int64_t count) {
  Predictions out = p;
  count = std::min<int64_t>(count, static_cast<int64_t>(p.top5.size()));
  out.top5.resize(static_cast<size_t>(count));
  out.logits.resize(static_cast<size_t>(count * p.classes));
  return out;
}

}  // namespace

Result<LabelledSet> load_labelled_set(std::span<const LabelledImage> items, const PreprocessSpec& spec,
                                      const SetOptions& options) {
  GPULAB_TRY(spec.validate());
  LabelledSet set;
  set.per_image = spec.image_numel();
  set.height = set.width = spec.output_size;
  for (const auto& item : items) {
    set.paths.push_back(item.path);
    set.labels.push_back(item.label);
  }
  const int64_t n = set.size();
  set.inputs.resize(static_cast<size_t>(n * set.per_image));
  std::vector<Status> errors(static_cast<size_t>(n));
  std::atomic<int64_t> done = 0;
  const int threads = thread_count(options.num_threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) {
        auto image = decode_image(set.paths[static_cast<size_t>(i)]);
        errors[static_cast<size_t>(i)] = image.is_ok()
                                             ? preprocess(*image, spec,
                                                          std::span<float>(set.inputs)
                                                              .subspan(static_cast<size_t>(i * set.per_image),
                                                                       static_cast<size_t>(set.per_image)))
                                             : image.status();
        const int64_t now = ++done;
        if (options.progress && t == 0) options.progress(now, n);
      }
    });
  for (auto& w : workers) w.join();
  if (options.progress) options.progress(n, n);
  for (int64_t i = 0; i < n; ++i)
    if (!errors[static_cast<size_t>(i)].is_ok())
      return errors[static_cast<size_t>(i)].with_context("image '" +
                                                         set.paths[static_cast<size_t>(i)].string() + "'");
  return set;
}

Result<Predictions> predict(const Plan& plan, const LabelledSet& set, const RunOptions& options) {
  if (plan.input_channels != set.channels || plan.input_h != set.height || plan.input_w != set.width)
    return Status::invalid_argument(fmt::format(
        "accuracy: the model takes [{}, {}, {}] images, the preprocessing makes [{}, {}, {}]. Check the "
        "model's preprocess.* metadata.",
        plan.input_channels, plan.input_h, plan.input_w, set.channels, set.height, set.width));
  const int threads = thread_count(options.num_threads);
  const int64_t per_batch = 4 * threads;
  Predictions out;
  out.classes = plan.num_classes;
  const int64_t n = set.size();
  out.logits.reserve(static_cast<size_t>(n * out.classes));
  for (int64_t first = 0; first < n; first += per_batch) {
    const int64_t count = std::min(per_batch, n - first);
    const auto input =
        std::span<const float>(set.inputs)
            .subspan(static_cast<size_t>(first * set.per_image), static_cast<size_t>(count * set.per_image));
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> logits,
                            interpret_plan(plan, input, count, InterpretOptions{.num_threads = threads}));
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    if (options.progress) options.progress(first + count, n);
  }
  for (int64_t i = 0; i < n; ++i)
    out.top5.push_back(
        top_k(std::span<const float>(out.logits)
                  .subspan(static_cast<size_t>(i * out.classes), static_cast<size_t>(out.classes)),
              5));
  return out;
}

Scores score(const Predictions& p, const LabelledSet& set, const Predictions& fp32) {
  Scores s;
  int64_t labelled = 0, top1 = 0, top5 = 0, agree = 0;
  double diff = 0, norm = 0;
  const size_t n = std::min(p.top5.size(), fp32.top5.size());
  for (size_t i = 0; i < n; ++i) {
    agree += p.top5[i][0] == fp32.top5[i][0];
    const int64_t label = i < set.labels.size() ? set.labels[i] : -1;
    if (label < 0) continue;
    ++labelled;
    top1 += p.top5[i][0] == label;
    top5 += std::find(p.top5[i].begin(), p.top5[i].end(), label) != p.top5[i].end();
  }
  for (size_t i = 0; i < std::min(p.logits.size(), fp32.logits.size()); ++i) {
    const double d = static_cast<double>(p.logits[i]) - fp32.logits[i];
    diff += d * d;
    norm += static_cast<double>(fp32.logits[i]) * fp32.logits[i];
  }
  s.agreement = n ? static_cast<double>(agree) / static_cast<double>(n) : 1.0;
  s.top1 = labelled ? static_cast<double>(top1) / static_cast<double>(labelled) : 0.0;
  s.top5 = labelled ? static_cast<double>(top5) / static_cast<double>(labelled) : 0.0;
  s.logits_rel_l2 = norm > 0 ? std::sqrt(diff / norm) : 0.0;
  return s;
}

namespace {

Result<Plan> lower_for(const Graph& graph, Precision precision, const AccuracyOptions& options,
                       const std::map<std::string, Precision>& layers) {
  BuildOptions build{.precision = precision, .max_batch = 64};
  build.activation_amax = options.activation_amax;
  build.layer_precision = layers;
  build.bias_correction = options.bias_correction;
  return lower_graph(graph, build);
}

// The Conv/Gemm FLOPs of each layer of `plan`, by name, and their total.
std::map<std::string, double> layer_flops(const Plan& plan, double* total) {
  std::map<std::string, double> out;
  *total = 0;
  for (const PlanStep& s : plan.steps)
    if (is_layer(s)) {
      out[s.name] += s.flops_per_image;
      *total += s.flops_per_image;
    }
  return out;
}

// SQNR of every quantized layer's output in `plan` against the FP32 plan, over `set`.
Result<std::map<std::string, double>> layer_sqnr(const Plan& plan, const Plan& fp32, const LabelledSet& set,
                                                 int threads) {
  std::map<std::string, int> fp32_value;
  for (size_t i = 0; i < fp32.values.size(); ++i) fp32_value[fp32.values[i].name] = static_cast<int>(i);
  std::map<std::string, std::pair<double, double>> sums;  // signal, noise
  const int64_t per_batch = 2 * threads;
  for (int64_t first = 0; first < set.size(); first += per_batch) {
    const int64_t count = std::min(per_batch, set.size() - first);
    const auto input =
        std::span<const float>(set.inputs)
            .subspan(static_cast<size_t>(first * set.per_image), static_cast<size_t>(count * set.per_image));
    std::vector<std::vector<float>> got, want;
    GPULAB_TRY(interpret_plan(plan, input, count, InterpretOptions{.values = &got, .num_threads = threads})
                   .status());
    GPULAB_TRY(interpret_plan(fp32, input, count, InterpretOptions{.values = &want, .num_threads = threads})
                   .status());
    for (const PlanStep& s : plan.steps) {
      if (!is_layer(s) || !is_quantized(s.precision)) continue;
      const PlanValue& v = plan.values[s.output];
      const auto at = fp32_value.find(v.name);
      if (at == fp32_value.end()) continue;
      const PlanValue& r = fp32.values[at->second];
      const std::vector<float>& a = got[s.output];
      const std::vector<float>& b = want[at->second];
      auto& [signal, noise] = sums[s.name];
      const int64_t pixels = count * v.h * v.w;
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t c = 0; c < std::min(v.c_valid, r.c_valid); ++c) {
          const double x = b[static_cast<size_t>(p * r.c + c)], d = a[static_cast<size_t>(p * v.c + c)] - x;
          signal += x * x;
          noise += d * d;
        }
    }
  }
  std::map<std::string, double> out;
  for (const auto& [name, s] : sums) out[name] = sqnr_db(s.first, s.second);
  return out;
}

// Per-layer localisation on `subset` (see the header).
Result<std::vector<LayerReport>> localise(const Graph& graph, const LabelledSet& subset,
                                          const Predictions& fp32, const AccuracyOptions& options,
                                          const Plan& quantized) {
  const int threads = thread_count(options.num_threads);
  GPULAB_ASSIGN_OR_RETURN(const Plan fp32_plan, lower_for(graph, Precision::kFp32, options, {}));
  GPULAB_ASSIGN_OR_RETURN(const auto sqnr, layer_sqnr(quantized, fp32_plan, subset, threads));
  double total = 0;
  const std::map<std::string, double> flops = layer_flops(fp32_plan, &total);
  const Precision fallback = fallback_precision(options.precision);
  std::vector<std::string> layers;
  for (const PlanStep& s : quantized.steps)
    if (is_layer(s) && is_quantized(s.precision)) layers.push_back(s.name);
  std::vector<LayerReport> out;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& name = layers[i];
    std::map<std::string, Precision> alone = options.layer_precision;
    for (const std::string& other : layers)
      if (other != name) alone[other] = fallback;
    GPULAB_ASSIGN_OR_RETURN(const Plan plan, lower_for(graph, options.precision, options, alone));
    RunOptions run{.num_threads = threads};
    if (options.progress)
      run.progress = [&](int64_t done, int64_t) {
        options.progress("per-layer", static_cast<int64_t>(i) * subset.size() + done,
                         static_cast<int64_t>(layers.size()) * subset.size());
      };
    GPULAB_ASSIGN_OR_RETURN(const Predictions p, predict(plan, subset, run));
    const Scores s = score(p, subset, fp32);
    LayerReport r;
    r.name = name;
    r.flops_share = total > 0 ? flops.at(name) / total : 0;
    r.sqnr_db = sqnr.contains(name) ? sqnr.at(name) : std::numeric_limits<double>::infinity();
    r.alone_agreement = s.agreement;
    r.alone_logits_sqnr_db = -20.0 * std::log10(std::max(s.logits_rel_l2, 1e-30));
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(), [](const LayerReport& a, const LayerReport& b) {
    return a.alone_logits_sqnr_db < b.alone_logits_sqnr_db;
  });
  return out;
}

}  // namespace

std::vector<std::string> fallback_order(std::vector<LayerReport> layers) {
  const auto noise_per_flop = [](const LayerReport& l) {
    return std::pow(10.0, -l.alone_logits_sqnr_db / 10.0) / std::max(l.flops_share, 1e-12);
  };
  std::stable_sort(layers.begin(), layers.end(), [&](const LayerReport& a, const LayerReport& b) {
    return noise_per_flop(a) > noise_per_flop(b);
  });
  std::vector<std::string> names;
  for (const LayerReport& l : layers) names.push_back(l.name);
  return names;
}

Result<Predictions> fp32_reference(const Graph& graph, const LabelledSet& set, const RunOptions& options) {
  BuildOptions build{.precision = Precision::kFp32, .max_batch = 64};
  GPULAB_ASSIGN_OR_RETURN(const Plan plan, lower_graph(graph, build));
  return predict(plan, set, options);
}

Result<size_t> smallest_passing_prefix(size_t n, size_t linear_steps,
                                       const std::function<Result<bool>(size_t)>& meets) {
  // One at a time for the first few (most plans need no more), then doubling and bisection.
  size_t pass = n + 1, fail = 0;
  for (size_t k = 1; k <= std::min(linear_steps, n) && pass > n; ++k) {
    GPULAB_ASSIGN_OR_RETURN(const bool ok, meets(k));
    (ok ? pass : fail) = k;
  }
  for (size_t k = 2 * std::max<size_t>(fail, 1); pass > n && fail < n; k *= 2) {
    k = std::min(k, n);
    GPULAB_ASSIGN_OR_RETURN(const bool ok, meets(k));
    (ok ? pass : fail) = k;
  }
  while (pass <= n && pass - fail > 1) {
    const size_t mid = fail + (pass - fail) / 2;
    GPULAB_ASSIGN_OR_RETURN(const bool ok, meets(mid));
    (ok ? pass : fail) = mid;
  }
  return pass <= n ? pass : n;  // not met even with every layer moved: all of them
}

double quantized_flops_share(const Plan& plan) {
  double all = 0, quantized = 0;
  for (const PlanStep& s : plan.steps) {
    if (!is_layer(s)) continue;
    all += s.flops_per_image;
    if (is_quantized(s.precision)) quantized += s.flops_per_image;
  }
  return all > 0 ? quantized / all : 0.0;
}

Result<AccuracyResult> measure_agreement(const Graph& graph, const LabelledSet& set, const Predictions& fp32,
                                         const AccuracyOptions& options) {
  const int threads = thread_count(options.num_threads);
  AccuracyResult result;
  result.precision = options.precision;
  result.images = set.size();
  result.labelled = std::count_if(set.labels.begin(), set.labels.end(), [](int64_t l) { return l >= 0; });
  result.fp32 = score(fp32, set, fp32);
  const auto run_on = [&](const std::string& phase) {
    RunOptions run{.num_threads = threads};
    if (options.progress)
      run.progress = [&options, phase](int64_t done, int64_t total) { options.progress(phase, done, total); };
    return run;
  };
  std::map<std::string, Precision> layers = options.layer_precision;
  GPULAB_ASSIGN_OR_RETURN(Plan plan, lower_for(graph, options.precision, options, layers));
  GPULAB_ASSIGN_OR_RETURN(Predictions predictions,
                          predict(plan, set, run_on(std::string(precision_name(options.precision)))));
  result.plain = result.final = score(predictions, set, fp32);
  result.plain_quantized_flops_share = result.final_quantized_flops_share = quantized_flops_share(plan);
  const bool quantized = is_quantized(options.precision);
  if (quantized && (options.per_layer || options.fallback)) {
    const LabelledSet subset = first_images(set, options.per_layer_images);
    result.per_layer_images = subset.size();
    GPULAB_ASSIGN_OR_RETURN(result.layers,
                            localise(graph, subset, first_predictions(fp32, subset.size()), options, plan));
  }
  if (quantized && options.fallback && result.plain.agreement < options.gate) {
    double total = 0;
    GPULAB_ASSIGN_OR_RETURN(const Plan fp32_plan, lower_for(graph, Precision::kFp32, options, {}));
    const std::map<std::string, double> flops = layer_flops(fp32_plan, &total);
    // The layers that may move, in fallback_order.
    std::vector<LayerReport> movable;
    for (const LayerReport& layer : result.layers)
      if (!layers.contains(layer.name)) movable.push_back(layer);
    const std::vector<std::string> ranked = fallback_order(movable);
    // The plan with the first k ranked layers in FP16, scored on the whole set (each k once).
    std::map<size_t, FallbackStep> steps;
    const auto evaluate = [&](size_t k) -> Result<FallbackStep> {
      if (auto it = steps.find(k); it != steps.end()) return it->second;
      std::map<std::string, Precision> moved = layers;
      for (size_t i = 0; i < k; ++i) moved[ranked[i]] = fallback_precision(options.precision);
      GPULAB_ASSIGN_OR_RETURN(const Plan p, lower_for(graph, options.precision, options, moved));
      GPULAB_ASSIGN_OR_RETURN(const Predictions got, predict(p, set, run_on(fmt::format("fallback {}", k))));
      FallbackStep step{.layers = static_cast<int64_t>(k),
                        .scores = score(got, set, fp32),
                        .quantized_flops_share = quantized_flops_share(p)};
      return steps[k] = step;
    };
    const size_t n = ranked.size();
    GPULAB_ASSIGN_OR_RETURN(const size_t chosen,
                            smallest_passing_prefix(n, kLinearFallbackSteps, [&](size_t k) -> Result<bool> {
                              GPULAB_ASSIGN_OR_RETURN(const FallbackStep s, evaluate(k));
                              return s.scores.agreement >= options.gate;
                            }));
    GPULAB_ASSIGN_OR_RETURN(const FallbackStep final_step, evaluate(chosen));
    double moved = 0;
    for (size_t i = 0; i < chosen; ++i) {
      layers[ranked[i]] = fallback_precision(options.precision);
      result.fallback_layers.push_back(ranked[i]);
      moved += flops.at(ranked[i]);
    }
    result.final = final_step.scores;
    result.final_quantized_flops_share = final_step.quantized_flops_share;
    result.fallback_flops_share = total > 0 ? moved / total : 0;
    for (const auto& [k, s] : steps) result.fallback_steps.push_back(s);
  }
  result.gate_met = result.final.agreement >= options.gate;
  result.layer_precision = layers;
  return result;
}

}  // namespace gpulab
