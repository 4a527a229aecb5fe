#include "telemetry/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace gpulab::telemetry {
namespace {

// cpp-httplib's Server with its per-request work (parse one request from a Stream, route it,
// write the response) reachable without a socket.
class HttpServer : public httplib::Server {
 public:
  void answer(httplib::Stream& stream) {
    bool connection_closed = false;
    process_request(stream, /*close_connection=*/true, connection_closed, nullptr);
  }
};

// A Stream that reads a request held in memory and collects what the server writes.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view request) : request_(request) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - pos_);
    if (n > 0) std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    response_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  std::string take_response() { return std::move(response_); }

 private:
  std::string_view request_;
  size_t pos_ = 0;
  std::string response_;
};

}  // namespace

struct MetricsServer::Impl {
  HttpServer server;
  int port = 0;
  std::string host;
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetricsServer::~MetricsServer() {
  stop();
}

std::unique_ptr<MetricsServer> MetricsServer::unbound(Render render) {
  auto impl = std::make_unique<Impl>();
  impl->port = -1;
  // httplib's default also sets SO_REUSEPORT, which would let a second exporter silently share
  // a port already in use; keep SO_REUSEADDR only (fast restarts), so a taken port is an error.
  impl->server.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->server.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    auto text = render();
    if (!text.is_ok()) {
      res.status = 503;
      res.set_content(text.status().to_string() + "\n", "text/plain");
      return;
    }
    // Prometheus text exposition format 0.0.4.
    res.set_content(text.value(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("gpulab monitor: Prometheus metrics at /metrics\n", "text/plain");
  });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::bind(const std::string& host, int port, Render render) {
  std::unique_ptr<MetricsServer> server = unbound(std::move(render));
  Impl* impl = server->impl_.get();
  impl->host = host;
  if (port == 0) {
    impl->port = impl->server.bind_to_any_port(host);
  } else if (impl->server.bind_to_port(host, port)) {
    impl->port = port;
  } else {
    impl->port = -1;
  }
  if (impl->port <= 0)
    return Status::io_error(fmt::format(
        "metrics server: cannot listen on {}:{} (address in use or not a local address). Pick another "
        "port or address",
        host, port));
  return server;
}

int MetricsServer::port() const {
  return impl_->port;
}

Status MetricsServer::serve() {
  if (!impl_->server.listen_after_bind())
    return Status::io_error(fmt::format("metrics server: serving on {}:{} failed", impl_->host, impl_->port));
  return Status::ok();
}

void MetricsServer::stop() {
  if (impl_) impl_->server.stop();
}

std::string MetricsServer::answer_raw_request(std::string_view request) {
  MemoryStream stream(request);
  impl_->server.answer(stream);
  return stream.take_response();
}

Result<std::pair<std::string, int>> parse_listen_address(const std::string& text) {
  const size_t colon = text.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon + 1 < text.size() && text.size() - colon - 1 <= 5) {
    port = 0;
    for (size_t i = colon + 1; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') {
        port = -1;
        break;
      }
      port = port * 10 + (text[i] - '0');
    }
  }
  if (port < 1 || port > 65535)
    return Status::invalid_argument(fmt::format(
        "--serve: '{}' is not ADDR:PORT with a port in 1..65535. Example: --serve 0.0.0.0:9400", text));
  std::string host = text.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::pair<std::string, int>(host, port);
}

}  // namespace gpulab::telemetry
