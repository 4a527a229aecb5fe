#include "telemetry/sampler.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

namespace gpulab::telemetry {

Result<std::unique_ptr<Sampler>> Sampler::create(std::shared_ptr<const Telemetry> telemetry,
                                                 SamplerOptions options) {
  if (!telemetry)
    return Status::invalid_argument("Sampler: no Telemetry given. Open one with Telemetry::open()");
  if (options.period_ms < 1)
    return Status::invalid_argument(
        fmt::format("Sampler: period {} ms is too short. Use at least 1 ms", options.period_ms));
  if (options.devices.empty()) {
    for (std::uint32_t i = 0; i < telemetry->device_count(); ++i) options.devices.push_back(i);
  }
  for (std::uint32_t d : options.devices) {
    if (d >= telemetry->device_count())
      return Status::invalid_argument(
          fmt::format("Sampler: GPU index {} out of range ({} GPUs)", d, telemetry->device_count()));
  }
  if (options.max_samples == 0) options.max_samples = 1;
  const std::uint32_t n = telemetry->device_count();
  std::unique_ptr<Sampler> s(new Sampler(std::move(telemetry), std::move(options)));
  s->latest_.resize(n);
  return s;
}

Sampler::~Sampler() {
  stop();
}

void Sampler::start() {
  if (running_.exchange(true)) return;
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void Sampler::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

void Sampler::loop() {
  using clock = std::chrono::steady_clock;
  auto next = clock::now();
  const SampleOptions sample_options{.processes = options_.processes};
  while (true) {
    for (std::uint32_t d : options_.devices) {
      auto r = telemetry_->sample(d, sample_options);
      std::lock_guard lock(mutex_);
      if (r.is_ok()) {
        latest_[d] = r.value();
        samples_.push_back(std::move(r).value());
        while (samples_.size() > options_.max_samples) samples_.pop_front();
      } else {
        errors_.push_back(r.status());
        if (errors_.size() > 16) errors_.erase(errors_.begin());
      }
    }
    next += std::chrono::milliseconds(options_.period_ms);
    const auto now = clock::now();
    if (next < now) next = now;  // fell behind (slow NVML call): do not burst to catch up
    std::unique_lock lock(mutex_);
    if (wake_.wait_until(lock, next, [this] { return stop_requested_; })) return;
  }
}

std::vector<GpuSample> Sampler::take_samples() {
  std::lock_guard lock(mutex_);
  std::vector<GpuSample> out(std::make_move_iterator(samples_.begin()),
                             std::make_move_iterator(samples_.end()));
  samples_.clear();
  return out;
}

std::optional<GpuSample> Sampler::latest(std::uint32_t device) const {
  std::lock_guard lock(mutex_);
  if (device >= latest_.size()) return std::nullopt;
  return latest_[device];
}

std::vector<Status> Sampler::errors() const {
  std::lock_guard lock(mutex_);
  return errors_;
}

namespace {

struct Mean {
  double sum = 0;
  std::size_t n = 0;
  template <typename T>
  void add(const std::optional<T>& v) {
    if (v) {
      sum += static_cast<double>(*v);
      ++n;
    }
  }
  std::optional<double> value() const {
    if (n == 0) return std::nullopt;
    return sum / static_cast<double>(n);
  }
};

template <typename T, typename U>
void keep_max(std::optional<T>& acc, const std::optional<U>& v) {
  if (v && (!acc || static_cast<T>(*v) > *acc)) acc = static_cast<T>(*v);
}

}  // namespace

std::vector<SampleSummary> summarize(const std::vector<GpuSample>& samples) {
  std::map<std::uint32_t, std::vector<const GpuSample*>> by_device;
  for (const GpuSample& s : samples) by_device[s.index].push_back(&s);
  std::vector<SampleSummary> out;
  for (const auto& [device, list] : by_device) {
    SampleSummary sum;
    sum.device = device;
    sum.count = list.size();
    sum.duration_s = (list.back()->timestamp_ms - list.front()->timestamp_ms) / 1000.0;
    Mean power, sm, mem_clock, util, mem_util, tx, rx;
    const GpuSample* first_energy = nullptr;
    const GpuSample* last_energy = nullptr;
    for (const GpuSample* s : list) {
      power.add(s->power_w);
      keep_max(sum.power_max_w, s->power_w);
      keep_max(sum.power_limit_w, s->power_limit_w);
      sm.add(s->sm_clock_mhz);
      mem_clock.add(s->memory_clock_mhz);
      util.add(s->gpu_util_pct);
      mem_util.add(s->memory_util_pct);
      tx.add(s->pcie_tx_kb_s);
      rx.add(s->pcie_rx_kb_s);
      keep_max(sum.memory_used_max_bytes, s->memory_used_bytes);
      keep_max(sum.temperature_max_c, s->temperature_c);
      if (s->clock_event_reasons) sum.clock_event_reasons_seen |= *s->clock_event_reasons;
      if (s->energy_mj) {
        if (!first_energy) first_energy = s;
        last_energy = s;
      }
    }
    sum.power_mean_w = power.value();
    sum.sm_clock_mean_mhz = sm.value();
    sum.memory_clock_mean_mhz = mem_clock.value();
    sum.gpu_util_mean_pct = util.value();
    sum.memory_util_mean_pct = mem_util.value();
    sum.pcie_tx_mean_kb_s = tx.value();
    sum.pcie_rx_mean_kb_s = rx.value();
    if (first_energy && last_energy != first_energy)
      sum.energy_j = static_cast<double>(*last_energy->energy_mj - *first_energy->energy_mj) / 1000.0;
    out.push_back(sum);
  }
  return out;
}

}  // namespace gpulab::telemetry
