#include "measure/bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace gpulab::measure {
namespace {

// A fake engine on a fake clock (integer microseconds, so durations add up exactly). Each
// enqueue costs `enqueue_us` of host time, each wait `wait_us`; every iteration reports the
// same device times.
struct FakeEngine {
  int64_t now_us = 0;
  int64_t enqueue_us = 50;
  int64_t wait_us = 1000;
  DeviceTimes times{.h2d_ms = 0.1, .compute_ms = 1.0, .d2h_ms = 0.2};
  std::map<int, int> outstanding;
  std::map<int, int64_t> enqueues, waits;
  int max_outstanding = 0;
  int64_t fail_at_wait = -1;  // the wait call (0-based, over all streams) that fails

  BenchHooks hooks() {
    BenchHooks h;
    h.enqueue = [this](int s) {
      now_us += enqueue_us;
      ++enqueues[s];
      max_outstanding = std::max(max_outstanding, ++outstanding[s]);
      return Status::ok();
    };
    h.wait = [this](int s) -> Result<DeviceTimes> {
      int64_t total = 0;
      for (auto& [stream, n] : waits) total += n;
      if (total == fail_at_wait) return Status::device_error("fake: the GPU fell off the bus");
      if (outstanding[s] <= 0) return Status::internal("fake: wait without enqueue");
      now_us += wait_us;
      --outstanding[s];
      ++waits[s];
      return times;
    };
    h.now_s = [this] { return static_cast<double>(now_us) / 1e6; };
    return h;
  }
  int64_t total_enqueues() const {
    int64_t n = 0;
    for (auto& [s, c] : enqueues) n += c;
    return n;
  }
};

BenchOptions quick_options() {
  BenchOptions o;
  o.batch = 8;
  o.warmup_ms = 0;
  o.min_duration_s = 0;
  o.min_iterations = 50;
  return o;
}

TEST(BenchLoop, StopsAtMinIterationsWhenDurationIsZero) {
  FakeEngine fake;
  auto r = run_bench_loop(quick_options(), fake.hooks());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // One warm-up round, then 50 iterations plus the one still queued when the loop stopped.
  EXPECT_GE(r->iterations, 50);
  EXPECT_LE(r->iterations, 50 + kMaxInFlightPerStream);
  EXPECT_EQ(fake.total_enqueues(), 1 + r->iterations);
  EXPECT_EQ(fake.waits[0], fake.enqueues[0]);
  EXPECT_EQ(fake.outstanding[0], 0);
  EXPECT_EQ(fake.max_outstanding, kMaxInFlightPerStream);
  EXPECT_EQ(static_cast<int64_t>(r->samples.size()), r->iterations);
}

TEST(BenchLoop, RunsAtLeastMinDuration) {
  FakeEngine fake;
  BenchOptions o = quick_options();
  o.min_iterations = 1;
  o.min_duration_s = 0.5;  // each iteration takes 1.05 ms of fake host time
  auto r = run_bench_loop(o, fake.hooks());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_GE(r->wall_s, 0.5);
  EXPECT_LT(r->wall_s, 0.5 + 0.01);
  EXPECT_GT(r->iterations, 400);
  // Throughput is images over host wall time, exactly.
  EXPECT_DOUBLE_EQ(r->throughput_ips, static_cast<double>(r->iterations) * 8 / r->wall_s);
}

TEST(BenchLoop, WarmsUpForWarmupMs) {
  FakeEngine fake;
  BenchOptions o = quick_options();
  o.warmup_ms = 10;  // each warm-up round takes 1.05 ms
  auto r = run_bench_loop(o, fake.hooks());
  ASSERT_TRUE(r.is_ok());
  const int64_t warmup = fake.total_enqueues() - r->iterations;
  EXPECT_GE(warmup, 10);
  EXPECT_LE(warmup, 11);
}

TEST(BenchLoop, RecordsDeviceAndEnqueueTimes) {
  FakeEngine fake;
  auto r = run_bench_loop(quick_options(), fake.hooks());
  ASSERT_TRUE(r.is_ok());
  EXPECT_DOUBLE_EQ(r->gpu_compute_ms.median, 1.0);
  EXPECT_DOUBLE_EQ(r->gpu_compute_ms.cov, 0.0);
  ASSERT_TRUE(r->h2d_ms.has_value());
  ASSERT_TRUE(r->d2h_ms.has_value());
  EXPECT_DOUBLE_EQ(r->h2d_ms->median, 0.1);
  EXPECT_DOUBLE_EQ(r->d2h_ms->max, 0.2);
  EXPECT_NEAR(r->latency_ms.median, 1.3, 1e-12);
  EXPECT_NEAR(r->enqueue_ms.median, 0.05, 1e-9);
  EXPECT_EQ(r->gpu_compute_ms.percentiles.size(), 4u);
  // Start times increase within a stream.
  for (size_t i = 1; i < r->samples.size(); ++i) {
    EXPECT_GE(r->samples[i].start_ms, r->samples[i - 1].start_ms);
  }
  EXPECT_TRUE(r->warnings.empty()) << r->warnings.front();
}

TEST(BenchLoop, WithoutTransfersLatencyIsCompute) {
  FakeEngine fake;
  BenchOptions o = quick_options();
  o.include_transfers = false;
  auto r = run_bench_loop(o, fake.hooks());
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->h2d_ms.has_value());
  EXPECT_FALSE(r->d2h_ms.has_value());
  EXPECT_DOUBLE_EQ(r->latency_ms.median, 1.0);
  for (const auto& s : r->samples) EXPECT_EQ(s.h2d_ms, 0);
}

TEST(BenchLoop, EveryStreamRunsAndIsDrained) {
  FakeEngine fake;
  BenchOptions o = quick_options();
  o.streams = 3;
  o.min_iterations = 30;
  auto r = run_bench_loop(o, fake.hooks());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::map<int, int> per_stream;
  for (const auto& s : r->samples) ++per_stream[s.stream];
  ASSERT_EQ(per_stream.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_GE(per_stream[s], 10);
    EXPECT_EQ(fake.enqueues[s], fake.waits[s]);
    EXPECT_EQ(fake.outstanding[s], 0);
  }
  EXPECT_LE(fake.max_outstanding, kMaxInFlightPerStream);
}

TEST(BenchLoop, HookErrorStopsWithContext) {
  FakeEngine fake;
  fake.fail_at_wait = 5;
  auto r = run_bench_loop(quick_options(), fake.hooks());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(r.status().message().find("bench iteration"), std::string::npos);
  EXPECT_NE(r.status().message().find("fell off the bus"), std::string::npos);
}

TEST(BenchLoop, MissingHooksAreAnError) {
  auto r = run_bench_loop(quick_options(), BenchHooks{});
  EXPECT_FALSE(r.is_ok());
}

TEST(BenchLoop, InvalidOptionsAreRejectedBeforeRunning) {
  FakeEngine fake;
  BenchOptions o = quick_options();
  o.batch = 0;
  auto r = run_bench_loop(o, fake.hooks());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(fake.total_enqueues(), 0);
}

struct BadOption {
  const char* flag;
  void (*apply)(BenchOptions&);
};

TEST(Validate, BadValuesNameTheFlag) {
  const BadOption cases[] = {
      {"--batch", [](BenchOptions& o) { o.batch = 0; }},
      {"--batch", [](BenchOptions& o) { o.batch = -4; }},
      {"--warmup-ms", [](BenchOptions& o) { o.warmup_ms = -1; }},
      {"--warmup-ms", [](BenchOptions& o) { o.warmup_ms = std::numeric_limits<double>::quiet_NaN(); }},
      {"--min-duration-s", [](BenchOptions& o) { o.min_duration_s = -0.5; }},
      {"--min-duration-s",
       [](BenchOptions& o) { o.min_duration_s = std::numeric_limits<double>::infinity(); }},
      {"--min-iterations", [](BenchOptions& o) { o.min_iterations = 0; }},
      {"--streams", [](BenchOptions& o) { o.streams = 0; }},
      {"--streams", [](BenchOptions& o) { o.streams = kMaxStreams + 1; }},
      {"--percentiles", [](BenchOptions& o) { o.percentiles = {}; }},
      {"--percentiles",
       [](BenchOptions& o) {
         o.percentiles = {50, 0};
       }},
      {"--percentiles", [](BenchOptions& o) { o.percentiles = {100.1}; }},
      {"--device", [](BenchOptions& o) { o.device = -1; }},
      {"--json and --export-times", [](BenchOptions& o) { o.json_path = o.export_times_path = "x"; }},
      {"--json and --save-output", [](BenchOptions& o) { o.json_path = o.output_path = "x"; }},
      {"--export-times and --save-output",
       [](BenchOptions& o) { o.export_times_path = o.output_path = "x"; }},
  };
  for (const BadOption& c : cases) {
    BenchOptions o;
    c.apply(o);
    const Status s = validate(o);
    ASSERT_FALSE(s.is_ok()) << c.flag;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.flag;
    EXPECT_EQ(s.message().rfind(c.flag, 0), 0u) << s.message();
  }
  EXPECT_TRUE(validate(BenchOptions{}).is_ok());
  BenchOptions zero;
  zero.warmup_ms = 0;
  zero.min_duration_s = 0;
  EXPECT_TRUE(validate(zero).is_ok());
}

std::vector<IterationTimes> synthetic_samples(int n, double compute_ms, double jitter_ms, double enqueue_ms,
                                              double h2d_ms, double d2h_ms) {
  std::vector<IterationTimes> out;
  for (int i = 0; i < n; ++i) {
    IterationTimes t;
    t.start_ms = i * compute_ms;
    t.enqueue_ms = enqueue_ms;
    t.h2d_ms = h2d_ms;
    t.compute_ms = compute_ms + (i % 2 == 0 ? jitter_ms : -jitter_ms);
    t.d2h_ms = d2h_ms;
    t.latency_ms = t.h2d_ms + t.compute_ms + t.d2h_ms;
    out.push_back(t);
  }
  return out;
}

bool has_warning(const BenchResult& r, std::string_view prefix) {
  for (const auto& w : r.warnings) {
    if (w.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(Warnings, StableFastRunHasNone) {
  auto r = make_bench_result(BenchOptions{}, synthetic_samples(100, 2.0, 0.01, 0.02, 0.3, 0.01), 1);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->warnings.empty());
}

TEST(Warnings, UnstableAboveTwoAndAHalfPercent) {
  // compute alternates 1.97 / 2.03: CoV 1.5% -> fine; 1.9 / 2.1: CoV 5% -> unstable.
  auto fine = make_bench_result(BenchOptions{}, synthetic_samples(100, 2.0, 0.03, 0.01, 0, 0), 1);
  ASSERT_TRUE(fine.is_ok());
  EXPECT_FALSE(has_warning(*fine, "unstable"));
  auto bad = make_bench_result(BenchOptions{}, synthetic_samples(100, 2.0, 0.1, 0.01, 0, 0), 1);
  ASSERT_TRUE(bad.is_ok());
  ASSERT_TRUE(has_warning(*bad, "unstable"));
  EXPECT_NE(bad->warnings[0].find("5.0%"), std::string::npos) << bad->warnings[0];
  EXPECT_NE(bad->warnings[0].find("--min-duration-s"), std::string::npos);
}

TEST(Warnings, EnqueueBoundSuggestsCudaGraph) {
  BenchOptions o;
  o.cuda_graph = false;
  auto r = make_bench_result(o, synthetic_samples(10, 0.2, 0, 0.3, 0, 0), 1);
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE(has_warning(*r, "enqueue-bound"));
  EXPECT_NE(r->warnings[0].find("--cuda-graph"), std::string::npos);
  o.cuda_graph = true;
  auto g = make_bench_result(o, synthetic_samples(10, 0.2, 0, 0.3, 0, 0), 1);
  ASSERT_TRUE(g.is_ok());
  ASSERT_TRUE(has_warning(*g, "enqueue-bound"));
  EXPECT_NE(g->warnings[0].find("--batch"), std::string::npos);
}

TEST(Warnings, TransferBoundOnlyWithTransfers) {
  BenchOptions o;
  auto r = make_bench_result(o, synthetic_samples(10, 1.0, 0, 0.01, 0.8, 0.3), 1);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(has_warning(*r, "transfer-bound"));
  o.include_transfers = false;
  auto n = make_bench_result(o, synthetic_samples(10, 1.0, 0, 0.01, 0.8, 0.3), 1);
  ASSERT_TRUE(n.is_ok());
  EXPECT_FALSE(has_warning(*n, "transfer-bound"));
}

TEST(Warnings, EnvironmentClocksAndThrottling) {
  auto r = make_bench_result(BenchOptions{}, synthetic_samples(10, 1.0, 0, 0.01, 0, 0), 1);
  ASSERT_TRUE(r.is_ok());
  r->environment.start = GpuState{.sm_clock_mhz = 1980};
  r->environment.end =
      GpuState{.sm_clock_mhz = 1500, .clock_event_reasons = {"sw_power_cap"}, .performance_limited = true};
  add_environment_warnings(*r);
  EXPECT_TRUE(has_warning(*r, "clocks dropped"));
  EXPECT_TRUE(has_warning(*r, "throttled"));
}

TEST(MakeResult, RejectsNoSamplesAndBadWallTime) {
  EXPECT_FALSE(make_bench_result(BenchOptions{}, {}, 1).is_ok());
  EXPECT_FALSE(make_bench_result(BenchOptions{}, synthetic_samples(3, 1, 0, 0, 0, 0), 0).is_ok());
}

BenchResult sample_result() {
  BenchOptions o;
  o.batch = 32;
  o.percentiles = {50, 99, 99.9};
  auto r = make_bench_result(o, synthetic_samples(200, 2.0, 0.01, 0.05, 0.4, 0.02), 0.5);
  EXPECT_TRUE(r.is_ok());
  BenchResult result = std::move(r).value();
  result.model = "resnet18.onnx";
  result.precision = "fp16";
  result.environment.gpu_name = "NVIDIA H200";
  result.environment.compute_capability = 90;
  result.environment.driver_version = "580.65.06";
  result.environment.cuda_runtime_version = 13000;
  result.environment.cudnn_version = 91900;
  result.environment.cublas_version = 130100;
  result.environment.start = GpuState{.sm_clock_mhz = 1980, .power_limit_w = 700};
  return result;
}

TEST(Json, SchemaHasEveryDocumentedField) {
  const nlohmann::json j = to_json(sample_result());
  EXPECT_EQ(j.at("schema"), "gpulab.bench");
  EXPECT_EQ(j.at("schema_version"), kBenchSchemaVersion);
  EXPECT_EQ(j.at("model"), "resnet18.onnx");
  EXPECT_EQ(j.at("precision"), "fp16");
  for (const char* key : {"batch", "warmup_ms", "min_duration_s", "min_iterations", "cuda_graph",
                          "include_transfers", "streams", "percentiles", "device"}) {
    EXPECT_TRUE(j.at("options").contains(key)) << key;
  }
  EXPECT_EQ(j.at("options").at("batch"), 32);
  EXPECT_NEAR(j.at("compute_throughput_ips").get<double>(), 32 * 1000.0 / 2.0, 1e-6);
  EXPECT_EQ(j.at("iterations"), 200);
  EXPECT_DOUBLE_EQ(j.at("wall_s").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j.at("throughput_ips").get<double>(), 200.0 * 32 / 0.5);
  for (const char* metric : {"gpu_compute_ms", "latency_ms", "enqueue_ms", "h2d_ms", "d2h_ms"}) {
    const auto& m = j.at("metrics").at(metric);
    ASSERT_TRUE(m.is_object()) << metric;
    for (const char* key : {"count", "min", "max", "mean", "median", "stddev", "cov"}) {
      EXPECT_TRUE(m.at(key).is_number()) << metric << "." << key;
    }
    EXPECT_EQ(m.at("count"), 200);
    const auto& p = m.at("percentiles");
    EXPECT_TRUE(p.at("p50").is_number());
    EXPECT_TRUE(p.at("p99").is_number());
    EXPECT_TRUE(p.at("p99.9").is_number());
  }
  EXPECT_DOUBLE_EQ(j.at("metrics").at("gpu_compute_ms").at("median").get<double>(), 2.0);
  EXPECT_TRUE(j.at("warnings").is_array());
  const auto& env = j.at("environment");
  EXPECT_EQ(env.at("gpu_name"), "NVIDIA H200");
  EXPECT_EQ(env.at("cudnn_version"), 91900);
  EXPECT_TRUE(env.at("cuda_driver_version").is_null());
  EXPECT_EQ(env.at("start").at("sm_clock_mhz"), 1980);
  EXPECT_TRUE(env.at("start").at("memory_clock_mhz").is_null());
  EXPECT_TRUE(env.at("end").is_null());
  EXPECT_TRUE(j.at("ceilings").is_null());
  EXPECT_TRUE(j.at("plan").is_null());
  EXPECT_TRUE(j.at("profile").is_array());
  // The document round-trips through text.
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST(Json, PlanTimeWhenRecorded) {
  BenchResult r = sample_result();
  r.plan_source = "build";
  r.plan_seconds = 14.25;
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("plan").at("source"), "build");
  EXPECT_DOUBLE_EQ(j.at("plan").at("seconds").get<double>(), 14.25);
  EXPECT_NE(format_summary(r).find("Plan: built from the model in 14.25 s"), std::string::npos);
  r.plan_source = "load";
  r.plan_seconds = 0.2104;
  EXPECT_NE(format_summary(r).find("Plan: loaded in 0.210 s"), std::string::npos);
}

TEST(Json, TransfersOffGivesNullCopies) {
  BenchOptions o;
  o.include_transfers = false;
  auto r = make_bench_result(o, synthetic_samples(5, 1, 0, 0.01, 0, 0), 1);
  ASSERT_TRUE(r.is_ok());
  const nlohmann::json j = to_json(*r);
  EXPECT_TRUE(j.at("metrics").at("h2d_ms").is_null());
  EXPECT_TRUE(j.at("metrics").at("d2h_ms").is_null());
  EXPECT_FALSE(j.at("options").at("include_transfers").get<bool>());
}

TEST(Summary, TableAndExplanation) {
  BenchResult r = sample_result();
  r.warnings.push_back("unstable: test warning");
  const std::string text = format_summary(r);
  for (const char* needle : {"resnet18.onnx", "fp16", "batch 32", "NVIDIA H200", "cuDNN 9.19.0",
                             "cuBLAS 13.1.0", "CUDA runtime 13.0", "Throughput: 12800.0 inferences/s",
                             "GPU compute", "Latency", "H2D", "D2H", "Enqueue", "p99.9", "CoV", "Warnings:",
                             "unstable: test warning", "What the numbers mean", "nearest-rank"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << needle << "\n" << text;
  }
}

TEST(Profile, RooflineOfKnownLayers) {
  const std::vector<LayerTiming> layers{
      // 1 TFLOP in 10 ms = 100 TFLOP/s; compute roof at 500 TFLOP/s = 2 ms -> 5x.
      {.name = "conv",
       .kind = "conv",
       .tactic = "chunk256:cudnn-unfused:70;k2=1,k3=0;eng70",
       .flops = 1e12,
       .bytes = 1e9,
       .gpu_ms = 10},
      // 4 GB in 2 ms = 2000 GB/s; memory roof at 4000 GB/s = 1 ms -> 2x.
      {.name = "pool", .kind = "maxpool", .flops = 1e6, .bytes = 4e9, .gpu_ms = 2},
  };
  const Ceilings c{.memory_gb_s = 4000, .tflops = 500, .source = "test"};
  auto rows = make_profile(layers, c);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(rows[0].share, 10.0 / 12, 1e-12);
  EXPECT_NEAR(rows[0].achieved_tflops, 100, 1e-9);
  EXPECT_NEAR(*rows[0].roofline_ms, 2, 1e-12);
  EXPECT_NEAR(*rows[0].roofline_factor, 5, 1e-12);
  EXPECT_EQ(rows[0].bound, "compute");
  EXPECT_NEAR(rows[1].achieved_gb_s, 2000, 1e-9);
  EXPECT_NEAR(*rows[1].roofline_ms, 1, 1e-12);
  EXPECT_EQ(rows[1].bound, "memory");
  const std::string text = format_profile(rows, c);
  EXPECT_NE(text.find("5.00c"), std::string::npos) << text;
  EXPECT_NE(text.find("2.00m"), std::string::npos) << text;
  // A batch-chunked tactic keeps its engine in the table.
  EXPECT_NE(text.find("chunk256:cudnn-unfused:70;"), std::string::npos) << text;

  auto no_roof = make_profile(layers, std::nullopt);
  EXPECT_FALSE(no_roof[0].roofline_ms.has_value());
  EXPECT_NE(format_profile(no_roof, std::nullopt).find("--ceilings"), std::string::npos);
}

TEST(Files, ExportTimesCsvAndJson) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gpulab_bench_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const BenchResult r = sample_result();
  ASSERT_TRUE(export_times_csv(dir / "times.csv", r.samples).is_ok());
  std::ifstream csv(dir / "times.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "iteration,stream,start_ms,enqueue_ms,h2d_ms,compute_ms,d2h_ms,latency_ms");
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 200);

  ASSERT_TRUE(write_bench_json(dir / "bench.json", r).is_ok());
  std::ifstream js(dir / "bench.json");
  std::stringstream buf;
  buf << js.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(buf.str()).at("schema"), "gpulab.bench");

  const Status bad = export_times_csv(dir / "no" / "such" / "dir" / "t.csv", r.samples);
  EXPECT_FALSE(bad.is_ok());
  std::filesystem::remove_all(dir);
}

TEST(BenchInput, IsTheDocumentedLcgAndTheSameForEveryBatch) {
  // The first values of the sequence docs/metrics.md gives (bench/compare_pytorch.py rebuilds it):
  // state 12345 -> 1013904223 + 12345 * 1664525 mod 2^32, value (state >> 8) / 2^23 - 1.
  std::vector<float> batch1(150528), batch2(2 * 150528);
  fill_bench_input(batch1);
  fill_bench_input(batch2);
  EXPECT_FLOAT_EQ(batch1[0], -0.9591946601867676f);
  EXPECT_FLOAT_EQ(batch1[1], -0.9669044017791748f);
  EXPECT_FLOAT_EQ(batch1[2], 0.08631157875061035f);
  EXPECT_TRUE(std::equal(batch1.begin(), batch1.end(), batch2.begin()));  // image 0 of any batch
  EXPECT_TRUE(std::all_of(batch2.begin(), batch2.end(), [](float v) { return v >= -1.0f && v < 1.0f; }));
}

// The lanes the GPU writes the bench input in (bench_input_lanes, kernels::launch_lcg_lanes), run
// here as the kernel runs them: the same sequence, bit for bit, for lane counts below, at and above
// the element count.
TEST(BenchInput, InterleavedLanesGiveTheSameSequence) {
  std::vector<float> expected(10007);
  fill_bench_input(expected);
  for (int64_t lanes : {1, 2, 7, 256, 10007, 20000}) {
    const BenchInputLanes l = bench_input_lanes(std::min<int64_t>(lanes, 10007));
    std::vector<float> got(expected.size(), 2.0f);
    for (size_t t = 0; t < l.starts.size(); ++t) {
      uint32_t state = l.starts[t];
      for (size_t i = t; i < got.size(); i += l.starts.size()) {
        got[i] = bench_input_value(state);
        state = state * l.mul + l.add;
      }
    }
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << lanes << " lanes";
  }
  EXPECT_TRUE(bench_input_lanes(0).starts.empty());
}

TEST(Files, OutputNpyIsNumpyFormatOne) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gpulab_bench_npy_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  const BenchOutput out{.batch = 2, .classes = 3, .logits = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f}};
  ASSERT_TRUE(write_output_npy(dir / "logits.npy", out).is_ok());
  std::ifstream f(dir / "logits.npy", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);  // the data starts 64-byte aligned
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  ASSERT_EQ(bytes.size(), 10 + header_len + 6 * sizeof(float));
  std::vector<float> back(6);
  std::memcpy(back.data(), bytes.data() + 10 + header_len, 6 * sizeof(float));
  EXPECT_EQ(back, out.logits);

  const BenchOutput wrong{.batch = 2, .classes = 3, .logits = {1.0f}};
  EXPECT_EQ(write_output_npy(dir / "bad.npy", wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.npy"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpulab::measure
