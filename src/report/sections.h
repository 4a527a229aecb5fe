// The sections of the report page, one builder per kind of input (internal to src/report).
//
// A builder only arranges data: text and tables as HTML, plots as Plot descriptions. Drawing the
// plots (gnuplot), the CSV files and the page itself are report.cc's.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "report/inputs.h"
#include "report/plot.h"

namespace gpulab::report {

struct Block {
  std::string html;          // a fragment, or
  std::optional<Plot> plot;  // a plot (drawn when the page is assembled)
};

struct Section {
  std::string id;                   // HTML id, unique in the page ("sweep-1")
  std::string title;                // the <h2>
  std::vector<Block> blocks;        // in page order
  std::vector<std::string> glance;  // lines (HTML) for the "At a glance" box at the top of the page
};

// What a result was measured on, as titles and tables name it: the GPU's name, "simulated
// (...)" for a simulated sweep, the CPU for accuracy's emulation.
std::string gpu_label(const Input& input);

// The model a result is about, as its file name ("resnet18.onnx"), "" when it has none.
std::string model_label(const Input& input);

Section environment_section(std::span<const Input> inputs);  // every input's environment, doctor's findings
Section sweep_section(const Input& input, const sweep::SweepResult& sweep, const std::string& id);
Section bench_section(const Input& input, const measure::BenchResult& bench, const std::string& id);
Section bandwidth_section(const Input& input, const measure::BandwidthReport& bandwidth,
                          const std::string& id);
Section monitor_section(const Input& input, const MonitorLog& log, const std::string& id);
Section pipeline_section(const Input& input, const PipelineReport& pipeline, const std::string& id);
Section accuracy_section(const Input& input, const AccuracyReport& accuracy, const std::string& id);

// Helpers shared by the builders.
Block html_block(std::string html);
Block plot_block(Plot plot);
// "<p class="note">...</p>" with escaped text.
std::string note(std::string_view text);
// The series color and point type of a precision, the same in every plot of the page.
int precision_color(std::string_view precision);
int precision_point(std::string_view precision);

}  // namespace gpulab::report
