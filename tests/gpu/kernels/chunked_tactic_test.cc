// Batch-chunked tactic strings ("chunk<images>:<cuDNN tactic>", runtime/conv_step.h) and how a
// batch splits into chunks, without a GPU.
#include <gtest/gtest.h>

#include "runtime/conv_step.h"

namespace gpulab {
namespace {

TEST(ChunkedTactic, ParsesTheChunkAndTheCudnnTactic) {
  const auto fused = parse_chunked_tactic("chunk256:cudnn:70;k2=1,k3=0;eng70");
  ASSERT_TRUE(fused.has_value());
  EXPECT_EQ(fused->chunk, 256);
  EXPECT_EQ(fused->inner, "cudnn:70;k2=1,k3=0;eng70");
  const auto unfused = parse_chunked_tactic("chunk2:cudnn-unfused:44;;x");
  ASSERT_TRUE(unfused.has_value());
  EXPECT_EQ(unfused->chunk, 2);
  EXPECT_EQ(unfused->inner, "cudnn-unfused:44;;x");
  EXPECT_EQ(chunked_tactic(256, "cudnn:70;;eng70"), "chunk256:cudnn:70;;eng70");
  EXPECT_EQ(parse_chunked_tactic(chunked_tactic(8, "cudnn:3;;e"))->chunk, 8);
}

TEST(ChunkedTactic, RefusesAnythingElse) {
  for (const char* bad : {"cudnn:70;;e", "direct", "", "chunk", "chunk256", "chunk256:", "chunk:cudnn:1",
                          "chunk0:cudnn:1", "chunk-4:cudnn:1", "chunk+4:cudnn:1", "chunk4x:cudnn:1",
                          "chunk 4:cudnn:1", "chunk99999999999999999999:cudnn:1", "chunk256:direct",
                          "chunk256:depthwise", "chunk256:wgmma-conv3x3:ws14", "chunk256:chunk2:cudnn:1"})
    EXPECT_FALSE(parse_chunked_tactic(bad).has_value()) << bad;
}

TEST(ChunkedTactic, IsACudnnTacticAndMalformedOnesAreRefused) {
  EXPECT_EQ(conv_kernel_of_tactic("chunk256:cudnn:70;;e"), ConvKernel::kCudnn);
  EXPECT_TRUE(check_conv_tactic("chunk256:cudnn:70;;e").is_ok());
  EXPECT_TRUE(check_conv_tactic("chunk256:cudnn-unfused:70;;e").is_ok());
  for (const char* bad : {"chunk0:cudnn:70", "chunk256:depthwise", "chunkx:cudnn:1"}) {
    const Status s = check_conv_tactic(bad);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }
}

TEST(ChunkedTactic, BatchSplitsIntoFullChunksAndARemainder) {
  // ResNet-18 at batch 1024 in chunks of 256: four launches of the tactic itself.
  EXPECT_EQ(split_batch(1024, 256).full, 4);
  EXPECT_EQ(split_batch(1024, 256).tail, 0);
  EXPECT_EQ(split_batch(1000, 256).full, 3);
  EXPECT_EQ(split_batch(1000, 256).tail, 232);
  EXPECT_EQ(split_batch(257, 256).full, 1);
  EXPECT_EQ(split_batch(257, 256).tail, 1);
  // A batch no larger than the chunk is one launch at its own size.
  EXPECT_EQ(split_batch(256, 256).full, 0);
  EXPECT_EQ(split_batch(256, 256).tail, 256);
  EXPECT_EQ(split_batch(1, 256).full, 0);
  EXPECT_EQ(split_batch(1, 256).tail, 1);
}

}  // namespace
}  // namespace gpulab
