#include "runtime/tactic_timing.h"

#include <gtest/gtest.h>

namespace gpulab::tactic_timing {
namespace {

TEST(TacticTiming, TheFirstCandidateIsAlwaysTimedInFull) {
  EXPECT_EQ(give_up_ms(kNoLimit), kNoLimit);
  EXPECT_FALSE(100.0 > give_up_ms(kNoLimit));
}

TEST(TacticTiming, ACandidateFarSlowerThanTheBestStopsEarly) {
  // Batch 1024: the best engine so far takes 20 ms; a loser at 95 ms gets no further launches.
  EXPECT_GT(95.0, give_up_ms(20.0));
  // gpulab's direct convolution on a 1x1 layer at batch 256: ~100 ms against 0.05 ms.
  EXPECT_GT(100.0, give_up_ms(0.05));
}

TEST(TacticTiming, ACandidateThatCouldStillWinIsTimedInFull) {
  // Within 4x of the best: one slow launch, and its median may still win.
  EXPECT_LT(3.9 * 20.0, give_up_ms(20.0));
  // A very short kernel with a jittery launch: 0.8 ms against a best of 0.05 ms is within the slack.
  EXPECT_LT(0.8, give_up_ms(0.05));
}

TEST(TacticTiming, LongCandidatesGetFewerTimedLaunches) {
  EXPECT_EQ(timed_runs(0.05), kTimedRuns);
  EXPECT_EQ(timed_runs(kLongMs), kTimedRuns);
  EXPECT_EQ(timed_runs(25.0), kLongTimedRuns);
  // An odd count, so that the median is one of the launches.
  EXPECT_EQ(kTimedRuns % 2, 1);
  EXPECT_EQ(kLongTimedRuns % 2, 1);
}

TEST(TacticTiming, WorkspaceLimitIsTheUsersOrAQuarterOfFreeMemory) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  // Set by the user (--max-workspace-mib), whatever the device has; 0 allows only engines that
  // need none.
  EXPECT_EQ(workspace_limit(2 * kGiB, 140 * kGiB), 2 * kGiB);
  EXPECT_EQ(workspace_limit(int64_t{0}, 140 * kGiB), 0);
  // Unset: a quarter of the free memory (140 GiB free: 35; 20 GiB free: 5).
  EXPECT_EQ(workspace_limit(std::nullopt, 140 * kGiB), 35 * kGiB);
  EXPECT_EQ(workspace_limit(std::nullopt, 20 * kGiB), 5 * kGiB);
  // ... but never below the floor, so that small engines still run on a nearly full device.
  EXPECT_EQ(workspace_limit(std::nullopt, 100 << 20), kMinAutoWorkspaceBytes);
  EXPECT_EQ(workspace_limit(std::nullopt, 0), kMinAutoWorkspaceBytes);
}

TEST(TacticTiming, BatchChunksByDefaultOnlyWhereNothingRanOverTheWholeBatch) {
  // No candidate ran at the max batch (over the workspace limit, out of memory): chunks may.
  EXPECT_TRUE(try_chunks(BatchChunks::kFallback, 1024, kNoLimit));
  EXPECT_TRUE(try_chunks(BatchChunks::kSearch, 1024, kNoLimit));
  // Something ran: the default does not pay for a second search (measured 2026-12-05:
  // ResNet-18 FP32 at batch 1024, 21 ms layers before the workspace limit was raised, chose no chunks
  // after it).
  EXPECT_FALSE(try_chunks(BatchChunks::kFallback, 1024, 21.0));
  EXPECT_FALSE(try_chunks(BatchChunks::kOff, 1024, kNoLimit));
}

TEST(TacticTiming, BatchChunkSearchTriesLongLayersAboveBatch256) {
  EXPECT_TRUE(try_chunks(BatchChunks::kSearch, 1024, 21.0));
  EXPECT_TRUE(try_chunks(BatchChunks::kSearch, kChunkImages + 1, 2 * kChunkSearchMs));
  // A plan for at most one chunk has nothing to split, whatever the mode.
  EXPECT_FALSE(try_chunks(BatchChunks::kSearch, kChunkImages, 21.0));
  EXPECT_FALSE(try_chunks(BatchChunks::kSearch, 32, kNoLimit));
  EXPECT_FALSE(try_chunks(BatchChunks::kFallback, kChunkImages, kNoLimit));
  // Short layers do not pay for the extra search (ResNet-18 FP16 at batch 1024: 7.2 ms for the whole
  // network on the H200).
  EXPECT_FALSE(try_chunks(BatchChunks::kSearch, 1024, 0.5));
  EXPECT_FALSE(try_chunks(BatchChunks::kSearch, 1024, kChunkSearchMs));
}

}  // namespace
}  // namespace gpulab::tactic_timing
