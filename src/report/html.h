// Small HTML helpers for the report page: escaping, tables, collapsible blocks, number formats.
// Every string from an input file goes through escape() before it reaches the page.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpulab::report::html {

// &, <, >, " and ' as entities; control characters other than tab and newline dropped.
std::string escape(std::string_view text);

struct Table {
  std::vector<std::string> header;             // escaped text or HTML
  std::vector<std::vector<std::string>> rows;  // cells as HTML (escape() what comes from inputs)
  std::vector<std::string> row_classes;        // per row, optional ("fail", "warn", "best")
  std::string css_class;                       // of the <table>
  std::vector<bool> numeric;                   // per column: right-aligned
};
std::string table(const Table& t);

// <details><summary>summary</summary>inner</details>; `summary` is escaped, `inner` is HTML.
std::string details(std::string_view summary, std::string_view inner_html, bool open = false);

// "—" for nullopt or a non-finite value; otherwise `decimals` places with thousands separated by
// a thin space ("36 338").
std::string number(std::optional<double> v, int decimals = 0);
// A fraction as a percentage: 0.963 -> "96.3%".
std::string percent(std::optional<double> fraction, int decimals = 1);
// Binary units: 1536 -> "1.5 KiB", 629145600 -> "600 MiB".
std::string bytes(std::optional<double> v);
// A time in milliseconds with about 3 significant digits: "0.184", "14.2", "157"; below 0.1 ms two
// significant digits ("0.012", "0.00031").
std::string ms(std::optional<double> v);

}  // namespace gpulab::report::html
