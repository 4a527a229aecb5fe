// A minimal HTTP server for Prometheus scraping: GET /metrics returns what `render` produces.
// Read-only: GET (and HEAD) of "/" and "/metrics" are the only routes; every other method or path
// is answered 4xx and changes nothing. A request that is not HTTP is answered 400.
//
// Wraps cpp-httplib (Debian's libcpp-httplib) so that the rest of gpulab does not see it.
// `render` runs on the server's worker threads, possibly concurrently: it must be thread-safe
// (Telemetry::sample is). A render error becomes HTTP 503 with the message.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gpulab/status.h"

namespace gpulab::telemetry {

class MetricsServer {
 public:
  using Render = std::function<Result<std::string>()>;
  // Binds host:port (port 0: any free port). kIoError when the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> bind(const std::string& host, int port, Render render);
  // A server with the same routes but no socket: only answer_raw_request works (serve() fails).
  static std::unique_ptr<MetricsServer> unbound(Render render);
  ~MetricsServer();  // stops serving and joins

  int port() const;
  // Serves until stop() is called from another thread (blocks the caller).
  Status serve();
  void stop();

  // Answers one request held in memory (the raw bytes a client would send) exactly as a
  // connection would be answered, cpp-httplib's request parser and the routes above included, and
  // returns the raw response (status line, headers, body). No socket; thread-safe as `render` is.
  // For tests and fuzzing.
  std::string answer_raw_request(std::string_view request);

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "ADDR:PORT" ("0.0.0.0:9400", ":9400" for all addresses). kInvalidArgument otherwise.
Result<std::pair<std::string, int>> parse_listen_address(const std::string& text);

}  // namespace gpulab::telemetry
