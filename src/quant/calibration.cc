#include "quant/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/elapsed.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "core/quant.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "plan/interpret.h"
#include "plan/lower.h"
#include "plan/plan.h"

namespace gpulab {

namespace fs = std::filesystem;

Result<std::string> model_file_hash(const fs::path& onnx_path) {
  GPULAB_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_file_bytes(onnx_path));
  return fmt::format("{:016x}", fnv1a64(bytes));
}

Result<std::vector<fs::path>> calibration_images(const fs::path& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    return Status::not_found(fmt::format(
        "calibration data '{}': no such folder. Give --calibration-data a folder of images like the model's "
        "inputs (a few hundred photos).",
        folder.string()));
  if (fs::exists(folder / "labels.tsv", ec)) {
    GPULAB_ASSIGN_OR_RETURN(const std::vector<LabelledImage> items, load_labelled_folder(folder));
    std::vector<fs::path> out;
    for (const auto& item : items) out.push_back(item.path);
    if (out.empty())
      return Status::not_found(
          fmt::format("calibration data '{}': its labels.tsv lists no images. Give a "
                      "folder of images like the model's inputs.",
                      folder.string()));
    return out;
  }
  const std::string arg = folder.string();
  auto listed = list_images(std::span<const std::string>(&arg, 1));
  if (!listed.is_ok()) return listed.status().with_context("calibration data");
  return listed;
}

int thread_count(int requested) {
  return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<int64_t> spread_subset(int64_t total, int64_t count) {
  std::vector<int64_t> out;
  if (total <= 0 || count <= 0) return out;
  count = std::min(count, total);
  for (int64_t j = 0; j < count; ++j) out.push_back(j * total / count);
  return out;
}

Result<std::vector<float>> load_image_batch(std::span<const fs::path> images, const PreprocessSpec& spec) {
  const int64_t per_image = spec.image_numel();
  std::vector<float> batch(static_cast<size_t>(per_image) * images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    auto image = decode_image(images[i]);
    if (!image.is_ok()) return image.status().with_context("calibration image '" + images[i].string() + "'");
    GPULAB_TRY(preprocess(*image, spec, std::span<float>(batch).subspan(i * per_image, per_image)));
  }
  return batch;
}

Result<CalibrationStatistics> collect_statistics(const Graph& graph, std::span<const fs::path> images,
                                                 const PreprocessSpec& spec,
                                                 const StatisticsOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const int threads = thread_count(options.num_threads);
  // A plain NHWC input value (no space-to-depth), so that the image's statistics hold no padding.
  BuildOptions build{.precision = Precision::kFp32, .max_batch = 2 * threads};
  build.stem_space_to_depth = false;
  GPULAB_ASSIGN_OR_RETURN(const Plan plan, lower_graph(graph, build));
  if (plan.input_channels != 3 || plan.input_h != spec.output_size || plan.input_w != spec.output_size)
    return Status::invalid_argument(fmt::format(
        "calibration: the model takes [{}, {}, {}] images, the preprocessing makes [3, {}, {}]. Check the "
        "model's preprocess.* metadata.",
        plan.input_channels, plan.input_h, plan.input_w, spec.output_size, spec.output_size));
  CalibrationStatistics stats;
  for (const PlanValue& v : plan.values) stats.tensors[v.name];
  const int64_t total = static_cast<int64_t>(images.size());
  const int64_t per_batch = build.max_batch;
  std::vector<float> valid;
  for (int64_t first = 0; first < total; first += per_batch) {
    const int64_t count = std::min(per_batch, total - first);
    GPULAB_ASSIGN_OR_RETURN(
        const std::vector<float> input,
        load_image_batch(images.subspan(static_cast<size_t>(first), static_cast<size_t>(count)), spec));
    std::vector<std::vector<float>> values;
    InterpretOptions run{.values = &values, .num_threads = threads};
    GPULAB_TRY(interpret_plan(plan, input, count, run).status());
    for (size_t i = 0; i < plan.values.size(); ++i) {
      const PlanValue& v = plan.values[i];
      if (values[i].empty()) continue;
      MagnitudeHistogram& h = stats.tensors[v.name];
      if (v.c == v.c_valid) {
        h.add(values[i]);
        continue;
      }
      valid.clear();
      for (size_t p = 0; p < values[i].size(); p += static_cast<size_t>(v.c))
        valid.insert(valid.end(), values[i].begin() + static_cast<std::ptrdiff_t>(p),
                     values[i].begin() + static_cast<std::ptrdiff_t>(p + v.c_valid));
      h.add(valid);
    }
    stats.images += count;
    if (options.progress) options.progress(stats.images, total);
  }
  stats.seconds = seconds_since(start);
  return stats;
}

CalibrationCache calibrate(const CalibrationStatistics& statistics, Calibrator calibrator,
                           double percentile) {
  CalibrationCache cache;
  cache.calibrator = calibrator;
  cache.percentile = percentile;
  cache.images = statistics.images;
  for (const auto& [name, histogram] : statistics.tensors)
    if (histogram.count() > 0) cache.amax[name] = calibrated_amax(histogram, calibrator, percentile);
  return cache;
}

Status save_calibration_cache(const CalibrationCache& cache, const fs::path& path) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, amax] : cache.amax)
    tensors[name] = {{"amax", amax},
                     {"int8_scale", symmetric_scale(amax, kInt8QuantMax)},
                     {"fp8_scale", symmetric_scale(amax, kFp8E4M3Max)}};
  nlohmann::json corrections = nlohmann::json::object();
  for (const auto& [precision, layers] : cache.bias_correction)
    for (const auto& [layer, values] : layers) corrections[precision][layer] = values;
  const nlohmann::json j = {{"schema", "gpulab.calibration"},
                            {"schema_version", 2},
                            {"model", cache.model},
                            {"model_fnv1a64", cache.model_hash},
                            {"calibrator", std::string(calibrator_name(cache.calibrator))},
                            {"percentile", cache.percentile},
                            {"images", cache.images},
                            {"tensors", std::move(tensors)},
                            {"bias_correction", std::move(corrections)}};
  return write_file_atomic(path, j.dump(1) + "\n");
}

Result<CalibrationCache> parse_calibration_cache(std::string_view text, const fs::path& path) {
  // Every field through JsonReader: a cache is outside input (a user may edit or truncate it), and
  // nlohmann's get<int>() of a float beyond int's range is undefined behaviour, not an error.
  const auto invalid = [&](std::string_view what) {
    return Status::invalid_file(
        fmt::format("calibration cache '{}': {}. Delete it to calibrate again.", path.string(), what));
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid("not JSON");
  const JsonReader r{j, ""};
  const auto schema = r.text("schema");
  const auto version = r.integer("schema_version");
  if (!schema.is_ok() || *schema != "gpulab.calibration" || !version.is_ok() ||
      (*version != 1 && *version != 2))
    return invalid("not a gpulab.calibration file of schema version 1 or 2");
  CalibrationCache cache;
  const auto read = [&]() -> Status {
    GPULAB_ASSIGN_OR_RETURN(const std::optional<std::string> model, r.optional<std::string>("model"));
    cache.model = model.value_or("");
    GPULAB_ASSIGN_OR_RETURN(cache.model_hash, r.text("model_fnv1a64"));
    GPULAB_ASSIGN_OR_RETURN(const std::string calibrator, r.text("calibrator"));
    GPULAB_ASSIGN_OR_RETURN(cache.calibrator, parse_calibrator(calibrator));
    GPULAB_ASSIGN_OR_RETURN(cache.percentile, r.number("percentile"));
    GPULAB_ASSIGN_OR_RETURN(cache.images, r.integer("images"));
    GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* tensors, r.object("tensors"));
    for (const auto& [name, t] : tensors->items()) {
      // Read as a double: a number beyond float's range must be refused, not converted.
      GPULAB_ASSIGN_OR_RETURN(const double amax, r.child(t, "tensors." + name).number("amax"));
      if (!(amax >= 0.0) || !(amax <= std::numeric_limits<float>::max()))
        return Status::invalid_file(fmt::format("tensor '{}' has amax {}", name, amax));
      cache.amax[name] = static_cast<float>(amax);
    }
    GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* corrections, r.optional_object("bias_correction"));
    if (!corrections) return Status::ok();
    for (const auto& [precision, layers] : corrections->items()) {
      const JsonReader by_precision = r.child(*corrections, "bias_correction");
      GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* per_layer, by_precision.object(precision.c_str()));
      for (const auto& [layer, values] : per_layer->items()) {
        const std::string where = "bias_correction." + precision + "." + layer;
        if (!values.is_array()) return Status::invalid_file(where + ": not an array of numbers");
        std::vector<float>& out = cache.bias_correction[precision][layer];
        for (const auto& v : values) {
          // A correction is a shift of a layer's output mean: finite and within float's range.
          if (!v.is_number() || !(std::abs(v.get<double>()) <= std::numeric_limits<float>::max()))
            return Status::invalid_file(where + ": not an array of finite numbers");
          out.push_back(static_cast<float>(v.get<double>()));
        }
      }
    }
    return Status::ok();
  };
  if (const Status s = read(); !s.is_ok()) return invalid(s.message());
  return cache;
}

Result<CalibrationCache> load_calibration_cache(const fs::path& path, const std::string& model_hash) {
  GPULAB_ASSIGN_OR_RETURN(const std::string text, read_file_text(path));
  GPULAB_ASSIGN_OR_RETURN(CalibrationCache cache, parse_calibration_cache(text, path));
  if (cache.model_hash != model_hash)
    return Status::invalid_argument(fmt::format(
        "calibration cache '{}' was made for another model ('{}', FNV-1a 64 {}; this model's is {}). Give "
        "--calibration-cache a new file to calibrate this model, or the cache made for it.",
        path.string(), cache.model, cache.model_hash, model_hash));
  return cache;
}

}  // namespace gpulab
