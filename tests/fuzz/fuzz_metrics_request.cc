// `monitor --serve`'s request handling: one raw HTTP request answered in process (cpp-httplib's
// parser and gpulab's routes; no socket). The answer must be an HTTP response.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "telemetry/metrics_server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gpulab::telemetry::MetricsServer;
  static const std::unique_ptr<MetricsServer> server =
      MetricsServer::unbound([]() -> gpulab::Result<std::string> {
        return std::string(
            "# TYPE gpulab_gpu_utilization_percent gauge\ngpulab_gpu_utilization_percent{gpu=\"0\"} 0\n");
      });
  const std::string response =
      server->answer_raw_request(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!response.empty() && response.rfind("HTTP/1.1 ", 0) != 0) {
    std::fprintf(stderr, "the server answered something that is not HTTP/1.1: %.40s\n", response.c_str());
    std::abort();
  }
  return 0;
}
