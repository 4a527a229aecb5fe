// decode_bench: the CPU path's work per image, on one thread, files already in RAM:
// decode_image_into (JPEG with or without DCT scaling) + resize_crop_into + normalize_into, the
// code the pipeline's decode threads run for `--preprocess cpu`. Prints JSON:
//   {"images", "passes", "dct_scaling", "preset", "cpu_s", "wall_s", "per_core_ips",
//    "decode_cpu_s", "preprocess_cpu_s", "dct_scaled_images"}
// per_core_ips = images / thread CPU seconds (robust to other work on a shared machine).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "image/preprocess.h"
#include "pipeline/pipeline.h"

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpulab;
  CLI::App app{"The pipeline's CPU decode + preprocess per image, one thread"};
  std::vector<std::string> inputs;
  int passes = 1;
  bool dct_scaling = true;
  std::string preset = "torchvision";
  int min_side = -1;
  app.add_option("inputs", inputs, "Image files or folders")->required();
  app.add_option("--passes", passes, "Passes over the files (after one warm-up pass)");
  app.add_flag("!--no-dct-scaling", dct_scaling, "Decode JPEGs at full size");
  app.add_option("--preset", preset, "torchvision or tf-slim");
  app.add_option("--min-side", min_side, "DCT scaling target (default: what the preset needs)");
  CLI11_PARSE(app, argc, argv);

  auto files = list_images(inputs);
  auto spec = preprocess_from_name(preset);
  if (!files.is_ok() || !spec.is_ok()) {
    std::fprintf(stderr, "decode_bench: %s\n",
                 (files.is_ok() ? spec.status() : files.status()).to_string().c_str());
    return 2;
  }
  std::vector<std::vector<std::byte>> bytes;
  for (const auto& f : *files) {
    auto b = read_file_bytes(f);
    if (!b.is_ok()) {
      std::fprintf(stderr, "decode_bench: %s\n", b.status().to_string().c_str());
      return 3;
    }
    bytes.push_back(std::move(b).value());
  }
  const DecodeOptions options{.min_shorter_side = !dct_scaling    ? 0
                                                  : min_side >= 0 ? min_side
                                                                  : min_decode_side(*spec)};
  Image image;
  ResizeScratch scratch;
  const size_t s = static_cast<size_t>(spec->output_size);
  std::vector<uint8_t> crop(s * s * 3);
  std::vector<float> out(static_cast<size_t>(spec->image_numel()));
  double decode_cpu_s = 0, preprocess_cpu_s = 0, cpu_s = 0, wall_s = 0;
  int64_t images = 0, scaled = 0;
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 warms up
    const double c0 = thread_cpu_s();
    const auto w0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < bytes.size(); ++i) {
      const double t0 = thread_cpu_s();
      auto info = decode_image_into(bytes[i], (*files)[i].string(), options, &image);
      const double t1 = thread_cpu_s();
      Status st = info.status();
      if (st.is_ok())
        st = resize_crop_into(image, info->source_width, info->source_height, *spec, crop, &scratch);
      if (st.is_ok()) st = normalize_into(crop, *spec, out);
      const double t2 = thread_cpu_s();
      if (!st.is_ok()) {
        std::fprintf(stderr, "decode_bench: %s\n", st.to_string().c_str());
        return 4;
      }
      if (pass == 0) continue;
      decode_cpu_s += t1 - t0;
      preprocess_cpu_s += t2 - t1;
      ++images;
      if (info->scale_num != info->scale_denom) ++scaled;
    }
    if (pass == 0) continue;
    cpu_s += thread_cpu_s() - c0;
    wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  const nlohmann::json j = {{"images", images},
                            {"passes", passes},
                            {"dct_scaling", dct_scaling},
                            {"preset", preset},
                            {"cpu_s", cpu_s},
                            {"wall_s", wall_s},
                            {"per_core_ips", cpu_s > 0 ? images / cpu_s : 0.0},
                            {"decode_cpu_s", decode_cpu_s},
                            {"preprocess_cpu_s", preprocess_cpu_s},
                            {"dct_scaled_images", scaled}};
  fmt::print("{}\n", j.dump(2));
  return 0;
}
