#include "plan/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace gpulab {

MemoryPlan plan_memory(std::span<const BufferRequest> requests, int64_t alignment_bytes) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by first use so that the result does not depend on sort stability.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
    return a < b;
  });
  auto align = [&](int64_t v) { return (v + alignment_bytes - 1) / alignment_bytes * alignment_bytes; };
  std::vector<size_t> placed;
  for (size_t i : order) {
    const auto& r = requests[i];
    // Intervals [offset, offset + bytes) of placed buffers alive at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      const auto& o = requests[j];
      if (o.first_step <= r.last_step && r.first_step <= o.last_step && o.bytes > 0)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + r.bytes <= begin) break;
      offset = std::max(offset, align(end));
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, align(offset + r.bytes));
    placed.push_back(i);
  }
  return plan;
}

std::vector<BufferRequest> value_lifetimes(const Plan& plan, int64_t batch) {
  std::vector<BufferRequest> requests(plan.values.size());
  std::vector<bool> seen(plan.values.size(), false);
  for (size_t v = 0; v < plan.values.size(); ++v)
    requests[v].bytes = plan.values[v].bytes_per_image() * batch;
  for (int s = 0; s < static_cast<int>(plan.steps.size()); ++s) {
    const auto& step = plan.steps[s];
    if (step.output >= 0) {
      auto& r = requests[step.output];
      if (!seen[step.output]) r.first_step = r.last_step = s;
      seen[step.output] = true;
    }
    for (int in : step.inputs) requests[in].last_step = std::max(requests[in].last_step, s);
  }
  // Values no step writes (a kStem step's fused intermediates) take no memory.
  for (size_t v = 0; v < plan.values.size(); ++v)
    if (!seen[v]) requests[v].bytes = 0;
  return requests;
}

}  // namespace gpulab
