// What limits one sweep point, with the numbers that say so.
//
// Each rule compares a measured ratio against a threshold; the thresholds live in
// VerdictThresholds (defaults documented in docs/metrics.md, overridable with
// `gpulab sweep --threshold NAME=VALUE`). Several verdicts may hold for a point; they are listed
// in the order below, so the first is the one that limits: an idle GPU (host), a saturated link
// (PCIe), a reduced clock (power cap, heat), then what the GPU spends its time on (compute, memory
// bandwidth; far from both: launch and latency; in between: the kernels' own efficiency), and last
// the capacity wall of the batch axis.
// Pure functions; no I/O.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab::sweep {

struct VerdictThresholds {
  double host_idle_share = 0.20;  // host-bound: GPU idle between inferences, 1 - throughput / compute rate
  double enqueue_ratio = 0.80;    // host-bound: median enqueue time / median latency
  double pcie_h2d_ratio = 1.00;   // pcie-bound: median H2D time / median GPU compute time
  double pcie_link_share = 0.80;  // pcie-bound: PCIe RX bytes/s / measured pinned H2D rate
  double power_cap_share = 0.20;  // power-capped: share of samples with a power-cap reason ...
  double clock_ratio = 0.95;      // ... and mean SM clock / max SM clock below this
  double thermal_share = 0.20;    // thermal: share of samples with a thermal slowdown reason
  double compute_share = 0.50;    // compute-bound: achieved FLOP/s / measured compute ceiling
  double memory_share = 0.50;     // memory-bound: plan bytes / time / measured device bandwidth
  double launch_share = 0.25;     // launch-bound: below this share of both ceilings ...
  double launch_ms = 2.0;         // ... and a batch's GPU compute time (median) at most this long
};

// "name=value,...": overrides the named thresholds. kInvalidArgument for an unknown name (listing
// the names) or a value that is not a number in (0, 10].
Status apply_threshold_overrides(std::string_view text, VerdictThresholds& thresholds);
// name -> value of every threshold, in declaration order of the struct (for JSON and docs).
std::vector<std::pair<std::string, double>> threshold_values(const VerdictThresholds& thresholds);

enum class VerdictKind {
  kHostBound,
  kPcieBound,
  kPowerCapped,
  kThermal,
  kComputeBound,
  kMemoryBound,
  kLaunchBound,
  kKernelBound,
  kCapacityBound,
};
// "host-bound", "pcie-bound", "power-capped", "thermal", "compute-bound", "memory-bound",
// "launch-bound", "kernel-bound", "capacity-bound".
std::string_view verdict_name(VerdictKind kind);
Result<VerdictKind> parse_verdict_name(std::string_view name);

struct Verdict {
  VerdictKind kind = VerdictKind::kComputeBound;
  std::string evidence;                  // one line of numbers, e.g. "62% of the 662 TFLOP/s ceiling"
  std::map<std::string, double> values;  // the same numbers, by name, for JSON
};

// The ratios the rules read, computed from one point's measurements. nullopt: not measurable
// (no ceiling, no telemetry, transfers not included).
struct PointRates {
  std::optional<double> achieved_tflops, compute_share;  // of the precision's ceiling
  std::optional<double> achieved_gb_s, memory_share;     // plan bytes / median GPU compute time
  std::optional<double> host_idle_share;                 // 1 - throughput / compute throughput
  std::optional<double> enqueue_ratio;                   // median enqueue / median latency
  std::optional<double> h2d_ratio;                       // median H2D / median GPU compute
  std::optional<double> pcie_rx_gb_s, pcie_link_share;   // NVML RX throughput / measured H2D rate
};

// Everything a verdict needs to know about a point.
struct VerdictInputs {
  int64_t batch = 0;
  PointRates rates;
  std::optional<double> compute_ceiling_tflops, memory_ceiling_gb_s, h2d_ceiling_gb_s;
  double median_compute_ms = 0, median_latency_ms = 0, median_enqueue_ms = 0;
  std::optional<double> median_h2d_ms;
  double throughput_ips = 0, compute_throughput_ips = 0;
  // Telemetry over the timed window.
  std::map<std::string, double> reason_shares;  // clock-event reason -> share of samples
  std::optional<double> sm_clock_mean_mhz, sm_clock_max_mhz, power_mean_w, power_limit_w, temperature_max_c;
  std::optional<int> pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
};

// The verdicts that hold, the limiting one first (see the header comment). Every point with both
// ceilings gets one of compute-, memory-, launch- or kernel-bound; without ceilings only the
// telemetry rules can hold.
std::vector<Verdict> judge_point(const VerdictInputs& in, const VerdictThresholds& thresholds);

// The capacity-bound verdict of the largest batch that fits, when `first_oom` did not.
Verdict capacity_verdict(int64_t largest_fit, int64_t first_oom, std::string_view oom_stage);

}  // namespace gpulab::sweep
