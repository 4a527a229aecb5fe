#include "report/inputs.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "core/file_io.h"
#include "core/json_reader.h"
#include "telemetry/format.h"

namespace gpulab::report {
namespace {

using nlohmann::json;

constexpr std::string_view kKnownSchemas = "gpulab.sweep, gpulab.bench, gpulab.pipeline, gpulab.accuracy";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The document, or nlohmann's description of where parsing stopped ("parse error at line 3,
// column 1: syntax error while parsing object - unexpected end of input; ...").
std::optional<json> parse_json(std::string_view text, std::string& error) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    std::string_view what = e.what();
    if (const size_t end = what.find("] ");
        what.starts_with("[json.exception") && end != std::string_view::npos)
      what.remove_prefix(end + 2);
    error = std::string(what);
    return std::nullopt;
  }
}

// ---- monitor ---------------------------------------------------------------------------------------

// "2026/12/05 08:24:24.123" -> seconds since the epoch of that wall-clock reading (as if UTC: only
// differences are used, so the time zone does not matter).
std::optional<double> parse_timestamp_s(std::string_view text) {
  std::tm tm{};
  int ms = 0;
  const std::string s(trim(text));
  if (std::sscanf(s.c_str(), "%d/%d/%d %d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return std::nullopt;
  if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
      tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60 || ms < 0 || ms > 999)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

// A CSV cell as monitor writes it: a number, "N/A", 0x-hex (clock-event bits), "P3" (pstate), or text.
std::optional<double> cell_number(std::string_view cell) {
  cell = trim(cell);
  if (cell.empty() || cell == "N/A") return std::nullopt;
  std::string s(cell);
  if (s.size() > 1 && s[0] == 'P' && std::isdigit(static_cast<unsigned char>(s[1]))) s.erase(0, 1);
  char* end = nullptr;
  const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const double v =
      hex ? static_cast<double>(std::strtoull(s.c_str(), &end, 16)) : std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Splits one CSV line as telemetry::csv_row writes it: ", "-separated, cells with ',' or '"' quoted
// ("" inside). nullopt for an unterminated quote.
std::optional<std::vector<std::string>> split_csv(std::string_view line) {
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false, in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        cell += c;
      }
    } else if (c == '"' && trim(cell).empty()) {
      in_quotes = quoted = true;
      cell.clear();
    } else if (c == ',') {
      cells.push_back(quoted ? cell : std::string(trim(cell)));
      cell.clear();
      quoted = false;
    } else {
      cell += c;
    }
  }
  if (in_quotes) return std::nullopt;
  cells.push_back(quoted ? cell : std::string(trim(cell)));
  return cells;
}

void set_time(MonitorLog& log) {
  std::optional<double> first;
  for (MonitorReading& r : log.readings) {
    const auto t = parse_timestamp_s(r.timestamp);
    if (!t) continue;
    if (!first) first = *t;
    r.time_s = *t - *first;
  }
}

// "key [unit]" -> "key".
std::string_view header_key(std::string_view column) {
  column = trim(column);
  if (const size_t bracket = column.find(" ["); bracket != std::string_view::npos)
    column = column.substr(0, bracket);
  return column;
}

bool is_text_field(std::string_view key) {
  return key == "timestamp" || key == "name" || key == "uuid" || key == "clocks_event_reasons.names";
}

void set_text(MonitorReading& r, std::string_view key, std::string value) {
  if (key == "timestamp") r.timestamp = std::move(value);
  if (key == "name") r.name = std::move(value);
  if (key == "uuid") r.uuid = std::move(value);
  if (key == "clocks_event_reasons.names") r.clock_event_reasons = std::move(value);
}

Result<MonitorReading> monitor_gpu_from_json(const json& gpu, const std::string& where) {
  if (!gpu.is_object()) return Status::invalid_file(where + ": not an object");
  MonitorReading r;
  for (const auto& [key, value] : gpu.items()) {
    if (is_text_field(key)) {
      if (value.is_string())
        set_text(r, key, value.get<std::string>());
      else if (!value.is_null())
        return Status::invalid_file(fmt::format("{}.{}: not a string", where, key));
    } else if (value.is_number()) {
      r.values[key] = value.get<double>();
      if (key == "index" && value.is_number_integer()) r.index = value.get<int64_t>();
    } else if (!value.is_null() && key != "processes") {
      return Status::invalid_file(fmt::format("{}.{}: not a number", where, key));
    }
  }
  return r;
}

// ---- pipeline / accuracy -------------------------------------------------------------------------

Status check_schema(const json& doc, std::string_view schema, int64_t version) {
  const JsonReader r{doc, std::string(schema)};
  GPULAB_ASSIGN_OR_RETURN(const auto v, r.optional<int64_t>("schema_version"));
  if (v.value_or(0) != version) {
    return Status::invalid_file(fmt::format("schema_version {} of {} is not the {} this gpulab reads",
                                            v.value_or(0), schema, version));
  }
  return Status::ok();
}

Result<std::string> text_or_empty(const JsonReader& r, const char* key) {
  GPULAB_ASSIGN_OR_RETURN(const auto v, r.optional<std::string>(key));
  return v.value_or("");
}

// The "environment" block pipeline and accuracy results share (optional as a whole).
Status read_environment(const JsonReader& r, std::string& gpulab_version, std::string& gpulab_commit,
                        std::string& command_line) {
  GPULAB_ASSIGN_OR_RETURN(const json* env, r.optional_object("environment"));
  if (!env) return Status::ok();
  const JsonReader e = r.child(*env, "environment");
  GPULAB_ASSIGN_OR_RETURN(gpulab_version, text_or_empty(e, "gpulab_version"));
  GPULAB_ASSIGN_OR_RETURN(gpulab_commit, text_or_empty(e, "gpulab_commit"));
  GPULAB_ASSIGN_OR_RETURN(command_line, text_or_empty(e, "command_line"));
  return Status::ok();
}

Result<PipelineStage> stage_from_json(const JsonReader& r) {
  if (!r.doc.is_object()) return r.bad("", "not an object");
  PipelineStage s;
  GPULAB_ASSIGN_OR_RETURN(s.name, r.text("name"));
  GPULAB_ASSIGN_OR_RETURN(s.threads, r.integer("threads"));
  GPULAB_ASSIGN_OR_RETURN(s.images, r.integer("images"));
  for (const auto& [key, field] : {std::pair{"busy_s", &s.busy_s},
                                   {"busy_share", &s.busy_share},
                                   {"cpu_s", &s.cpu_s},
                                   {"capacity_ips", &s.capacity_ips},
                                   {"wait_input_s", &s.wait_input_s},
                                   {"wait_output_s", &s.wait_output_s}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.number(key));
  }
  return s;
}

Result<AccuracyPrecision> accuracy_precision_from_json(const JsonReader& r) {
  if (!r.doc.is_object()) return r.bad("", "not an object");
  AccuracyPrecision p;
  GPULAB_ASSIGN_OR_RETURN(p.precision, r.text("precision"));
  GPULAB_ASSIGN_OR_RETURN(p.top1, r.optional<double>("top1"));
  GPULAB_ASSIGN_OR_RETURN(p.top5, r.optional<double>("top5"));
  GPULAB_ASSIGN_OR_RETURN(p.agreement, r.number("agreement"));
  GPULAB_ASSIGN_OR_RETURN(p.logits_rel_l2, r.number("logits_rel_l2"));
  GPULAB_ASSIGN_OR_RETURN(p.quantized_flops_share, r.optional<double>("quantized_flops_share"));
  GPULAB_ASSIGN_OR_RETURN(p.gate_met, r.boolean("gate_met"));
  GPULAB_ASSIGN_OR_RETURN(const json* fallback, r.optional_object("fallback"));
  if (fallback) {
    const JsonReader f = r.child(*fallback, "fallback");
    GPULAB_ASSIGN_OR_RETURN(p.fallback_agreement, f.number("agreement"));
    GPULAB_ASSIGN_OR_RETURN(p.fallback_top1, f.optional<double>("top1"));
    GPULAB_ASSIGN_OR_RETURN(p.fallback_flops_share, f.optional<double>("fallback_flops_share"));
    GPULAB_ASSIGN_OR_RETURN(const json* layers, f.array("layers"));
    for (const json& l : *layers) {
      if (!l.is_string()) return f.bad("layers", "a layer name is not a string");
      p.fallback_layers.push_back(l.get<std::string>());
    }
  }
  GPULAB_ASSIGN_OR_RETURN(const json* per_layer, r.optional_object("per_layer"));
  if (per_layer) {
    const JsonReader pl = r.child(*per_layer, "per_layer");
    GPULAB_ASSIGN_OR_RETURN(p.per_layer_images, pl.integer("images"));
    GPULAB_ASSIGN_OR_RETURN(const json* layers, pl.array("layers"));
    for (size_t i = 0; i < layers->size(); ++i) {
      const JsonReader l = JsonReader{(*layers)[i], fmt::format("{}.layers[{}]", pl.where, i)};
      if (!l.doc.is_object()) return l.bad("", "not an object");
      AccuracyLayer layer;
      GPULAB_ASSIGN_OR_RETURN(layer.name, l.text("name"));
      GPULAB_ASSIGN_OR_RETURN(layer.flops_share, l.number("flops_share"));
      GPULAB_ASSIGN_OR_RETURN(layer.sqnr_db, l.optional<double>("sqnr_db"));
      GPULAB_ASSIGN_OR_RETURN(layer.alone_agreement, l.number("alone_agreement"));
      GPULAB_ASSIGN_OR_RETURN(layer.alone_logits_sqnr_db, l.optional<double>("alone_logits_sqnr_db"));
      p.layers.push_back(std::move(layer));
    }
  }
  return p;
}

// ---- Recognising a document ------------------------------------------------------------------------

bool looks_like_doctor(const json& doc) {
  if (!doc.is_array() || doc.empty()) return false;
  const json& f = doc.front();
  return f.is_object() && f.contains("check") && f.contains("status");
}

bool looks_like_bandwidth(const json& doc) {
  return doc.is_object() && doc.contains("device_name") && doc.contains("points");
}

bool looks_like_monitor(const json& doc) {
  return doc.is_object() && doc.contains("gpus") && doc["gpus"].is_array();
}

Result<Input> read_document(const json& doc) {
  if (doc.is_object() && doc.contains("schema")) {
    if (!doc["schema"].is_string()) return Status::invalid_file("its \"schema\" is not a string");
    const std::string schema = doc["schema"].get<std::string>();
    if (schema == "gpulab.sweep") {
      GPULAB_ASSIGN_OR_RETURN(auto s, sweep::sweep_from_json(doc));
      return Input{.kind = InputKind::kSweep, .data = std::move(s)};
    }
    if (schema == "gpulab.bench") {
      GPULAB_ASSIGN_OR_RETURN(auto b, measure::bench_from_json(doc));
      return Input{.kind = InputKind::kBench, .data = std::move(b)};
    }
    if (schema == "gpulab.pipeline") {
      GPULAB_ASSIGN_OR_RETURN(auto p, pipeline_from_json(doc));
      return Input{.kind = InputKind::kPipeline, .data = std::move(p)};
    }
    if (schema == "gpulab.accuracy") {
      GPULAB_ASSIGN_OR_RETURN(auto a, accuracy_from_json(doc));
      return Input{.kind = InputKind::kAccuracy, .data = std::move(a)};
    }
    return Status::invalid_file(fmt::format(
        "schema \"{}\" is not one gpulab report reads ({}; and doctor, bandwidth and monitor output)", schema,
        kKnownSchemas));
  }
  if (looks_like_doctor(doc)) {
    GPULAB_ASSIGN_OR_RETURN(auto f, doctor::findings_from_json(doc));
    return Input{.kind = InputKind::kDoctor, .data = std::move(f)};
  }
  if (looks_like_bandwidth(doc)) {
    GPULAB_ASSIGN_OR_RETURN(auto b, measure::bandwidth_from_json(doc));
    return Input{.kind = InputKind::kBandwidth, .data = std::move(b)};
  }
  return Status::invalid_file(
      fmt::format("not a gpulab result: no \"schema\" field ({}), and not the shape of doctor --json, "
                  "bandwidth --json or monitor --json",
                  kKnownSchemas));
}

bool looks_like_monitor_csv(std::string_view first_line) {
  const auto cells = split_csv(first_line);
  if (!cells || cells->size() < 2) return false;
  for (const std::string& c : *cells) {
    if (!telemetry::find_field(header_key(c))) return false;
  }
  return true;
}

Result<Input> recognise(std::string_view bytes) {
  const std::string_view text = trim(bytes);
  if (text.empty()) return Status::invalid_file("the file is empty. Give the output of a gpulab command");
  if (text.front() == '{' || text.front() == '[') {
    std::string error;
    if (auto doc = parse_json(text, error)) {
      if (looks_like_monitor(*doc)) {
        GPULAB_ASSIGN_OR_RETURN(auto log, monitor_from_json_lines(text));
        return Input{.kind = InputKind::kMonitor, .data = std::move(log)};
      }
      return read_document(*doc);
    }
    // Several documents, one per line: monitor --json.
    const std::string_view first_line = text.substr(0, text.find('\n'));
    std::string line_error;
    if (first_line.size() < text.size()) {
      if (auto first = parse_json(first_line, line_error); first && looks_like_monitor(*first)) {
        GPULAB_ASSIGN_OR_RETURN(auto log, monitor_from_json_lines(text));
        return Input{.kind = InputKind::kMonitor, .data = std::move(log)};
      }
    }
    return Status::invalid_file(fmt::format(
        "not valid JSON ({}). A truncated file? Write it again with the command that made it", error));
  }
  const std::string_view first_line = text.substr(0, text.find('\n'));
  if (looks_like_monitor_csv(first_line)) {
    GPULAB_ASSIGN_OR_RETURN(auto log, monitor_from_csv(text));
    return Input{.kind = InputKind::kMonitor, .data = std::move(log)};
  }
  return Status::invalid_file(
      "not a gpulab result: neither JSON nor a gpulab monitor --csv log (a header of telemetry field "
      "names). Give the output of gpulab sweep/bench/pipeline/accuracy/bandwidth/doctor --json or monitor");
}

}  // namespace

std::string_view input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kSweep: return "sweep";
    case InputKind::kBench: return "bench";
    case InputKind::kBandwidth: return "bandwidth";
    case InputKind::kDoctor: return "doctor";
    case InputKind::kMonitor: return "monitor";
    case InputKind::kPipeline: return "pipeline";
    case InputKind::kAccuracy: return "accuracy";
  }
  return "?";
}

Result<MonitorLog> monitor_from_json_lines(std::string_view text) {
  MonitorLog log{.format = "json"};
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    std::string error;
    auto doc = parse_json(line, error);
    if (!doc) {
      // monitor stopped mid-line: the last line may be cut short.
      if (trim(text.substr(std::min(start, text.size()))).empty() && !log.readings.empty()) {
        log.notes.push_back(
            fmt::format("line {} is incomplete (monitor stopped while writing it): dropped", line_no));
        break;
      }
      return Status::invalid_file(fmt::format("monitor log line {}: not valid JSON ({})", line_no, error));
    }
    if (!looks_like_monitor(*doc)) {
      return Status::invalid_file(
          fmt::format("monitor log line {}: not a {{\"gpus\": [...]}} reading", line_no));
    }
    const json& gpus = (*doc)["gpus"];
    for (size_t g = 0; g < gpus.size(); ++g) {
      GPULAB_ASSIGN_OR_RETURN(
          MonitorReading r,
          monitor_gpu_from_json(gpus[g], fmt::format("monitor log line {}: gpus[{}]", line_no, g)));
      for (const auto& [key, value] : gpus[g].items()) {
        if (key != "processes" && std::find(log.fields.begin(), log.fields.end(), key) == log.fields.end())
          log.fields.push_back(key);
      }
      log.readings.push_back(std::move(r));
    }
  }
  if (log.readings.empty()) return Status::invalid_file("monitor log: no reading");
  set_time(log);
  return log;
}

Result<MonitorLog> monitor_from_csv(std::string_view text) {
  MonitorLog log{.format = "csv"};
  size_t line_no = 0, start = 0;
  std::vector<std::string> keys;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const auto cells = split_csv(line);
    const bool last = trim(text.substr(std::min(start, text.size()))).empty();
    if (keys.empty()) {
      if (!cells) return Status::invalid_file("monitor CSV: the header has an unterminated quote");
      for (const std::string& c : *cells) {
        const std::string_view key = header_key(c);
        if (!telemetry::find_field(key)) {
          return Status::invalid_file(fmt::format("monitor CSV header: '{}' is not a telemetry field", key));
        }
        keys.emplace_back(key);
      }
      log.fields = keys;
      continue;
    }
    if (!cells || cells->size() != keys.size()) {
      if (last && !log.readings.empty()) {
        log.notes.push_back(
            fmt::format("line {} is incomplete (monitor stopped while writing it): dropped", line_no));
        break;
      }
      return Status::invalid_file(fmt::format("monitor CSV line {}: {} cells where the header has {}",
                                              line_no, cells ? cells->size() : 0, keys.size()));
    }
    MonitorReading r;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (is_text_field(keys[i])) {
        if ((*cells)[i] != "N/A") set_text(r, keys[i], (*cells)[i]);
        continue;
      }
      const auto v = cell_number((*cells)[i]);
      if (!v && trim((*cells)[i]) != "N/A") {
        return Status::invalid_file(
            fmt::format("monitor CSV line {}: {} '{}' is not a number", line_no, keys[i], (*cells)[i]));
      }
      if (v) r.values[keys[i]] = *v;
      // Only a value int64 holds converts (a cast of 1e300 is undefined behaviour).
      if (v && keys[i] == "index" && std::fabs(*v) < 9.0e18) r.index = static_cast<int64_t>(*v);
    }
    log.readings.push_back(std::move(r));
  }
  if (log.readings.empty()) return Status::invalid_file("monitor CSV: a header but no reading");
  set_time(log);
  return log;
}

Result<PipelineReport> pipeline_from_json(const json& doc) {
  if (!doc.is_object()) return Status::invalid_file("not a JSON object");
  GPULAB_TRY(check_schema(doc, "gpulab.pipeline", 1));
  const JsonReader r{doc, "pipeline"};
  PipelineReport p;
  GPULAB_ASSIGN_OR_RETURN(p.model, r.text("model"));
  GPULAB_ASSIGN_OR_RETURN(p.backend, text_or_empty(r, "backend"));
  GPULAB_ASSIGN_OR_RETURN(p.preprocess, text_or_empty(r, "preprocess"));
  GPULAB_ASSIGN_OR_RETURN(p.decoder, text_or_empty(r, "decoder"));
  GPULAB_ASSIGN_OR_RETURN(const json* options, r.object("options"));
  const JsonReader o = r.child(*options, "options");
  GPULAB_ASSIGN_OR_RETURN(p.batch, o.integer("batch"));
  GPULAB_ASSIGN_OR_RETURN(p.decode_threads, o.integer("decode_threads"));
  GPULAB_ASSIGN_OR_RETURN(p.queue_depth, o.integer("queue_depth"));
  for (const auto& [key, field] : {std::pair{"files", &p.files},
                                   {"passes", &p.passes},
                                   {"images", &p.images},
                                   {"failed_images", &p.failed_images}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.integer(key));
  }
  GPULAB_ASSIGN_OR_RETURN(p.wall_s, r.number("wall_s"));
  GPULAB_ASSIGN_OR_RETURN(p.throughput_ips, r.number("throughput_ips"));
  for (const auto& [key, field] : {std::pair{"warm_throughput_ips", &p.warm_throughput_ips},
                                   {"compute_only_ips", &p.compute_only_ips},
                                   {"end_to_end_vs_compute", &p.end_to_end_vs_compute},
                                   {"h2d_gb_s", &p.h2d_gb_s},
                                   {"gpu_busy_share", &p.gpu_busy_share}}) {
    GPULAB_ASSIGN_OR_RETURN(*field, r.optional<double>(key));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* split, r.optional_object("gpu_split"));
  if (split) {
    const JsonReader g = r.child(*split, "gpu_split");
    PipelineReport::GpuSplit gs;
    for (const auto& [key, field] : {std::pair{"preprocess_s", &gs.preprocess_s},
                                     {"model_s", &gs.model_s},
                                     {"output_s", &gs.output_s}}) {
      GPULAB_ASSIGN_OR_RETURN(*field, g.number(key));
    }
    for (const auto& [key, field] : {std::pair{"host_submit_s", &gs.host_submit_s},
                                     {"host_enqueue_s", &gs.host_enqueue_s},
                                     {"host_wait_s", &gs.host_wait_s}}) {
      GPULAB_ASSIGN_OR_RETURN(*field, g.optional<double>(key));
    }
    p.gpu_split = gs;
  }
  GPULAB_ASSIGN_OR_RETURN(p.compute_only_source, text_or_empty(r, "compute_only_source"));
  GPULAB_ASSIGN_OR_RETURN(const json* stages, r.array("stages"));
  if (stages->empty()) return r.bad("stages", "empty");
  for (size_t i = 0; i < stages->size(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(PipelineStage s,
                            stage_from_json(r.child((*stages)[i], fmt::format("stages[{}]", i))));
    p.stages.push_back(std::move(s));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* limiting, r.object("limiting_stage"));
  const JsonReader l = r.child(*limiting, "limiting_stage");
  GPULAB_ASSIGN_OR_RETURN(p.limiting_stage, l.text("name"));
  GPULAB_ASSIGN_OR_RETURN(p.limiting_capacity_ips, l.number("capacity_ips"));
  GPULAB_ASSIGN_OR_RETURN(p.next_stage, text_or_empty(l, "next_name"));
  GPULAB_ASSIGN_OR_RETURN(p.margin, l.optional<double>("margin"));
  GPULAB_ASSIGN_OR_RETURN(const json* memory, r.optional_object("memory"));
  if (memory) {
    const JsonReader m = r.child(*memory, "memory");
    GPULAB_ASSIGN_OR_RETURN(p.rss_peak_bytes, m.optional<int64_t>("rss_peak_bytes"));
    GPULAB_ASSIGN_OR_RETURN(p.rss_growth_fraction, m.optional<double>("rss_growth_fraction"));
  }
  GPULAB_TRY(read_environment(r, p.gpulab_version, p.gpulab_commit, p.command_line));
  GPULAB_ASSIGN_OR_RETURN(const json* env, r.optional_object("environment"));
  if (env) {
    GPULAB_ASSIGN_OR_RETURN(p.hardware_threads,
                            r.child(*env, "environment").optional<int64_t>("hardware_threads"));
  }
  return p;
}

Result<AccuracyReport> accuracy_from_json(const json& doc) {
  if (!doc.is_object()) return Status::invalid_file("not a JSON object");
  GPULAB_TRY(check_schema(doc, "gpulab.accuracy", 1));
  const JsonReader r{doc, "accuracy"};
  AccuracyReport a;
  GPULAB_ASSIGN_OR_RETURN(a.model, r.text("model"));
  GPULAB_ASSIGN_OR_RETURN(a.dataset, text_or_empty(r, "dataset"));
  GPULAB_ASSIGN_OR_RETURN(a.emulated, text_or_empty(r, "emulated"));
  GPULAB_ASSIGN_OR_RETURN(a.images, r.integer("images"));
  GPULAB_ASSIGN_OR_RETURN(a.labelled, r.integer("labelled"));
  GPULAB_ASSIGN_OR_RETURN(a.gate, r.number("gate"));
  GPULAB_ASSIGN_OR_RETURN(const json* fp32, r.optional_object("fp32"));
  if (fp32) {
    const JsonReader f = r.child(*fp32, "fp32");
    GPULAB_ASSIGN_OR_RETURN(a.fp32_top1, f.optional<double>("top1"));
    GPULAB_ASSIGN_OR_RETURN(a.fp32_top5, f.optional<double>("top5"));
  }
  GPULAB_ASSIGN_OR_RETURN(const json* results, r.array("results"));
  for (size_t i = 0; i < results->size(); ++i) {
    GPULAB_ASSIGN_OR_RETURN(AccuracyPrecision p, accuracy_precision_from_json(
                                                     r.child((*results)[i], fmt::format("results[{}]", i))));
    a.results.push_back(std::move(p));
  }
  GPULAB_TRY(read_environment(r, a.gpulab_version, a.gpulab_commit, a.command_line));
  return a;
}

Result<Input> parse_input(std::string_view source, std::string_view bytes) {
  auto input = recognise(bytes);
  if (!input.is_ok()) return input.status().with_context(fmt::format("'{}'", source));
  input->source = std::string(source);
  return input;
}

Result<Input> read_input(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(const std::string text, read_file_text(path));
  return parse_input(path.string(), text);
}

}  // namespace gpulab::report
