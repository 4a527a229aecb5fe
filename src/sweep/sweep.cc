// The sweep's search, the per-point measurement with its telemetry, verdicts and recommendation.
#include "sweep/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace gpulab::sweep {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* precision_str(Precision p) {
  return precision_name(p).data();
}

}  // namespace

std::string_view oom_stage_name(OomStage stage) {
  switch (stage) {
    case OomStage::kBuild: return "build";
    case OomStage::kContext: return "context";
    case OomStage::kRun: return "run";
  }
  return "unknown";
}

std::string_view point_status_name(PointStatus status) {
  switch (status) {
    case PointStatus::kOk: return "ok";
    case PointStatus::kOom: return "oom";
    case PointStatus::kFailed: return "failed";
  }
  return "unknown";
}

Status validate(const SweepOptions& o) {
  if (o.precisions.empty()) {
    return Status::invalid_argument(
        "--precisions: empty. Give one or more of fp32, tf32, fp16, bf16, int8, fp8.");
  }
  std::set<Precision> seen;
  for (Precision p : o.precisions) {
    if (!seen.insert(p).second) {
      return Status::invalid_argument(
          fmt::format("--precisions: '{}' is listed twice. Give each precision once.", precision_str(p)));
    }
  }
  for (size_t i = 0; i < o.batches.size(); ++i) {
    if (o.batches[i] < 1) {
      return Status::invalid_argument(fmt::format(
          "--batches: {} is not a batch size. Give positive integers, e.g. 1,8,64.", o.batches[i]));
    }
    if (i > 0 && o.batches[i] <= o.batches[i - 1]) {
      return Status::invalid_argument(fmt::format(
          "--batches: {} follows {}; the list must be strictly increasing (e.g. 1,8,64), since a batch "
          "that does not fit ends the precision's list.",
          o.batches[i], o.batches[i - 1]));
    }
  }
  if (o.max_batch < 1) {
    return Status::invalid_argument(fmt::format("--max-batch: {} is below 1.", o.max_batch));
  }
  if (!(o.bisect_tolerance > 0 && o.bisect_tolerance < 1)) {
    return Status::invalid_argument(fmt::format(
        "--bisect-tolerance: {} is not in (0, 1) (0.05 = within 5% of the batch).", o.bisect_tolerance));
  }
  if (o.latency_budget_ms && !(*o.latency_budget_ms > 0 && std::isfinite(*o.latency_budget_ms))) {
    return Status::invalid_argument(fmt::format(
        "--latency-budget-ms: {} is not a positive number of milliseconds.", *o.latency_budget_ms));
  }
  if (!(o.accuracy_gate > 0 && o.accuracy_gate <= 1)) {
    return Status::invalid_argument(
        fmt::format("--accuracy-gate: {} is not a fraction in (0, 1] (0.99 = 99% top-1 agreement with FP32).",
                    o.accuracy_gate));
  }
  if (o.accuracy_images < 0) {
    return Status::invalid_argument(
        fmt::format("--accuracy-images: {} is negative (0 = every image of the folder).", o.accuracy_images));
  }
  if (!(o.knee_fraction > 0 && o.knee_fraction <= 1)) {
    return Status::invalid_argument(fmt::format("knee fraction {} is not in (0, 1].", o.knee_fraction));
  }
  for (double w : o.power_limits_w) {
    if (!(w > 0 && std::isfinite(w))) {
      return Status::invalid_argument(
          fmt::format("--power-limits: {} is not a positive number of watts.", w));
    }
  }
  if (o.bench.streams != 1) {
    return Status::invalid_argument("sweep: one stream per point (--streams is a bench option).");
  }
  GPULAB_TRY(measure::validate(o.bench));
  if (o.bench.percentiles.end() == std::find(o.bench.percentiles.begin(), o.bench.percentiles.end(), 99.0)) {
    return Status::invalid_argument(
        "--percentiles: the sweep needs p99 (its latency budget is a p99). Add 99.");
  }
  return Status::ok();
}

Result<std::vector<LabelledImage>> load_gate_images(const std::filesystem::path& folder, int64_t max_images) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    return Status::not_found(
        fmt::format("--dataset: '{}' is not a folder. Give a folder of labelled images "
                    "(labels.tsv, as ../shared/datasets/imagenet-sample-256) or of images.",
                    folder.string()));
  }
  std::vector<LabelledImage> images;
  if (std::filesystem::exists(folder / "labels.tsv", ec)) {
    GPULAB_ASSIGN_OR_RETURN(images, load_labelled_folder(folder));
  } else {
    const std::vector<std::string> args{folder.string()};
    GPULAB_ASSIGN_OR_RETURN(const auto paths, list_images(args));
    for (const auto& p : paths) images.push_back({.path = p, .label = -1});
  }
  if (images.empty())
    return Status::not_found(fmt::format("--dataset: '{}' has no images.", folder.string()));
  if (max_images > 0 && static_cast<int64_t>(images.size()) > max_images)
    images.resize(static_cast<size_t>(max_images));
  return images;
}

// ---- BatchSearch ---------------------------------------------------------------------------------

BatchSearch::BatchSearch(int64_t max_batch, double tolerance)
    : max_batch_(max_batch), tolerance_(tolerance) {}

std::optional<int64_t> BatchSearch::next() const {
  if (oom_) {
    if (!fit_) return std::nullopt;  // not even one image fits
    const int64_t gap = *oom_ - *fit_;
    const auto within =
        std::max<int64_t>(1, static_cast<int64_t>(std::floor(tolerance_ * static_cast<double>(*fit_))));
    if (gap <= within) return std::nullopt;
    return *fit_ + gap / 2;
  }
  if (!fit_) return 1;
  if (*fit_ >= max_batch_) return std::nullopt;
  return std::min(2 * *fit_, max_batch_);
}

void BatchSearch::record(int64_t batch, bool fits) {
  if (fits) {
    fit_ = std::max(fit_.value_or(0), batch);
  } else {
    oom_ = std::min(oom_.value_or(batch), batch);
  }
}

// ---- Telemetry -------------------------------------------------------------------------------------

PointTelemetry aggregate_telemetry(const std::vector<telemetry::GpuSample>& all, uint32_t device,
                                   int64_t images, double window_s, uint32_t pid) {
  std::vector<const telemetry::GpuSample*> samples;
  for (const auto& s : all) {
    if (s.index == device) samples.push_back(&s);
  }
  PointTelemetry t;
  t.samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) return t;

  // Mean, min and max of one optional field over the samples that have it.
  struct Stat {
    double sum = 0, min = 0, max = 0;
    int64_t n = 0;
    void add(double v) {
      min = n == 0 ? v : std::min(min, v);
      max = n == 0 ? v : std::max(max, v);
      sum += v;
      ++n;
    }
    std::optional<double> mean() const {
      return n ? std::optional(sum / static_cast<double>(n)) : std::nullopt;
    }
    std::optional<double> lo() const { return n ? std::optional(min) : std::nullopt; }
    std::optional<double> hi() const { return n ? std::optional(max) : std::nullopt; }
  };
  Stat power, sm, util, temp, tx, rx, mem_total, mem_process;
  std::map<std::string, int64_t> reason_counts;
  int64_t with_reasons = 0;
  for (const auto* s : samples) {
    if (s->power_w) power.add(*s->power_w);
    if (s->sm_clock_mhz) sm.add(*s->sm_clock_mhz);
    if (s->gpu_util_pct) util.add(*s->gpu_util_pct);
    if (s->temperature_c) temp.add(*s->temperature_c);
    if (s->pcie_tx_kb_s) tx.add(*s->pcie_tx_kb_s);
    if (s->pcie_rx_kb_s) rx.add(*s->pcie_rx_kb_s);
    if (s->memory_used_bytes) mem_total.add(static_cast<double>(*s->memory_used_bytes));
    if (s->processes) {
      for (const auto& p : *s->processes) {
        if (p.pid == pid && p.used_bytes) mem_process.add(static_cast<double>(*p.used_bytes));
      }
    }
    if (s->clock_event_reasons) {
      ++with_reasons;
      for (const std::string& name : telemetry::decode_clock_event_reasons(*s->clock_event_reasons)) {
        ++reason_counts[name];
      }
    }
  }
  const telemetry::GpuSample& last = *samples.back();
  t.power_mean_w = power.mean();
  t.power_max_w = power.hi();
  t.power_limit_w = last.power_limit_w;
  // Energy: NVML's counter over the samples' span, scaled to the window; else mean power x window.
  const telemetry::GpuSample* first_e = nullptr;
  const telemetry::GpuSample* last_e = nullptr;
  for (const auto* s : samples) {
    if (!s->energy_mj) continue;
    if (!first_e) first_e = s;
    last_e = s;
  }
  if (images > 0 && window_s > 0) {
    if (first_e && last_e && last_e->timestamp_ms > first_e->timestamp_ms &&
        *last_e->energy_mj >= *first_e->energy_mj) {
      const double joules = static_cast<double>(*last_e->energy_mj - *first_e->energy_mj) / 1000.0;
      const double span_s = static_cast<double>(last_e->timestamp_ms - first_e->timestamp_ms) / 1000.0;
      t.energy_per_image_j = joules / span_s * window_s / static_cast<double>(images);
      t.energy_source = "counter";
      // The mean power is the counter's too: NVML's power reading is a moving average over about a
      // second on Hopper, so a half-second window's samples still carry the idle GPU before it (an
      // H100 sweep's FP16 ResNet-18 points read 260 W by samples where the counter and a 20 s
      // nvidia-smi reading gave 680-720 W; bench/results/2026-12-05-eb666af).
      t.power_mean_w = joules / span_s;
    } else if (t.power_mean_w) {
      t.energy_per_image_j = *t.power_mean_w * window_s / static_cast<double>(images);
      t.energy_source = "integrated";
    }
    // NVML's PCIe counters are KB/s (1024 bytes) over a ~20 ms window.
    if (auto m = tx.mean()) t.pcie_tx_bytes_per_image = *m * 1024.0 * window_s / static_cast<double>(images);
    if (auto m = rx.mean()) t.pcie_rx_bytes_per_image = *m * 1024.0 * window_s / static_cast<double>(images);
  }
  if (t.power_limit_w && *t.power_limit_w > 0) {
    if (t.power_mean_w) t.power_mean_share = *t.power_mean_w / *t.power_limit_w;
    if (t.power_max_w) t.power_max_share = *t.power_max_w / *t.power_limit_w;
  }
  t.sm_clock_mean_mhz = sm.mean();
  t.sm_clock_min_mhz = sm.lo();
  if (last.sm_clock_max_mhz) t.sm_clock_max_mhz = *last.sm_clock_max_mhz;
  t.gpu_util_mean_pct = util.mean();
  t.temperature_mean_c = temp.mean();
  t.temperature_max_c = temp.hi();
  if (auto m = mem_total.hi()) t.memory_used_total_max_bytes = static_cast<int64_t>(*m);
  if (auto m = mem_process.hi()) t.memory_used_process_max_bytes = static_cast<int64_t>(*m);
  for (const auto& [name, count] : reason_counts) {
    t.clock_event_reason_shares[name] = static_cast<double>(count) / static_cast<double>(with_reasons);
  }
  auto to_int = [](const std::optional<uint32_t>& v) -> std::optional<int> {
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  };
  t.pcie_gen = to_int(last.pcie_gen);
  t.pcie_gen_max = to_int(last.pcie_gen_max);
  t.pcie_width = to_int(last.pcie_width);
  t.pcie_width_max = to_int(last.pcie_width_max);
  return t;
}

namespace {

// ---- One point -----------------------------------------------------------------------------------

struct Runner {
  const SweepOptions& options;
  const SweepContext& context;
  SweepResult& result;
  Clock::time_point start = Clock::now();

  std::optional<measure::Ceilings> ceilings_of(Precision p) const {
    auto it = result.ceilings.find(std::string(precision_name(p)));
    if (it == result.ceilings.end()) return std::nullopt;
    return it->second;
  }

  // The rates of one measurement (the point's, or one GPU's part of it) of `point`'s plan.
  PointRates rates_of(const SweepPoint& point, const measure::BenchResult& b,
                      const PointTelemetry& telemetry) const {
    PointRates r;
    const double compute_s = b.gpu_compute_ms.median * 1e-3;
    const auto batch = static_cast<double>(point.batch);
    const auto ceilings = ceilings_of(point.precision);
    if (compute_s > 0) {
      r.achieved_tflops = point.plan.flops_per_image * batch / compute_s / 1e12;
      r.achieved_gb_s = (point.plan.bytes_per_image * batch + static_cast<double>(point.plan.param_bytes)) /
                        compute_s / 1e9;
      if (ceilings && ceilings->tflops > 0) r.compute_share = *r.achieved_tflops / ceilings->tflops;
      if (ceilings && ceilings->memory_gb_s > 0) r.memory_share = *r.achieved_gb_s / ceilings->memory_gb_s;
    }
    // Busy time per inference is the mean latency (one stream); the rest of the wall time the GPU
    // waited for the host.
    if (b.latency_ms.mean > 0 && point.batch > 0) {
      const double busy_share = b.throughput_ips * b.latency_ms.mean * 1e-3 / batch;
      r.host_idle_share = std::clamp(1.0 - busy_share, 0.0, 1.0);
    }
    if (b.latency_ms.median > 0) r.enqueue_ratio = b.enqueue_ms.median / b.latency_ms.median;
    if (b.h2d_ms && b.gpu_compute_ms.median > 0) r.h2d_ratio = b.h2d_ms->median / b.gpu_compute_ms.median;
    if (telemetry.pcie_rx_bytes_per_image) {
      r.pcie_rx_gb_s = *telemetry.pcie_rx_bytes_per_image * b.throughput_ips / 1e9;
      if (result.h2d_gb_s && *result.h2d_gb_s > 0) r.pcie_link_share = *r.pcie_rx_gb_s / *result.h2d_gb_s;
    }
    return r;
  }

  std::vector<Verdict> verdicts_of(const SweepPoint& point, const measure::BenchResult& b,
                                   const PointTelemetry& t, const PointRates& rates) const {
    const auto ceilings = ceilings_of(point.precision);
    VerdictInputs in{.batch = point.batch, .rates = rates};
    if (ceilings && ceilings->tflops > 0) in.compute_ceiling_tflops = ceilings->tflops;
    if (ceilings && ceilings->memory_gb_s > 0) in.memory_ceiling_gb_s = ceilings->memory_gb_s;
    in.h2d_ceiling_gb_s = result.h2d_gb_s;
    in.median_compute_ms = b.gpu_compute_ms.median;
    in.median_latency_ms = b.latency_ms.median;
    in.median_enqueue_ms = b.enqueue_ms.median;
    if (b.h2d_ms) in.median_h2d_ms = b.h2d_ms->median;
    in.throughput_ips = b.throughput_ips;
    in.compute_throughput_ips = measure::compute_throughput_ips(b);
    in.reason_shares = t.clock_event_reason_shares;
    in.sm_clock_mean_mhz = t.sm_clock_mean_mhz;
    in.sm_clock_max_mhz = t.sm_clock_max_mhz;
    in.power_mean_w = t.power_mean_w;
    in.power_limit_w = t.power_limit_w;
    in.temperature_max_c = t.temperature_max_c;
    in.pcie_gen = t.pcie_gen;
    in.pcie_gen_max = t.pcie_gen_max;
    in.pcie_width = t.pcie_width;
    in.pcie_width_max = t.pcie_width_max;
    return judge_point(in, options.thresholds);
  }

  // With several GPUs: each GPU's share of the point (its own telemetry, rates and verdicts), and
  // the point's telemetry and verdicts become the slowest GPU's, the one that limits the aggregate.
  void add_per_gpu(SweepPoint& point, const std::vector<std::pair<uint32_t, measure::BenchResult>>& parts,
                   const std::vector<telemetry::GpuSample>& window, uint32_t pid) const {
    if (parts.empty()) return;
    for (const auto& [device, b] : parts) {
      GpuShare share{.device = device,
                     .throughput_ips = b.throughput_ips,
                     .gpu_compute_median_ms = b.gpu_compute_ms.median};
      if (const double* p99 = b.latency_ms.find_percentile(99)) share.latency_p99_ms = *p99;
      share.telemetry = aggregate_telemetry(window, device, b.iterations * point.batch, b.wall_s, pid);
      share.rates = rates_of(point, b, share.telemetry);
      share.verdicts = verdicts_of(point, b, share.telemetry, share.rates);
      point.per_gpu.push_back(std::move(share));
    }
    const auto [slowest, fastest] = std::minmax_element(
        point.per_gpu.begin(), point.per_gpu.end(),
        [](const GpuShare& a, const GpuShare& b) { return a.throughput_ips < b.throughput_ips; });
    point.balance = fastest->throughput_ips > 0 ? slowest->throughput_ips / fastest->throughput_ips : 1.0;
    point.telemetry = slowest->telemetry;
    point.verdicts = slowest->verdicts;
  }

  // Marks `point` as ended by `status` at `stage`: out of memory, or another failure.
  static void fail(SweepPoint& point, const Status& status, OomStage stage) {
    if (status.code() == StatusCode::kOutOfMemory) {
      point.status = PointStatus::kOom;
      point.oom_stage = stage;
    } else {
      point.status = PointStatus::kFailed;
    }
    point.error = status.to_string();
    point.error_code = status.code();
  }

  SweepPoint run_point(Precision precision, int64_t batch, std::optional<double> power_limit,
                       std::string phase) {
    SweepPoint point{
        .precision = precision, .batch = batch, .power_limit_w = power_limit, .phase = std::move(phase)};
    SweepTarget& target = *context.target;
    const auto point_start = Clock::now();
    point.memory_before_bytes = target.device_memory_used_bytes();
    if (context.telemetry) context.telemetry->start();
    std::optional<measure::BenchResult> bench;
    int64_t window_end_ms = 0;
    auto plan = target.prepare_plan(precision, batch);
    Status context_status = Status::ok();
    if (!plan.is_ok()) {
      fail(point, plan.status(), OomStage::kBuild);
    } else if (point.plan = *plan, context_status = target.prepare_context(batch); !context_status.is_ok()) {
      fail(point, context_status, OomStage::kContext);
    } else {
      measure::BenchOptions bench_options = options.bench;
      bench_options.batch = batch;
      bench_options.include_transfers = options.include_transfers;
      auto measured = target.measure(bench_options);
      window_end_ms = now_unix_ms();
      if (!measured.is_ok()) {
        fail(point, measured.status(), OomStage::kRun);
      } else {
        bench = std::move(*measured);
        bench->samples.clear();  // per-iteration times are not part of a sweep point
        bench->samples.shrink_to_fit();
      }
    }
    std::vector<telemetry::GpuSample> samples;
    if (context.telemetry) samples = context.telemetry->stop();
    target.release();
    point.memory_after_bytes = target.device_memory_used_bytes();
    point.seconds = std::chrono::duration<double>(Clock::now() - point_start).count();
    if (!bench) return point;

    // The timed window: the last wall_s seconds before the measurement returned.
    const auto window_start_ms = window_end_ms - static_cast<int64_t>(std::ceil(bench->wall_s * 1000.0));
    std::vector<telemetry::GpuSample> window;
    for (auto& s : samples) {
      if (s.timestamp_ms >= window_start_ms && s.timestamp_ms <= window_end_ms)
        window.push_back(std::move(s));
    }
    const auto pid = static_cast<uint32_t>(::getpid());
    point.telemetry =
        aggregate_telemetry(window, context.telemetry_device, bench->iterations * batch, bench->wall_s, pid);
    point.bench = std::move(bench);
    point.rates = rates_of(point, *point.bench, point.telemetry);
    point.verdicts = verdicts_of(point, *point.bench, point.telemetry, point.rates);
    add_per_gpu(point, target.last_per_gpu(), window, pid);
    return point;
  }

  // A point of an interrupted earlier run with the same coordinates, when it is final.
  const SweepPoint* resumed(Precision precision, int64_t batch, std::optional<double> power_limit) const {
    if (!context.resume) return nullptr;
    for (const SweepPoint& p : context.resume->points) {
      if (p.precision == precision && p.batch == batch && p.power_limit_w == power_limit &&
          p.status != PointStatus::kFailed) {
        return &p;
      }
    }
    return nullptr;
  }

  bool interrupted() const { return context.interrupted && context.interrupted->load(); }

  void publish() {
    // A resumed sweep's time includes the runs it resumes (the record of a sweep over several
    // GPU-host calls, 2026-12-05, said only its last call's 373 s).
    const double before = context.resume ? context.resume->seconds : 0.0;
    result.seconds = before + std::chrono::duration<double>(Clock::now() - start).count();
    if (context.observer) context.observer(result);
  }

  Status prepare_precision(Precision p) {
    const std::string name(precision_name(p));
    if (!result.ceilings.count(name)) {
      if (const auto* r = context.resume; r && r->ceilings.count(name)) {
        result.ceilings[name] = r->ceilings.at(name);
      } else if (auto c = context.target->ceilings(p); c.is_ok()) {
        result.ceilings[name] = *c;
      } else {
        result.ceilings.erase(name);  // verdicts that need the ceiling are then not judged
      }
    }
    if (options.dataset_dir.empty() || p == Precision::kFp32 || result.accuracy.count(name))
      return Status::ok();
    if (const auto* r = context.resume; r && r->accuracy.count(name)) {
      result.accuracy[name] = r->accuracy.at(name);
      return Status::ok();
    }
    GPULAB_ASSIGN_OR_RETURN(result.accuracy[name],
                            context.target->agreement(p, options.dataset_dir, options.accuracy_images));
    publish();
    return Status::ok();
  }

  // The batches of one precision under one power limit; false when interrupted.
  bool sweep_precision(Precision p, std::optional<double> power_limit) {
    BatchSearch search(options.max_batch, options.bisect_tolerance);
    size_t list_index = 0;
    while (true) {
      std::optional<int64_t> batch;
      std::string phase = "list";
      if (options.batches.empty()) {
        batch = search.next();
        phase = std::string(search.phase());
      } else if (list_index < options.batches.size() && !search.smallest_oom()) {
        batch = options.batches[list_index++];
      }
      if (!batch) break;
      if (interrupted()) return false;
      if (const SweepPoint* old = resumed(p, *batch, power_limit)) {
        result.points.push_back(*old);
      } else {
        if (context.on_point_start) context.on_point_start(result, p, *batch, phase);
        result.points.push_back(run_point(p, *batch, power_limit, phase));
        warn_of_throughput_drop(result.points);
        publish();
      }
      const SweepPoint& point = result.points.back();
      if (point.status == PointStatus::kFailed) break;  // not a capacity question: stop this precision
      search.record(*batch, point.status == PointStatus::kOk);
    }
    // The largest batch that fits is capacity-bound when a larger one ran out of memory.
    if (search.largest_fit() && search.smallest_oom()) {
      SweepPoint* fit = nullptr;
      const SweepPoint* oom = nullptr;
      for (SweepPoint& q : result.points) {
        if (q.precision != p || q.power_limit_w != power_limit) continue;
        if (q.status == PointStatus::kOk && q.batch == *search.largest_fit()) fit = &q;
        if (q.status == PointStatus::kOom && q.batch == *search.smallest_oom()) oom = &q;
      }
      if (fit && oom) {
        std::erase_if(fit->verdicts, [](const Verdict& v) { return v.kind == VerdictKind::kCapacityBound; });
        fit->verdicts.push_back(capacity_verdict(fit->batch, oom->batch, oom_stage_name(*oom->oom_stage)));
      }
    }
    return true;
  }
};

}  // namespace

Status run_sweep(const SweepOptions& options, const SweepContext& context, SweepResult& result) {
  GPULAB_TRY(validate(options));
  if (context.target == nullptr) return Status::internal("run_sweep: no target");
  if (!options.power_limits_w.empty() && context.power == nullptr) {
    return Status::internal("run_sweep: power limits without a power control");
  }
  result.options = options;
  result.state = "running";
  Runner runner{.options = options, .context = context, .result = result};
  auto finish = [&](std::string state, const Status& status) {
    result.recommendations = recommend(options, result);
    result.state = std::move(state);
    if (!status.is_ok()) result.error = status.to_string();
    runner.publish();
    return status;
  };
  if (options.include_transfers && !result.h2d_gb_s) {
    if (context.resume && context.resume->h2d_gb_s) {
      result.h2d_gb_s = context.resume->h2d_gb_s;
    } else if (auto rate = context.target->h2d_gb_s(); rate.is_ok()) {
      result.h2d_gb_s = *rate;
    }
  }
  std::vector<std::optional<double>> limits;
  for (double w : options.power_limits_w) limits.emplace_back(w);
  if (limits.empty()) limits.emplace_back(std::nullopt);
  for (const auto& limit : limits) {
    if (limit) {
      if (Status s = context.power->set_w(*limit); !s.is_ok()) {
        return finish("failed",
                      s.with_context(fmt::format("sweep: setting the power limit to {:.0f} W", *limit)));
      }
    }
    for (Precision p : options.precisions) {
      if (runner.interrupted()) return finish("interrupted", Status::ok());
      if (Status s = runner.prepare_precision(p); !s.is_ok()) {
        return finish("failed", s.with_context(fmt::format("sweep: accuracy gate of {}", precision_name(p))));
      }
      if (!runner.sweep_precision(p, limit)) return finish("interrupted", Status::ok());
    }
  }
  // Nothing measured and nothing out of memory: the model or the device is the problem, not a batch.
  const auto measured = std::find_if(result.points.begin(), result.points.end(),
                                     [](const SweepPoint& q) { return q.status != PointStatus::kFailed; });
  if (measured == result.points.end() && !result.points.empty()) {
    const SweepPoint& first = result.points.front();
    return finish("failed", Status(first.error_code,
                                   fmt::format("sweep: no point could be measured; the first "
                                               "({} batch {}) failed with {}",
                                               precision_name(first.precision), first.batch, first.error)));
  }
  return finish("complete", Status::ok());
}

// ---- Progress ----------------------------------------------------------------------------------------

int64_t estimate_remaining_points(const SweepOptions& options, const SweepResult& result) {
  const int64_t axes = static_cast<int64_t>(std::max<size_t>(1, options.power_limits_w.size()));
  const auto full_growth =
      static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(options.max_batch)))) + 1;
  const auto bisection = static_cast<int64_t>(std::ceil(std::log2(1.0 / options.bisect_tolerance))) + 1;
  const int64_t per_precision_default =
      options.batches.empty() ? full_growth + bisection : static_cast<int64_t>(options.batches.size());
  // Points per (power limit, precision) run so far, in order; the last one may be unfinished.
  std::vector<std::pair<std::pair<std::optional<double>, Precision>, std::vector<const SweepPoint*>>> runs;
  for (const SweepPoint& p : result.points) {
    const auto key = std::pair{p.power_limit_w, p.precision};
    if (runs.empty() || runs.back().first != key) runs.push_back({key, {}});
    runs.back().second.push_back(&p);
  }
  const int64_t total_runs = axes * static_cast<int64_t>(options.precisions.size());
  int64_t remaining = 0, finished_points = 0, finished_runs = 0;
  if (!runs.empty()) {
    // The current run: replay its search to see what is left of it.
    const auto& current = runs.back().second;
    if (options.batches.empty()) {
      BatchSearch search(options.max_batch, options.bisect_tolerance);
      for (const SweepPoint* p : current) search.record(p->batch, p->status == PointStatus::kOk);
      if (search.next()) {
        if (!search.smallest_oom()) {
          remaining +=
              static_cast<int64_t>(std::ceil(std::log2(static_cast<double>(options.max_batch) /
                                                       static_cast<double>(*search.largest_fit())))) +
              bisection;
        } else {
          const double gap = static_cast<double>(*search.smallest_oom() - *search.largest_fit());
          const double within =
              std::max(1.0, options.bisect_tolerance * static_cast<double>(*search.largest_fit()));
          remaining += static_cast<int64_t>(std::ceil(std::log2(gap / within)));
        }
      }
    } else {
      remaining += std::max<int64_t>(0, static_cast<int64_t>(options.batches.size() - current.size()));
    }
    for (size_t i = 0; i + 1 < runs.size(); ++i)
      finished_points += static_cast<int64_t>(runs[i].second.size());
    finished_runs = static_cast<int64_t>(runs.size()) - 1;
  }
  const int64_t not_started = total_runs - static_cast<int64_t>(runs.size());
  const int64_t per_run =
      finished_runs > 0 ? (finished_points + finished_runs - 1) / finished_runs : per_precision_default;
  remaining += std::max<int64_t>(0, not_started) * per_run;
  return std::max<int64_t>(1, remaining);
}

void warn_of_throughput_drop(std::vector<SweepPoint>& points) {
  if (points.empty() || !points.back().bench) return;
  SweepPoint& last = points.back();
  const SweepPoint* best = nullptr;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const SweepPoint& q = points[i];
    if (q.precision != last.precision || q.power_limit_w != last.power_limit_w || !q.bench ||
        q.batch >= last.batch)
      continue;
    if (!best || q.bench->throughput_ips > best->bench->throughput_ips) best = &q;
  }
  if (!best || last.bench->throughput_ips >= 0.5 * best->bench->throughput_ips) return;
  last.bench->warnings.push_back(fmt::format(
      "throughput drop: {:.0f} img/s, {:.0f}% of batch {}'s {:.0f} img/s. A larger batch is not slower per "
      "image on its own: this plan runs slower kernels (tactics: {}; near the memory limit a tactic's "
      "workspace may not fit); `gpulab build --max-batch {} -v` logs each layer's tactic and fallback.",
      last.bench->throughput_ips, 100 * last.bench->throughput_ips / best->bench->throughput_ips, best->batch,
      best->bench->throughput_ips, last.plan.tactics.empty() ? "-" : last.plan.tactics, last.batch));
}

SweepTime sweep_time(const SweepResult& result) {
  SweepTime t;
  for (const SweepPoint& p : result.points) {
    if (p.plan.source == "build") {
      t.builds += p.plan.seconds;
      ++t.plans;
      if (p.plan.tactics == kTimedTactics) {
        t.timed_builds += p.plan.seconds;
        ++t.timed_plans;
        t.tactic_build += p.plan.tactic_build_s;
        t.tactic_timing += p.plan.tactic_timing_s;
      }
    }
    if (p.bench) t.windows += p.bench->wall_s;
  }
  for (const auto& [precision, a] : result.accuracy) t.gates += a.seconds;
  t.rest = std::max(0.0, result.seconds - t.builds - t.windows - t.gates);
  return t;
}

std::string timed_builds_note(const SweepTime& t) {
  if (t.timed_plans == 0) return {};
  std::string split;
  if (t.tactic_build + t.tactic_timing > 0)
    split = fmt::format(": {:.1f} s building cuDNN candidates, {:.1f} s timing them", t.tactic_build,
                        t.tactic_timing);
  return fmt::format("; {:.1f} s in the {} that timed tactics{}", t.timed_builds, t.timed_plans, split);
}

PointWarnings point_warnings(const SweepResult& result) {
  PointWarnings w;
  for (const SweepPoint& p : result.points) {
    if (!p.bench) continue;
    ++w.measured;
    bool unstable = false;
    for (const std::string& text : p.bench->warnings) {
      if (text.starts_with(measure::kUnstableWarning))
        unstable = true;
      else
        w.listed.emplace_back(&p, text);
    }
    w.unstable += unstable;
  }
  return w;
}

// ---- Recommendation --------------------------------------------------------------------------------

namespace {

// Below this top-1 accuracy on the gate's labels, a model's weights look untrained.
constexpr double kNearChanceTop1 = 0.05;

PrecisionRecommendation recommend_one(const SweepOptions& options, const SweepResult& result, Precision p,
                                      std::optional<double> power_limit) {
  PrecisionRecommendation rec{.precision = p, .power_limit_w = power_limit};
  const std::string name(precision_name(p));
  if (auto it = result.accuracy.find(name); it != result.accuracy.end()) {
    rec.accuracy = it->second;
    rec.accuracy_passed = it->second.agreement >= options.accuracy_gate;
  } else if (!options.dataset_dir.empty() && p == Precision::kFp32) {
    rec.accuracy_passed = true;  // the reference itself
  }
  std::vector<const SweepPoint*> fits;
  for (const SweepPoint& q : result.points) {
    if (q.precision != p || q.power_limit_w != power_limit) continue;
    if (q.status == PointStatus::kOom)
      rec.first_oom_batch = std::min(rec.first_oom_batch.value_or(q.batch), q.batch);
    if (q.status != PointStatus::kOk || !q.bench) continue;
    fits.push_back(&q);
    rec.largest_fitting_batch = std::max(rec.largest_fitting_batch.value_or(q.batch), q.batch);
  }
  auto p99 = [](const SweepPoint* q) {
    const double* v = q->bench->latency_ms.find_percentile(99);
    return v ? *v : q->bench->latency_ms.max;
  };
  std::vector<const SweepPoint*> candidates;
  for (const SweepPoint* q : fits) {
    if (!options.latency_budget_ms || p99(q) <= *options.latency_budget_ms) candidates.push_back(q);
  }
  if (rec.accuracy_passed == false) {
    rec.excluded =
        fmt::format("accuracy gate: top-1 agreement with FP32 {:.2f}% < {:.2f}% on {} images",
                    rec.accuracy->agreement * 100, options.accuracy_gate * 100, rec.accuracy->images);
    // Untrained weights (the seeded fixtures: 0.2% on the ImageNet sample) put the logits so close
    // together that any rounding flips the top class of some images: the gate then says little about
    // the precision, and the user should hear why it failed.
    if (const auto& top1 = rec.accuracy->top1_accuracy; top1 && *top1 < kNearChanceTop1)
      rec.excluded += fmt::format(
          " (top-1 accuracy against the labels {:.1f}%, near chance: untrained weights give near-tied "
          "logits that rounding flips, so the gate says little about this model; without --dataset "
          "there is no gate)",
          *top1 * 100);
  } else if (fits.empty()) {
    rec.excluded = "no batch was measured";
  } else if (candidates.empty()) {
    const auto fastest = *std::min_element(
        fits.begin(), fits.end(), [&](const SweepPoint* a, const SweepPoint* b) { return p99(a) < p99(b); });
    rec.excluded = fmt::format(
        "no batch within the p99 latency budget of {:.3f} ms (the lowest p99 was {:.3f} ms, "
        "at batch {})",
        *options.latency_budget_ms, p99(fastest), fastest->batch);
  }
  if (rec.excluded.empty()) {
    const SweepPoint* best = *std::max_element(
        candidates.begin(), candidates.end(),
        [](const auto* a, const auto* b) { return a->bench->throughput_ips < b->bench->throughput_ips; });
    rec.best_batch = best->batch;
    rec.best_throughput_ips = best->bench->throughput_ips;
    rec.best_p99_ms = p99(best);
    const SweepPoint* knee = best;
    for (const SweepPoint* q : candidates) {
      if (q->bench->throughput_ips >= options.knee_fraction * best->bench->throughput_ips &&
          q->batch < knee->batch) {
        knee = q;
      }
    }
    rec.knee_batch = knee->batch;
    rec.knee_throughput_ips = knee->bench->throughput_ips;
  }
  return rec;
}

}  // namespace

std::vector<PrecisionRecommendation> recommend(const SweepOptions& options, const SweepResult& result) {
  std::vector<std::optional<double>> limits;
  for (double w : options.power_limits_w) limits.emplace_back(w);
  if (limits.empty()) limits.emplace_back(std::nullopt);
  std::vector<PrecisionRecommendation> out;
  for (const auto& limit : limits) {
    for (Precision p : options.precisions) out.push_back(recommend_one(options, result, p, limit));
  }
  return out;
}

}  // namespace gpulab::sweep
