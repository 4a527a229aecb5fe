// The memory planner never lets two live buffers overlap and reuses memory of dead ones.
#include <gtest/gtest.h>

#include "plan/memory_plan.h"

namespace gpulab {
namespace {

void expect_no_live_overlap(std::span<const BufferRequest> req, const MemoryPlan& plan, int64_t alignment) {
  ASSERT_EQ(plan.offsets.size(), req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % alignment, 0) << i;
    EXPECT_LE(plan.offsets[i] + req[i].bytes, plan.arena_bytes) << i;
    for (size_t j = i + 1; j < req.size(); ++j) {
      const bool live_together =
          req[i].first_step <= req[j].last_step && req[j].first_step <= req[i].last_step;
      const bool overlap = plan.offsets[i] < plan.offsets[j] + req[j].bytes &&
                           plan.offsets[j] < plan.offsets[i] + req[i].bytes;
      EXPECT_FALSE(live_together && overlap && req[i].bytes > 0 && req[j].bytes > 0) << i << " and " << j;
    }
  }
}

TEST(MemoryPlan, ChainReusesTwoBuffers) {
  // a -> b -> c -> d: each buffer lives from its producer to its single consumer.
  std::vector<BufferRequest> req = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {1000, 3, 4}};
  const auto plan = plan_memory(req, 256);
  expect_no_live_overlap(req, plan, 256);
  EXPECT_EQ(plan.arena_bytes, 2 * 1024);  // ping-pong
  EXPECT_EQ(plan.offsets[0], plan.offsets[2]);
}

TEST(MemoryPlan, ResidualKeepsItsBufferAlive) {
  // x (0..3) feeds step 1 and the residual add at step 3; y (1..2), z (2..3), out (3..4).
  std::vector<BufferRequest> req = {{512, 0, 3}, {512, 1, 2}, {512, 2, 3}, {512, 3, 4}};
  const auto plan = plan_memory(req, 256);
  expect_no_live_overlap(req, plan, 256);
  EXPECT_EQ(plan.arena_bytes, 3 * 512);
}

TEST(MemoryPlan, RandomRequestsNeverOverlapWhileLive) {
  uint32_t s = 7;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return s >> 8;
  };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> req;
    for (int i = 0; i < 40; ++i) {
      const int first = static_cast<int>(next() % 30);
      req.push_back({static_cast<int64_t>(next() % 100000), first, first + static_cast<int>(next() % 8)});
    }
    const auto plan = plan_memory(req, 256);
    expect_no_live_overlap(req, plan, 256);
    int64_t total = 0;
    for (const auto& r : req) total += (r.bytes + 255) / 256 * 256;
    EXPECT_LE(plan.arena_bytes, total);
  }
}

TEST(MemoryPlan, LifetimesFromAPlan) {
  Plan plan;
  plan.values = {{"x", 4, 4, 8, 8, DataType::kFloat16},
                 {"y", 2, 2, 8, 8, DataType::kFloat16},
                 {"z", 1, 1, 8, 8, DataType::kFloat16}};
  plan.steps = {{.kind = StepKind::kInput, .name = "in", .inputs = {}, .output = 0},
                {.kind = StepKind::kMaxPool, .name = "p", .inputs = {0}, .output = 1},
                {.kind = StepKind::kGlobalAveragePool, .name = "g", .inputs = {1}, .output = 2},
                {.kind = StepKind::kOutput, .name = "out", .inputs = {2}, .output = -1}};
  const auto req = value_lifetimes(plan, 3);
  ASSERT_EQ(req.size(), 3u);
  EXPECT_EQ(req[0].bytes, 4 * 4 * 8 * 2 * 3);
  EXPECT_EQ(req[0].first_step, 0);
  EXPECT_EQ(req[0].last_step, 1);
  EXPECT_EQ(req[2].first_step, 2);
  EXPECT_EQ(req[2].last_step, 3);
}

}  // namespace
}  // namespace gpulab
