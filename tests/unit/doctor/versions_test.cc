// `gpulab --version`'s rows (src/doctor/versions.h) from given build and run-time versions.
#include "doctor/versions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpulab::doctor {
namespace {

using ::testing::HasSubstr;

const ComponentVersion& row(const std::vector<ComponentVersion>& rows, const std::string& name) {
  for (const ComponentVersion& r : rows)
    if (r.component == name) return r;
  static const ComponentVersion kNone;
  ADD_FAILURE() << "no row " << name;
  return kNone;
}

TEST(Versions, CudaBuildOnAMachineWithTheLibraries) {
  const BuiltVersions built{.cuda = "13.0.48",
                            .cudnn = "9.19.0",
                            .cublas = "13.1.0",
                            .cudnn_frontend = "1.32.0",
                            .cutlass = "4.2.0"};
  FoundVersions found;
  found.cuda_driver = 13000;
  found.cuda_runtime = {
      .found = true, .path_or_error = "libcudart.so.13", .version = "13.0", .cuda_major = 13};
  found.cudnn = {
      .found = true, .path_or_error = "/usr/lib/libcudnn.so.9", .version = "9.14.0", .cuda_major = 13};
  found.cublas = {.found = true, .path_or_error = "libcublas.so.13", .version = "13.1.0", .cuda_major = 13};
  const auto rows = component_versions(built, found);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(row(rows, "CUDA runtime").built, "13.0.48");
  EXPECT_EQ(row(rows, "CUDA runtime").found, "13.0");
  EXPECT_EQ(row(rows, "CUDA driver").found, "13.0");
  // Built with one cuDNN, running with another: both shown, with the file that was loaded.
  EXPECT_EQ(row(rows, "cuDNN").built, "9.19.0");
  EXPECT_EQ(row(rows, "cuDNN").found, "9.14.0");
  EXPECT_EQ(row(rows, "cuDNN").detail, "/usr/lib/libcudnn.so.9");
  EXPECT_EQ(row(rows, "cuDNN frontend").found, "1.32.0");
  EXPECT_EQ(row(rows, "CUTLASS").detail, "header-only: compiled in");

  const std::string text = format_versions("gpulab 0.1.0 (commit abc)", rows);
  EXPECT_THAT(text, HasSubstr("gpulab 0.1.0 (commit abc)\n"));
  EXPECT_THAT(text, HasSubstr("cuDNN           9.19.0      9.14.0      /usr/lib/libcudnn.so.9"));
}

TEST(Versions, CpuBuildWithoutDriverSaysWhatIsMissing) {
  FoundVersions found;
  found.cuda_driver_error = "libcuda.so.1: cannot open shared object file";
  found.cuda_runtime = {.found = false, .path_or_error = "libcudart.so.13: cannot open shared object file"};
  found.cudnn = {.found = false, .path_or_error = "libcudnn.so.9 not found"};
  found.cublas = {.found = false, .path_or_error = "libcublas.so.13 not found"};
  const auto rows = component_versions(BuiltVersions{}, found);
  for (const ComponentVersion& r : rows) {
    EXPECT_EQ(r.built, "") << r.component;
    EXPECT_EQ(r.found, "") << r.component;
  }
  EXPECT_THAT(row(rows, "CUDA driver").detail, HasSubstr("libcuda.so.1: cannot open"));
  EXPECT_THAT(row(rows, "cuDNN").detail, HasSubstr("not found: libcudnn.so.9"));
  EXPECT_EQ(row(rows, "CUTLASS").detail, "not used by this build");

  const auto json = versions_to_json(rows);
  ASSERT_EQ(json.size(), 6u);
  EXPECT_TRUE(json[0]["built"].is_null());
  EXPECT_TRUE(json[0]["found"].is_null());
  EXPECT_EQ(json[0]["component"], "CUDA runtime");
  EXPECT_THAT(format_versions("gpulab", rows), HasSubstr("CUTLASS         -           -           not used"));
}

}  // namespace
}  // namespace gpulab::doctor
