#include "report/plot.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "core/file_io.h"
#include "report/html.h"

extern char** environ;

namespace gpulab::report {
namespace {

namespace fs = std::filesystem;

// Text from an input file, safe inside a gnuplot single-quoted string: control characters (a
// newline would end the command) become spaces, a quote is doubled.
std::string gnuplot_string(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else if (c == '\'') {
      out += "''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A label in a data file (gnuplot reads "..." there, with no escapes): no quotes, no control characters.
std::string data_label(std::string_view text) {
  std::string out = "\"";
  for (char c : text) out += (static_cast<unsigned char>(c) < 0x20 || c == '"') ? ' ' : c;
  return out + "\"";
}

// A long title on two lines, broken after "what:" ('line 1'."\n".'line 2'), so that it fits the plot.
std::string title_expression(std::string_view title) {
  constexpr size_t kOneLine = 64;
  const size_t colon = title.find(": ");
  if (title.size() <= kOneLine || colon == std::string_view::npos) return gnuplot_string(title);
  return gnuplot_string(title.substr(0, colon + 1)) + ".\"\\n\"." + gnuplot_string(title.substr(colon + 2));
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number(double v) {
  return fmt::format("{:.9g}", v);
}

bool usable(double v, bool log_scale) {
  return std::isfinite(v) && (!log_scale || v > 0);
}

// The points of a series that can be drawn on the plot's scales.
std::vector<std::pair<double, double>> points(const Plot& plot, const Series& s) {
  std::vector<std::pair<double, double>> out;
  const size_t n = std::min(s.x.size(), s.y.size());
  for (size_t i = 0; i < n; ++i) {
    if (usable(s.x[i], plot.log_x) && usable(s.y[i], plot.log_y)) out.emplace_back(s.x[i], s.y[i]);
  }
  return out;
}

struct Extent {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return lo > hi; }
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // A range of nonzero width (a single value is widened: x0.8..1.25 on a log scale, +-1 otherwise).
  std::pair<double, double> span(bool log_scale) const {
    if (lo < hi) return {lo, hi};
    return log_scale ? std::pair{lo * 0.8, hi * 1.25} : std::pair{lo - 1, hi + 1};
  }
};

// The data series, then the reference lines turned into two-point series over the data's range
// (so that autoscaling includes them and the legend names them).
std::vector<Series> drawn_series(const Plot& plot) {
  std::vector<Series> out;
  Extent x, y;
  for (const Series& s : plot.series) {
    Series kept = s;
    kept.x.clear();
    kept.y.clear();
    kept.labels.clear();
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!usable(s.x[i], plot.log_x) || !usable(s.y[i], plot.log_y)) continue;
      kept.x.push_back(s.x[i]);
      kept.y.push_back(s.y[i]);
      kept.labels.push_back(i < s.labels.size() ? s.labels[i] : std::string());
      x.add(s.x[i]);
      y.add(s.y[i]);
    }
    if (!kept.x.empty()) out.push_back(std::move(kept));
  }
  if (out.empty()) return out;
  for (const ReferenceLine& l : plot.lines) {
    const bool log_scale = l.axis == ReferenceLine::Axis::kHorizontal ? plot.log_y : plot.log_x;
    if (!usable(l.value, log_scale)) continue;
    if (l.axis == ReferenceLine::Axis::kHorizontal) {
      y.add(l.value);
    } else {
      x.add(l.value);
    }
  }
  const auto [x0, x1] = x.span(plot.log_x);
  const auto [y0, y1] = y.span(plot.log_y);
  for (const ReferenceLine& l : plot.lines) {
    const bool horizontal = l.axis == ReferenceLine::Axis::kHorizontal;
    if (!usable(l.value, horizontal ? plot.log_y : plot.log_x)) continue;
    Series s{.title = l.title, .style = Series::Style::kLines, .color = l.color, .dash_type = l.dash_type};
    s.x = horizontal ? std::vector{x0, x1} : std::vector{l.value, l.value};
    s.y = horizontal ? std::vector{l.value, l.value} : std::vector{y0, y1};
    out.push_back(std::move(s));
  }
  return out;
}

std::string with_clause(const Series& s) {
  const std::string_view color = kPalette[static_cast<size_t>(s.color) % kPalette.size()];
  switch (s.style) {
    case Series::Style::kLinesPoints:
      return fmt::format("with linespoints lc rgb '{}' pt {} ps {} dt {} lw {}", color, s.point_type,
                         s.point_size, s.dash_type, s.line_width);
    case Series::Style::kLines:
      return fmt::format("with lines lc rgb '{}' dt {} lw {}", color, s.dash_type, s.line_width);
    case Series::Style::kPoints:
      return fmt::format("with points lc rgb '{}' pt {} ps {} lw {}", color, s.point_type, s.point_size,
                         s.line_width);
    case Series::Style::kLabels:
      return fmt::format("with labels left offset char 0.7,0.5 font ',10' tc rgb '{}'", color);
  }
  return "";
}

// Bars: the length at which a bar starts (0, or below the smallest bar on a log scale).
double bar_base(const Plot& plot) {
  if (plot.bar_base) return *plot.bar_base;
  if (!plot.log_x) return 0;
  double lo = std::numeric_limits<double>::infinity();
  for (const Bar& b : plot.bars) {
    if (b.value > 0 && std::isfinite(b.value)) lo = std::min(lo, b.value);
  }
  return std::isfinite(lo) ? lo / 4 : 1;
}

std::string truncated(std::string_view label, size_t max_chars) {
  if (label.size() <= max_chars) return std::string(label);
  return std::string(label.substr(0, max_chars - 3)) + "...";
}

// The points of a series the data file gets. A line of more than kMaxLinePoints (a long monitor
// log) keeps, of each of kMaxLinePoints / 2 consecutive runs, its lowest and highest point, in
// order: the drawing keeps every spike at a fraction of the SVG's size. The CSV keeps every point.
constexpr size_t kMaxLinePoints = 4000;
std::vector<size_t> drawn_points(const Series& s) {
  std::vector<size_t> out;
  const size_t n = s.x.size();
  if (s.style != Series::Style::kLines || n <= kMaxLinePoints) {
    for (size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const size_t runs = kMaxLinePoints / 2;
  for (size_t r = 0; r < runs; ++r) {
    const size_t begin = r * n / runs, end = (r + 1) * n / runs;
    if (begin >= end) continue;
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      if (s.y[i] < s.y[lo]) lo = i;
      if (s.y[i] > s.y[hi]) hi = i;
    }
    out.push_back(std::min(lo, hi));
    if (lo != hi) out.push_back(std::max(lo, hi));
  }
  return out;
}

// Room for the legend below the plot, so that many or long entries do not squeeze the plot: gnuplot
// lays the entries out in as many columns of the widest entry as fit the width (about 7.5 px a
// character at 13 px, 70 px for the sample and the gaps, 720 px usable), one line each 20 px.
int key_height(const Plot& plot) {
  size_t entries = 0, widest = 0;
  for (const Series& s : plot.series) {
    if (s.title.empty() || s.style == Series::Style::kLabels) continue;
    ++entries;
    widest = std::max(widest, s.title.size());
  }
  for (const ReferenceLine& l : plot.lines) {
    ++entries;
    widest = std::max(widest, l.title.size());
  }
  const size_t columns =
      std::max<size_t>(1, static_cast<size_t>(720 / (7.5 * static_cast<double>(widest) + 70)));
  const size_t rows = (entries + columns - 1) / columns;
  return 20 * static_cast<int>(std::max<size_t>(rows, 1)) + 40;
}

}  // namespace

bool Plot::has_data() const {
  if (!bars.empty()) {
    return std::any_of(bars.begin(), bars.end(),
                       [&](const Bar& b) { return std::isfinite(b.value) && (!log_x || b.value > 0); });
  }
  return std::any_of(series.begin(), series.end(),
                     [&](const Series& s) { return !points(*this, s).empty(); });
}

std::string gnuplot_data(const Plot& plot) {
  std::string out;
  if (!plot.bars.empty()) {
    // "value position group" rows, the first bar at the top; the script picks each group's rows.
    const int n = static_cast<int>(plot.bars.size());
    for (int i = 0; i < n; ++i) {
      const Bar& b = plot.bars[static_cast<size_t>(i)];
      if (usable(b.value, plot.log_x)) out += fmt::format("{} {} {}\n", number(b.value), n - 1 - i, b.group);
    }
    return out;
  }
  for (const Series& s : drawn_series(plot)) {
    for (size_t i : drawn_points(s)) {
      out += fmt::format("{} {}", number(s.x[i]), number(s.y[i]));
      if (s.style == Series::Style::kLabels) out += " " + data_label(i < s.labels.size() ? s.labels[i] : "");
      out += "\n";
    }
    out += "\n\n";
  }
  return out;
}

// A bar chart's legend sits below its plot area, which starts right of the bar labels; gnuplot
// centres the entries on that area and lets them run past the right edge (the accuracy chart's
// third entry did). The columns that fit right of the labels (same measures as key_height).
size_t bar_key_columns(const Plot& plot) {
  size_t label = 0, widest = 0;
  for (const Bar& b : plot.bars) label = std::max(label, std::min<size_t>(b.label.size(), 40));
  for (const std::string& g : plot.bar_groups) widest = std::max(widest, g.size());
  const double room = 740 - (7.5 * static_cast<double>(label) + 30);
  return std::max<size_t>(1, static_cast<size_t>(room / (7.5 * static_cast<double>(widest) + 70)));
}

std::string gnuplot_script(const Plot& plot, const fs::path& data_file, const fs::path& svg_file) {
  const bool bars = !plot.bars.empty();
  const size_t key_columns = bars ? bar_key_columns(plot) : 0;
  const size_t key_rows =
      bars ? (std::max<size_t>(plot.bar_groups.size(), 1) + key_columns - 1) / key_columns : 0;
  const int height = bars ? std::clamp(130 + 22 * static_cast<int>(plot.bars.size()), 260, 1400) +
                                20 * (static_cast<int>(key_rows) - 1)
                          : 400 + key_height(plot);
  std::string s;
  s += fmt::format(
      "set terminal svg size 760,{} dynamic noenhanced font 'DejaVu Sans,13' background rgb '#ffffff'\n",
      height);
  s += fmt::format("set output {}\n", gnuplot_string(svg_file.string()));
  s += "set encoding utf8\n";
  s += fmt::format("set title {}\n", title_expression(plot.title));
  s += fmt::format("set xlabel {}\n", gnuplot_string(plot.x_label));
  s += fmt::format("set ylabel {}\n", gnuplot_string(plot.y_label));
  s += "set border 3 lc rgb '#555555'\nset tics nomirror out\n";
  s += "set grid xtics ytics lc rgb '#dddddd' lw 1 dt 1\n";
  s += "set key outside below center horizontal noautotitle\n";
  if (plot.log_x) s += fmt::format("set logscale x {}\n", plot.log_x_base);
  if (plot.log_y) s += "set logscale y 10\n";
  if (!plot.x_tics.empty()) {
    std::string tics;
    for (const auto& [at, label] : plot.x_tics) {
      if (!usable(at, plot.log_x)) continue;
      tics += fmt::format("{}{} {}", tics.empty() ? "" : ", ", gnuplot_string(label), number(at));
    }
    if (!tics.empty()) s += fmt::format("set xtics ({})\n", tics);
  }
  const std::string data = gnuplot_string(data_file.string());
  if (bars) {
    const int n = static_cast<int>(plot.bars.size());
    std::string tics;
    for (int i = 0; i < n; ++i) {
      tics += fmt::format("{}{} {}", i ? ", " : "",
                          gnuplot_string(truncated(plot.bars[static_cast<size_t>(i)].label, 40)), n - 1 - i);
    }
    s += fmt::format("set ytics ({}) scale 0\nset yrange [-0.7:{}]\nunset ylabel\n", tics, n - 0.3);
    s += "set grid noytics\nset style fill solid 0.85 border -1\n";
    s += fmt::format("set key maxcols {}\n", key_columns);
    // Plain numbers on a log axis ("1000000", not gnuplot's "1e+06" beside "100000").
    if (plot.log_x && plot.x_tics.empty()) s += "set format x '%.0f'\n";
    const double base = bar_base(plot);
    if (plot.log_x || plot.bar_base) s += fmt::format("set xrange [{}:*]\n", number(base));
    std::string cmd;
    for (size_t g = 0; g < std::max<size_t>(plot.bar_groups.size(), 1); ++g) {
      const bool any = std::any_of(plot.bars.begin(), plot.bars.end(), [&](const Bar& b) {
        return static_cast<size_t>(b.group) == g && usable(b.value, plot.log_x);
      });
      if (!any) continue;
      const std::string title = g < plot.bar_groups.size() ? gnuplot_string(plot.bar_groups[g]) : "''";
      cmd += fmt::format(
          "{}{} using (({}+$1)/2):($3=={}?$2:NaN):({}):1:($2-0.38):($2+0.38) with boxxyerror lc rgb '{}' "
          "title {}",
          cmd.empty() ? "plot " : ", \\\n     ", data, number(base), g, number(base),
          kPalette[g % kPalette.size()], title);
    }
    return s + cmd + "\n";
  }
  std::string cmd;
  const std::vector<Series> series = drawn_series(plot);
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& se = series[i];
    const std::string using_clause = se.style == Series::Style::kLabels ? "1:2:3" : "1:2";
    const std::string title = se.title.empty() || se.style == Series::Style::kLabels
                                  ? std::string("notitle")
                                  : "title " + gnuplot_string(se.title);
    cmd += fmt::format("{}{} index {} using {} {} {}", i ? ", \\\n     " : "plot ", data, i, using_clause,
                       with_clause(se), title);
  }
  return s + cmd + "\n";
}

std::string plot_csv(const Plot& plot) {
  std::string out;
  if (!plot.bars.empty()) {
    out = fmt::format("group,label,{}\n", csv_field(plot.x_label));
    for (const Bar& b : plot.bars) {
      const std::string group = static_cast<size_t>(b.group) < plot.bar_groups.size()
                                    ? plot.bar_groups[static_cast<size_t>(b.group)]
                                    : std::string();
      out += fmt::format("{},{},{}\n", csv_field(group), csv_field(b.label), number(b.value));
    }
    return out;
  }
  out = fmt::format("series,{},{}\n", csv_field(plot.x_label), csv_field(plot.y_label));
  for (const Series& s : drawn_series(plot)) {
    if (s.style == Series::Style::kLabels) continue;  // annotations of points another series has
    for (size_t i = 0; i < s.x.size(); ++i) {
      out += fmt::format("{},{},{}\n", csv_field(s.title), number(s.x[i]), number(s.y[i]));
    }
  }
  return out;
}

std::string inline_svg(std::string_view svg, std::string_view id_prefix, std::string_view title) {
  const size_t start = svg.find("<svg");
  std::string out(start == std::string_view::npos ? svg : svg.substr(start));
  const std::string prefix(id_prefix);
  out = std::regex_replace(out, std::regex(R"re(\bid=(['"]))re"), "id=$1" + prefix + "-");
  out = std::regex_replace(out, std::regex(R"re(href=(['"])#)re"), "href=$1#" + prefix + "-");
  out = std::regex_replace(out, std::regex(R"re(url\(#)re"), "url(#" + prefix + "-");
  const std::string escaped = html::escape(title);
  if (const size_t t = out.find("<title>"); t != std::string::npos) {
    const size_t end = out.find("</title>", t);
    if (end != std::string::npos) out.replace(t, end - t + 8, "<title>" + escaped + "</title>");
  }
  if (out.starts_with("<svg"))
    out.insert(4, fmt::format(" class=\"plot\" role=\"img\" aria-label=\"{}\"", escaped));
  return out;
}

Result<fs::path> find_gnuplot() {
  if (const char* env = std::getenv("GPULAB_GNUPLOT"); env && *env) {
    if (::access(env, X_OK) == 0 && !fs::is_directory(env)) return fs::path(env);
    return Status::not_found(fmt::format(
        "GPULAB_GNUPLOT names '{}', which is not an executable file. Point it at gnuplot or unset it", env));
  }
  if (const char* path = std::getenv("PATH")) {
    std::string_view dirs = path;
    while (!dirs.empty()) {
      const size_t colon = dirs.find(':');
      const std::string_view dir = dirs.substr(0, colon);
      if (!dir.empty()) {
        const fs::path candidate = fs::path(dir) / "gnuplot";
        if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate;
      }
      if (colon == std::string_view::npos) break;
      dirs.remove_prefix(colon + 1);
    }
  }
  return Status::not_found(
      "gnuplot is not installed (not on PATH). Install it to get the plots (Debian/Ubuntu: apt-get install "
      "gnuplot-nox); without it the page has every table but no plot");
}

namespace {

// A temporary folder, removed with everything in it when this goes out of scope.
class TempDir {
 public:
  static Result<TempDir> create() {
    std::string pattern = (fs::temp_directory_path() / "gpulab-report-XXXXXX").string();
    if (!::mkdtemp(pattern.data()))
      return Status::io_error(
          fmt::format("report: cannot create a temporary folder ({})", std::strerror(errno)));
    return TempDir(pattern);
  }
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  explicit TempDir(fs::path p) : path_(std::move(p)) {}
  fs::path path_;
};

// Runs `gnuplot script` with stdout and stderr into `log` and HOME set to `home` (so that no
// ~/.gnuplot changes the plot). Returns the exit status, or kUnavailable on timeout.
Result<int> run_gnuplot(const fs::path& gnuplot, const fs::path& script, const fs::path& log,
                        const fs::path& home, std::chrono::milliseconds timeout) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "HOME=", 5) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("HOME=" + home.string());
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string program = gnuplot.string(), script_arg = script.string();
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status::unavailable(
        fmt::format("report: cannot run gnuplot '{}' ({})", program, std::strerror(rc)));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return Status::internal("report: waitpid on gnuplot failed");
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::unavailable(
          fmt::format("report: gnuplot did not finish within {} ms; it was stopped", timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

Result<std::string> render_plot(const Plot& plot, const fs::path& gnuplot,
                                std::chrono::milliseconds timeout) {
  GPULAB_ASSIGN_OR_RETURN(TempDir dir, TempDir::create());
  const fs::path data = dir.path() / "plot.dat", script = dir.path() / "plot.gp",
                 svg = dir.path() / "plot.svg", log = dir.path() / "gnuplot.log";
  GPULAB_TRY(write_file_atomic(data, gnuplot_data(plot)));
  GPULAB_TRY(write_file_atomic(script, gnuplot_script(plot, data, svg)));
  GPULAB_ASSIGN_OR_RETURN(const int exit_code, run_gnuplot(gnuplot, script, log, dir.path(), timeout));
  auto messages = read_file_text(log);
  std::string said = messages.is_ok() ? std::string(*messages) : std::string();
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  auto text = read_file_text(svg);
  if (exit_code != 0 || !text.is_ok() || text->find("</svg>") == std::string::npos) {
    return Status::internal(fmt::format("report: gnuplot could not draw plot '{}' (exit code {}): {}",
                                        plot.id, exit_code, said.empty() ? "no message" : said));
  }
  return inline_svg(*text, plot.id, plot.title);
}

}  // namespace gpulab::report
