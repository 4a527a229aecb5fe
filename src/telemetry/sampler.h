// A background thread that samples every GPU at a fixed period and keeps the readings.
//
// Start it around the work to observe, then take the readings (take_samples) or their
// aggregates (summarize). Sampling never allocates on the caller's thread; the buffer is
// bounded (oldest readings are dropped past max_samples). All members are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gpulab/status.h"
#include "telemetry/sample.h"
#include "telemetry/telemetry.h"

namespace gpulab::telemetry {

struct SamplerOptions {
  int period_ms = 50;
  std::vector<std::uint32_t> devices;  // empty: every GPU
  bool processes = false;              // per-process memory in each reading
  std::size_t max_samples = 100000;    // per sampler, all GPUs together
};

class Sampler {
 public:
  // kInvalidArgument for a period < 1 ms or an unknown device index.
  static Result<std::unique_ptr<Sampler>> create(std::shared_ptr<const Telemetry> telemetry,
                                                 SamplerOptions options);
  ~Sampler();  // stops the thread

  void start();  // takes a first reading at once; no-op when running
  void stop();   // joins the thread; readings stay available
  bool running() const { return running_.load(); }

  // Moves out every reading taken so far, oldest first.
  std::vector<GpuSample> take_samples();
  // The newest reading of a device; nullopt before the first.
  std::optional<GpuSample> latest(std::uint32_t device) const;
  // Errors seen while sampling (e.g. a GPU lost), most recent last, at most 16.
  std::vector<Status> errors() const;

 private:
  Sampler(std::shared_ptr<const Telemetry> t, SamplerOptions o)
      : telemetry_(std::move(t)), options_(std::move(o)) {}
  void loop();

  std::shared_ptr<const Telemetry> telemetry_;
  SamplerOptions options_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_requested_ = false;
  std::deque<GpuSample> samples_;
  std::vector<std::optional<GpuSample>> latest_;
  std::vector<Status> errors_;
};

// Aggregates of one GPU's readings over a run, for bench and sweep points. Fields are nullopt
// when no reading had them.
struct SampleSummary {
  std::uint32_t device = 0;
  std::size_t count = 0;
  double duration_s = 0;  // first to last reading
  std::optional<double> power_mean_w, power_max_w, power_limit_w;
  std::optional<double> energy_j;  // energy counter difference, last - first
  std::optional<double> sm_clock_mean_mhz, memory_clock_mean_mhz;
  std::optional<double> gpu_util_mean_pct, memory_util_mean_pct;
  std::optional<std::uint64_t> memory_used_max_bytes;
  std::optional<double> temperature_max_c;
  std::optional<double> pcie_tx_mean_kb_s, pcie_rx_mean_kb_s;
  std::uint64_t clock_event_reasons_seen = 0;  // OR of every reading's reasons
};
// One summary per device present in `samples`, ordered by device index.
std::vector<SampleSummary> summarize(const std::vector<GpuSample>& samples);

}  // namespace gpulab::telemetry
