// `gpulab sweep --resume FILE`: the sweep result JSON (sweep_from_json after json::parse, as
// read_sweep_json does), then what a resumed sweep prints and writes from it. Invariant (abort, so
// libFuzzer keeps the input): what to_json writes from an accepted result is accepted again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sweep/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab::sweep;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  auto result = sweep_from_json(doc);
  if (!result.is_ok()) return 0;
  (void)format_sweep(*result);
  (void)to_csv(*result);
  const std::string written = to_json(*result).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  auto back = sweep_from_json(nlohmann::json::parse(written, nullptr, false));
  if (!back.is_ok()) {
    std::fprintf(stderr, "sweep_from_json refuses what to_json wrote: %s\n",
                 back.status().to_string().c_str());
    std::abort();
  }
  return 0;
}
