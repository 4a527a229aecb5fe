// `gpulab report FILE...`: report::parse_input on one result file of any kind (it recognises the
// kind by content: sweep, bench, pipeline, accuracy, doctor, bandwidth, monitor JSON Lines and
// CSV), then the page built from what it accepted, without gnuplot (the sections, tables, CSVs
// and plot data are all computed; only the drawing is left out). Invariant (abort, so libFuzzer
// keeps the input): a result parse_input accepts gives a page.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "report/inputs.h"
#include "report/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab::report;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto input = parse_input("fuzz.json", bytes);
  if (!input.is_ok()) return 0;
  const Input inputs[] = {std::move(*input)};
  auto page = build_report(inputs, {.generator = "fuzz_report_input", .gnuplot_missing = "fuzzing"});
  if (!page.is_ok()) {
    std::fprintf(stderr, "build_report refuses what parse_input accepted: %s\n",
                 page.status().to_string().c_str());
    std::abort();
  }
  return 0;
}
