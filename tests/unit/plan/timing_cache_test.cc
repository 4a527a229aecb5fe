// Timing cache: keys separate GPUs and library versions; the file round-trips; a malformed file
// is an error, a missing one an empty cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "plan/timing_cache.h"

namespace gpulab {
namespace {

TEST(TimingCache, KeysSeparateTargets) {
  const PlanTarget h200{"NVIDIA H200", 90, 13000, 91900, 130100};
  PlanTarget a100 = h200;
  a100.gpu_name = "NVIDIA A100";
  a100.compute_capability = 80;
  PlanTarget other_cudnn = h200;
  other_cudnn.cudnn_version = 91400;
  const std::string sig = "conv|n256|c64|k64|3x3";
  EXPECT_NE(TimingCache::make_key(sig, h200), TimingCache::make_key(sig, a100));
  EXPECT_NE(TimingCache::make_key(sig, h200), TimingCache::make_key(sig, other_cudnn));
  EXPECT_NE(TimingCache::make_key(sig, h200), TimingCache::make_key(sig + "|relu", h200));
  EXPECT_EQ(TimingCache::make_key(sig, h200), TimingCache::make_key(sig, h200));
}

TEST(TimingCache, SaveLoadRoundTrip) {
  const auto path = std::filesystem::temp_directory_path() / "gpulab_timing_cache_test.json";
  std::filesystem::remove(path);
  auto empty = TimingCache::load(path);
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(empty->size(), 0u);
  TimingCache cache;
  cache.put("a", {"cudnn:e1", 0.25});
  cache.put("b", {"direct", 3.5});
  ASSERT_TRUE(cache.save(path).is_ok());
  auto back = TimingCache::load(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  ASSERT_NE(back->find("a"), nullptr);
  EXPECT_EQ(back->find("a")->tactic, "cudnn:e1");
  EXPECT_DOUBLE_EQ(back->find("b")->time_ms, 3.5);
  EXPECT_EQ(back->find("c"), nullptr);
  std::filesystem::remove(path);
}

TEST(TimingCache, MalformedFileIsAnError) {
  const auto path = std::filesystem::temp_directory_path() / "gpulab_timing_cache_bad.json";
  for (const char* text :
       {"not json", "{\"format\": 2, \"entries\": {}}", "{\"format\": 1, \"entries\": {\"k\": 3}}",
        // found by the fuzz target: a format beyond int's range
        "{\"format\": 923720318446744071867470955161, \"entries\": {}}"}) {
    { std::ofstream(path) << text; }
    auto r = TimingCache::load(path);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile);
    EXPECT_NE(r.status().message().find("Delete the file"), std::string::npos);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace gpulab
