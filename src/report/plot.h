// Plots of the report, drawn by gnuplot (Debian's gnuplot-nox, svg terminal) and inlined as SVG.
//
// A Plot is data: series of (x, y) points, reference lines, or horizontal bars. gpulab writes a
// gnuplot script and one data file into a temporary folder, runs gnuplot on them (with a time
// limit) and reads the SVG back; the same data goes to the CSV the report writes beside the page.
// Everything that comes from an input file (titles, layer names) is sanitised before it reaches
// the script, so a result file cannot make gnuplot run a command. Colors come from Okabe and Ito's
// palette (distinguishable with the common color-vision deficiencies), and series also differ by
// point type and dash pattern, so no plot is read by color alone.
#pragma once

#include <array>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab::report {

// Okabe & Ito (2008): blue, vermillion, bluish green, reddish purple, orange, sky blue, black,
// yellow (last: it is hard to see on white).
inline constexpr std::array<std::string_view, 8> kPalette = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                             "#E69F00", "#56B4E9", "#000000", "#F0E442"};
inline constexpr int kBlack = 6;

struct Series {
  enum class Style { kLinesPoints, kLines, kPoints, kLabels };
  std::string title;  // legend entry; "" = none
  std::vector<double> x, y;
  std::vector<std::string> labels;  // kLabels: the text at each point
  Style style = Style::kLinesPoints;
  int color = 0;       // index into kPalette
  int point_type = 7;  // gnuplot's: 6 open circle, 7 circle, 5 square, 9 triangle, 12 open diamond, ...
  double point_size = 0.8;
  int dash_type = 1;  // gnuplot's: 1 solid, 2 dashed, 3 short dashes, 4 dot-dash
  double line_width = 1.5;
};

// A horizontal or vertical line across the plot, with its legend entry: a limit, a budget, a
// theoretical rate, the out-of-memory wall. Drawn over the range of the data series.
struct ReferenceLine {
  enum class Axis { kHorizontal, kVertical };
  Axis axis = Axis::kHorizontal;
  double value = 0;   // y of a horizontal line, x of a vertical one
  std::string title;  // legend entry with the value: "power limit 350 W"
  int color = kBlack;
  int dash_type = 2;
};

// One horizontal bar (bar charts list them top to bottom).
struct Bar {
  std::string label;  // the category, on the y axis
  double value = 0;   // length, in the x axis' unit
  int group = 0;      // index into Plot::bar_groups (its color and legend entry)
};

struct Plot {
  std::string id;                // unique in the page: the figure's HTML id and the CSV file name
  std::string title;             // what, of which model, on which GPU
  std::string x_label, y_label;  // with the unit: "batch [images]"
  bool log_x = false, log_y = false;
  int log_x_base = 10;                                 // 2 for batch sizes and bytes
  std::vector<std::pair<double, std::string>> x_tics;  // explicit tick labels; empty = gnuplot's
  std::vector<Series> series;
  std::vector<ReferenceLine> lines;
  std::vector<Bar> bars;                // a bar chart when not empty (series are then ignored)
  std::vector<std::string> bar_groups;  // legend entries of the bars' groups (color = group index)
  std::optional<double> bar_base;       // where bars start (default 0, or below the shortest on log x)
  std::string caption;                  // how to read it, under the plot

  // Whether there is anything to draw (points on the plot's scales, or bars).
  bool has_data() const;
};

// The gnuplot script that draws `plot` from `data_file` (written by gnuplot_data) into `svg_file`.
std::string gnuplot_script(const Plot& plot, const std::filesystem::path& data_file,
                           const std::filesystem::path& svg_file);
// The data file: one block per series (reference lines included), separated by two blank lines.
std::string gnuplot_data(const Plot& plot);
// Every plotted series as CSV: "series,<x label>,<y label>" (bars: "group,label,<x label>").
std::string plot_csv(const Plot& plot);

// Turns gnuplot's SVG document into an element for an HTML page: no XML prolog, ids prefixed with
// `id_prefix` (several plots share a page), its <title> set to `title`, role="img".
std::string inline_svg(std::string_view svg, std::string_view id_prefix, std::string_view title);

// Where gnuplot is: $GPULAB_GNUPLOT when set (it must then exist), else `gnuplot` on $PATH.
// kNotFound with what to install when there is none.
Result<std::filesystem::path> find_gnuplot();

// Runs gnuplot on the plot in a temporary folder (removed after) and returns the SVG element for
// the page. kUnavailable when gnuplot cannot be run or does not finish within `timeout`; kInternal
// when it rejects the script (its message included).
Result<std::string> render_plot(const Plot& plot, const std::filesystem::path& gnuplot,
                                std::chrono::milliseconds timeout);

}  // namespace gpulab::report
