#include "sweep/verdict.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace gpulab::sweep {
namespace {

struct ThresholdField {
  const char* name;
  double VerdictThresholds::*field;
};
constexpr ThresholdField kThresholdFields[] = {
    {"host_idle_share", &VerdictThresholds::host_idle_share},
    {"enqueue_ratio", &VerdictThresholds::enqueue_ratio},
    {"pcie_h2d_ratio", &VerdictThresholds::pcie_h2d_ratio},
    {"pcie_link_share", &VerdictThresholds::pcie_link_share},
    {"power_cap_share", &VerdictThresholds::power_cap_share},
    {"clock_ratio", &VerdictThresholds::clock_ratio},
    {"thermal_share", &VerdictThresholds::thermal_share},
    {"compute_share", &VerdictThresholds::compute_share},
    {"memory_share", &VerdictThresholds::memory_share},
    {"launch_share", &VerdictThresholds::launch_share},
    {"launch_ms", &VerdictThresholds::launch_ms},
};

std::string pct(double fraction) {
  return fmt::format("{:.0f}%", fraction * 100.0);
}

// Sum of the shares of the given reasons (each sample counts once per reason it has; the shares
// are of different reasons, so their sum can exceed the share of samples with any of them: the
// largest is reported instead).
std::pair<std::string, double> largest_share(const std::map<std::string, double>& shares,
                                             std::initializer_list<const char*> reasons) {
  std::pair<std::string, double> best{"", 0.0};
  for (const char* r : reasons) {
    auto it = shares.find(r);
    if (it != shares.end() && it->second > best.second) best = {r, it->second};
  }
  return best;
}

std::optional<Verdict> host_bound(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  const bool idle = r.host_idle_share && *r.host_idle_share >= t.host_idle_share;
  const bool enqueue = r.enqueue_ratio && *r.enqueue_ratio >= t.enqueue_ratio;
  if (!idle && !enqueue) return std::nullopt;
  Verdict v{.kind = VerdictKind::kHostBound};
  v.evidence = fmt::format(
      "GPU idle {} of the time between inferences ({:.0f} img/s completed vs {:.0f} img/s "
      "from GPU time); enqueue {:.3f} ms of {:.3f} ms latency",
      pct(r.host_idle_share.value_or(0)), in.throughput_ips, in.compute_throughput_ips, in.median_enqueue_ms,
      in.median_latency_ms);
  if (r.host_idle_share) v.values["host_idle_share"] = *r.host_idle_share;
  if (r.enqueue_ratio) v.values["enqueue_ratio"] = *r.enqueue_ratio;
  return v;
}

std::optional<Verdict> pcie_bound(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  const bool h2d = r.h2d_ratio && *r.h2d_ratio >= t.pcie_h2d_ratio;
  const bool link = r.pcie_link_share && *r.pcie_link_share >= t.pcie_link_share;
  if (!h2d && !link) return std::nullopt;
  Verdict v{.kind = VerdictKind::kPcieBound};
  std::string text;
  if (in.median_h2d_ms) {
    text = fmt::format("H2D {:.3f} ms vs GPU compute {:.3f} ms", *in.median_h2d_ms, in.median_compute_ms);
    v.values["h2d_ratio"] = r.h2d_ratio.value_or(0);
  }
  if (r.pcie_rx_gb_s && r.pcie_link_share && in.h2d_ceiling_gb_s) {
    text += fmt::format("{}PCIe RX {:.1f} GB/s = {} of the measured {:.1f} GB/s", text.empty() ? "" : "; ",
                        *r.pcie_rx_gb_s, pct(*r.pcie_link_share), *in.h2d_ceiling_gb_s);
    v.values["pcie_link_share"] = *r.pcie_link_share;
  }
  if (in.pcie_gen && in.pcie_gen_max && in.pcie_width && in.pcie_width_max &&
      (*in.pcie_gen < *in.pcie_gen_max || *in.pcie_width < *in.pcie_width_max)) {
    text += fmt::format("; link Gen{} x{} below its maximum Gen{} x{}", *in.pcie_gen, *in.pcie_width,
                        *in.pcie_gen_max, *in.pcie_width_max);
  }
  v.evidence = std::move(text);
  return v;
}

std::optional<double> clock_ratio(const VerdictInputs& in) {
  if (!in.sm_clock_mean_mhz || !in.sm_clock_max_mhz || *in.sm_clock_max_mhz <= 0) return std::nullopt;
  return *in.sm_clock_mean_mhz / *in.sm_clock_max_mhz;
}

std::optional<Verdict> power_capped(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto [reason, share] = largest_share(in.reason_shares, {"sw_power_cap", "hw_power_brake_slowdown"});
  const auto ratio = clock_ratio(in);
  if (share < t.power_cap_share || !ratio || *ratio >= t.clock_ratio) return std::nullopt;
  Verdict v{.kind = VerdictKind::kPowerCapped};
  v.evidence = fmt::format("{} in {} of samples; SM clock {:.0f} of {:.0f} MHz ({})", reason, pct(share),
                           *in.sm_clock_mean_mhz, *in.sm_clock_max_mhz, pct(*ratio));
  if (in.power_mean_w && in.power_limit_w) {
    v.evidence += fmt::format("; power {:.0f} W of the {:.0f} W limit", *in.power_mean_w, *in.power_limit_w);
  }
  v.values = {{"reason_share", share}, {"clock_ratio", *ratio}};
  return v;
}

std::optional<Verdict> thermal(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto [reason, share] =
      largest_share(in.reason_shares, {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"});
  if (share < t.thermal_share) return std::nullopt;
  Verdict v{.kind = VerdictKind::kThermal};
  v.evidence = fmt::format("{} in {} of samples", reason, pct(share));
  if (in.temperature_max_c) v.evidence += fmt::format("; {:.0f} C at most", *in.temperature_max_c);
  if (auto ratio = clock_ratio(in)) {
    v.evidence += fmt::format("; SM clock {} of its maximum", pct(*ratio));
    v.values["clock_ratio"] = *ratio;
  }
  v.values["reason_share"] = share;
  return v;
}

std::optional<Verdict> compute_or_memory(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  const double c = r.compute_share.value_or(0), m = r.memory_share.value_or(0);
  const bool compute = r.compute_share && c >= t.compute_share && c >= m;
  const bool memory = r.memory_share && m >= t.memory_share && m > c;
  if (compute) {
    return Verdict{
        .kind = VerdictKind::kComputeBound,
        .evidence = fmt::format("{} of the {:.0f} TFLOP/s compute ceiling ({:.1f} TFLOP/s achieved)", pct(c),
                                *in.compute_ceiling_tflops, *r.achieved_tflops),
        .values = {{"compute_share", c}, {"achieved_tflops", *r.achieved_tflops}}};
  }
  if (memory) {
    return Verdict{
        .kind = VerdictKind::kMemoryBound,
        .evidence = fmt::format("{} of the {:.0f} GB/s device bandwidth ({:.0f} GB/s from the plan's bytes)",
                                pct(m), *in.memory_ceiling_gb_s, *r.achieved_gb_s),
        .values = {{"memory_share", m}, {"achieved_gb_s", *r.achieved_gb_s}}};
  }
  return std::nullopt;
}

// Kernels too small to fill the GPU: far from both ceilings, and a batch short enough that launch
// and latency can be what it is made of. A long batch far from both ceilings is slow kernels
// (kernel-bound): an H100 sweep's FP32 ResNet-18 on cuDNN's heuristic choice took 2 s per batch
// of 1024 at 4% of the compute ceiling (2026-12-05, eb666af).
bool small_kernels(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  return r.compute_share && r.memory_share && *r.compute_share < t.launch_share &&
         *r.memory_share < t.launch_share && in.median_compute_ms <= t.launch_ms;
}

std::optional<Verdict> launch_bound(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  if (!small_kernels(in, t)) return std::nullopt;
  return Verdict{.kind = VerdictKind::kLaunchBound,
                 .evidence = fmt::format(
                     "{} of the compute ceiling and {} of the memory bandwidth: kernels too small to fill "
                     "the GPU, launch and latency dominate ({:.3f} ms per batch of {})",
                     pct(*r.compute_share), pct(*r.memory_share), in.median_compute_ms, in.batch),
                 .values = {{"compute_share", *r.compute_share}, {"memory_share", *r.memory_share}}};
}

// Between the launch and the compute/memory thresholds: neither roofline is near, nor is the GPU
// mostly waiting on launches; what is left is how efficient the kernels are.
std::optional<Verdict> kernel_bound(const VerdictInputs& in, const VerdictThresholds& t) {
  const auto& r = in.rates;
  if (!r.compute_share || !r.memory_share) return std::nullopt;
  const double c = *r.compute_share, m = *r.memory_share;
  if (c >= t.compute_share || m >= t.memory_share) return std::nullopt;
  if (small_kernels(in, t)) return std::nullopt;
  return Verdict{
      .kind = VerdictKind::kKernelBound,
      .evidence = fmt::format("{} of the {:.0f} TFLOP/s compute ceiling and {} of the {:.0f} GB/s bandwidth: "
                              "neither roofline is reached; the kernels' efficiency limits (`gpulab bench "
                              "--profile` shows the layers furthest from their roofline)",
                              pct(c), *in.compute_ceiling_tflops, pct(m), *in.memory_ceiling_gb_s),
      .values = {{"compute_share", c}, {"memory_share", m}}};
}

}  // namespace

Status apply_threshold_overrides(std::string_view text, VerdictThresholds& thresholds) {
  std::string names;
  for (const auto& f : kThresholdFields) names += fmt::format("{}{}", names.empty() ? "" : ", ", f.name);
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    start = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::invalid_argument(
          fmt::format("--threshold: '{}' is not NAME=VALUE. Names: {}.", item, names));
    }
    const std::string name(item.substr(0, eq));
    const std::string value_text(item.substr(eq + 1));
    const ThresholdField* field = nullptr;
    for (const auto& f : kThresholdFields) {
      if (name == f.name) field = &f;
    }
    if (field == nullptr) {
      return Status::invalid_argument(fmt::format("--threshold: unknown name '{}'. Names: {}.", name, names));
    }
    char* end = nullptr;
    const double value = std::strtod(value_text.c_str(), &end);
    if (value_text.empty() || end != value_text.c_str() + value_text.size() || !std::isfinite(value) ||
        value <= 0 || value > 10) {
      return Status::invalid_argument(fmt::format(
          "--threshold: {}='{}' is not a number in (0, 10]. Shares and ratios are fractions (0.2 = 20%).",
          name, value_text));
    }
    thresholds.*(field->field) = value;
  }
  return Status::ok();
}

std::vector<std::pair<std::string, double>> threshold_values(const VerdictThresholds& thresholds) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& f : kThresholdFields) out.emplace_back(f.name, thresholds.*(f.field));
  return out;
}

std::string_view verdict_name(VerdictKind kind) {
  switch (kind) {
    case VerdictKind::kHostBound: return "host-bound";
    case VerdictKind::kPcieBound: return "pcie-bound";
    case VerdictKind::kPowerCapped: return "power-capped";
    case VerdictKind::kThermal: return "thermal";
    case VerdictKind::kComputeBound: return "compute-bound";
    case VerdictKind::kMemoryBound: return "memory-bound";
    case VerdictKind::kLaunchBound: return "launch-bound";
    case VerdictKind::kKernelBound: return "kernel-bound";
    case VerdictKind::kCapacityBound: return "capacity-bound";
  }
  return "unknown";
}

Result<VerdictKind> parse_verdict_name(std::string_view name) {
  for (VerdictKind k : {VerdictKind::kHostBound, VerdictKind::kPcieBound, VerdictKind::kPowerCapped,
                        VerdictKind::kThermal, VerdictKind::kComputeBound, VerdictKind::kMemoryBound,
                        VerdictKind::kLaunchBound, VerdictKind::kKernelBound, VerdictKind::kCapacityBound}) {
    if (verdict_name(k) == name) return k;
  }
  return Status::invalid_file(fmt::format("'{}' is not a verdict name", name));
}

std::vector<Verdict> judge_point(const VerdictInputs& in, const VerdictThresholds& thresholds) {
  std::vector<Verdict> out;
  for (auto rule :
       {host_bound, pcie_bound, power_capped, thermal, compute_or_memory, launch_bound, kernel_bound}) {
    if (auto v = rule(in, thresholds)) out.push_back(std::move(*v));
  }
  return out;
}

Verdict capacity_verdict(int64_t largest_fit, int64_t first_oom, std::string_view oom_stage) {
  return Verdict{.kind = VerdictKind::kCapacityBound,
                 .evidence = fmt::format("batch {} fits, {} does not (out of memory at {})", largest_fit,
                                         first_oom, oom_stage),
                 .values = {{"largest_fit", static_cast<double>(largest_fit)},
                            {"first_oom", static_cast<double>(first_oom)}}};
}

}  // namespace gpulab::sweep
