// gpulab report's library: recognising and reading every kind of result (and refusing bad ones
// without a crash), the plots' gnuplot scripts, data and CSV, and the page with and without gnuplot.
#include "report/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/file_io.h"
#include "report/html.h"
#include "report/plot.h"
#include "sweep/simulated_target.h"
#include "test_support.h"

namespace gpulab::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- Result documents, made by the writers of the commands themselves ---------------------------

json simulated_sweep_json() {
  auto scenario = sweep::load_scenario(testing::source_dir() / "tests/fixtures/sweep/resnet18_like.json");
  EXPECT_TRUE(scenario.is_ok()) << scenario.status().to_string();
  sweep::SimulatedTarget target(*scenario, "simulated (resnet18_like.json)");
  sweep::SweepOptions o;
  o.model_path = "resnet18_like.json";
  o.precisions = {Precision::kFp16, Precision::kFp32};
  o.bench.min_duration_s = 0.02;
  o.bench.warmup_ms = 0;
  o.latency_budget_ms = 20;
  sweep::SweepResult result;
  result.model = o.model_path;
  result.options = o;
  result.target = target.info();
  result.environment.gpu_name = "Simulated 16 GiB GPU";
  result.environment.gpulab_version = "0.1.0";
  const Status s = sweep::run_sweep(o, {.target = &target, .telemetry = &target}, result);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return sweep::to_json(result);
}

measure::BenchResult bench_result() {
  measure::BenchOptions o{.batch = 8, .min_duration_s = 0, .min_iterations = 3};
  std::vector<measure::IterationTimes> samples;
  for (int i = 0; i < 20; ++i) {
    const double compute = 1.0 + 0.01 * i;
    samples.push_back({.start_ms = 2.0 * i,
                       .enqueue_ms = 0.02,
                       .h2d_ms = 0.1,
                       .compute_ms = compute,
                       .d2h_ms = 0.05,
                       .latency_ms = 0.15 + compute});
  }
  auto b = measure::make_bench_result(o, samples, 0.05);
  EXPECT_TRUE(b.is_ok());
  b->model = "models/resnet18.onnx";
  b->precision = "fp16";
  b->environment.gpu_name = "Test GPU";
  b->environment.driver_version = "580.65.06";
  b->environment.cudnn_version = 91900;
  b->environment.start = measure::GpuState{.sm_clock_mhz = 1980, .power_limit_w = 700};
  b->environment.gpulab_version = "0.1.0";
  b->environment.gpulab_commit = "77dd3cb0a1b2";
  b->ceilings = measure::Ceilings{.memory_gb_s = 3000, .tflops = 500, .source = "test"};
  const std::vector<measure::LayerTiming> layers = {{.name = "conv1",
                                                     .kind = "conv",
                                                     .tactic = "t",
                                                     .precision = "fp16",
                                                     .flops = 2e11,
                                                     .bytes = 1e8,
                                                     .gpu_ms = 0.9},
                                                    {.name = "pool",
                                                     .kind = "maxpool",
                                                     .tactic = "own",
                                                     .precision = "fp16",
                                                     .flops = 1e8,
                                                     .bytes = 2e8,
                                                     .gpu_ms = 0.3},
                                                    {.name = "fc 'head'",
                                                     .kind = "gemm",
                                                     .tactic = "lt",
                                                     .precision = "fp16",
                                                     .flops = 8e9,
                                                     .bytes = 2e6,
                                                     .gpu_ms = 0.1}};
  b->profile = measure::make_profile(layers, b->ceilings);
  b->plan_source = "build";
  b->plan_seconds = 1.5;
  return *b;
}

measure::BandwidthReport bandwidth_report() {
  measure::BandwidthReport r{.device_name = "Test GPU",
                             .uuid = "GPU-1",
                             .pcie_gen = 4,
                             .pcie_width = 16,
                             .pcie_gb_s = 31.5,
                             .memory_gb_s = 2000};
  for (auto [kind, memory] : {std::pair{measure::CopyKind::kHostToDevice, measure::HostMemory::kPinned},
                              {measure::CopyKind::kDeviceToHost, measure::HostMemory::kPageable},
                              {measure::CopyKind::kDeviceToDevice, measure::HostMemory::kDevice}}) {
    for (uint64_t size : {4096ull, 1ull << 20, 1ull << 30}) {
      r.points.push_back({.kind = kind,
                          .memory = memory,
                          .size_bytes = size,
                          .repeats = 20,
                          .median_ms = 1,
                          .min_ms = 0.9,
                          .max_ms = 1.2,
                          .gb_s = static_cast<double>(size) / 1e6,
                          .peak_share = 0.5});
    }
  }
  return r;
}

std::vector<doctor::Finding> findings() {
  return {{.check = "nvidia kernel module",
           .status = doctor::Severity::kFail,
           .detail = "not loaded",
           .fix = "Install the driver"},
          {.check = "nouveau", .status = doctor::Severity::kPass, .detail = "not loaded"},
          {.check = "GPU 0 persistence mode",
           .status = doctor::Severity::kWarn,
           .detail = "off",
           .fix = "nvidia-smi -pm 1"}};
}

const char* kMonitorCsv =
    "timestamp, index, name, power.draw [W], power.limit [W], clocks.sm [MHz], clocks_event_reasons.active, "
    "clocks_event_reasons.names, pstate\n"
    "2026/12/05 08:00:00.000, 0, \"GPU, quoted\", 100.00, 700.00, 1980, 0x0000000000000004, sw_power_cap, "
    "P0\n"
    "2026/12/05 08:00:00.500, 0, \"GPU, quoted\", N/A, 700.00, 1710, 0x0000000000000000, none, P2\n";

const char* kMonitorJsonLines =
    R"({"gpus":[{"timestamp":"2026/12/05 08:00:00.000","index":0,"name":"NVIDIA H200","power.draw":90.0,"power.limit":700.0,"processes":null}]}
{"gpus":[{"timestamp":"2026/12/05 08:00:01.000","index":0,"name":"NVIDIA H200","power.draw":null,"power.limit":700.0,"processes":[]}]}
)";

// A real `gpulab pipeline --json` output, recorded on the CPU (the pipeline's own benchmark).
fs::path pipeline_record() {
  return testing::source_dir() / "bench/results/2026-12-05-32716b3/cpu_pipeline_sample256_loop50.json";
}
// A GPU run of gpulab pipeline on an H100, with the split of its GPU and infer-thread time.
fs::path gpu_pipeline_record() {
  return testing::source_dir() / "bench/results/2026-12-06-ef9bcb0/diag2_pipe_gpu.json";
}

std::optional<fs::path> python_fixture_dir() {
  const char* dir = std::getenv("GPULAB_REPORT_FIXTURE_DIR");
  if (!dir || !fs::exists(fs::path(dir) / "accuracy.json")) return std::nullopt;
  return fs::path(dir);
}

// ---- Reading ---------------------------------------------------------------------------------------

TEST(ReportInputs, WritersAndReadersRoundTrip) {
  const measure::BenchResult b = bench_result();
  auto bench = measure::bench_from_json(measure::to_json(b));
  ASSERT_TRUE(bench.is_ok()) << bench.status().to_string();
  EXPECT_EQ(measure::to_json(*bench), measure::to_json(b));

  const measure::BandwidthReport bw = bandwidth_report();
  auto bandwidth = measure::bandwidth_from_json(measure::to_json(bw));
  ASSERT_TRUE(bandwidth.is_ok()) << bandwidth.status().to_string();
  EXPECT_EQ(measure::to_json(*bandwidth), measure::to_json(bw));

  auto doctor = doctor::findings_from_json(doctor::to_json(findings()));
  ASSERT_TRUE(doctor.is_ok()) << doctor.status().to_string();
  EXPECT_EQ(doctor::to_json(*doctor), doctor::to_json(findings()));

  const json sweep = simulated_sweep_json();
  auto back = sweep::sweep_from_json(sweep);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(sweep::to_json(*back)["environment"], sweep["environment"]);
  EXPECT_EQ(sweep::to_json(*back)["recommendations"], sweep["recommendations"]);
}

TEST(ReportInputs, RecognisesEachKindByItsContent) {
  const struct {
    std::string text;
    InputKind kind;
  } cases[] = {
      {simulated_sweep_json().dump(), InputKind::kSweep},
      {measure::to_json(bench_result()).dump(2), InputKind::kBench},
      {measure::to_json(bandwidth_report()).dump(), InputKind::kBandwidth},
      {doctor::to_json(findings()).dump(2), InputKind::kDoctor},
      {kMonitorCsv, InputKind::kMonitor},
      {kMonitorJsonLines, InputKind::kMonitor},
      {*read_file_text(pipeline_record()), InputKind::kPipeline},
  };
  for (const auto& c : cases) {
    auto in = parse_input("x", c.text);
    ASSERT_TRUE(in.is_ok()) << in.status().to_string();
    EXPECT_EQ(in->kind, c.kind) << input_kind_name(c.kind);
    EXPECT_EQ(in->source, "x");
  }
  if (const auto dir = python_fixture_dir()) {
    for (const auto& [file, kind] : {std::pair{"accuracy.json", InputKind::kAccuracy},
                                     {"bench_profile.json", InputKind::kBench},
                                     {"bandwidth.json", InputKind::kBandwidth}}) {
      auto in = read_input(*dir / file);
      ASSERT_TRUE(in.is_ok()) << in.status().to_string();
      EXPECT_EQ(in->kind, kind) << file;
    }
  }
}

TEST(ReportInputs, MonitorLogsKeepUnsupportedFieldsOut) {
  auto csv = monitor_from_csv(kMonitorCsv);
  ASSERT_TRUE(csv.is_ok()) << csv.status().to_string();
  ASSERT_EQ(csv->readings.size(), 2u);
  EXPECT_EQ(csv->readings[0].name, "GPU, quoted");
  EXPECT_DOUBLE_EQ(csv->readings[0].values.at("clocks_event_reasons.active"), 4);
  EXPECT_DOUBLE_EQ(csv->readings[1].values.at("pstate"), 2);
  EXPECT_EQ(csv->readings[1].values.count("power.draw"), 0u);  // N/A is absent, never 0
  EXPECT_DOUBLE_EQ(*csv->readings[1].time_s, 0.5);

  auto lines = monitor_from_json_lines(kMonitorJsonLines);
  ASSERT_TRUE(lines.is_ok()) << lines.status().to_string();
  EXPECT_EQ(lines->readings[1].values.count("power.draw"), 0u);
  EXPECT_DOUBLE_EQ(*lines->readings[1].time_s, 1.0);

  // monitor stopped while writing its last line: that line is dropped, with a note.
  const std::string text = kMonitorJsonLines;
  auto cut = monitor_from_json_lines(text.substr(0, text.size() - 20));
  ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
  EXPECT_EQ(cut->readings.size(), 1u);
  ASSERT_EQ(cut->notes.size(), 1u);
  EXPECT_NE(cut->notes[0].find("line 2 is incomplete"), std::string::npos);
  // A broken line in the middle is an error naming it.
  auto broken = monitor_from_json_lines("{\"gpus\": [{}]}\n{oops\n{\"gpus\": [{}]}\n");
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("line 2"), std::string::npos) << broken.status().message();
  auto bad_cell = monitor_from_csv("index, power.draw [W]\n0, lots\n0, 3\n");
  ASSERT_FALSE(bad_cell.is_ok());
  EXPECT_NE(bad_cell.status().message().find("line 2: power.draw 'lots' is not a number"), std::string::npos)
      << bad_cell.status().message();
}

TEST(ReportInputs, BadInputNamesTheFileAndWhatIsWrong) {
  const std::string sweep = simulated_sweep_json().dump(2);
  const struct {
    std::string text, message;
  } cases[] = {
      {"", "the file is empty"},
      {"   \n", "the file is empty"},
      {sweep.substr(0, sweep.size() / 2), "not valid JSON"},
      {R"({"schema": "gpulab.calibration", "schema_version": 1})",
       "schema \"gpulab.calibration\" is not one"},
      {R"({"schema": 7})", "its \"schema\" is not a string"},
      {R"({"hello": "world"})", "not a gpulab result: no \"schema\" field"},
      {R"({"schema": "gpulab.sweep", "schema_version": 2})", "schema_version 2 is not the 1"},
      {R"({"schema": "gpulab.bench", "schema_version": 1, "model": 3})",
       "bench.model: missing or not a string"},
      {R"([{"check": "x", "status": "great", "detail": "", "fix": ""}])", "doctor[0].status: 'great' is not"},
      {"\x89PNG\r\n\x1a\n\x00\x00", "neither JSON nor a gpulab monitor --csv log"},
      {"a,b,c\n1,2,3\n", "neither JSON nor a gpulab monitor --csv log"},
  };
  for (const auto& c : cases) {
    auto in = parse_input("results/x.json", c.text);
    ASSERT_FALSE(in.is_ok()) << c.message;
    EXPECT_EQ(in.status().code(), StatusCode::kInvalidFile) << in.status().to_string();
    EXPECT_TRUE(in.status().message().starts_with("'results/x.json': ")) << in.status().message();
    EXPECT_NE(in.status().message().find(c.message), std::string::npos) << in.status().message();
  }
  auto missing = read_input("/nonexistent/sweep.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Every node of a document replaced by values of other types, and every key dropped: each reader
// returns (an error or a result), never throws or crashes. Arrays: the first two elements.
void for_each_mutation(const json& doc, const std::function<void(const json&)>& visit) {
  const json others[] = {nullptr, "x", -1, 1.5, json::array(), json::object(), true};
  std::function<void(json&, json&)> walk = [&](json& root, json& node) {
    const json saved = node;
    for (const json& o : others) {
      node = o;
      visit(root);
    }
    node = saved;
    if (node.is_object()) {
      for (auto it = saved.begin(); it != saved.end(); ++it) {
        node.erase(it.key());
        visit(root);
        node[it.key()] = it.value();
        walk(root, node[it.key()]);
      }
    } else if (node.is_array()) {
      for (size_t i = 0; i < std::min<size_t>(node.size(), 2); ++i) walk(root, node[i]);
    }
  };
  json root = doc;
  walk(root, root);
}

TEST(ReportInputs, MutatedAndTruncatedDocumentsNeverCrashTheReaders) {
  std::vector<json> docs = {measure::to_json(bench_result()), measure::to_json(bandwidth_report()),
                            doctor::to_json(findings())};
  json sweep = simulated_sweep_json();
  sweep["points"] = json::array({sweep["points"][0], sweep["points"].back()});  // an ok and an oom point
  docs.push_back(sweep);
  std::vector<fs::path> files = {pipeline_record(), gpu_pipeline_record()};
  if (const auto dir = python_fixture_dir()) files.push_back(*dir / "accuracy.json");
  for (const fs::path& file : files) {
    auto text = read_file_text(file);
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    docs.push_back(json::parse(*text));
  }
  int variants = 0, accepted = 0;
  for (const json& doc : docs) {
    for_each_mutation(doc, [&](const json& variant) {
      ++variants;
      EXPECT_NO_THROW({
        auto in = parse_input("m.json", variant.dump());
        if (!in.is_ok()) {
          EXPECT_EQ(in.status().code(), StatusCode::kInvalidFile) << in.status().to_string();
        } else {
          // What a reader accepts, the page shows (the sections meet the odd values too).
          ++accepted;
          const Input inputs[] = {std::move(*in)};
          auto page = build_report(inputs, {.gnuplot_missing = "not in this test"});
          EXPECT_TRUE(page.is_ok()) << page.status().to_string();
        }
      });
    });
    const std::string text = doc.dump();
    for (size_t n = 0; n < text.size(); n += std::max<size_t>(1, text.size() / 211)) {
      auto in = parse_input("t.json", text.substr(0, n));
      EXPECT_FALSE(in.is_ok()) << "a prefix of " << n << " bytes was accepted";
    }
  }
  EXPECT_GT(variants, 1000);
  EXPECT_GT(accepted, 100);  // optional fields nulled, strings changed: pages were built
}

// Values a corrupt file may hold where the page converts or dereferences: a number beyond int64
// as a monitor's GPU index or link generation, a recommendation with a best throughput but no
// best batch (sweep_from_json asks for both only when nothing was excluded).
TEST(ReportInputs, ValuesBeyondRangeOrMissingBesideOthersStillGiveAPage) {
  auto huge = parse_input("m.csv",
                          "timestamp, index, power.draw [W], pcie.link.gen.current, pcie.link.width.current\n"
                          "2026/12/05 08:00:00.000, 1e300, 100, 1e300, -1e300\n");
  ASSERT_TRUE(huge.is_ok()) << huge.status().to_string();
  EXPECT_FALSE(std::get<MonitorLog>(huge->data).readings[0].index.has_value());
  json sweep = simulated_sweep_json();
  ASSERT_FALSE(sweep["recommendations"].empty());
  sweep["recommendations"][0]["excluded"] = "a reason";
  sweep["recommendations"][0]["best_batch"] = nullptr;
  sweep["recommendations"][0]["knee_batch"] = nullptr;
  auto odd = parse_input("s.json", sweep.dump());
  ASSERT_TRUE(odd.is_ok()) << odd.status().to_string();
  const Input inputs[] = {std::move(*huge), std::move(*odd)};
  auto page = build_report(inputs, {.gnuplot_missing = "not in this test"});
  ASSERT_TRUE(page.is_ok()) << page.status().to_string();
  EXPECT_NE(page->html.find("id=\"monitor-1\""), std::string::npos);
}

// ---- Plots ------------------------------------------------------------------------------------------

Plot small_plot() {
  Plot p{.id = "t-plot",
         .title = "Throughput: it's\na 'test'",
         .x_label = "batch [images]",
         .y_label = "throughput [images/s]",
         .log_x = true,
         .log_x_base = 2};
  p.series.push_back({.title = "fp16", .x = {1, 2, 4, 0, -1}, .y = {10, 20, 40, 5, 5}});
  p.series.push_back({.title = "nothing on a log scale", .x = {0}, .y = {1}});
  p.lines.push_back(
      {.axis = ReferenceLine::Axis::kVertical, .value = 8, .title = "out of memory at batch 8"});
  return p;
}

TEST(ReportPlot, ScriptQuotesTextAndDataKeepsOnlyDrawablePoints) {
  const Plot p = small_plot();
  const std::string script = gnuplot_script(p, "/tmp/d.dat", "/tmp/o.svg");
  // A newline would end the command, a lone quote the string: neither reaches the script.
  EXPECT_NE(script.find("set title 'Throughput: it''s a ''test'''\n"), std::string::npos) << script;
  EXPECT_NE(script.find("set logscale x 2"), std::string::npos);
  const std::string data = gnuplot_data(p);
  // x = 0 and x = -1 cannot be drawn on a log scale; the empty series is dropped; the wall spans
  // the data's y range.
  EXPECT_EQ(data, "1 10\n2 20\n4 40\n\n\n8 10\n8 40\n\n\n");
  EXPECT_EQ(plot_csv(p),
            "series,batch [images],throughput [images/s]\nfp16,1,10\nfp16,2,20\nfp16,4,40\n"
            "out of memory at batch 8,8,10\nout of memory at batch 8,8,40\n");
  EXPECT_TRUE(p.has_data());
  EXPECT_FALSE((Plot{.log_y = true, .series = {{.x = {1}, .y = {0}}}}.has_data()));
}

// A bar chart's legend starts right of its labels: as many columns as fit there (the accuracy
// chart's third entry ran past the right edge when gnuplot chose), and plain log-axis numbers.
TEST(ReportPlot, BarLegendKeepsRightOfTheLabelsAndInsideThePlot) {
  Plot p{.id = "bars", .title = "Agreement", .x_label = "agreement with FP32 [%]", .log_x = true};
  p.bar_groups = {"meets the gate", "below the gate", "the gate"};
  p.bars = {{.label = "int8 + FP16 fallback (3 layers)", .value = 99.2, .group = 0},
            {.label = "int8", .value = 97.3, .group = 1},
            {.label = "gate", .value = 99, .group = 2}};
  const std::string script = gnuplot_script(p, "/tmp/d.dat", "/tmp/o.svg");
  EXPECT_NE(script.find("set key maxcols 2\n"), std::string::npos) << script;
  EXPECT_NE(script.find("set format x '%.0f'\n"), std::string::npos) << script;
  p.bars[0].label = "int4";  // the labels are 4 characters long: room for all three
  EXPECT_NE(gnuplot_script(p, "/tmp/d.dat", "/tmp/o.svg").find("set key maxcols 3\n"), std::string::npos);
}

TEST(ReportPlot, ALongLineIsThinnedForDrawingButKeepsItsSpikesAndTheCsvKeepsAll) {
  Plot p{.id = "long", .x_label = "time [s]", .y_label = "power [W]"};
  Series s{.title = "GPU 0", .style = Series::Style::kLines};
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i * 0.05);
    s.y.push_back(i == 77777 ? 700 : 100 + i % 7);
  }
  p.series.push_back(std::move(s));
  const std::string data = gnuplot_data(p);
  const size_t lines = static_cast<size_t>(std::count(data.begin(), data.end(), '\n'));
  EXPECT_LE(lines, 4002u);
  EXPECT_NE(data.find(" 700\n"), std::string::npos) << "the spike was dropped";
  const std::string csv = plot_csv(p);
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), 100001u);
}

TEST(ReportPlot, InlineSvgHasUniqueIdsAndATitle) {
  const std::string svg =
      "<?xml version=\"1.0\"?>\n<!DOCTYPE svg>\n<svg viewBox=\"0 0 10 10\"><title>Gnuplot</title>"
      "<defs><path id='gpPt0'/></defs><use xlink:href='#gpPt0'/><g clip-path=\"url(#c1)\" id=\"c1\"/></svg>";
  const std::string out = inline_svg(svg, "p3", "A <title> & more");
  EXPECT_TRUE(out.starts_with("<svg class=\"plot\" role=\"img\" aria-label=\"A &lt;title&gt; &amp; more\""))
      << out;
  EXPECT_NE(out.find("id='p3-gpPt0'"), std::string::npos) << out;
  EXPECT_NE(out.find("href='#p3-gpPt0'"), std::string::npos);
  EXPECT_NE(out.find("url(#p3-c1)"), std::string::npos);
  EXPECT_NE(out.find("<title>A &lt;title&gt; &amp; more</title>"), std::string::npos);
}

TEST(ReportPlot, GnuplotDrawsItAndNoInputRunsACommand) {
  auto gnuplot = find_gnuplot();
  if (!gnuplot.is_ok()) GTEST_SKIP() << gnuplot.status().message();
  const fs::path marker = fs::temp_directory_path() / ("gpulab-report-pwned-" + std::to_string(::getpid()));
  Plot p = small_plot();
  p.title = "x'\nsystem('touch " + marker.string() + "')\nset title '";
  p.series[0].title = "fp16' ; system('touch " + marker.string() + "') ; '";
  auto svg = render_plot(p, *gnuplot, std::chrono::seconds(30));
  ASSERT_TRUE(svg.is_ok()) << svg.status().to_string();
  EXPECT_FALSE(fs::exists(marker)) << "a title ran a command";
  EXPECT_TRUE(svg->starts_with("<svg")) << svg->substr(0, 100);
  EXPECT_NE(svg->find("batch [images]"), std::string::npos);
  EXPECT_NE(svg->find("throughput [images/s]"), std::string::npos);
  EXPECT_NE(svg->find("id='t-plot-gpPt0'"), std::string::npos);
}

TEST(ReportPlot, MissingGnuplotIsAClearError) {
  ::setenv("GPULAB_GNUPLOT", "/nonexistent/gnuplot", 1);
  auto g = find_gnuplot();
  ::unsetenv("GPULAB_GNUPLOT");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
  EXPECT_NE(g.status().message().find("GPULAB_GNUPLOT names '/nonexistent/gnuplot'"), std::string::npos);
  auto r = render_plot(small_plot(), "/nonexistent/gnuplot", std::chrono::seconds(5));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().to_string();
}

// ---- The page ---------------------------------------------------------------------------------------

std::vector<Input> all_inputs() {
  std::vector<std::pair<std::string, std::string>> texts = {
      {"sweep.json", simulated_sweep_json().dump()},
      {"bench.json", measure::to_json(bench_result()).dump()},
      {"bandwidth.json", measure::to_json(bandwidth_report()).dump()},
      {"doctor.json", doctor::to_json(findings()).dump()},
      {"monitor.csv", kMonitorCsv}};
  // The pipeline's real CPU record; the accuracy fixture (make_report_fixtures.py writes no pipeline
  // file: a stale one from an older script hid that this read a file a clean build does not have).
  std::vector<fs::path> files = {pipeline_record()};
  if (const auto dir = python_fixture_dir()) files.push_back(*dir / "accuracy.json");
  for (const fs::path& file : files) {
    auto text = read_file_text(file);
    EXPECT_TRUE(text.is_ok()) << text.status().to_string();
    if (text.is_ok()) texts.emplace_back(file.filename().string(), *text);
  }
  std::vector<Input> out;
  for (const auto& [name, text] : texts) {
    auto in = parse_input(name, text);
    EXPECT_TRUE(in.is_ok()) << in.status().to_string();
    if (in.is_ok()) out.push_back(std::move(*in));
  }
  return out;
}

TEST(ReportPage, APipelineOnTheGpuSaysWhereTheGpuAndTheInferThreadSpentTheirTime) {
  auto in = read_input(gpu_pipeline_record());
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  const auto& split = std::get<PipelineReport>(in->data).gpu_split;
  ASSERT_TRUE(split.has_value());
  EXPECT_NEAR(split->model_s, 15.518, 1e-3);
  ASSERT_TRUE(split->host_enqueue_s.has_value());
  EXPECT_NEAR(*split->host_enqueue_s, 15.368, 1e-3);
  EXPECT_FALSE(split->host_submit_s.has_value());  // written from 2127c8f on
  const Input inputs[] = {std::move(*in)};
  auto out = build_report(inputs, {.gnuplot_missing = "not in this test"});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_NE(out->html.find("(0.005 s preprocessing, 15.518 s the model, 0.001 s top-k and results)"),
            std::string::npos);
  EXPECT_NE(out->html.find(
                "The infer thread spent 15.368 s in the engine's enqueue, and 0.060 s waiting for batches "
                "to finish."),
            std::string::npos);
}

TEST(ReportPage, WithoutGnuplotTheTablesAndTheCsvAreThere) {
  const std::vector<Input> inputs = all_inputs();
  auto out = build_report(inputs, {.gnuplot_missing = "gnuplot is not installed"});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const std::string& page = out->html;
  EXPECT_NE(page.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("<b>No plots:</b> gnuplot is not installed"), std::string::npos);
  for (const char* id : {"id=\"environment\"", "id=\"sweep-1\"", "id=\"bench-1\"", "id=\"bandwidth-1\"",
                         "id=\"monitor-1\"", "id=\"glance\""}) {
    EXPECT_NE(page.find(id), std::string::npos) << id;
  }
  // The doctor's fix is highlighted, the sweep's recommendation and verdicts are tables.
  EXPECT_NE(page.find("<span class=\"fix\">Install the driver</span>"), std::string::npos);
  EXPECT_NE(page.find("<h3>Recommendation</h3>"), std::string::npos);
  EXPECT_NE(page.find("<h3>What limits each batch</h3>"), std::string::npos);
  EXPECT_NE(page.find("fc &#39;head&#39;"), std::string::npos);  // layer names escaped
  EXPECT_GT(out->plots, 10);
  EXPECT_EQ(out->plots_drawn, 0);
  EXPECT_EQ(out->csv_files.size(), static_cast<size_t>(out->plots));
  ASSERT_FALSE(out->warnings.empty());
  EXPECT_NE(out->warnings[0].find("gnuplot is not installed"), std::string::npos);
  // Two GPUs (the simulated one, the test one) and the monitor's: labelled.
  EXPECT_NE(page.find("Results from 3 GPUs."), std::string::npos);
  EXPECT_FALSE(build_report({}, {}).is_ok());
}

TEST(ReportPage, WithGnuplotEveryPlotIsDrawnWithItsAxes) {
  auto gnuplot = find_gnuplot();
  if (!gnuplot.is_ok()) GTEST_SKIP() << gnuplot.status().message();
  const std::vector<Input> inputs = all_inputs();
  auto out = build_report(inputs, {.title = "Test <report>", .gnuplot = *gnuplot});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->plots_drawn, out->plots) << (out->warnings.empty() ? "" : out->warnings[0]);
  EXPECT_TRUE(out->warnings.empty());
  const std::string& page = out->html;
  EXPECT_NE(page.find("<title>Test &lt;report&gt;</title>"), std::string::npos);
  for (const char* label : {"batch [images]", "throughput [images/s]", "latency per batch [ms]",
                            "mean power [W]", "mean SM clock [MHz]", "energy per image [mJ]",
                            "median GPU time [ms]", "arithmetic intensity [FLOP/byte]", "bandwidth [GB/s]",
                            "power [W]", "time since the first reading [s]"}) {
    EXPECT_NE(page.find(label), std::string::npos) << label;
  }
  EXPECT_EQ(page.find("<?xml"), std::string::npos);
}

TEST(ReportPage, ASweepUnderSeveralPowerLimitsHasACurvePerLimit) {
  struct FakePower : sweep::PowerLimitControl {
    std::vector<double> set;
    Result<double> current_w() override { return 350.0; }
    Status set_w(double w) override {
      set.push_back(w);
      return Status::ok();
    }
  } power;
  auto scenario = sweep::load_scenario(testing::source_dir() / "tests/fixtures/sweep/resnet18_like.json");
  ASSERT_TRUE(scenario.is_ok());
  sweep::SimulatedTarget target(*scenario, "sim");
  target.set_power_limit_source(
      [&]() -> std::optional<double> { return power.set.empty() ? 350 : power.set.back(); });
  sweep::SweepOptions o;
  o.precisions = {Precision::kFp16};
  o.batches = {8, 64, 256};
  o.power_limits_w = {200, 300};
  o.bench.min_duration_s = 0.02;
  o.bench.warmup_ms = 0;
  sweep::SweepResult result;
  result.options = o;
  ASSERT_TRUE(
      sweep::run_sweep(o, {.target = &target, .telemetry = &target, .power = &power}, result).is_ok());
  auto in = parse_input("limits.json", sweep::to_json(result).dump());
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  auto out = build_report(std::span(&*in, 1), {});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  std::string power_csv;
  for (const auto& [name, text] : out->csv_files) {
    if (name == "sweep-1-power.csv") power_csv = text;
  }
  // One curve per limit, each limit a line of its own.
  for (const char* series :
       {"fp16 @ 200 W,8,", "fp16 @ 300 W,256,", "power limit 200 W,", "power limit 300 W,"}) {
    EXPECT_NE(power_csv.find(series), std::string::npos) << series << "\n" << power_csv;
  }
  EXPECT_NE(out->html.find("fp16 @ 200 W"), std::string::npos);
}

TEST(ReportPage, ASweepsWarningsAreListedAndItsUnstablePointsCounted) {
  auto scenario = sweep::load_scenario(testing::source_dir() / "tests/fixtures/sweep/resnet18_like.json");
  ASSERT_TRUE(scenario.is_ok());
  sweep::SimulatedTarget target(*scenario, "sim");
  sweep::SweepOptions o;
  o.precisions = {Precision::kFp32};
  o.batches = {8, 64, 256};
  o.bench.min_duration_s = 0.02;
  o.bench.warmup_ms = 0;
  sweep::SweepResult result;
  result.options = o;
  ASSERT_TRUE(sweep::run_sweep(o, {.target = &target, .telemetry = &target}, result).is_ok());
  ASSERT_EQ(result.points.size(), 3u);
  for (sweep::SweepPoint& p : result.points) p.bench->warnings.clear();
  result.points[0].bench->warnings.push_back("unstable: GPU compute time varies by 3.0%");
  result.points[2].bench->warnings = {"unstable: GPU compute time varies by 4.0%",
                                      "throughput drop: <made up>"};
  auto in = parse_input("warned.json", sweep::to_json(result).dump());
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  auto out = build_report(std::span(&*in, 1), {});
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_NE(
      out->html.find("<h3>Warnings</h3>\n<ul>\n<li>fp32 batch 256: throughput drop: &lt;made up&gt;</li>"),
      std::string::npos);
  EXPECT_NE(out->html.find("2 of 3 measured points were unstable"), std::string::npos);
  EXPECT_NE(out->html.find("Where the time went: plan builds"), std::string::npos);
  EXPECT_NE(
      sweep::format_sweep(result).find("  fp32 batch 256: throughput drop: <made up>\n  2 of 3 measured "
                                       "points unstable"),
      std::string::npos)
      << sweep::format_sweep(result);
}

TEST(ReportPage, WritesAtomicallyAndRefusesAFileAsTheCsvFolder) {
  const fs::path dir = fs::temp_directory_path() / ("gpulab-report-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ReportOutput out{.html = "<!DOCTYPE html>", .csv_files = {{"a.csv", "x,y\n1,2\n"}}};
  ASSERT_TRUE(write_report({.html_path = dir / "r.html", .csv_dir = dir / "csv"}, out).is_ok());
  EXPECT_EQ(*read_file_text(dir / "csv/a.csv"), "x,y\n1,2\n");
  std::ofstream(dir / "file") << "x";
  const Status s = write_report({.html_path = dir / "r2.html", .csv_dir = dir / "file"}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_FALSE(fs::exists(dir / "r2.html"));
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 3u);  // r.html, csv/a.csv, file: no temporary file left behind
  fs::remove_all(dir);
}

TEST(ReportHtml, EscapesAndFormats) {
  EXPECT_EQ(html::escape("<a href=\"x\">'&'</a>\x01"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html::number(36338.4), "36\u2009338");
  EXPECT_EQ(html::number(-1234.5, 1), "-1\u2009234.5");
  EXPECT_EQ(html::number(std::nullopt), "—");
  EXPECT_EQ(html::percent(0.9631), "96.3%");
  EXPECT_EQ(html::bytes(629145600), "600 MiB");
  EXPECT_EQ(html::ms(14.183), "14.2");
  EXPECT_EQ(html::ms(0.000312), "0.00031");
}

}  // namespace
}  // namespace gpulab::report
