// gpulab/status.h: error handling for every library call.
//
// Library functions return [[nodiscard]] Status or Result<T>; no exception crosses the public
// API and nothing in the library exits or aborts on bad input. A message reads
// "<where>: <what> (<values>). <what to do>".
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpulab {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a flag, option or parameter out of range
  kNotFound,         // a file, tensor, device or library that is not there
  kInvalidModel,     // a model file that cannot be parsed or is inconsistent
  kUnsupported,      // well-formed, but gpulab cannot run it (op, attribute, dtype)
  kInvalidFile,      // a plan, image or other file that is truncated or corrupt
  kIoError,          // reading or writing failed
  kOutOfMemory,      // host or device allocation failed
  kDeviceError,      // CUDA, cuDNN, cuBLAS or NVML reported an error
  kUnavailable,      // no GPU, no driver, library not loadable
  kInternal,         // a broken invariant inside gpulab: a bug
};

// Stable lower-case name of a code ("invalid model"), used in messages and JSON.
std::string_view status_code_name(StatusCode code);

// Process exit code the CLI uses for a failed Status with this code (always non-zero).
int exit_code_for(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status invalid_model(std::string m) { return {StatusCode::kInvalidModel, std::move(m)}; }
  static Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status invalid_file(std::string m) { return {StatusCode::kInvalidFile, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status device_error(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid model: <message>"
  std::string to_string() const;

  // Prefixes the message with context: "loading 'a.onnx': <message>".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : storage_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : storage_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(storage_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return is_ok(); }

  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(storage_);
  }
  T& value() & { return std::get<T>(storage_); }
  const T& value() const& { return std::get<T>(storage_); }
  T&& value() && { return std::get<T>(std::move(storage_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> storage_;
};

namespace detail {
inline Status to_status(Status s) {
  return s;
}
template <typename T>
Status to_status(const Result<T>& r) {
  return r.status();
}
}  // namespace detail

}  // namespace gpulab

#define GPULAB_CONCAT_INNER(a, b) a##b
#define GPULAB_CONCAT(a, b) GPULAB_CONCAT_INNER(a, b)

// Returns early with the Status of `expr` (a Status or a Result) when it is not ok.
#define GPULAB_TRY(expr)                                                     \
  do {                                                                       \
    ::gpulab::Status gpulab_try_status_ = ::gpulab::detail::to_status(expr); \
    if (!gpulab_try_status_.is_ok()) return gpulab_try_status_;              \
  } while (0)

// GPULAB_ASSIGN_OR_RETURN(auto graph, load_onnx(path)); declares `graph` from the Result's value.
#define GPULAB_ASSIGN_OR_RETURN(decl, expr) \
  GPULAB_ASSIGN_OR_RETURN_IMPL(GPULAB_CONCAT(gpulab_result_, __LINE__), decl, expr)
#define GPULAB_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  decl = std::move(tmp).value()
