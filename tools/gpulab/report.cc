// gpulab report: one self-contained HTML page with the plots and tables of any mix of gpulab's
// result files (src/report/report.h). Exit codes: 0 written (also without gnuplot: tables only,
// with a warning); 2 bad flags; 3 a file that is not there; 4 a file that is not a gpulab result
// or is cut short; 6 the page cannot be written.
#ifdef GPULAB_HAVE_REPORT

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "gpulab/git_commit.h"
#include "gpulab/version.h"
#include "report/plot.h"
#include "report/report.h"

namespace gpulab::cli {
namespace {

namespace fs = std::filesystem;
// Not `report::`: inside gpulab::cli that names cli::report(Status).
namespace rpt = ::gpulab::report;

struct ReportFlags {
  std::vector<std::string> files;
  std::string output = "report.html";
  std::string title;
  std::string csv_dir;
  bool json = false;
};

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// The page must not overwrite one of its inputs.
Status check_output(const ReportFlags& f) {
  std::error_code ec;
  for (const std::string& in : f.files) {
    if (fs::exists(f.output, ec) && fs::equivalent(in, f.output, ec)) {
      return Status::invalid_argument(
          fmt::format("-o: '{}' is one of the result files. Give another name for the page", f.output));
    }
  }
  if (fs::is_directory(f.output, ec)) {
    return Status::invalid_argument(fmt::format("-o: '{}' is a folder. Give the page's file name", f.output));
  }
  return Status::ok();
}

int run_report(const ReportFlags& f) {
  if (f.files.empty()) {
    return report(Status::invalid_argument(
        "report: no result file. Give the files gpulab sweep/bench/pipeline/accuracy/bandwidth/doctor --json "
        "and "
        "monitor --json/--csv wrote, e.g. gpulab report sweep.json doctor.json -o report.html"));
  }
  GPULAB_TRY_CLI(check_output(f));
  std::vector<rpt::Input> inputs;
  for (const std::string& file : f.files) {
    GPULAB_ASSIGN_OR_REPORT(rpt::Input in, rpt::read_input(file));
    inputs.push_back(std::move(in));
  }
  rpt::ReportOptions options{
      .title = f.title,
      .generator = fmt::format("gpulab {} (commit {})", GPULAB_VERSION, GPULAB_GIT_COMMIT),
      .generated_at = utc_now()};
  if (auto gnuplot = rpt::find_gnuplot(); gnuplot.is_ok()) {
    options.gnuplot = *gnuplot;
  } else {
    options.gnuplot_missing = gnuplot.status().message();
  }
  GPULAB_ASSIGN_OR_REPORT(const rpt::ReportOutput out, rpt::build_report(inputs, options));
  GPULAB_TRY_CLI(rpt::write_report({.html_path = f.output, .csv_dir = f.csv_dir}, out));
  for (const std::string& w : out.warnings) std::fprintf(stderr, "gpulab: report: warning: %s\n", w.c_str());

  if (f.json) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& in : inputs)
      files.push_back({{"file", in.source}, {"kind", rpt::input_kind_name(in.kind)}});
    nlohmann::json csv = nlohmann::json::array();
    if (!f.csv_dir.empty()) {
      for (const auto& [name, text] : out.csv_files) csv.push_back((fs::path(f.csv_dir) / name).string());
    }
    const nlohmann::json j = {{"output", f.output}, {"inputs", files},
                              {"plots", out.plots}, {"plots_drawn", out.plots_drawn},
                              {"csv_files", csv},   {"warnings", out.warnings}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  size_t width = 4;  // "file"
  for (const auto& in : inputs) width = std::max(width, in.source.size());
  std::printf("%-*s  %s\n", static_cast<int>(width), "file", "read as");
  for (const auto& in : inputs) {
    std::printf("%-*s  %s\n", static_cast<int>(width), in.source.c_str(),
                std::string(rpt::input_kind_name(in.kind)).c_str());
  }
  std::printf(
      "\nwrote %s: %d plots (%d drawn by gnuplot)%s\n", f.output.c_str(), out.plots, out.plots_drawn,
      f.csv_dir.empty() ? "" : fmt::format("; {} CSV files in {}", out.csv_files.size(), f.csv_dir).c_str());
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* sub =
      app.add_subcommand("report",
                         "One self-contained HTML page (plots drawn by gnuplot, no network) from gpulab's "
                         "result files: sweep, bench "
                         "(--profile), pipeline, accuracy, bandwidth, doctor --json, monitor --json/--csv");
  sub->add_option("files", f->files, "Result files, recognised by their content (any mix, any order)");
  sub->add_option("-o,--output", f->output, "The HTML page to write (atomically)")->capture_default_str();
  sub->add_option("--title", f->title, "Title of the page (default: the model and GPU of the results)");
  sub->add_option("--csv-dir", f->csv_dir,
                  "Also write every plotted series as <plot id>.csv into this folder");
  sub->add_flag("--json", f->json, "Print what was read and written as JSON");
  on_run(sub, [f] { return run_report(*f); });
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_REPORT
