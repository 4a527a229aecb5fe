// gpulab monitor: watch the GPUs. A live view (one line per GPU, per-process memory below), CSV
// with nvidia-smi field names, JSON Lines, or a Prometheus /metrics endpoint.
#ifdef GPULAB_HAVE_TELEMETRY

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "cli.h"
#include "core/interrupt.h"
#include "telemetry/format.h"
#include "telemetry/metrics_server.h"
#include "telemetry/telemetry.h"

namespace gpulab::cli {
namespace {

struct MonitorOptions {
  int interval_ms = 1000;
  int count = 0;
  bool csv = false;
  bool json = false;
  bool no_header = false;
  std::string fields;
  std::string serve;
  std::vector<unsigned> gpus;
};

Result<std::vector<telemetry::GpuSample>> sample_all(const telemetry::Telemetry& t,
                                                     const std::vector<std::uint32_t>& gpus) {
  std::vector<telemetry::GpuSample> out;
  for (std::uint32_t i : gpus) {
    GPULAB_ASSIGN_OR_RETURN(auto s, t.sample(i));
    out.push_back(std::move(s));
  }
  return out;
}

int serve(const telemetry::Telemetry& t, const std::vector<std::uint32_t>& gpus, const std::string& host,
          int port, InterruptWatch& interrupt) {
  auto server = telemetry::MetricsServer::bind(host, port, [&t, gpus]() -> Result<std::string> {
    GPULAB_ASSIGN_OR_RETURN(auto samples, sample_all(t, gpus));
    return telemetry::to_prometheus(samples);
  });
  if (!server.is_ok()) return report(server.status());
  std::fprintf(stderr, "gpulab monitor: serving Prometheus metrics on http://%s:%d/metrics\n", host.c_str(),
               port);
  // SIGINT/SIGTERM stop the server (on the watcher's thread); the command then returns 128 + the
  // signal, as a shell reports a process the signal ended.
  // signal_number() is set before the undo action runs (interrupted() only after it), so it is
  // the one to read once serve() returns.
  interrupt.on_signal([s = server.value().get()] { s->stop(); });
  if (interrupt.signal_number() != 0) return interrupt.exit_code();
  const Status served = server.value()->serve();
  if (interrupt.signal_number() != 0) return interrupt.exit_code();
  return report(served);
}

// Sleeps until `until` or a SIGINT/SIGTERM, whichever comes first (checked every 50 ms).
void sleep_unless_interrupted(std::chrono::steady_clock::time_point until, const InterruptWatch& interrupt) {
  while (!interrupt.interrupted()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}

int run_monitor(const MonitorOptions& o) {
  auto selection = o.fields.empty()
                       ? Result<std::vector<const telemetry::Field*>>(telemetry::default_fields())
                       : telemetry::parse_field_list(o.fields);
  if (!selection.is_ok()) return report(selection.status());
  std::pair<std::string, int> listen{"", 0};
  if (!o.serve.empty()) {
    auto where = telemetry::parse_listen_address(o.serve);
    if (!where.is_ok()) return report(where.status());
    listen = where.value();
  }
  // Before any thread starts (the server's workers inherit the blocked signals).
  InterruptWatch interrupt;
  auto opened = telemetry::Telemetry::open();
  if (!opened.is_ok()) return report(opened.status());
  const telemetry::Telemetry& t = *opened.value();
  if (t.device_count() == 0)
    return report(Status::unavailable("monitor: the NVIDIA driver sees no GPU. Run `gpulab doctor`"));
  std::vector<std::uint32_t> gpus;
  for (unsigned g : o.gpus) {
    if (g >= t.device_count())
      return report(Status::invalid_argument(
          fmt::format("--gpu: index {} out of range ({} GPUs)", g, t.device_count())));
    gpus.push_back(g);
  }
  if (gpus.empty())
    for (std::uint32_t i = 0; i < t.device_count(); ++i) gpus.push_back(i);
  if (!o.serve.empty()) return serve(t, gpus, listen.first, listen.second, interrupt);

  const bool live = !o.csv && !o.json;
  const bool clear = live && isatty(STDOUT_FILENO) != 0;
  if (o.csv && !o.no_header) std::printf("%s\n", telemetry::csv_header(selection.value()).c_str());
  // Interrupted, the loop ends between two readings: every line written is whole.
  auto next = std::chrono::steady_clock::now();
  for (int i = 0; o.count == 0 || i < o.count; ++i) {
    if (i > 0) {
      next += std::chrono::milliseconds(o.interval_ms);
      sleep_unless_interrupted(next, interrupt);
    }
    if (interrupt.interrupted()) return interrupt.exit_code();
    auto samples = sample_all(t, gpus);
    if (!samples.is_ok()) return report(samples.status());
    if (o.csv) {
      for (const auto& s : samples.value())
        std::printf("%s\n", telemetry::csv_row(s, selection.value()).c_str());
    } else if (o.json) {
      nlohmann::json tick = nlohmann::json::array();
      for (const auto& s : samples.value()) tick.push_back(telemetry::to_json(s, selection.value()));
      std::printf("%s\n", nlohmann::json{{"gpus", tick}}.dump().c_str());
    } else {
      if (clear)
        std::printf("\x1b[H\x1b[2J");
      else if (i > 0)
        std::printf("\n");
      std::printf("%s  driver %s\n",
                  telemetry::format_timestamp(samples.value().front().timestamp_ms).c_str(),
                  t.driver_version().c_str());
      for (const auto& s : samples.value()) {
        std::printf("%s\n", telemetry::live_line(s).c_str());
        for (const auto& line : telemetry::process_lines(s)) std::printf("%s\n", line.c_str());
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_monitor_command(CLI::App& app) {
  auto opts = std::make_shared<MonitorOptions>();
  CLI::App* sub =
      app.add_subcommand("monitor",
                         "Watch GPU utilization, memory, power, clocks, throttle reasons and PCIe traffic "
                         "(live view, --csv, --json, or --serve for Prometheus)");
  sub->add_option("--interval-ms", opts->interval_ms, "Time between readings")
      ->check(CLI::Range(10, 3600000))
      ->capture_default_str();
  sub->add_option("--count", opts->count, "Number of readings, then exit (0: until interrupted)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* csv = sub->add_flag("--csv", opts->csv, "CSV with nvidia-smi style field names and a timestamp");
  auto* json = sub->add_flag("--json", opts->json, "JSON Lines: one {\"gpus\": [...]} object per reading");
  csv->excludes(json);
  sub->add_flag("--no-header", opts->no_header, "CSV without the header line");
  sub->add_option(
      "--fields", opts->fields,
      "Comma-separated fields for --csv/--json, e.g. timestamp,index,memory.used,power.draw ('all')");
  sub->add_option("--gpu", opts->gpus, "GPU indices to watch (default: all)")->delimiter(',');
  sub->add_option(
      "--serve", opts->serve,
      "Serve Prometheus metrics on ADDR:PORT at /metrics (dcgm-exporter names), e.g. 0.0.0.0:9400");
  on_run(sub, [opts] { return run_monitor(*opts); });
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_TELEMETRY
