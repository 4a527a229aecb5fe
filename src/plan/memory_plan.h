// Activation memory plan: every value of a plan gets an offset in one arena; values whose
// lifetimes do not overlap share bytes. CUDA-free, deterministic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "plan/plan.h"

namespace gpulab {

// A buffer that must hold its bytes from the step that writes it (first_step) through the last
// step that reads it (last_step), both inclusive.
struct BufferRequest {
  int64_t bytes = 0;
  int first_step = 0;
  int last_step = 0;
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per request, multiples of the alignment
  int64_t arena_bytes = 0;       // smallest arena that holds every buffer at its offset
};

// Greedy: largest buffers first, each at the lowest aligned offset that does not overlap a
// placed buffer whose lifetime overlaps its own. Never overlaps two live buffers.
MemoryPlan plan_memory(std::span<const BufferRequest> requests, int64_t alignment_bytes = 256);

// The lifetimes of a plan's values at batch size `batch` (a value read by no step lives through
// the step that writes it).
std::vector<BufferRequest> value_lifetimes(const Plan& plan, int64_t batch);

}  // namespace gpulab
