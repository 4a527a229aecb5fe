// The result files `gpulab report` reads, recognised by their content, never their name.
//
// JSON documents with a "schema" field are read by it: "gpulab.sweep" (sweep --json),
// "gpulab.bench" (bench --json, with --profile), "gpulab.pipeline" (pipeline --json) and
// "gpulab.accuracy" (accuracy --json), each at the schema_version this gpulab writes. The outputs
// that have no schema field are recognised by their shape:
//   doctor --json       an array of {"check", "status", "detail", "fix"}
//   bandwidth --json    an object with "device_name" and "points" of {"copy", "host_memory", ...}
//   monitor --json      JSON Lines, one {"gpus": [...]} per reading
//   monitor --csv       a header of telemetry field keys ("timestamp, index, power.draw [W], ...")
//                       and one row per GPU and reading
// Anything else, and a file that is cut short, is kInvalidFile whose message names the file and
// what is wrong (a monitor log is the exception: its last line may be cut short when monitor
// was stopped, and that line is dropped with a note). Every reader takes bytes or a parsed
// document and never throws, whatever the input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "doctor/doctor.h"
#include "gpulab/status.h"
#include "measure/bandwidth.h"
#include "measure/bench.h"
#include "sweep/sweep.h"

namespace gpulab::report {

// ---- monitor --json / --csv ------------------------------------------------------------------------

struct MonitorReading {
  std::optional<double> time_s;  // since the log's first reading; nullopt when no timestamp was logged
  std::string timestamp;         // as logged ("2026/12/05 08:24:24.123", local time)
  std::optional<int64_t> index;  // NVML device index
  std::string name, uuid;
  // The numeric fields logged, by key ("power.draw", "memory.used"), in their unit (docs/
  // telemetry.md); a field NVML could not read (N/A, null) is absent, never 0.
  std::map<std::string, double> values;
  std::string clock_event_reasons;  // "clocks_event_reasons.names" when logged
};

struct MonitorLog {
  std::string format;               // "json" or "csv"
  std::vector<std::string> fields;  // the keys logged, in order
  std::vector<MonitorReading> readings;
  std::vector<std::string> notes;  // what was dropped and why
};

// `text` is the whole log. kInvalidFile naming the line that is wrong.
Result<MonitorLog> monitor_from_json_lines(std::string_view text);
Result<MonitorLog> monitor_from_csv(std::string_view text);

// ---- pipeline --json (schema "gpulab.pipeline" version 1) -------------------------------------------

struct PipelineStage {
  std::string name;  // "read", "decode", "infer"
  int64_t threads = 0, images = 0;
  double busy_s = 0, busy_share = 0, cpu_s = 0, capacity_ips = 0, wait_input_s = 0, wait_output_s = 0;
};

struct PipelineReport {
  std::string model, backend, preprocess, decoder;
  int64_t batch = 0, decode_threads = 0, queue_depth = 0;
  int64_t files = 0, passes = 0, images = 0, failed_images = 0;
  double wall_s = 0, throughput_ips = 0;
  std::optional<double> warm_throughput_ips;
  std::vector<PipelineStage> stages;
  std::string limiting_stage, next_stage;
  double limiting_capacity_ips = 0;
  std::optional<double> margin;  // next stage's capacity / the limiting one's
  std::optional<double> compute_only_ips, end_to_end_vs_compute, h2d_gb_s, gpu_busy_share;
  // gpu_split (GPU path): the GPU's busy time in parts and the infer thread's host time, seconds.
  struct GpuSplit {
    double preprocess_s = 0, model_s = 0, output_s = 0;
    std::optional<double> host_submit_s, host_enqueue_s, host_wait_s;
  };
  std::optional<GpuSplit> gpu_split;
  std::string compute_only_source;
  std::optional<int64_t> rss_peak_bytes;
  std::optional<double> rss_growth_fraction;
  std::string gpulab_version, gpulab_commit, command_line;
  std::optional<int64_t> hardware_threads;
};
Result<PipelineReport> pipeline_from_json(const nlohmann::json& doc);

// ---- accuracy --json (schema "gpulab.accuracy" version 1) -------------------------------------------

struct AccuracyLayer {
  std::string name;
  double flops_share = 0;                      // of all Conv/Gemm FLOPs
  std::optional<double> sqnr_db;               // its output in the fully quantized plan; null = exact
  double alone_agreement = 1;                  // only this layer in the reduced precision
  std::optional<double> alone_logits_sqnr_db;  // null = exact
};

struct AccuracyPrecision {
  std::string precision;
  std::optional<double> top1, top5;  // null without labels
  double agreement = 0;              // top-1 agreement with FP32
  double logits_rel_l2 = 0;
  std::optional<double> quantized_flops_share;  // INT8/FP8
  bool gate_met = false;
  // After moving layers to FP16 (null without a fallback).
  std::optional<double> fallback_agreement, fallback_top1;
  std::vector<std::string> fallback_layers;
  std::optional<double> fallback_flops_share;
  int64_t per_layer_images = 0;
  std::vector<AccuracyLayer> layers;  // worst first; empty without --per-layer
};

struct AccuracyReport {
  std::string model, dataset, emulated;
  int64_t images = 0, labelled = 0;
  double gate = 0;  // top-1 agreement a precision must reach (fraction)
  std::optional<double> fp32_top1, fp32_top5;
  std::vector<AccuracyPrecision> results;
  std::string gpulab_version, gpulab_commit, command_line;
};
Result<AccuracyReport> accuracy_from_json(const nlohmann::json& doc);

// ---- Any input -------------------------------------------------------------------------------------------

enum class InputKind { kSweep, kBench, kBandwidth, kDoctor, kMonitor, kPipeline, kAccuracy };
// "sweep", "bench", "bandwidth", "doctor", "monitor", "pipeline", "accuracy".
std::string_view input_kind_name(InputKind kind);

struct Input {
  std::string source;  // the file as the user named it
  InputKind kind = InputKind::kSweep;
  std::variant<sweep::SweepResult, measure::BenchResult, measure::BandwidthReport,
               std::vector<doctor::Finding>, MonitorLog, PipelineReport, AccuracyReport>
      data;
};

// Recognises and reads one result. `source` names it in messages: "'sweep.json': ...".
Result<Input> parse_input(std::string_view source, std::string_view bytes);
// Reads the file (kNotFound when missing), then parse_input.
Result<Input> read_input(const std::filesystem::path& path);

}  // namespace gpulab::report
