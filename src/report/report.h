// `gpulab report`: one self-contained HTML page from any mix of gpulab's result files.
//
//   std::vector<Input> inputs;                      // report/inputs.h: read_input(path) per file
//   auto out = build_report(inputs, {.title = "", .generator = "gpulab 0.1.0 (abc123)", .gnuplot = path});
//   write_report({.html_path = "report.html", .csv_dir = "csv"}, *out);
//
// The page opens offline: plots are inline SVG drawn by gnuplot (report/plot.h), the style sheet
// is inline, and a Content-Security-Policy forbids every network request, script and font, so a
// browser shows the page exactly as written. Sections appear for the inputs given, in a fixed
// order (environment and doctor, sweeps, bench runs, pipeline, accuracy, bandwidth, monitor),
// after an "At a glance" box that says what each result concludes. Without gnuplot (an empty
// ReportOptions::gnuplot) the page has every table, and says where each plot would be.
#pragma once

#include <chrono>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpulab/status.h"
#include "report/inputs.h"

namespace gpulab::report {

struct ReportOptions {
  std::string title;              // "" = from the inputs ("gpulab report: resnet18.onnx on NVIDIA H200")
  std::string generator;          // who made the page, for its footer: "gpulab 0.1.0 (commit 9ef52bb)"
  std::string generated_at;       // when, for its footer ("" = not shown)
  std::filesystem::path gnuplot;  // the gnuplot executable; empty = no plots
  std::string gnuplot_missing;    // why there is none (shown on the page); used when gnuplot is empty
  std::chrono::milliseconds gnuplot_timeout{30000};  // per plot
};

struct ReportOutput {
  std::string html;
  std::vector<std::pair<std::string, std::string>> csv_files;  // file name ("<plot id>.csv"), content
  int plots = 0;                                               // plots on the page
  int plots_drawn = 0;                                         // of which gnuplot drew
  std::vector<std::string> warnings;                           // for stderr: plots not drawn, and why
};

// Builds the page. kInvalidArgument for no inputs. A plot gnuplot cannot draw is a warning (the
// page says so where the plot would be), not an error.
Result<ReportOutput> build_report(std::span<const Input> inputs, const ReportOptions& options);

struct ReportFiles {
  std::filesystem::path html_path;  // the page
  std::filesystem::path csv_dir;    // "" = no CSV; created when missing
};

// Writes the page and the CSVs, each to a temporary file renamed into place, so that no reader
// ever sees half a file. kInvalidArgument when csv_dir exists and is not a folder.
Status write_report(const ReportFiles& files, const ReportOutput& output);

}  // namespace gpulab::report
