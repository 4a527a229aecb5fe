// The sweep on the simulated target: the search, OOM handling and memory records, the
// recommendation, --resume and the JSON, all without a GPU.
#include "sweep/sweep.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "sweep/cuda_target.h"
#include "sweep/multi_target.h"
#include "sweep/simulated_target.h"

namespace gpulab::sweep {
namespace {

std::vector<int64_t> visit(int64_t max_batch, int64_t largest_fit, double tolerance = 0.05) {
  BatchSearch search(max_batch, tolerance);
  std::vector<int64_t> seen;
  while (auto b = search.next()) {
    seen.push_back(*b);
    search.record(*b, *b <= largest_fit);
    if (seen.size() > 100) break;
  }
  return seen;
}

// Which batch's timed tactics the CUDA target's plan at each batch of a search takes (0: its own),
// following the target's bookkeeping: a plan that times its own becomes the last timed batch.
std::vector<int64_t> tactic_batches(const std::vector<int64_t>& batches, int64_t up_to, int64_t ratio) {
  std::vector<int64_t> from;
  int64_t last_timed = 0;
  for (int64_t b : batches) {
    from.push_back(sweep_tactic_batch(b, last_timed, up_to, ratio));
    if (from.back() == 0) last_timed = b;
  }
  return from;
}

TEST(SweepTacticBatch, TimesEveryFourthPowerOfTwoUpToTheLimitThenReusesIt) {
  const std::vector<int64_t> grow{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 3072};
  EXPECT_EQ(tactic_batches(grow, 1024, 4),
            (std::vector<int64_t>{0, 1, 0, 4, 0, 16, 0, 64, 0, 256, 0, 1024, 1024, 1024}));
  // Ratio 1 times every batch up to the limit (the behaviour before the ratio existed).
  EXPECT_EQ(tactic_batches(grow, 1024, 1),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 1024, 1024}));
  // --timed-tactics-up-to 0 times at every batch, however large.
  EXPECT_EQ(tactic_batches({1, 2, 65536}, 0, 4), (std::vector<int64_t>{0, 0, 0}));
}

TEST(SweepTacticBatch, AListOrABisectionBelowTheLastTimedBatchTimesItsOwn) {
  // Explicit --batches spaced 8x apart: each is timed.
  EXPECT_EQ(tactic_batches({1, 8, 64, 512}, 1024, 4), (std::vector<int64_t>{0, 0, 0, 0}));
  // A smaller batch than the last timed one cannot take its tactics (BuildOptions::tactic_batch
  // must be below the plan's batch): timed; 96 then follows 64 within 4x.
  EXPECT_EQ(tactic_batches({256, 64, 96, 300}, 1024, 4), (std::vector<int64_t>{0, 0, 64, 0}));
}

TEST(BatchSearch, GrowsThenBisectsToWithinFivePercent) {
  // 256 fits, 512 does not: bisection between them until the gap is at most 5% of the fit.
  EXPECT_EQ(visit(65536, 300),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 384, 320, 288, 304, 296}));
}

TEST(BatchSearch, StopsAtOneImageAndAtTheMaximum) {
  EXPECT_EQ(visit(65536, 0), (std::vector<int64_t>{1}));  // not even one image fits
  EXPECT_EQ(visit(100, 1000), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));  // max_batch tried last
  EXPECT_EQ(visit(64, 1000), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  // Small batches bisect to one image.
  EXPECT_EQ(visit(65536, 5), (std::vector<int64_t>{1, 2, 4, 8, 6, 5}));
}

SimulatedScenario scenario() {
  SimulatedScenario s;
  s.gpu_name = "test GPU";
  s.memory_mib = 1000;
  s.baseline_used_mib = 100;
  s.power_limit_w = 300;
  s.idle_power_w = 50;
  s.watts_per_tflops = 10;
  s.flops_per_image = 1e9;
  s.bytes_per_image = 1e6;
  s.param_bytes = 1'000'000;
  // fp16: weights 20 MiB, 10 MiB per image: 88 images fit (100 + 20 + 880 = 1000).
  s.precisions[Precision::kFp16] = {.launch_ms = 0.1,
                                    .per_image_ms = 0.01,
                                    .tflops_ceiling = 100,
                                    .memory_gb_s = 1000,
                                    .weights_mib = 20,
                                    .mib_per_image = 10,
                                    .oom_stage = OomStage::kContext,
                                    .agreement = 0.995};
  // bf16 runs out of memory while running, and fails the 99% gate.
  s.precisions[Precision::kBf16] = {.launch_ms = 0.1,
                                    .per_image_ms = 0.011,
                                    .tflops_ceiling = 100,
                                    .memory_gb_s = 1000,
                                    .weights_mib = 20,
                                    .mib_per_image = 10,
                                    .oom_stage = OomStage::kRun,
                                    .agreement = 0.97};
  return s;
}

SweepOptions options() {
  SweepOptions o;
  o.model_path = "model.onnx";
  o.precisions = {Precision::kFp16, Precision::kBf16};
  o.bench.min_duration_s = 0.05;
  o.bench.warmup_ms = 0;
  o.bisect_tolerance = 0.01;  // bisect to one image in these small batches
  return o;
}

struct SweepRun {
  SweepResult result;
  Status status;
};

SweepRun run(const SweepOptions& o, SimulatedTarget& target, const SweepResult* resume = nullptr,
             const std::atomic<bool>* interrupted = nullptr,
             std::function<void(const SweepResult&)> observer = {}) {
  SweepRun r;
  r.status = run_sweep(o,
                       {.target = &target,
                        .telemetry = &target,
                        .observer = std::move(observer),
                        .interrupted = interrupted,
                        .resume = resume},
                       r.result);
  return r;
}

std::vector<int64_t> batches_of(const SweepResult& r, Precision p) {
  std::vector<int64_t> out;
  for (const auto& q : r.points) {
    if (q.precision == p) out.push_back(q.batch);
  }
  return out;
}

TEST(Sweep, VisitsTheSearchAndRecoversFromOutOfMemory) {
  SimulatedTarget target(scenario(), "sim");
  const SweepRun r = run(options(), target);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_EQ(r.result.state, "complete");
  EXPECT_EQ(batches_of(r.result, Precision::kFp16),
            (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 96, 80, 88, 92, 90, 89}));
  for (const SweepPoint& p : r.result.points) {
    // Every point, OOM or not, leaves the device memory where it found it.
    ASSERT_TRUE(p.memory_before_bytes && p.memory_after_bytes);
    EXPECT_EQ(*p.memory_before_bytes, int64_t{100} << 20) << p.batch;
    EXPECT_EQ(*p.memory_after_bytes, int64_t{100} << 20) << p.batch;
    if (p.precision == Precision::kFp16) {
      EXPECT_EQ(p.status == PointStatus::kOk, p.batch <= 88) << p.batch;
      if (p.status == PointStatus::kOom) {
        EXPECT_EQ(p.oom_stage, OomStage::kContext);
        EXPECT_NE(p.error.find("out of memory"), std::string::npos) << p.error;
      }
    } else if (p.status == PointStatus::kOom) {
      EXPECT_EQ(p.oom_stage, OomStage::kRun);
    }
  }
  // The largest batch that fits is capacity-bound, with the batch that did not as evidence.
  const auto fit = std::find_if(r.result.points.begin(), r.result.points.end(), [](const SweepPoint& p) {
    return p.precision == Precision::kFp16 && p.batch == 88;
  });
  ASSERT_NE(fit, r.result.points.end());
  ASSERT_FALSE(fit->verdicts.empty());
  EXPECT_EQ(fit->verdicts.back().kind, VerdictKind::kCapacityBound);
  EXPECT_EQ(fit->verdicts.back().values.at("first_oom"), 89);
  EXPECT_EQ(fit->verdicts.back().evidence, "batch 88 fits, 89 does not (out of memory at context)");
}

TEST(Sweep, RecordsMemoryThatAnOutOfMemoryLeaves) {
  SimulatedScenario s = scenario();
  s.leak_mib_per_oom = 4;
  SimulatedTarget target(s, "sim");
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  const SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok());
  int64_t ooms = 0;
  for (const SweepPoint& p : r.result.points) {
    const int64_t left = *p.memory_after_bytes - *p.memory_before_bytes;
    EXPECT_EQ(left, p.status == PointStatus::kOom ? int64_t{4} << 20 : 0) << p.batch;
    ooms += p.status == PointStatus::kOom;
  }
  EXPECT_GE(ooms, 4);
}

TEST(Sweep, RecommendsTheBestBatchUnderTheBudgetAndTheKnee) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.latency_budget_ms = 0.5;  // 0.1 + 0.01 x b (plus the power cap's slowdown): b <= 40 or less
  o.dataset_dir = GPULAB_SOURCE_DIR "/data/images";
  const SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  ASSERT_EQ(r.result.recommendations.size(), 2u);
  const PrecisionRecommendation& fp16 = r.result.recommendations[0];
  EXPECT_EQ(fp16.precision, Precision::kFp16);
  EXPECT_TRUE(fp16.excluded.empty()) << fp16.excluded;
  EXPECT_EQ(fp16.largest_fitting_batch, 88);
  EXPECT_EQ(fp16.first_oom_batch, 89);
  ASSERT_TRUE(fp16.best_batch && fp16.knee_batch && fp16.best_p99_ms);
  EXPECT_LE(*fp16.best_p99_ms, 0.5);
  // The best is the fastest point within the budget; the knee the smallest within 5% of it.
  double best = 0;
  for (const SweepPoint& p : r.result.points) {
    if (p.precision != Precision::kFp16 || p.status != PointStatus::kOk) continue;
    const double p99 = *p.bench->latency_ms.find_percentile(99);
    if (p99 <= 0.5) best = std::max(best, p.bench->throughput_ips);
  }
  EXPECT_EQ(*fp16.best_throughput_ips, best);
  EXPECT_GE(*fp16.knee_throughput_ips, 0.95 * best);
  EXPECT_LE(*fp16.knee_batch, *fp16.best_batch);
  ASSERT_TRUE(fp16.accuracy);
  EXPECT_EQ(fp16.accuracy->images, 5);  // the bundled photos, counted for real
  EXPECT_EQ(fp16.accuracy_passed, true);
  // bf16 measures fine but fails the accuracy gate: excluded, and the message says by how much.
  const PrecisionRecommendation& bf16 = r.result.recommendations[1];
  EXPECT_FALSE(bf16.best_batch.has_value());
  EXPECT_EQ(bf16.excluded, "accuracy gate: top-1 agreement with FP32 97.00% < 99.00% on 5 images");
}

TEST(Sweep, AGateFailedOnAnUntrainedModelSaysWhy) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.dataset_dir = GPULAB_SOURCE_DIR "/data/images";
  SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  ASSERT_TRUE(r.result.accuracy.contains("bf16"));
  // Trained weights (or no labels): the plain message. Near chance (the seeded ResNet-18 scored
  // 0.2% on the ImageNet sample): the reason the gate failed, and how to run without it.
  r.result.accuracy["bf16"].top1_accuracy = 0.70;
  EXPECT_EQ(recommend(o, r.result)[1].excluded,
            "accuracy gate: top-1 agreement with FP32 97.00% < 99.00% on 5 images");
  r.result.accuracy["bf16"].top1_accuracy = 0.002;
  const std::string excluded = recommend(o, r.result)[1].excluded;
  EXPECT_TRUE(
      excluded.starts_with("accuracy gate: top-1 agreement with FP32 97.00% < 99.00% on 5 images "
                           "(top-1 accuracy against the labels 0.2%, near chance"))
      << excluded;
  EXPECT_NE(excluded.find("without --dataset there is no gate"), std::string::npos) << excluded;
}

TEST(Sweep, SaysWhyNoBatchFitsTheBudget) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.batches = {1, 8};
  o.latency_budget_ms = 0.05;
  const SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok());
  EXPECT_EQ(batches_of(r.result, Precision::kFp16), (std::vector<int64_t>{1, 8}));
  EXPECT_NE(
      r.result.recommendations[0].excluded.find("no batch within the p99 latency budget of 0.050 ms (the "
                                                "lowest p99 was 0.1"),
      std::string::npos)
      << r.result.recommendations[0].excluded;
}

TEST(Sweep, AListStopsAtItsFirstOutOfMemory) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.batches = {1, 64, 100, 200};
  const SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok());
  EXPECT_EQ(batches_of(r.result, Precision::kFp16), (std::vector<int64_t>{1, 64, 100}));
  EXPECT_EQ(r.result.points.back().status, PointStatus::kOom);
  EXPECT_EQ(r.result.points.back().phase, "list");
}

TEST(Sweep, InterruptedThenResumedMeasuresOnlyWhatIsLeft) {
  SimulatedTarget full_target(scenario(), "sim");
  const SweepRun full = run(options(), full_target);
  ASSERT_TRUE(full.status.is_ok());

  // Stop after five points.
  SimulatedTarget target(scenario(), "sim");
  std::atomic<bool> stop{false};
  const SweepRun first = run(options(), target, nullptr, &stop, [&](const SweepResult& r) {
    if (r.points.size() >= 5) stop = true;
  });
  ASSERT_TRUE(first.status.is_ok());
  EXPECT_EQ(first.result.state, "interrupted");
  ASSERT_EQ(first.result.points.size(), 5u);

  // The JSON round trip is what --resume reads.
  auto saved = sweep_from_json(to_json(first.result));
  ASSERT_TRUE(saved.is_ok()) << saved.status().to_string();
  saved->seconds = 1000.0;  // as if the first run had taken that long
  int started = 0;
  SimulatedTarget second_target(scenario(), "sim");
  SweepRun second;
  second.status = run_sweep(
      options(),
      {.target = &second_target,
       .telemetry = &second_target,
       .on_point_start = [&](const SweepResult&, Precision, int64_t, std::string_view) { ++started; },
       .resume = &*saved},
      second.result);
  ASSERT_TRUE(second.status.is_ok());
  EXPECT_EQ(second.result.state, "complete");
  EXPECT_GE(second.result.seconds, 1000.0) << "the resumed run's time counts";
  EXPECT_EQ(static_cast<size_t>(started), full.result.points.size() - 5);
  ASSERT_EQ(second.result.points.size(), full.result.points.size());
  for (size_t i = 0; i < full.result.points.size(); ++i) {
    EXPECT_EQ(second.result.points[i].batch, full.result.points[i].batch);
    EXPECT_EQ(second.result.points[i].precision, full.result.points[i].precision);
    EXPECT_EQ(second.result.points[i].status, full.result.points[i].status);
  }
  EXPECT_EQ(second.result.recommendations[0].best_batch, full.result.recommendations[0].best_batch);
}

TEST(Sweep, AModelNoPointCanRunEndsTheSweepWithItsError) {
  // A target whose plans cannot be built (an op the engine does not run).
  class Unbuildable : public SimulatedTarget {
   public:
    using SimulatedTarget::SimulatedTarget;
    Result<PlanFacts> prepare_plan(Precision, int64_t) override {
      return Status::unsupported("node 'attn' (op Attention): not supported");
    }
  };
  Unbuildable target(scenario(), "sim");
  SweepRun r;
  r.status = run_sweep(options(), {.target = &target, .telemetry = &target}, r.result);
  EXPECT_EQ(r.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status.message().find("node 'attn'"), std::string::npos) << r.status.message();
  EXPECT_EQ(r.result.state, "failed");
  EXPECT_EQ(r.result.points.size(), 2u);  // the first point of each precision
  // The JSON of a failed sweep is still a valid sweep document.
  EXPECT_TRUE(sweep_from_json(to_json(r.result)).is_ok());
}

TEST(Sweep, PowerLimitAxisSetsEachLimit) {
  struct FakePower : PowerLimitControl {
    std::vector<double> set;
    Result<double> current_w() override { return 300.0; }
    Status set_w(double w) override {
      set.push_back(w);
      return Status::ok();
    }
  } power;
  SimulatedScenario s = scenario();
  s.watts_per_tflops = 2;  // batch 64 draws about 220 W at the full clock
  double limit = 300;
  SimulatedTarget target(s, "sim");
  target.set_power_limit_source(
      [&]() -> std::optional<double> { return power.set.empty() ? limit : power.set.back(); });
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.batches = {64};
  o.power_limits_w = {150, 250};
  SweepResult result;
  ASSERT_TRUE(run_sweep(o, {.target = &target, .telemetry = &target, .power = &power}, result).is_ok());
  EXPECT_EQ(power.set, (std::vector<double>{150, 250}));
  ASSERT_EQ(result.points.size(), 2u);
  EXPECT_EQ(result.points[0].power_limit_w, 150);
  // The lower limit caps the clock harder: slower, and the cap's evidence says so.
  EXPECT_GT(result.points[0].bench->gpu_compute_ms.median, result.points[1].bench->gpu_compute_ms.median);
  ASSERT_FALSE(result.points[0].verdicts.empty());
  EXPECT_EQ(result.points[0].verdicts.front().kind, VerdictKind::kPowerCapped);
  EXPECT_EQ(result.recommendations.size(), 2u);  // one per (limit, precision)
}

TEST(Sweep, EstimatesTheRemainingPoints) {
  SweepOptions o = options();
  o.max_batch = 1024;
  SweepResult empty;
  // Two precisions of 11 growth points (1..1024) and 8 bisection points (to 1%) each.
  EXPECT_EQ(estimate_remaining_points(o, empty), 2 * (11 + 8));
  SimulatedTarget target(scenario(), "sim");
  const SweepRun r = run(o, target);
  EXPECT_EQ(estimate_remaining_points(o, r.result), 1);  // done: never below one
}

TEST(Sweep, SeveralGpusAtOnce) {
  // GPU 1 has less memory (fp16 fits 48 images there, 88 on GPU 0) and a lower power limit.
  SimulatedScenario small = scenario();
  small.memory_mib = 600;
  small.power_limit_w = 120;
  std::vector<GpuTargetSlot> slots;
  auto a = std::make_unique<SimulatedTarget>(scenario(), "sim");
  auto b = std::make_unique<SimulatedTarget>(small, "sim");
  a->set_device_index(0);
  b->set_device_index(1);
  CombinedTelemetry telemetry({a.get(), b.get()});
  slots.push_back({.device = 0, .target = std::move(a)});
  slots.push_back({.device = 1, .target = std::move(b)});
  MultiGpuTarget target(std::move(slots));
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.gpus = {0, 1};
  SweepResult r;
  ASSERT_TRUE(run_sweep(o, {.target = &target, .telemetry = &telemetry}, r).is_ok());
  EXPECT_EQ(target.info().description, "2 x sim (GPUs 0, 1)");
  // A batch fits when it fits on every GPU: the smaller GPU decides.
  EXPECT_EQ(r.recommendations[0].largest_fitting_batch, 48);
  EXPECT_EQ(r.recommendations[0].first_oom_batch, 49);
  // Memory is the sum over the GPUs, back at its level after each point.
  EXPECT_EQ(*r.points.front().memory_before_bytes, int64_t{200} << 20);
  for (const SweepPoint& p : r.points) {
    EXPECT_EQ(p.memory_after_bytes, p.memory_before_bytes);
    if (p.status != PointStatus::kOk) continue;
    ASSERT_EQ(p.per_gpu.size(), 2u);
    EXPECT_EQ(p.per_gpu[1].device, 1u);
    // The pooled throughput, every image over the longest window, is the aggregate: at most the sum
    // of the GPUs' own rates (the one that finishes first idles at the end), and close to it.
    const double sum = p.per_gpu[0].throughput_ips + p.per_gpu[1].throughput_ips;
    EXPECT_LE(p.bench->throughput_ips, sum * (1 + 1e-9));
    EXPECT_GT(p.bench->throughput_ips, 0.98 * sum);
    // Each GPU's telemetry is its own: GPU 1 draws at most its limit.
    EXPECT_LE(*p.per_gpu[1].telemetry.power_max_w, 120.0);
  }
  // At batch 32 the 120 W GPU is power-capped and slower: it limits the point, which carries its verdicts.
  const auto b32 =
      std::find_if(r.points.begin(), r.points.end(), [](const SweepPoint& p) { return p.batch == 32; });
  ASSERT_NE(b32, r.points.end());
  EXPECT_LT(b32->per_gpu[1].throughput_ips, b32->per_gpu[0].throughput_ips);
  EXPECT_DOUBLE_EQ(*b32->balance, b32->per_gpu[1].throughput_ips / b32->per_gpu[0].throughput_ips);
  EXPECT_EQ(b32->verdicts.front().kind, VerdictKind::kPowerCapped);
  EXPECT_EQ(b32->per_gpu[1].verdicts.front().kind, VerdictKind::kPowerCapped);
  // per_gpu survives the JSON round trip (what --resume reads).
  auto back = sweep_from_json(to_json(r));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(to_json(*back)["points"], to_json(r)["points"]);
  EXPECT_EQ(back->options.gpus, (std::vector<uint32_t>{0, 1}));
  EXPECT_NE(format_sweep(r).find("Per GPU (img/s of each GPU while all ran at once"), std::string::npos);
}

TEST(SweepOptions, RejectsBadValues) {
  auto bad = [](auto edit) {
    SweepOptions o = options();
    edit(o);
    return validate(o);
  };
  EXPECT_TRUE(validate(options()).is_ok());
  EXPECT_EQ(bad([](SweepOptions& o) { o.batches = {8, 4}; }).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad([](SweepOptions& o) {
              o.batches = {8, 4};
            })
                .message()
                .find("strictly increasing"),
            std::string::npos);
  EXPECT_FALSE(bad([](SweepOptions& o) { o.batches = {0, 4}; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.latency_budget_ms = 0; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.latency_budget_ms = -1; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.accuracy_gate = 1.5; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.precisions = {}; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.precisions = {Precision::kFp16, Precision::kFp16}; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.bisect_tolerance = 0; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.power_limits_w = {-5}; }).is_ok());
  EXPECT_FALSE(bad([](SweepOptions& o) { o.bench.percentiles = {50, 90}; }).is_ok());
}

TEST(SweepJson, RoundTripsEveryPointField) {
  SimulatedScenario s = scenario();
  s.thermal_from_batch = 32;
  SimulatedTarget target(s, "sim");
  SweepOptions o = options();
  o.include_transfers = true;
  const SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok());
  const nlohmann::json doc = to_json(r.result);
  EXPECT_EQ(doc["schema"], "gpulab.sweep");
  EXPECT_EQ(doc["schema_version"], kSweepSchemaVersion);
  auto back = sweep_from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  // Points serialize to the same JSON after a round trip, and so do the environment and the
  // recommendations (gpulab report shows them).
  EXPECT_EQ(to_json(*back)["points"], doc["points"]);
  EXPECT_EQ(to_json(*back)["options"], doc["options"]);
  EXPECT_EQ(to_json(*back)["accuracy"], doc["accuracy"]);
  EXPECT_EQ(to_json(*back)["environment"], doc["environment"]);
  EXPECT_EQ(to_json(*back)["recommendations"], doc["recommendations"]);
  EXPECT_FALSE(doc["recommendations"].empty());
  const auto& p = doc["points"][5];
  for (const char* key :
       {"plan", "metrics", "telemetry", "rates", "verdicts", "throughput_ips", "memory_before_bytes"}) {
    EXPECT_TRUE(p.contains(key)) << key;
  }
  EXPECT_FALSE(p["metrics"]["h2d_ms"].is_null());  // with transfers
}

TEST(SweepJson, KeepsWhereAnInt8SweepsRangesCameFrom) {
  SimulatedTarget target(scenario(), "sim");
  SweepRun r = run(options(), target);
  EXPECT_TRUE(to_json(r.result)["calibration"].is_null());  // no 8-bit precision
  r.result.calibration = SweepCalibration{.source = "/data/photos",
                                          .calibrator = "percentile",
                                          .percentile = 99.99,
                                          .images = 500,
                                          .tensors = 62,
                                          .seconds = 41.25,
                                          .bias_corrected_layers = {{"int8", 21}, {"fp8", 0}},
                                          .gate_images_excluded = 500};
  const nlohmann::json doc = to_json(r.result);
  EXPECT_EQ(doc["calibration"]["bias_corrected_layers"]["int8"], 21);
  auto back = sweep_from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_TRUE(back->calibration.has_value());
  EXPECT_EQ(to_json(*back)["calibration"], doc["calibration"]);
  EXPECT_NE(
      format_sweep(r.result).find(
          "8-bit ranges: percentile 99.99 of 62 activations, 500 images of /data/photos calibrated on the "
          "CPU; fp8 bias correction on 0 layers; int8 bias correction on 21 layers (41.2 s, before the "
          "sweep's time); every precision's accuracy gate leaves out the 500 images calibrated on"),
      std::string::npos)
      << format_sweep(r.result);
  nlohmann::json bad = doc;
  bad["calibration"]["images"] = "many";
  EXPECT_NE(sweep_from_json(bad).status().message().find("calibration.images"), std::string::npos)
      << sweep_from_json(bad).status().message();
  bad = doc;
  bad["calibration"]["bias_corrected_layers"]["int8"] = 2.5;
  EXPECT_NE(sweep_from_json(bad).status().message().find("calibration.bias_corrected_layers"),
            std::string::npos)
      << sweep_from_json(bad).status().message();
}

TEST(SweepJson, RefusesMalformedDocumentsByName) {
  SimulatedTarget target(scenario(), "sim");
  const SweepRun r = run(options(), target);
  nlohmann::json doc = to_json(r.result);
  auto refused = [](const nlohmann::json& d) { return sweep_from_json(d).status(); };
  EXPECT_EQ(refused(nlohmann::json::array()).code(), StatusCode::kInvalidFile);
  EXPECT_NE(refused({{"schema", "gpulab.bench"}}).message().find("not a gpulab sweep result"),
            std::string::npos);
  nlohmann::json v = doc;
  v["schema_version"] = 99;
  EXPECT_NE(refused(v).message().find("schema_version 99"), std::string::npos);
  nlohmann::json p = doc;
  p["points"][3].erase("batch");
  EXPECT_NE(refused(p).message().find("points[3].batch"), std::string::npos) << refused(p).message();
  nlohmann::json m = doc;
  m["points"][2]["metrics"]["latency_ms"].erase("median");
  EXPECT_NE(refused(m).message().find("points[2].metrics.latency_ms"), std::string::npos)
      << refused(m).message();
  nlohmann::json k = doc;
  k["points"][0]["verdicts"][0]["kind"] = "slow";
  EXPECT_NE(refused(k).message().find("'slow' is not a verdict name"), std::string::npos)
      << refused(k).message();
  nlohmann::json st = doc;
  st["points"][0]["status"] = "maybe";
  EXPECT_FALSE(sweep_from_json(st).is_ok());
}

TEST(SweepCsv, OneRowPerPoint) {
  SimulatedTarget target(scenario(), "sim");
  const SweepRun r = run(options(), target);
  const std::string csv = to_csv(r.result);
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), r.result.points.size() + 1);
  EXPECT_EQ(csv.substr(0, csv.find(',')), "precision");
  EXPECT_NE(csv.find("\nfp16,89,,bisect,oom,context,"), std::string::npos) << csv;
}

TEST(SweepTable, PrintsVerdictsEvidenceAndRecommendation) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.latency_budget_ms = 1.0;
  const SweepRun r = run(o, target);
  const std::string table = format_sweep(r.result);
  EXPECT_NE(table.find("out of memory at context"), std::string::npos);
  EXPECT_NE(table.find("Why (the limiting verdict"), std::string::npos);
  EXPECT_NE(table.find("capacity-bound: batch 88 fits, 89 does not"), std::string::npos) << table;
  EXPECT_NE(
      table.find("Recommendation: the batch with the highest throughput within a p99 latency of 1.000 ms"),
      std::string::npos);
}

TEST(SweepTable, SaysWhereTheTimeWent) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.batches = {1, 8};
  o.dataset_dir = GPULAB_SOURCE_DIR "/data/images";
  SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  ASSERT_EQ(r.result.points.size(), 2u);
  // Made-up times: two plans built in 30 and 12 s, timed windows of 1 s, a 20 s gate, 70 s in all.
  // The first timed its tactics, the second reused them.
  r.result.points[0].plan.source = r.result.points[1].plan.source = "build";
  r.result.points[0].plan.seconds = 30;
  r.result.points[0].plan.tactics = "timed";
  r.result.points[1].plan.seconds = 12;
  r.result.points[1].plan.tactics = "timed at 1";
  r.result.points[0].bench->wall_s = r.result.points[1].bench->wall_s = 1;
  r.result.accuracy["fp16"].seconds = 20;
  r.result.seconds = 70;
  EXPECT_NE(format_sweep(r.result).find(
                "Time: 70.0 s = plan builds 42.0 s (2 plans; 30.0 s in the 1 that timed tactics) + accuracy "
                "gates 20.0 s + timed windows 2.0 s + the rest 6.0 s"),
            std::string::npos)
      << format_sweep(r.result);
  // With the tactic search's split (files from 2026-12-06 on), and its JSON round trip.
  r.result.points[0].plan.tactic_build_s = 8;
  r.result.points[0].plan.tactic_timing_s = 19.5;
  EXPECT_NE(format_sweep(r.result).find("(2 plans; 30.0 s in the 1 that timed tactics: 8.0 s building cuDNN "
                                        "candidates, 19.5 s timing them)"),
            std::string::npos)
      << format_sweep(r.result);
  auto back = sweep_from_json(to_json(r.result));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->points[0].plan.tactic_build_s, 8);
  EXPECT_EQ(back->points[0].plan.tactic_timing_s, 19.5);
  r.result.points[0].plan.tactics = "simulated";
  EXPECT_NE(format_sweep(r.result).find("plan builds 42.0 s (2 plans) + accuracy"), std::string::npos);
}

TEST(SweepTable, WarnsOfALargerBatchWithHalfTheThroughput) {
  SimulatedTarget target(scenario(), "sim");
  SweepOptions o = options();
  o.precisions = {Precision::kFp16};
  o.batches = {1, 8, 64};
  SweepRun r = run(o, target);
  ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
  ASSERT_EQ(r.result.points.size(), 3u);
  for (SweepPoint& p : r.result.points) p.bench->warnings.clear();
  // The simulation's throughput grows with the batch: no warning.
  warn_of_throughput_drop(r.result.points);
  EXPECT_TRUE(r.result.points[2].bench->warnings.empty());
  // Batch 64 at a third of batch 8's throughput (as FP32 ResNet-18 at 12288 against 8192): warned,
  // naming the batch it fell from; the table lists it under Warnings.
  const double at8 = r.result.points[1].bench->throughput_ips;
  r.result.points[2].bench->throughput_ips = at8 / 3;
  r.result.points[2].plan.tactics = "timed at 8";
  warn_of_throughput_drop(r.result.points);
  ASSERT_EQ(r.result.points[2].bench->warnings.size(), 1u);
  const std::string& w = r.result.points[2].bench->warnings[0];
  EXPECT_TRUE(w.starts_with(fmt::format("throughput drop: {:.0f} img/s, 33% of batch 8's", at8 / 3))) << w;
  EXPECT_NE(w.find("tactics: timed at 8"), std::string::npos) << w;
  EXPECT_NE(format_sweep(r.result).find("Warnings:\n  fp16 batch 64: throughput drop"), std::string::npos)
      << format_sweep(r.result);
  // Another precision's faster points do not count.
  r.result.points[1].precision = Precision::kBf16;
  r.result.points[2].bench->warnings.clear();
  r.result.points[0].bench->throughput_ips = at8 / 3;
  warn_of_throughput_drop(r.result.points);
  EXPECT_TRUE(r.result.points[2].bench->warnings.empty());
}

}  // namespace
}  // namespace gpulab::sweep
