// Every input in tests/fuzz/regressions/onnx_import (models that once crashed or hit undefined
// behaviour somewhere between the importer and lowering; tests/fuzz/regressions/README.md says how
// each was made) goes through what fuzz_onnx_import and `gpulab inspect` do with a model, and ends
// in a clean answer: imported, or refused as an invalid or unsupported model. The asan preset runs
// this under ASan and UBSan, where the original defects aborted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "graph/cost.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Import, cost at batch 1, passes, lowering in FP32 and BF16: the first failure, or ok.
Status inspect_and_lower(const fs::path& path) {
  GPULAB_ASSIGN_OR_RETURN(Graph graph, load_onnx(path));
  (void)graph_cost(graph, 1);
  GPULAB_TRY(run_passes(graph));
  (void)graph_cost(graph, 1);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    BuildOptions options;
    options.precision = precision;
    options.max_batch = 2;
    GPULAB_TRY(lower_graph(graph, options).status());
  }
  return Status::ok();
}

std::map<std::string, Status> run_all() {
  std::map<std::string, Status> out;
  for (const auto& entry :
       fs::directory_iterator(fs::path(GPULAB_SOURCE_DIR) / "tests/fuzz/regressions/onnx_import"))
    if (entry.path().extension() == ".onnx")
      out[entry.path().filename().string()] = inspect_and_lower(entry.path());
  return out;
}

TEST(FuzzRegressions, EveryModelIsImportedOrCleanlyRefused) {
  const auto results = run_all();
  ASSERT_GE(results.size(), 13u);
  for (const auto& [name, status] : results) {
    EXPECT_TRUE(status.is_ok() || status.code() == StatusCode::kInvalidModel ||
                status.code() == StatusCode::kUnsupported)
        << name << ": " << status.to_string();
  }
}

TEST(FuzzRegressions, ExtremeDimensionsAndWindowsAreRefusedWithTheReason) {
  const auto results = run_all();
  auto refused = [&](const std::string& name, const std::string& why) {
    const auto it = results.find(name);
    ASSERT_NE(it, results.end()) << name;
    EXPECT_EQ(it->second.code(), StatusCode::kInvalidModel) << name << ": " << it->second.to_string();
    EXPECT_THAT(it->second.message(), HasSubstr(why)) << name;
  };
  // A declared input of 2^62 x 3 x 9 x 9 elements: refused before anything counts its bytes.
  refused("fire_concat.input_dim0_2e62.onnx", "elements per image");
  refused("odd_tensors.input_dim0_2e62.onnx", "elements per image");
  // Padding of INT64_MAX: the padded size is not computable.
  refused("fire_concat.conv_pad_top_int64max.onnx", "too large");
  refused("fire_concat.conv_pad_bottom_int64max.onnx", "too large");
  // auto_pad SAME with a zero or negative stride, kernel or dilation.
  for (const char* name :
       {"pads_and_pools.same_upper_stride_0.onnx", "pads_and_pools.same_upper_stride_int64min.onnx",
        "pads_and_pools.same_upper_kernel_int64min.onnx", "pads_and_pools.same_lower_dilation_int64min.onnx"})
    refused(name, "auto_pad");
  // A node name that is not UTF-8 made serialize_plan's JSON dump throw (std::terminate in build).
  refused("mobilenet_like.invalid_utf8_name.onnx", "not valid UTF-8");
  // A Clip whose min is NaN: lowering wrote a plan whose header (JSON null) could not be read back.
  refused("mobilenet_like.clip_min_nan.onnx", "is NaN");
  // A kernel_shape of INT64_MAX: the SAME padding is computable; the weight disagrees.
  refused("pads_and_pools.same_upper_kernel_int64max.onnx", "kernel_shape");
}

TEST(FuzzRegressions, AHugeStrideIsLegalAndGivesOneWindow) {
  // A stride of INT64_MAX: one window per axis (MaxPool 3x3 ceil_mode over 9x9; a SAME_UPPER
  // Conv over 10x10), computed without overflow.
  for (const char* name :
       {"fire_concat.maxpool_stride_int64max.onnx", "pads_and_pools.same_upper_stride_int64max.onnx"}) {
    auto graph = load_onnx(fs::path(GPULAB_SOURCE_DIR) / "tests/fuzz/regressions/onnx_import" / name);
    ASSERT_TRUE(graph.is_ok()) << name << ": " << graph.status().to_string();
    EXPECT_TRUE(run_passes(*graph).is_ok()) << name;
  }
}

}  // namespace
}  // namespace gpulab
