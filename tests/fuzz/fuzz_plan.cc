// Plan file load and validation (deserialize_plan, what load_plan does after reading the file).
// Each input is tried as it is, then with its trailing FNV-1a checksum recomputed, so that the
// mutations reach the header JSON and the weight table instead of stopping at the checksum.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "image/preprocess.h"
#include "plan/memory_plan.h"
#include "plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpulab;
  const auto bytes = std::as_bytes(std::span(data, size));
  (void)deserialize_plan(bytes);
  if (size < 8) return 0;
  std::vector<std::byte> fixed(bytes.begin(), bytes.end());
  const uint64_t sum = fnv1a64(std::span(fixed).first(size - 8));
  for (int i = 0; i < 8; ++i) fixed[size - 8 + i] = static_cast<std::byte>((sum >> (8 * i)) & 0xff);
  auto plan = deserialize_plan(fixed);
  if (!plan.is_ok()) return 0;
  // What classify, bench and the runtime do with a loaded plan before running it: the input's
  // preprocessing, the weights' size, the activation memory plan at the max batch.
  (void)preprocess_from_metadata(plan->metadata);
  (void)plan->weights_bytes();
  const MemoryPlan memory = plan_memory(value_lifetimes(*plan, plan->max_batch));
  if (memory.arena_bytes < 0) std::abort();
  return 0;
}
