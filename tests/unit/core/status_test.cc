#include "gpulab/status.h"

#include <gtest/gtest.h>

namespace gpulab {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return Status::invalid_argument("value " + std::to_string(v) + " must be positive");
  return v;
}

Status double_positive(int v, int* out) {
  GPULAB_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return Status::ok();
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status s = Status::invalid_model("Conv 'c1': weight missing");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidModel);
  EXPECT_EQ(s.to_string(), "invalid model: Conv 'c1': weight missing");
  EXPECT_EQ(s.with_context("loading 'm.onnx'").message(), "loading 'm.onnx': Conv 'c1': weight missing");
}

TEST(Status, ExitCodesAreNonZeroForErrors) {
  EXPECT_EQ(exit_code_for(StatusCode::kOk), 0);
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kInvalidModel,
        StatusCode::kUnsupported, StatusCode::kInvalidFile, StatusCode::kIoError, StatusCode::kOutOfMemory,
        StatusCode::kDeviceError, StatusCode::kUnavailable, StatusCode::kInternal}) {
    EXPECT_NE(exit_code_for(c), 0) << status_code_name(c);
  }
}

TEST(Result, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(double_positive(4, &out).is_ok());
  EXPECT_EQ(out, 8);
  Status s = double_positive(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-1"), std::string::npos);
}

}  // namespace
}  // namespace gpulab
