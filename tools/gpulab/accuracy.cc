// gpulab accuracy: how well a reduced-precision plan agrees with FP32 on labelled images, emulated
// on the CPU (src/quant/accuracy.h), with per-layer error localisation and FP16 fallback.
//   gpulab accuracy --model m.onnx --precision int8 --dataset DIR [--fallback auto] [--per-layer]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "calibration_flags.h"
#include "cli.h"
#include "data_paths.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"
#include "image/dataset.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "progress.h"
#include "quant/accuracy.h"

namespace gpulab::cli {
namespace {

namespace fs = std::filesystem;

struct AccuracyFlags {
  std::string model, dataset, labels;
  std::vector<std::string> precisions = {"int8"};
  CalibrationFlags calibration;
  std::string fallback = "off";
  double gate_percent = 99.0;
  bool per_layer = false;
  int64_t per_layer_images = 100;
  int64_t images = 0;  // 0: all
  std::vector<std::string> layer_precision;
  int threads = 0;
  bool json = false;
  std::string command_line;
  bool exclude_calibration_images = false;  // a calibration flag was given (float precisions too)
};

// Labelled images of --dataset (its labels.tsv, or --labels), or its image files unlabelled.
Result<std::vector<LabelledImage>> dataset_items(const AccuracyFlags& f) {
  std::error_code ec;
  if (!f.labels.empty() || fs::exists(fs::path(f.dataset) / "labels.tsv", ec))
    return load_labelled_folder(f.dataset, f.labels);
  const std::string arg = f.dataset;
  GPULAB_ASSIGN_OR_RETURN(const std::vector<fs::path> files,
                          list_images(std::span<const std::string>(&arg, 1)));
  std::vector<LabelledImage> items;
  for (const auto& p : files) items.push_back(LabelledImage{.path = p, .label = -1});
  return items;
}

std::string percent(double fraction) {
  return fmt::format("{:.2f}%", 100.0 * fraction);
}
nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
nlohmann::json scores_json(const Scores& s, bool labelled) {
  return {{"top1", labelled ? nlohmann::json(s.top1) : nlohmann::json(nullptr)},
          {"top5", labelled ? nlohmann::json(s.top5) : nlohmann::json(nullptr)},
          {"agreement", s.agreement},
          {"logits_rel_l2", s.logits_rel_l2}};
}

nlohmann::json result_json(const AccuracyResult& r, bool labelled) {
  nlohmann::json j = scores_json(r.plain, labelled);
  j["precision"] = std::string(precision_name(r.precision));
  j["quantized_flops_share"] =
      is_quantized(r.precision) ? nlohmann::json(r.plain_quantized_flops_share) : nlohmann::json(nullptr);
  j["gate_met"] = r.gate_met;
  j["fallback"] = nullptr;
  if (!r.fallback_layers.empty() || (is_quantized(r.precision) && r.final.agreement != r.plain.agreement)) {
    nlohmann::json fb = scores_json(r.final, labelled);
    fb["layers"] = r.fallback_layers;
    fb["fallback_flops_share"] = r.fallback_flops_share;
    fb["quantized_flops_share"] = r.final_quantized_flops_share;
    nlohmann::json steps = nlohmann::json::array();
    for (const FallbackStep& s : r.fallback_steps)
      steps.push_back({{"layers", s.layers},
                       {"agreement", s.scores.agreement},
                       {"quantized_flops_share", s.quantized_flops_share}});
    fb["steps"] = std::move(steps);
    j["fallback"] = std::move(fb);
  }
  j["per_layer"] = nullptr;
  if (!r.layers.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerReport& l : r.layers)
      layers.push_back({{"name", l.name},
                        {"flops_share", l.flops_share},
                        {"sqnr_db", finite_or_null(l.sqnr_db)},
                        {"alone_agreement", l.alone_agreement},
                        {"alone_logits_sqnr_db", finite_or_null(l.alone_logits_sqnr_db)}});
    j["per_layer"] = {{"images", r.per_layer_images}, {"layers", std::move(layers)}};
  }
  return j;
}

void print_table(const AccuracyFlags& f, const std::vector<AccuracyResult>& results, const Scores& fp32,
                 int64_t images, int64_t labelled, const std::optional<Calibration>& calibration) {
  fmt::print("{} on {} images of {} ({} labelled), emulated on the CPU\n", f.model, images, f.dataset,
             labelled);
  if (calibration) {
    if (calibration->from_cache)
      fmt::print("calibration: {} ranges from '{}' ({} images)\n",
                 calibrator_name(calibration->cache.calibrator), f.calibration.cache,
                 calibration->cache.images);
    else
      fmt::print("calibration: {} on {} images of {} (not scored), {:.1f} s\n",
                 calibrator_name(calibration->cache.calibrator), calibration->images.size(),
                 f.calibration.data, calibration->seconds);
  }
  const auto labelled_pct = [&](double v) { return labelled ? percent(v) : std::string("-"); };
  fmt::print("\n{:<14} {:>8} {:>8} {:>11} {:>13} {:>12}\n", "precision", "top-1", "top-5", "agreement",
             "logits rel L2", "8-bit FLOPs");
  fmt::print("{:<14} {:>8} {:>8} {:>11} {:>13} {:>12}\n", "fp32", labelled_pct(fp32.top1),
             labelled_pct(fp32.top5), percent(1.0), "0", "-");
  for (const AccuracyResult& r : results) {
    const bool q = is_quantized(r.precision);
    fmt::print("{:<14} {:>8} {:>8} {:>11} {:>13.2e} {:>12}\n", precision_name(r.precision),
               labelled_pct(r.plain.top1), labelled_pct(r.plain.top5), percent(r.plain.agreement),
               r.plain.logits_rel_l2, q ? percent(r.plain_quantized_flops_share) : "-");
    if (!r.fallback_layers.empty())
      fmt::print("{:<14} {:>8} {:>8} {:>11} {:>13.2e} {:>12}\n",
                 fmt::format("{}+fallback", precision_name(r.precision)), labelled_pct(r.final.top1),
                 labelled_pct(r.final.top5), percent(r.final.agreement), r.final.logits_rel_l2,
                 percent(r.final_quantized_flops_share));
  }
  for (const AccuracyResult& r : results) {
    if (!r.layers.empty()) {
      fmt::print("\n{} per layer ({} images; worst first by the logits' SQNR with only that layer in {}):\n",
                 precision_name(r.precision), r.per_layer_images, precision_name(r.precision));
      fmt::print("{:<44} {:>7} {:>9} {:>11} {:>12}\n", "layer", "FLOPs", "SQNR dB", "alone agr.",
                 "alone SQNR");
      for (const LayerReport& l : r.layers)
        fmt::print("{:<44} {:>6.1f}% {:>9.1f} {:>11} {:>12.1f}\n", l.name, 100 * l.flops_share, l.sqnr_db,
                   percent(l.alone_agreement), l.alone_logits_sqnr_db);
    }
    if (!r.fallback_layers.empty()) {
      std::string names;
      for (const auto& n : r.fallback_layers) names += (names.empty() ? "" : ", ") + n;
      fmt::print("\n{} fallback: {} layer(s) moved to fp16 ({} of the Conv/Gemm FLOPs): {}\n",
                 precision_name(r.precision), r.fallback_layers.size(), percent(r.fallback_flops_share),
                 names);
    }
    fmt::print("{} gate (top-1 agreement >= {:.2f}%): {}\n", precision_name(r.precision), f.gate_percent,
               r.gate_met ? "met" : "NOT met");
  }
}

int run_accuracy(AccuracyFlags f) {
  if (f.model.empty()) {
    GPULAB_ASSIGN_OR_REPORT(f.model, default_model_path());
  }
  std::vector<Precision> precisions;
  for (const std::string& list : f.precisions) {
    std::stringstream ss(list);
    for (std::string name; std::getline(ss, name, ',');) {
      auto p = parse_precision(name);
      if (!p.is_ok() || *p == Precision::kFp32 || *p == Precision::kTf32)
        return report(Status::invalid_argument(fmt::format(
            "--precision: '{}' is not one of int8, fp8, fp16, bf16 (FP32 is the reference).", name)));
      precisions.push_back(*p);
    }
  }
  if (f.fallback != "off" && f.fallback != "auto")
    return report(Status::invalid_argument("--fallback: '" + f.fallback + "' is not auto or off."));
  std::map<std::string, Precision> layers;
  for (const auto& item : f.layer_precision) {
    const auto eq = item.find('=');
    auto p = eq == std::string::npos ? Result<Precision>(Status::invalid_argument("expected NAME=PRECISION"))
                                     : parse_precision(item.substr(eq + 1));
    if (!p.is_ok()) return report(p.status().with_context("--layer-precision '" + item + "'"));
    layers[item.substr(0, eq)] = *p;
  }
  const int threads = thread_count(f.threads);

  GPULAB_ASSIGN_OR_REPORT(Graph graph, load_onnx(f.model));
  GPULAB_TRY_CLI(run_passes(graph).with_context("optimizing '" + f.model + "'"));
  GPULAB_ASSIGN_OR_REPORT(const PreprocessSpec spec, model_preprocess(graph));
  GPULAB_ASSIGN_OR_REPORT(std::vector<LabelledImage> items, dataset_items(f));

  std::optional<Calibration> calibration;
  const bool any_quantized = std::any_of(precisions.begin(), precisions.end(), is_quantized);
  if (any_quantized || f.exclude_calibration_images) {
    // The images --calibration-data (default: the dataset) and --calibration-images pick are not
    // scored, whether they are calibrated on now or were for a reused cache; checked before
    // calibrating.
    const bool data_given = !f.calibration.data.empty();
    if (!data_given) f.calibration.data = f.dataset;
    const CalibrationFlags cf = f.calibration;
    const bool cache_reused = !cf.cache.empty() && fs::exists(cf.cache);
    auto picked = picked_calibration_images(cf);
    if (!picked.is_ok() && (data_given || !cache_reused)) return report(picked.status());
    if (picked.is_ok()) {
      std::set<fs::path> used;
      for (const auto& p : *picked) used.insert(fs::weakly_canonical(p));
      std::erase_if(items,
                    [&](const LabelledImage& i) { return used.contains(fs::weakly_canonical(i.path)); });
      if (items.empty())
        return report(
            Status::invalid_argument(fmt::format("accuracy: every image of '{}' is calibrated on, none is "
                                                 "left to score. Lower --calibration-images "
                                                 "or give another --calibration-data folder.",
                                                 f.dataset)));
    }
    if (any_quantized) {
      GPULAB_ASSIGN_OR_REPORT(calibration, calibrate_model(cf, f.model, graph, spec, threads));
    }
  }
  if (f.images > 0 && static_cast<int64_t>(items.size()) > f.images)
    items.resize(static_cast<size_t>(f.images));

  ProgressLine progress("");
  GPULAB_ASSIGN_OR_REPORT(
      const LabelledSet set,
      load_labelled_set(items, spec, {.num_threads = threads, .progress = [&](int64_t d, int64_t t) {
                                        progress.update("decoding", d, t);
                                      }}));
  GPULAB_ASSIGN_OR_REPORT(
      const Predictions fp32,
      fp32_reference(graph, set, {.num_threads = threads, .progress = [&](int64_t d, int64_t t) {
                                    progress.update("fp32", d, t);
                                  }}));
  std::vector<AccuracyResult> results;
  for (Precision p : precisions) {
    AccuracyOptions options{
        .precision = p,
        .layer_precision = layers,
        .gate = f.gate_percent / 100.0,
        .fallback = f.fallback == "auto",
        .per_layer = f.per_layer,
        .per_layer_images = f.per_layer_images,
        .num_threads = threads,
        .progress = [&](std::string_view phase, int64_t d, int64_t t) { progress.update(phase, d, t); }};
    if (calibration && is_quantized(p)) {
      options.activation_amax = calibration->cache.amax;
      BuildOptions build{.precision = p};
      build.activation_amax = options.activation_amax;
      GPULAB_ASSIGN_OR_REPORT(options.bias_correction, model_bias_correction(f.calibration, *calibration,
                                                                             graph, build, spec, threads));
    }
    GPULAB_ASSIGN_OR_REPORT(AccuracyResult r, measure_agreement(graph, set, fp32, options));
    results.push_back(std::move(r));
  }
  progress.finish();

  const int64_t labelled =
      std::count_if(set.labels.begin(), set.labels.end(), [](int64_t l) { return l >= 0; });
  const Scores fp32_scores = score(fp32, set, fp32);
  if (f.json) {
    nlohmann::json j = {{"schema", "gpulab.accuracy"},
                        {"schema_version", 1},
                        {"model", f.model},
                        {"dataset", f.dataset},
                        {"images", set.size()},
                        {"labelled", labelled},
                        {"gate", f.gate_percent / 100.0},
                        {"emulated", "cpu"},
                        {"calibration", nullptr},
                        {"fp32", scores_json(fp32_scores, labelled > 0)},
                        {"environment",
                         {{"gpulab_version", GPULAB_VERSION},
                          {"gpulab_commit", GPULAB_GIT_COMMIT},
                          {"command_line", f.command_line},
                          {"threads", threads}}}};
    if (calibration)
      j["calibration"] = {
          {"calibrator", std::string(calibrator_name(calibration->cache.calibrator))},
          {"percentile", calibration->cache.percentile},
          {"images", calibration->from_cache ? calibration->cache.images
                                             : static_cast<int64_t>(calibration->images.size())},
          {"source", calibration->from_cache ? "cache" : "data"},
          {"data", calibration->from_cache ? nlohmann::json(nullptr) : nlohmann::json(f.calibration.data)},
          {"cache",
           f.calibration.cache.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.calibration.cache)},
          {"seconds", calibration->seconds},
          {"bias_correction", f.calibration.bias_correction == "on"}};
    nlohmann::json rs = nlohmann::json::array();
    for (const auto& r : results) rs.push_back(result_json(r, labelled > 0));
    j["results"] = std::move(rs);
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(f, results, fp32_scores, set.size(), labelled, calibration);
  }
  const bool all_met =
      std::all_of(results.begin(), results.end(), [](const AccuracyResult& r) { return r.gate_met; });
  return all_met ? 0 : 1;
}

}  // namespace

void add_accuracy_command(CLI::App& app) {
  auto f = std::make_shared<AccuracyFlags>();
  CLI::App* sub = app.add_subcommand(
      "accuracy",
      "Top-1/top-5 and agreement with FP32 of INT8/FP8/FP16/BF16 plans on labelled images (CPU emulation)");
  sub->add_option("-m,--model", f->model, "ONNX classifier (default: the bundled MobileNetV2)");
  sub->add_option("--precision", f->precisions, "int8, fp8, fp16 or bf16; repeat or separate with commas")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--dataset", f->dataset,
                  "Folder with labels.tsv (file, class index), or a folder of images")
      ->required();
  sub->add_option("--labels", f->labels,
                  "A labels.tsv to read instead of the dataset's (files relative to it)");
  add_calibration_flags(sub, &f->calibration, 200);
  sub->add_option("--fallback", f->fallback,
                  "auto: move the most sensitive layers to fp16 until the gate is met")
      ->check(CLI::IsMember({"off", "auto"}))
      ->capture_default_str();
  sub->add_option("--gate", f->gate_percent, "Top-1 agreement with FP32 to reach, percent")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  sub->add_flag("--per-layer", f->per_layer,
                "Per-layer error localisation (SQNR, agreement with one layer quantized)");
  sub->add_option("--per-layer-images", f->per_layer_images,
                  "Images of the per-layer pass (the first of the set)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--images", f->images, "Score only the first N images left after calibration")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  sub->add_option("--layer-precision", f->layer_precision, "Per-layer precision, NAME=fp16 (repeatable)");
  sub->add_option("--threads", f->threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  sub->add_flag("--json", f->json, "Print JSON (schema gpulab.accuracy) instead of tables");
  on_run(sub, [f, sub] {
    f->command_line = process_command_line();
    f->exclude_calibration_images = sub->count("--calibration-data") + sub->count("--calibration-images") > 0;
    return run_accuracy(*f);
  });
}

}  // namespace gpulab::cli
