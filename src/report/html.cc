#include "report/html.h"

#include <cmath>

#include <fmt/format.h>

namespace gpulab::report::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t':
      case '\n': out += c; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
    }
  }
  return out;
}

std::string table(const Table& t) {
  std::string out = t.css_class.empty() ? "<table>" : fmt::format("<table class=\"{}\">", t.css_class);
  auto align = [&](size_t column) {
    return column < t.numeric.size() && t.numeric[column] ? std::string_view(" class=\"num\"")
                                                          : std::string_view();
  };
  out += "<thead><tr>";
  for (size_t i = 0; i < t.header.size(); ++i) out += fmt::format("<th{}>{}</th>", align(i), t.header[i]);
  out += "</tr></thead><tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string cls = r < t.row_classes.size() && !t.row_classes[r].empty()
                                ? fmt::format(" class=\"{}\"", t.row_classes[r])
                                : std::string();
    out += fmt::format("<tr{}>", cls);
    for (size_t i = 0; i < t.rows[r].size(); ++i) out += fmt::format("<td{}>{}</td>", align(i), t.rows[r][i]);
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string details(std::string_view summary, std::string_view inner_html, bool open) {
  return fmt::format("<details{}><summary>{}</summary>\n{}</details>\n", open ? " open" : "", escape(summary),
                     inner_html);
}

std::string number(std::optional<double> v, int decimals) {
  if (!v || !std::isfinite(*v)) return "—";
  std::string digits = fmt::format("{:.{}f}", std::fabs(*v), decimals);
  const size_t point = digits.find('.');
  std::string whole = digits.substr(0, point);
  const std::string frac = point == std::string::npos ? std::string() : digits.substr(point);
  std::string grouped;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (i > 0 && (whole.size() - i) % 3 == 0) grouped += "\u2009";  // thin space
    grouped += whole[i];
  }
  const bool negative = *v < 0 && digits.find_first_not_of("0.") != std::string::npos;
  return (negative ? "-" : "") + grouped + frac;
}

std::string percent(std::optional<double> fraction, int decimals) {
  if (!fraction || !std::isfinite(*fraction)) return "—";
  return fmt::format("{:.{}f}%", *fraction * 100, decimals);
}

std::string bytes(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "—";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = *v;
  int unit = 0;
  while (std::fabs(x) >= 1024 && unit < 4) {
    x /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", x);
  return fmt::format("{:.{}f} {}", x, std::fabs(x) < 10 ? 2 : (std::fabs(x) < 100 ? 1 : 0), kUnits[unit]);
}

std::string ms(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "—";
  const double a = std::fabs(*v);
  if (a > 0 && a < 0.1) return fmt::format("{:.2g}", *v);  // 0.012, 0.00031: two significant digits
  return fmt::format("{:.{}f}", *v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
}

}  // namespace gpulab::report::html
