#include "sweep/multi_target.h"

#include <algorithm>
#include <barrier>
#include <thread>

#include <fmt/format.h>

#include "core/affinity.h"

namespace gpulab::sweep {

MultiGpuTarget::MultiGpuTarget(std::vector<GpuTargetSlot> slots) : slots_(std::move(slots)) {}

TargetInfo MultiGpuTarget::info() const {
  TargetInfo first = slots_.front().target->info();
  std::string devices;
  for (const auto& s : slots_) devices += fmt::format("{}{}", devices.empty() ? "" : ", ", s.device);
  return {.kind = first.kind,
          .description = fmt::format("{} x {} (GPUs {})", slots_.size(), first.description, devices),
          .device = static_cast<int>(slots_.front().device)};
}

std::vector<Status> MultiGpuTarget::on_each(const std::function<Status(GpuTargetSlot&)>& fn) {
  std::vector<Status> statuses(slots_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < slots_.size(); ++i) {
    threads.emplace_back([&, i] {
      if (!slots_[i].cpus.empty()) (void)pin_current_thread(slots_[i].cpus);  // best effort
      statuses[i] = fn(slots_[i]);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

Status MultiGpuTarget::first_error(const std::vector<Status>& statuses) const {
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (statuses[i].code() == StatusCode::kOutOfMemory) {
      return statuses[i].with_context(fmt::format("GPU {}", slots_[i].device));
    }
  }
  for (size_t i = 0; i < statuses.size(); ++i) {
    if (!statuses[i].is_ok()) return statuses[i].with_context(fmt::format("GPU {}", slots_[i].device));
  }
  return Status::ok();
}

Result<PlanFacts> MultiGpuTarget::prepare_plan(Precision precision, int64_t batch) {
  std::vector<PlanFacts> facts(slots_.size());
  const auto statuses = on_each([&](GpuTargetSlot& slot) -> Status {
    const size_t i = static_cast<size_t>(&slot - slots_.data());
    GPULAB_ASSIGN_OR_RETURN(facts[i], slot.target->prepare_plan(precision, batch));
    return Status::ok();
  });
  GPULAB_TRY(first_error(statuses));
  PlanFacts out = facts.front();
  for (const PlanFacts& f : facts) out.seconds = std::max(out.seconds, f.seconds);
  return out;
}

Status MultiGpuTarget::prepare_context(int64_t batch) {
  return first_error(on_each([&](GpuTargetSlot& slot) { return slot.target->prepare_context(batch); }));
}

Result<measure::BenchResult> MultiGpuTarget::measure(const measure::BenchOptions& options) {
  last_.clear();
  std::vector<std::optional<measure::BenchResult>> results(slots_.size());
  std::barrier together(static_cast<std::ptrdiff_t>(slots_.size()));
  const auto statuses = on_each([&](GpuTargetSlot& slot) -> Status {
    const size_t i = static_cast<size_t>(&slot - slots_.data());
    bool arrived = false;
    slot.target->set_before_measure([&] {
      arrived = true;
      together.arrive_and_wait();
    });
    auto r = slot.target->measure(options);
    slot.target->set_before_measure({});
    if (!arrived) together.arrive_and_drop();  // failed before its window: the others go on
    if (!r.is_ok()) return r.status();
    results[i] = std::move(*r);
    return Status::ok();
  });
  GPULAB_TRY(first_error(statuses));
  // The pooled result: every GPU's iterations over the longest window.
  std::vector<measure::IterationTimes> pooled;
  double wall_s = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const measure::BenchResult& r = *results[i];
    pooled.insert(pooled.end(), r.samples.begin(), r.samples.end());
    wall_s = std::max(wall_s, r.wall_s);
  }
  GPULAB_ASSIGN_OR_RETURN(measure::BenchResult out,
                          measure::make_bench_result(options, std::move(pooled), wall_s));
  out.precision = results.front()->precision;
  out.environment = results.front()->environment;
  for (size_t i = 0; i < slots_.size(); ++i) {
    results[i]->samples.clear();
    last_.emplace_back(slots_[i].device, std::move(*results[i]));
  }
  return out;
}

void MultiGpuTarget::release() {
  on_each([](GpuTargetSlot& slot) {
    slot.target->release();
    return Status::ok();
  });
}

std::optional<int64_t> MultiGpuTarget::device_memory_used_bytes() {
  int64_t total = 0;
  for (auto& s : slots_) {
    const auto used = s.target->device_memory_used_bytes();
    if (!used) return std::nullopt;
    total += *used;
  }
  return total;
}

Result<measure::Ceilings> MultiGpuTarget::ceilings(Precision precision) {
  return slots_.front().target->ceilings(precision);
}

Result<double> MultiGpuTarget::h2d_gb_s() {
  return slots_.front().target->h2d_gb_s();
}

Result<AgreementResult> MultiGpuTarget::agreement(Precision precision,
                                                  const std::filesystem::path& dataset_dir,
                                                  int64_t max_images) {
  return slots_.front().target->agreement(precision, dataset_dir, max_images);
}

void CombinedTelemetry::start() {
  for (TelemetrySource* s : sources_) s->start();
}

std::vector<telemetry::GpuSample> CombinedTelemetry::stop() {
  std::vector<telemetry::GpuSample> out;
  for (TelemetrySource* s : sources_) {
    auto part = s->stop();
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

}  // namespace gpulab::sweep
