// The host side of cuDNN's parallel prebuild (cudnn_prebuild.h): how many workers
// GPULAB_CUDNN_BUILD_THREADS asks for, and that 0 turns it off without touching a device. Needs the
// CUDA build but no GPU.
#include "backends/cuda/cudnn_prebuild.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace gpulab::cuda {
namespace {

TEST(CudnnPrebuild, ThreadsFollowTheVariableElseTheCpusUpToEight) {
  EXPECT_EQ(CudnnPrebuild::threads_for(nullptr, 16), 8);
  EXPECT_EQ(CudnnPrebuild::threads_for(nullptr, 2), 2);
  EXPECT_EQ(CudnnPrebuild::threads_for("", 3), 3);
  EXPECT_EQ(CudnnPrebuild::threads_for(nullptr, 0), 1);  // affinity unreadable: still one worker
  EXPECT_EQ(CudnnPrebuild::threads_for("0", 16), 0);
  EXPECT_EQ(CudnnPrebuild::threads_for("12", 2), 12);
  EXPECT_EQ(CudnnPrebuild::threads_for("1000", 2), 64);
  EXPECT_EQ(CudnnPrebuild::threads_for("-3", 2), 0);
  EXPECT_EQ(CudnnPrebuild::threads_for("four", 16), 8);  // not a number: the default
  EXPECT_EQ(CudnnPrebuild::threads_for("4x", 16), 8);
}

TEST(CudnnPrebuild, ZeroThreadsBuildNothing) {
  ASSERT_EQ(setenv("GPULAB_CUDNN_BUILD_THREADS", "0", 1), 0);
  {
    CudnnPrebuild prebuild(0);
    EXPECT_FALSE(prebuild.enabled());
    bool ran = false;
    prebuild.submit([&](cudnnHandle_t) {
      ran = true;
      return Status::ok();
    });
    EXPECT_TRUE(prebuild.wait().empty());
    EXPECT_FALSE(ran);
  }
  unsetenv("GPULAB_CUDNN_BUILD_THREADS");
}

}  // namespace
}  // namespace gpulab::cuda
