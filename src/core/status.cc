#include "gpulab/status.h"

namespace gpulab {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kInvalidModel: return "invalid model";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInvalidFile: return "invalid file";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kDeviceError: return "device error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

int exit_code_for(StatusCode code) {
  // 1 is left for "ran, but a check failed" (doctor, accuracy gates); 2 is usage errors.
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument: return 2;
    case StatusCode::kNotFound: return 3;
    case StatusCode::kInvalidModel:
    case StatusCode::kInvalidFile: return 4;
    case StatusCode::kUnsupported: return 5;
    case StatusCode::kIoError: return 6;
    case StatusCode::kOutOfMemory: return 7;
    case StatusCode::kDeviceError:
    case StatusCode::kUnavailable: return 8;
    case StatusCode::kInternal: return 70;
  }
  return 70;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return {code_, std::string(context) + ": " + message_};
}

}  // namespace gpulab
