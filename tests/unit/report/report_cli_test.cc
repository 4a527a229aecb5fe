// `gpulab report` end to end, from real outputs of the commands that run without a GPU (a
// simulated sweep, doctor on this machine, monitor and a sweep's telemetry through the fake
// NVML) and the fixtures of the others (tests/fixtures/make_report_fixtures.py); bad input; and
// the page in a real browser: headless Chromium loads it from disk, must log nothing on its
// console, must have every section and plot with its axis labels in its DOM, and must draw a
// screenshot that is not blank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "image/decode.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CliRun;
using testing::run_gpulab;

std::string shell_quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

std::string read_text(const fs::path& p) {
  auto t = read_file_text(p);
  return t.is_ok() ? *t : std::string();
}

// The sections a page must have, with labels every plot of the section carries.
struct Expected {
  std::string section;
  std::vector<std::string> labels;
};

class ReportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("gpulab-report-cli-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // A real output of a gpulab command, made on first use (each test runs in its own process, and
  // most need only some of them). Fails the test when the command does.
  static fs::path made(const std::string& name) {
    const fs::path path = dir_ / name;
    if (fs::exists(path)) return path;
    const std::string fake = "GPULAB_NVML_LIBRARY='" + std::string(GPULAB_FAKE_NVML) +
                             "' GPULAB_FAKE_NVML_SCENARIO=" + shell_quoted(write_nvml_scenario());
    const std::string sweep =
        "sweep --simulate " +
        shell_quoted(testing::source_dir() / "tests/fixtures/sweep/resnet18_like.json") +
        " --min-duration-s 0.02 --warmup-ms 0 ";
    CliRun r;
    if (name == "sweep.json") {
      r = run_gpulab(sweep + "--latency-budget-ms 20 --json " + shell_quoted(path));
    } else if (name == "sweep_nvml.json") {
      r = run_gpulab(
          sweep + "--precisions fp16 --batches 1,8,64 --telemetry nvml --json " + shell_quoted(path), fake);
    } else if (name == "doctor.json") {
      // doctor exits 1 when a check fails (no GPU here): its JSON is what matters.
      r = run_gpulab("doctor --json --pcie-load-ms 0 > " + shell_quoted(path));
      r.exit_code = json::parse(read_text(path), nullptr, false).is_array() ? 0 : 1;
    } else if (name == "monitor.jsonl" || name == "monitor.csv") {
      r = run_gpulab(std::string("monitor --") + (name == "monitor.csv" ? "csv" : "json") +
                         " --interval-ms 20 --count 30 > " + shell_quoted(path),
                     fake);
    }
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
    return path;
  }
  // An H200 that idles, runs at full power, hits its power cap, then idles again.
  static fs::path write_nvml_scenario() {
    const json phase_busy = {{"gpu_util_pct", 97},  {"memory_util_pct", 61}, {"memory_used_mib", 40000},
                             {"power_w", 520},      {"sm_clock_mhz", 1980},  {"clock_event_reasons", 0},
                             {"temperature_c", 55}, {"pcie_gen", 5},         {"pstate", 0}};
    const json doc = {
        {"driver_version", "580.65.06"},
        {"devices",
         {{{"name", "NVIDIA H200"},
           {"memory_total_mib", 143771},
           {"power_limit_w", 700},
           {"readings",
            {{"gpu_util_pct", 3},
             {"memory_util_pct", 1},
             {"memory_used_mib", 900},
             {"power_w", 90},
             {"energy_w", 90},
             {"sm_clock_mhz", 345},
             {"memory_clock_mhz", 3201},
             {"clock_event_reasons", 1},
             {"temperature_c", 34},
             {"pcie_tx_kb_s", 100},
             {"pcie_rx_kb_s", 200},
             {"pcie_gen", 1},
             {"pcie_width", 16},
             {"pstate", 8}}},
           {"phases",
            {{{"after_ms", 120}, {"readings", phase_busy}},
             {{"after_ms", 300},
              {"readings", {{"power_w", 700}, {"sm_clock_mhz", 1710}, {"clock_event_reasons", 4}}}},
             {{"after_ms", 480},
              {"readings",
               {{"gpu_util_pct", 0},
                {"power_w", 95},
                {"sm_clock_mhz", 345},
                {"clock_event_reasons", 1}}}}}}}}}};
    const fs::path p = dir_ / "nvml.json";
    std::ofstream(p) << doc.dump(2);
    return p;
  }
  void SetUp() override {
    if (!fs::exists(testing::gpulab_exe()))
      GTEST_SKIP() << "gpulab binary not built at " << testing::gpulab_exe();
  }
  // Every input: the real outputs above, and the fixtures when the ctest fixture wrote them.
  static std::vector<fs::path> all_inputs() {
    // The pipeline's: a real output, recorded by its own CPU benchmark.
    std::vector<fs::path> files = {
        made("sweep.json"), made("doctor.json"), made("monitor.jsonl"), made("monitor.csv"),
        testing::source_dir() / "bench/results/2026-12-05-32716b3/cpu_pipeline_sample256_loop50.json"};
    if (const char* fixtures = std::getenv("GPULAB_REPORT_FIXTURE_DIR")) {
      for (const char* f : {"bench_profile.json", "bandwidth.json", "accuracy.json"}) {
        if (fs::exists(fs::path(fixtures) / f)) files.push_back(fs::path(fixtures) / f);
      }
    }
    return files;
  }
  static bool have_fixtures() {
    const char* fixtures = std::getenv("GPULAB_REPORT_FIXTURE_DIR");
    return fixtures && fs::exists(fs::path(fixtures) / "accuracy.json");
  }
  static std::string args(const std::vector<fs::path>& files) {
    std::string out;
    for (const auto& f : files) out += shell_quoted(f) + " ";
    return out;
  }
  static std::vector<Expected> expected_sections() {
    std::vector<Expected> e = {
        {"environment", {}},
        {"sweep-1",
         {"batch [images]", "throughput [images/s]", "latency per batch [ms]", "mean power [W]",
          "mean SM clock [MHz]", "energy per image [mJ]", "PCIe bytes per image [KiB]"}},
        {"monitor-1",
         {"time since the first reading [s]", "utilization [%]", "memory used [MiB]", "power [W]",
          "clock [MHz]"}},
        {"monitor-2", {"time since the first reading [s]", "utilization [%]"}},
        {"pipeline-1", {"capacity [images/s]"}},
    };
    if (have_fixtures()) {
      e.push_back(
          {"bench-1", {"median GPU time [ms]", "arithmetic intensity [FLOP/byte]", "achieved [TFLOP/s]"}});
      e.push_back({"bandwidth-1", {"transfer size [bytes]", "bandwidth [GB/s]"}});
      e.push_back({"accuracy-1",
                   {"agreement with FP32 [%]", "SQNR of the logits with only this layer reduced [dB]"}});
    }
    return e;
  }
  static bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

  static inline fs::path dir_;
};

// The text of <section id="id"> ... </section> in a page or DOM.
std::string section_of(const std::string& page, const std::string& id) {
  const size_t start = page.find("<section id=\"" + id + "\"");
  if (start == std::string::npos) return {};
  return page.substr(start, page.find("</section>", start) - start);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(ReportCli, OnePageFromEveryKindOfResult) {
  const fs::path page = dir_ / "all.html", csv = dir_ / "csv";
  const CliRun r = run_gpulab("report " + args(all_inputs()) + "-o " + shell_quoted(page) + " --csv-dir " +
                              shell_quoted(csv) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  std::vector<std::string> kinds;
  for (const json& in : out["inputs"]) kinds.push_back(in["kind"]);
  std::vector<std::string> want = {"sweep", "doctor", "monitor", "monitor", "pipeline"};
  if (have_fixtures()) want.insert(want.end(), {"bench", "bandwidth", "accuracy"});
  EXPECT_EQ(kinds, want);
  const int plots = out["plots"];
  EXPECT_GE(plots, have_fixtures() ? 21 : 15);
  if (have_gnuplot()) {
    EXPECT_EQ(out["plots_drawn"], plots) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  EXPECT_EQ(out["csv_files"].size(), static_cast<size_t>(plots));
  for (const json& f : out["csv_files"]) EXPECT_TRUE(fs::exists(f.get<std::string>())) << f;
  // A CSV of a plot: its series with the axis labels as the header.
  EXPECT_TRUE(
      read_text(csv / "sweep-1-throughput.csv").starts_with("series,batch [images],throughput [images/s]\n"));

  const std::string html = read_text(page);
  for (const Expected& e : expected_sections()) {
    const std::string s = section_of(html, e.section);
    ASSERT_FALSE(s.empty()) << e.section;
    for (const std::string& label : e.labels) {
      if (have_gnuplot()) {
        EXPECT_NE(s.find(label), std::string::npos) << e.section << ": " << label;
      }
    }
  }
  if (have_gnuplot()) {
    EXPECT_EQ(count(html, "<svg"), static_cast<size_t>(plots));
  }
  // The simulated sweep says so; doctor's findings on this machine are there with their fixes.
  EXPECT_NE(html.find("<b>Simulated sweep.</b>"), std::string::npos);
  EXPECT_NE(section_of(html, "environment").find("gpulab doctor"), std::string::npos);
  // Nothing would reach the network: no http(s) resource, no script.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(std::regex_search(html, std::regex(R"((src|href)=["']https?:)")), false);
}

TEST_F(ReportCli, ResultsOfTwoGpusAreLabelled) {
  const fs::path page = dir_ / "two.html";
  const CliRun r = run_gpulab("report " + shell_quoted(made("sweep.json")) + " " +
                              shell_quoted(made("sweep_nvml.json")) + " -o " + shell_quoted(page));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read_text(page);
  EXPECT_NE(html.find("Results from 2 GPUs."), std::string::npos);
  EXPECT_NE(html.find("<title>gpulab report: resnet18_like.json on 2 GPUs</title>"), std::string::npos);
  EXPECT_NE(section_of(html, "sweep-1").find("Sweep: resnet18_like.json on simulated"), std::string::npos);
  EXPECT_NE(section_of(html, "sweep-2").find("Sweep: resnet18_like.json on NVIDIA H200"), std::string::npos);
  if (have_gnuplot()) {
    EXPECT_NE(html.find("aria-label=\"Throughput vs batch: resnet18_like.json on NVIDIA H200\""),
              std::string::npos);
  }
}

TEST_F(ReportCli, WithoutGnuplotThePageHasItsTables) {
  const fs::path page = dir_ / "noplots.html";
  // gnuplot nowhere on PATH (the shell and gpulab are named by their full paths).
  const CliRun r = run_gpulab("report " + shell_quoted(made("sweep.json")) + " -o " + shell_quoted(page),
                              "PATH=/nonexistent");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.err.find("warning: gnuplot is not installed (not on PATH)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("apt-get install gnuplot-nox"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("(0 drawn by gnuplot)"), std::string::npos) << r.out;
  const std::string html = read_text(page);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<b>No plots:</b>"), std::string::npos);
  EXPECT_NE(html.find("<h3>Recommendation</h3>"), std::string::npos);
  EXPECT_NE(html.find("Plot not drawn: gnuplot is not installed"), std::string::npos);
  const CliRun named = run_gpulab("report " + shell_quoted(dir_ / "sweep.json") + " -o " + shell_quoted(page),
                                  "GPULAB_GNUPLOT=/nonexistent/gnuplot");
  EXPECT_EQ(named.exit_code, 0) << named.output;
  EXPECT_NE(named.err.find("GPULAB_GNUPLOT names '/nonexistent/gnuplot'"), std::string::npos) << named.err;
}

TEST_F(ReportCli, BadInputGetsAClearMessageAndLeavesNoFile) {
  const fs::path bad = dir_ / "bad";
  fs::create_directories(bad);
  const std::string sweep = read_text(made("sweep.json"));
  std::ofstream(bad / "truncated.json") << sweep.substr(0, sweep.size() / 3);
  std::ofstream(bad / "other.json") << R"({"name": "not ours", "values": [1, 2]})";
  std::ofstream(bad / "calibration.json") << R"({"schema": "gpulab.calibration", "schema_version": 1})";
  std::ofstream(bad / "empty.json") << "";
  std::ofstream(bad / "page.html") << "the previous page";
  const std::string good = shell_quoted(dir_ / "sweep.json") + " ";
  const std::string out = " -o " + shell_quoted(bad / "page.html");
  const struct {
    std::string args;
    int exit_code;
    std::string message;
  } cases[] = {
      {"report" + out, 2, "report: no result file"},
      {"report " + good + shell_quoted(bad / "truncated.json") + out, 4,
       "'" + (bad / "truncated.json").string() + "': not valid JSON (parse error"},
      {"report " + shell_quoted(bad / "other.json") + out, 4,
       "'" + (bad / "other.json").string() + "': not a gpulab result: no \"schema\" field"},
      {"report " + shell_quoted(bad / "calibration.json") + out, 4,
       "schema \"gpulab.calibration\" is not one gpulab report reads"},
      {"report " + shell_quoted(bad / "empty.json") + out, 4, "the file is empty"},
      {"report " + shell_quoted(bad / "missing.json") + out, 3, "missing.json': no such file"},
      {"report " + good + "-o " + shell_quoted(dir_ / "sweep.json"), 2, "is one of the result files"},
      {"report " + good + "-o " + shell_quoted(bad), 2, "is a folder"},
      {"report " + good + out + " --csv-dir " + shell_quoted(bad / "empty.json"), 2, "--csv-dir: "},
  };
  for (const auto& c : cases) {
    const CliRun r = run_gpulab(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.output;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  // The page of a failed run is not written, and the previous one is untouched; nothing half-written.
  EXPECT_EQ(read_text(bad / "page.html"), "the previous page");
  for (const auto& e : fs::directory_iterator(bad)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  EXPECT_EQ(read_text(dir_ / "sweep.json"), sweep);
}

// ---- The page in a browser ---------------------------------------------------------------------------

std::optional<fs::path> find_chromium() {
  if (const char* env = std::getenv("GPULAB_CHROMIUM"); env && *env) return fs::path(env);
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return fs::path(name);
  }
  return std::nullopt;
}

// Runs headless Chromium on the page with `what` (--dump-dom, --screenshot=...); its stdout and
// its log (console messages included) go to files. Returns the exit code.
int chromium(const fs::path& browser, const fs::path& page, const std::string& what,
             const fs::path& stdout_file, const fs::path& log_file, const fs::path& profile) {
  const std::string cmd = "timeout 120 " + shell_quoted(browser) +
                          " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars "
                          "--no-first-run --user-data-dir=" +
                          shell_quoted(profile) + " --enable-logging=stderr --v=0 " + what + " " +
                          shell_quoted("file://" + page.string()) + " > " + shell_quoted(stdout_file) +
                          " 2> " + shell_quoted(log_file);
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Console messages Chromium logged (JavaScript errors, Content-Security-Policy violations, ...).
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
    start = end + 1;
  }
  return out;
}

TEST_F(ReportCli, ChromiumShowsEverySectionAndPlotWithoutAConsoleMessage) {
  const auto browser = find_chromium();
  if (!browser)
    GTEST_SKIP() << "Chromium is not installed (scripts/install-deps.sh installs Debian's chromium)";
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed: no plots to look at";
  const fs::path page = dir_ / "browser.html";
  const CliRun r = run_gpulab("report " + args(all_inputs()) + "-o " + shell_quoted(page) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int plots = json::parse(r.out)["plots"];

  const fs::path dom_file = dir_ / "dom.html", log = dir_ / "chromium.log",
                 profile = dir_ / "chromium-profile";
  // The console check catches what it should: a page that asks for a network image logs a
  // Content-Security-Policy violation.
  const fs::path probe = dir_ / "probe.html";
  std::ofstream(probe)
      << "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
         "content=\"default-src 'none'\"></head><body><img src=\"https://example.com/x.png\">"
         "</body></html>";
  ASSERT_EQ(chromium(*browser, probe, "--dump-dom", dom_file, log, profile), 0) << read_text(log);
  ASSERT_FALSE(console_lines(read_text(log)).empty())
      << "Chromium logged no console message for a blocked image";

  ASSERT_EQ(chromium(*browser, page, "--dump-dom", dom_file, log, profile), 0) << read_text(log);
  const std::string dom = read_text(dom_file);
  EXPECT_TRUE(console_lines(read_text(log)).empty()) << "console: " << console_lines(read_text(log)).front();
  // What the browser built from the page: every section, every plot as an SVG, every axis label.
  EXPECT_EQ(count(dom, "<svg"), static_cast<size_t>(plots));
  for (const Expected& e : expected_sections()) {
    const std::string s = section_of(dom, e.section);
    ASSERT_FALSE(s.empty()) << "section " << e.section << " is not in the DOM";
    if (e.section != "environment") {
      EXPECT_GT(count(s, "<svg"), 0u) << e.section;
    }
    for (const std::string& label : e.labels)
      EXPECT_NE(s.find(label), std::string::npos) << e.section << ": " << label;
  }
  EXPECT_NE(section_of(dom, "environment").find("class=\"fix\""), std::string::npos);

  // The screenshot: decoded, more than a few percent of its pixels are not the white background.
  const fs::path shot = dir_ / "screenshot.png";
  ASSERT_EQ(chromium(*browser, page, "--window-size=1280,2400 --screenshot=" + shell_quoted(shot),
                     dir_ / "shot.out", log, profile),
            0)
      << read_text(log);
  EXPECT_TRUE(console_lines(read_text(log)).empty()) << "console: " << console_lines(read_text(log)).front();
  auto image = decode_image(shot);
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  EXPECT_EQ(image->width, 1280);
  int64_t ink = 0;
  for (int y = 0; y < image->height; ++y) {
    for (int x = 0; x < image->width; ++x) {
      if (image->at(x, y, 0) < 240 || image->at(x, y, 1) < 240 || image->at(x, y, 2) < 240) ++ink;
    }
  }
  const double share = static_cast<double>(ink) / (static_cast<double>(image->width) * image->height);
  EXPECT_GT(share, 0.05) << "the screenshot is nearly blank";
  RecordProperty("non_background_share", std::to_string(share));
}

}  // namespace
}  // namespace gpulab
