#include "image/preprocess.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include <fmt/format.h>

namespace gpulab {
namespace {

// ---- PIL-compatible antialiased bilinear resampling -------------------------------------------
//
// For each output sample, weights of a triangle filter over the input samples it covers; the
// filter is stretched by the downscale factor (support = max(in/out, 1)), which is what
// antialiases. Weights are normalized, then turned into 22-bit fixed point (PIL's PRECISION_BITS
// for 8-bit images: 32 - 8 integer bits - 2 guard bits) and each pass rounds and clamps to uint8.
constexpr int kPrecisionBits = 22;

// Both passes of resize_bilinear_pil (arguments already checked); may throw std::bad_alloc.
Image resize_pixels(const Image& image, int width, int height);

struct AxisWeights {
  std::vector<int> first;      // first input index per output index
  std::vector<int> count;      // number of input samples per output index
  std::vector<int32_t> coeff;  // count[i] weights per output index, stride `max_count`
  int max_count = 0;
};

AxisWeights compute_axis_weights(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // bilinear: support 1 at scale 1
  AxisWeights w;
  w.max_count = static_cast<int>(std::ceil(support)) * 2 + 1;
  w.first.resize(out_size);
  w.count.resize(out_size);
  w.coeff.assign(static_cast<size_t>(out_size) * w.max_count, 0);
  std::vector<double> k(w.max_count);
  const double inv_filter_scale = 1.0 / filter_scale;
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    // Truncation toward zero (a C cast), then clamping, as PIL does.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::min(hi - lo, w.max_count);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      const double t = std::abs((lo + i - center + 0.5) * inv_filter_scale);
      k[i] = t < 1.0 ? 1.0 - t : 0.0;
      total += k[i];
    }
    for (int i = 0; i < n; ++i) {
      const double v = total != 0.0 ? k[i] / total : 0.0;
      const double fixed = v * (1 << kPrecisionBits);
      w.coeff[static_cast<size_t>(o) * w.max_count + i] =
          static_cast<int32_t>(v < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    w.first[o] = lo;
    w.count[o] = n;
  }
  return w;
}

uint8_t clamp_fixed(int32_t acc) {
  if (acc <= 0) return 0;
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

// Resamples along x (each row) from `in` (in_w x h) to out_w columns.
std::vector<uint8_t> resample_rows(const uint8_t* in, int in_w, int h, int out_w) {
  const AxisWeights w = compute_axis_weights(in_w, out_w);
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * h * 3);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * in_w * 3;
    uint8_t* dst = out.data() + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const int32_t* k = &w.coeff[static_cast<size_t>(x) * w.max_count];
      const uint8_t* src = row + static_cast<size_t>(w.first[x]) * 3;
      int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int i = 0; i < w.count[x]; ++i) {
        for (int c = 0; c < 3; ++c) acc[c] += src[i * 3 + c] * k[i];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = clamp_fixed(acc[c]);
    }
  }
  return out;
}

// Resamples along y (each column) from `in` (w x in_h) to out_h rows.
std::vector<uint8_t> resample_columns(const uint8_t* in, int w_px, int in_h, int out_h) {
  const AxisWeights w = compute_axis_weights(in_h, out_h);
  const size_t row_bytes = static_cast<size_t>(w_px) * 3;
  std::vector<uint8_t> out(row_bytes * out_h);
  std::vector<int32_t> acc(row_bytes);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &w.coeff[static_cast<size_t>(y) * w.max_count];
    for (int i = 0; i < w.count[y]; ++i) {
      const uint8_t* src = in + static_cast<size_t>(w.first[y] + i) * row_bytes;
      for (size_t j = 0; j < row_bytes; ++j) acc[j] += src[j] * k[i];
    }
    uint8_t* dst = out.data() + static_cast<size_t>(y) * row_bytes;
    for (size_t j = 0; j < row_bytes; ++j) dst[j] = clamp_fixed(acc[j]);
  }
  return out;
}

// ---- geometry ---------------------------------------------------------------------------------

// torchvision CenterCrop offset: int(round((size - crop) / 2.0)) with round-half-to-even; when the
// crop is larger than the image, torchvision pads (crop - size) // 2 on the leading side.
int center_crop_offset(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  const int diff = size - crop;
  const int half = diff / 2;
  if (diff % 2 == 0) return half;
  return half % 2 == 0 ? half : half + 1;  // x.5 rounds to the even neighbour
}

// torchvision Resize(int): shorter side -> `shorter`, longer side int(shorter * long / short).
void resized_size(int64_t width, int64_t height, int64_t shorter, int64_t* out_w, int64_t* out_h) {
  if (width <= height) {
    *out_w = shorter;
    *out_h = shorter * height / width;
  } else {
    *out_h = shorter;
    *out_w = shorter * width / height;
  }
}

// tf.image.central_crop start offset along one axis (computed in double, as TF does).
int central_crop_offset(int size, float fraction) {
  const double side = size;
  return static_cast<int>((side - side * static_cast<double>(fraction)) / 2.0);
}

struct TfAxis {
  std::vector<int> lo, hi;
  std::vector<float> lerp;
};

// TF1 resize_bilinear sampling along one axis (align_corners=false, half_pixel_centers=false),
// in float32 exactly as TF computes it: scale = in / out, src = dst * scale.
TfAxis tf_axis(int in_size, int out_size) {
  TfAxis a;
  a.lo.resize(out_size), a.hi.resize(out_size), a.lerp.resize(out_size);
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  for (int o = 0; o < out_size; ++o) {
    const float src = static_cast<float>(o) * scale;
    const float floor_src = std::floor(src);
    a.lo[o] = std::max(static_cast<int>(floor_src), 0);
    a.hi[o] = std::min(a.lo[o] + 1, in_size - 1);
    a.lerp[o] = src - floor_src;
  }
  return a;
}

// Calls emit(y, x, c, value) for each output pixel of the TF-Slim crop + resize, value in 0..255.
template <typename Emit>
void tf_slim_resize(const Image& image, const PreprocessSpec& spec, Emit&& emit) {
  const int off_y = central_crop_offset(image.height, spec.central_fraction);
  const int off_x = central_crop_offset(image.width, spec.central_fraction);
  const int crop_h = image.height - 2 * off_y;
  const int crop_w = image.width - 2 * off_x;
  const int s = spec.output_size;
  const TfAxis ay = tf_axis(crop_h, s);
  const TfAxis ax = tf_axis(crop_w, s);
  auto px = [&](int y, int x, int c) { return static_cast<float>(image.at(off_x + x, off_y + y, c)); };
  for (int y = 0; y < s; ++y) {
    const float yl = ay.lerp[y];
    for (int x = 0; x < s; ++x) {
      const float xl = ax.lerp[x];
      for (int c = 0; c < 3; ++c) {
        const float tl = px(ay.lo[y], ax.lo[x], c), tr = px(ay.lo[y], ax.hi[x], c);
        const float bl = px(ay.hi[y], ax.lo[x], c), br = px(ay.hi[y], ax.hi[x], c);
        const float top = tl + (tr - tl) * xl;
        const float bottom = bl + (br - bl) * xl;
        emit(y, x, c, top + (bottom - top) * yl);
      }
    }
  }
}

// torchvision steps 1-2: the resized image (uint8) and the crop offsets into it.
struct TorchvisionResized {
  Image resized;
  int off_x = 0, off_y = 0;
};

Result<TorchvisionResized> torchvision_resize(const Image& image, const PreprocessSpec& spec) {
  int64_t w = 0, h = 0;
  resized_size(image.width, image.height, spec.resize_shorter, &w, &h);
  if (w > kMaxImageSide || h > kMaxImageSide || w * h > kMaxImagePixels) {
    return Status::invalid_argument(
        fmt::format("preprocess: resizing the {}x{} image's shorter side to {} gives {}x{}, beyond {} pixels "
                    "per side or {} "
                    "in total. The image's aspect ratio is too extreme for this preset.",
                    image.width, image.height, spec.resize_shorter, w, h, kMaxImageSide, kMaxImagePixels));
  }
  GPULAB_ASSIGN_OR_RETURN(Image resized,
                          resize_bilinear_pil(image, static_cast<int>(w), static_cast<int>(h)));
  TorchvisionResized r{std::move(resized), 0, 0};
  r.off_x = center_crop_offset(static_cast<int>(w), spec.output_size);
  r.off_y = center_crop_offset(static_cast<int>(h), spec.output_size);
  return r;
}

Status check_input(const Image& image, const PreprocessSpec& spec, std::string_view where) {
  GPULAB_TRY(spec.validate());
  if (image.channels != 3 || image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return Status::invalid_argument(fmt::format(
        "{}: the image is not 8-bit RGB HWC ({}x{}, {} channels, {} bytes). Decode it with decode_image().",
        where, image.width, image.height, image.channels, image.rgb.size()));
  }
  return Status::ok();
}

// ---- metadata parsing ---------------------------------------------------------------------------

Result<float> parse_float(std::string_view text, std::string_view key) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  float v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    return Status::invalid_model(
        fmt::format("model metadata '{}': '{}' is not a number. Fix the model's "
                    "metadata_props.",
                    key, text));
  }
  return v;
}

Result<int> parse_int(std::string_view text, std::string_view key) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return Status::invalid_model(
        fmt::format("model metadata '{}': '{}' is not an integer. Fix the model's "
                    "metadata_props.",
                    key, text));
  }
  return v;
}

Result<std::array<float, 3>> parse_triple(const std::string& text, std::string_view key) {
  std::array<float, 3> out{};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t comma = text.find(',', start);
    const bool last = i == 2;
    if (last != (comma == std::string::npos)) {
      return Status::invalid_model(
          fmt::format("model metadata '{}': '{}' must be three comma-separated numbers "
                      "(R,G,B). Fix the model's metadata_props.",
                      key, text));
    }
    const std::string_view part =
        std::string_view(text).substr(start, last ? std::string::npos : comma - start);
    GPULAB_ASSIGN_OR_RETURN(out[i], parse_float(part, key));
    start = comma + 1;
  }
  return out;
}

bool consume(std::string_view& text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return false;
  text.remove_prefix(prefix.size());
  return true;
}

// "center_crop_<f>_then_resize_<n>" or "resize_<s>_then_center_crop_<n>".
Status parse_resize(const std::string& value, PreprocessSpec* spec) {
  constexpr std::string_view kKey = "preprocess.resize";
  std::string_view text = value;
  if (consume(text, "center_crop_")) {
    const size_t sep = text.find("_then_resize_");
    if (sep != std::string_view::npos) {
      spec->preset = PreprocessSpec::Preset::kTfSlim;
      GPULAB_ASSIGN_OR_RETURN(spec->central_fraction, parse_float(text.substr(0, sep), kKey));
      GPULAB_ASSIGN_OR_RETURN(spec->output_size, parse_int(text.substr(sep + 13), kKey));
      return Status::ok();
    }
  } else if (consume(text, "resize_")) {
    const size_t sep = text.find("_then_center_crop_");
    if (sep != std::string_view::npos) {
      spec->preset = PreprocessSpec::Preset::kTorchvision;
      GPULAB_ASSIGN_OR_RETURN(spec->resize_shorter, parse_int(text.substr(0, sep), kKey));
      GPULAB_ASSIGN_OR_RETURN(spec->output_size, parse_int(text.substr(sep + 18), kKey));
      return Status::ok();
    }
  }
  return Status::unsupported(fmt::format(
      "model metadata 'preprocess.resize': '{}' is not supported. Supported: "
      "'center_crop_<fraction>_then_resize_<size>' (TF-Slim) and 'resize_<shorter>_then_center_crop_<size>' "
      "(torchvision); or choose a preset explicitly.",
      value));
}

}  // namespace

PreprocessSpec PreprocessSpec::torchvision_imagenet() {
  PreprocessSpec s;
  s.preset = Preset::kTorchvision;
  s.output_size = 224;
  s.resize_shorter = 256;
  s.mean = {0.485f, 0.456f, 0.406f};
  s.std = {0.229f, 0.224f, 0.225f};
  return s;
}

PreprocessSpec PreprocessSpec::tf_slim_inception() {
  PreprocessSpec s;
  s.preset = Preset::kTfSlim;
  s.output_size = 224;
  s.central_fraction = 0.875f;
  s.mean = {0.5f, 0.5f, 0.5f};
  s.std = {0.5f, 0.5f, 0.5f};
  return s;
}

std::string PreprocessSpec::describe() const {
  const std::string norm =
      fmt::format("mean ({:.4g}, {:.4g}, {:.4g}) std ({:.4g}, {:.4g}, {:.4g}) of pixel/255", mean[0], mean[1],
                  mean[2], std[0], std[1], std[2]);
  if (preset == Preset::kTorchvision) {
    return fmt::format(
        "torchvision: resize shorter side to {} (PIL bilinear, antialiased), center crop {}x{}, {}",
        resize_shorter, output_size, output_size, norm);
  }
  return fmt::format("tf-slim: central crop {:.4g}, bilinear resize to {}x{} (TF1, no antialias), {}",
                     central_fraction, output_size, output_size, norm);
}

Status PreprocessSpec::validate() const {
  if (output_size <= 0 || output_size > 8192) {
    return Status::invalid_argument(
        fmt::format("preprocess: output size {} is out of range (1..8192).", output_size));
  }
  if (preset == Preset::kTorchvision && (resize_shorter <= 0 || resize_shorter > 65535)) {
    return Status::invalid_argument(
        fmt::format("preprocess: resize_shorter {} is out of range (1..65535).", resize_shorter));
  }
  if (preset == Preset::kTfSlim && !(central_fraction > 0.f && central_fraction <= 1.f)) {
    return Status::invalid_argument(
        fmt::format("preprocess: central fraction {} is out of range (0, 1].", central_fraction));
  }
  for (int c = 0; c < 3; ++c) {
    if (!(std[c] > 0.f) || !std::isfinite(std[c]) || !std::isfinite(mean[c])) {
      return Status::invalid_argument(
          fmt::format("preprocess: channel {} has mean {} std {}; std must be a "
                      "positive finite number.",
                      c, mean[c], std[c]));
    }
  }
  return Status::ok();
}

Result<PreprocessSpec> preprocess_from_name(std::string_view name) {
  if (name == "torchvision") return PreprocessSpec::torchvision_imagenet();
  if (name == "tf-slim" || name == "tf_slim" || name == "inception")
    return PreprocessSpec::tf_slim_inception();
  return Status::invalid_argument(
      fmt::format("preprocess preset '{}' is unknown. Use 'torchvision' or 'tf-slim'.", name));
}

Result<PreprocessSpec> preprocess_from_metadata(const std::map<std::string, std::string>& metadata_props) {
  const auto resize = metadata_props.find("preprocess.resize");
  if (resize == metadata_props.end()) {
    return Status::not_found(
        "model metadata: no 'preprocess.resize' entry, so the model does not say how to "
        "preprocess its input. Choose a preset explicitly (torchvision or tf-slim).");
  }
  PreprocessSpec spec;
  GPULAB_TRY(parse_resize(resize->second, &spec));
  float pixel_max = 255.f;
  if (auto it = metadata_props.find("preprocess.pixel_range"); it != metadata_props.end()) {
    if (it->second == "0-1") {
      pixel_max = 1.f;
    } else if (it->second != "0-255") {
      return Status::unsupported(
          fmt::format("model metadata 'preprocess.pixel_range': '{}' is not supported "
                      "('0-255' or '0-1').",
                      it->second));
    }
  }
  std::array<float, 3> mean{0.f, 0.f, 0.f};
  std::array<float, 3> std_dev{pixel_max, pixel_max, pixel_max};
  for (const auto& [key, value] : metadata_props) {
    if (!key.starts_with("preprocess.")) continue;
    if (key == "preprocess.mean") {
      GPULAB_ASSIGN_OR_RETURN(mean, parse_triple(value, key));
    } else if (key == "preprocess.std") {
      GPULAB_ASSIGN_OR_RETURN(std_dev, parse_triple(value, key));
    } else if (key == "preprocess.layout") {
      if (value != "RGB") {
        return Status::unsupported(
            fmt::format("model metadata 'preprocess.layout': '{}' is not supported (only "
                        "'RGB').",
                        value));
      }
    } else if (key == "preprocess.interpolation") {
      if (!value.starts_with("bilinear")) {
        return Status::unsupported(
            fmt::format("model metadata 'preprocess.interpolation': '{}' is not supported "
                        "(only bilinear).",
                        value));
      }
    } else if (key != "preprocess.resize" && key != "preprocess.pixel_range" && key != "preprocess.input") {
      return Status::unsupported(fmt::format(
          "model metadata: key '{}' is not understood (known: preprocess.resize, .mean, .std, .pixel_range, "
          ".layout, .interpolation, .input). Remove it or choose a preset explicitly.",
          key));
    }
  }
  // Stored in units of pixel/255.
  for (int c = 0; c < 3; ++c) {
    spec.mean[c] = mean[c] / pixel_max;
    spec.std[c] = std_dev[c] / pixel_max;
  }
  GPULAB_TRY(spec.validate());
  return spec;
}

Result<Image> resize_bilinear_pil(const Image& image, int width, int height) {
  if (width <= 0 || height <= 0 || image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return Status::invalid_argument(fmt::format("resize: cannot resize a {}x{} image ({} bytes) to {}x{}.",
                                                image.width, image.height, image.rgb.size(), width, height));
  }
  if (static_cast<int64_t>(width) * height > kMaxImagePixels) {
    return Status::invalid_argument(fmt::format("resize: {}x{} is more than {} pixels. Use a smaller size.",
                                                width, height, kMaxImagePixels));
  }
  try {
    return resize_pixels(image, width, height);
  } catch (const std::bad_alloc&) {
    return Status::out_of_memory(fmt::format("resize: cannot allocate buffers for {}x{} -> {}x{}.",
                                             image.width, image.height, width, height));
  }
}

namespace {

Image resize_pixels(const Image& image, int width, int height) {
  Image out;
  out.width = width;
  out.height = height;
  std::vector<uint8_t> pixels;
  const uint8_t* src = image.rgb.data();
  if (width != image.width) {  // horizontal pass first, as PIL does
    pixels = resample_rows(src, image.width, image.height, width);
    src = pixels.data();
  }
  if (height != image.height) {
    out.rgb = resample_columns(src, width, image.height, height);
  } else if (width != image.width) {
    out.rgb = std::move(pixels);
  } else {
    out.rgb = image.rgb;
  }
  return out;
}

}  // namespace

namespace {

// x = (p / 255 - mean) / std = p * scale + bias.
struct NormalizeCoefficients {
  std::array<float, 3> scale{}, bias{};
};

NormalizeCoefficients normalize_coefficients(const PreprocessSpec& spec) {
  NormalizeCoefficients k;
  for (int c = 0; c < 3; ++c) {
    k.scale[c] = static_cast<float>(1.0 / (255.0 * spec.std[c]));
    k.bias[c] = static_cast<float>(-static_cast<double>(spec.mean[c]) / spec.std[c]);
  }
  return k;
}

// resize_crop_into() for kTorchvision: PIL's two passes restricted to the crop window. Output
// column x of the resized image depends only on the input columns of its filter, output row y only
// on the horizontally resampled rows of its filter, so computing the window alone gives the same
// bytes. Where width or height is unchanged PIL skips that pass; the filter at scale 1 is the
// identity (one tap of weight 1), so running it changes nothing.
Status torchvision_resize_crop_window(const Image& image, int source_width, int source_height,
                                      const PreprocessSpec& spec, std::span<uint8_t> out,
                                      ResizeScratch* scratch) {
  GPULAB_ASSIGN_OR_RETURN(const CropGeometry g, crop_geometry(source_width, source_height, spec));
  const int64_t rw = g.resized_width, rh = g.resized_height;
  const int s = spec.output_size;
  const int off_x = g.crop_x, off_y = g.crop_y;
  const int x0 = std::max(off_x, 0), x1 = std::min<int>(off_x + s, static_cast<int>(rw));
  const int y0 = std::max(off_y, 0), y1 = std::min<int>(off_y + s, static_cast<int>(rh));
  if (x0 > off_x || y0 > off_y || x1 < off_x + s || y1 < off_y + s) std::fill(out.begin(), out.end(), 0);
  const size_t cols = static_cast<size_t>(std::max(x1 - x0, 0));
  const size_t row_bytes = cols * 3;
  auto out_row = [&](int y) {
    return out.data() + (static_cast<size_t>(y - off_y) * s + static_cast<size_t>(x0 - off_x)) * 3;
  };
  // The horizontal pass over input row r, window columns only. Skipped (a copy) where PIL skips
  // it: the width does not change.
  const bool resample_x = image.width != rw;
  const AxisWeights wx = resample_x ? compute_axis_weights(image.width, static_cast<int>(rw)) : AxisWeights{};
  auto horizontal_row = [&](int r, uint8_t* dst) {
    const uint8_t* in = image.rgb.data() + static_cast<size_t>(r) * image.width * 3;
    if (!resample_x) {
      std::memcpy(dst, in + static_cast<size_t>(x0) * 3, row_bytes);
      return;
    }
    for (int x = x0; x < x1; ++x) {
      const int32_t* k = &wx.coeff[static_cast<size_t>(x) * wx.max_count];
      const uint8_t* src = in + static_cast<size_t>(wx.first[x]) * 3;
      int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int i = 0; i < wx.count[x]; ++i) {
        for (int c = 0; c < 3; ++c) acc[c] += src[i * 3 + c] * k[i];
      }
      for (int c = 0; c < 3; ++c) dst[(x - x0) * 3 + c] = clamp_fixed(acc[c]);
    }
  };
  if (image.height == rh) {  // no vertical pass: the window's rows straight into the output
    for (int y = y0; y < y1; ++y) horizontal_row(y, out_row(y));
    return Status::ok();
  }
  const AxisWeights wy = compute_axis_weights(image.height, static_cast<int>(rh));
  int r0 = image.height, r1 = 0;  // input rows the window's output rows read
  for (int y = y0; y < y1; ++y) {
    r0 = std::min(r0, wy.first[y]);
    r1 = std::max(r1, wy.first[y] + wy.count[y]);
  }
  if (r0 >= r1) return Status::ok();
  scratch->rows.resize(static_cast<size_t>(r1 - r0) * row_bytes);
  for (int r = r0; r < r1; ++r)
    horizontal_row(r, scratch->rows.data() + static_cast<size_t>(r - r0) * row_bytes);
  std::vector<int32_t>& acc = scratch->acc;
  acc.resize(row_bytes);
  for (int y = y0; y < y1; ++y) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &wy.coeff[static_cast<size_t>(y) * wy.max_count];
    for (int i = 0; i < wy.count[y]; ++i) {
      const uint8_t* src = scratch->rows.data() + static_cast<size_t>(wy.first[y] + i - r0) * row_bytes;
      const int32_t weight = k[i];
      for (size_t j = 0; j < row_bytes; ++j) acc[j] += src[j] * weight;
    }
    uint8_t* dst = out_row(y);
    for (size_t j = 0; j < row_bytes; ++j) dst[j] = clamp_fixed(acc[j]);
  }
  return Status::ok();
}

}  // namespace

Result<CropGeometry> crop_geometry(int source_width, int source_height, const PreprocessSpec& spec) {
  if (spec.preset == PreprocessSpec::Preset::kTfSlim) {
    if (source_width <= 0 || source_height <= 0)
      return Status::invalid_argument(
          fmt::format("preprocess: image size {}x{} is not positive.", source_width, source_height));
    CropGeometry g;
    g.crop_x = central_crop_offset(source_width, spec.central_fraction);
    g.crop_y = central_crop_offset(source_height, spec.central_fraction);
    g.resized_width = source_width - 2 * g.crop_x;
    g.resized_height = source_height - 2 * g.crop_y;
    return g;
  }
  int64_t rw = 0, rh = 0;
  resized_size(source_width, source_height, spec.resize_shorter, &rw, &rh);
  if (source_width <= 0 || source_height <= 0 || rw > kMaxImageSide || rh > kMaxImageSide ||
      rw * rh > kMaxImagePixels) {
    return Status::invalid_argument(fmt::format(
        "preprocess: resizing the {}x{} image's shorter side to {} gives {}x{}, beyond {} pixels "
        "per side or {} in total. The image's aspect ratio is too extreme for this preset.",
        source_width, source_height, spec.resize_shorter, rw, rh, kMaxImageSide, kMaxImagePixels));
  }
  CropGeometry g;
  g.resized_width = static_cast<int>(rw);
  g.resized_height = static_cast<int>(rh);
  g.crop_x = center_crop_offset(g.resized_width, spec.output_size);
  g.crop_y = center_crop_offset(g.resized_height, spec.output_size);
  return g;
}

Status resize_crop_into(const Image& image, int source_width, int source_height, const PreprocessSpec& spec,
                        std::span<uint8_t> out_hwc, ResizeScratch* scratch) {
  GPULAB_TRY(check_input(image, spec, "resize_crop_into"));
  const size_t s = static_cast<size_t>(spec.output_size);
  if (out_hwc.size() != s * s * 3) {
    return Status::invalid_argument(
        fmt::format("resize_crop_into: output buffer holds {} bytes, needs {} ({}x{}x3).", out_hwc.size(),
                    s * s * 3, s, s));
  }
  if (spec.preset == PreprocessSpec::Preset::kTfSlim) {
    tf_slim_resize(image, spec, [&](int y, int x, int c, float v) {
      out_hwc[(static_cast<size_t>(y) * s + x) * 3 + c] =
          static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    });
    return Status::ok();
  }
  if (source_width <= 0 || source_height <= 0) {
    return Status::invalid_argument(
        fmt::format("resize_crop_into: source size {}x{} is not positive.", source_width, source_height));
  }
  return torchvision_resize_crop_window(image, source_width, source_height, spec, out_hwc, scratch);
}

Status normalize_into(std::span<const uint8_t> hwc, const PreprocessSpec& spec, std::span<float> out_chw) {
  GPULAB_TRY(spec.validate());
  const size_t plane = static_cast<size_t>(spec.output_size) * spec.output_size;
  if (hwc.size() != plane * 3 || static_cast<int64_t>(out_chw.size()) != spec.image_numel()) {
    return Status::invalid_argument(fmt::format(
        "normalize_into: {} input bytes and {} output floats for a {}x{} image (needs {} and {}).",
        hwc.size(), out_chw.size(), spec.output_size, spec.output_size, plane * 3, plane * 3));
  }
  // One table per channel (the same float expression preprocess() evaluates, for each of the 256
  // values) and one pass over the pixels writing the three planes.
  const NormalizeCoefficients k = normalize_coefficients(spec);
  std::array<std::array<float, 256>, 3> table{};
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) table[c][v] = static_cast<float>(v) * k.scale[c] + k.bias[c];
  float* r = out_chw.data();
  float* g = r + plane;
  float* b = g + plane;
  const uint8_t* p = hwc.data();
  for (size_t i = 0; i < plane; ++i, p += 3) {
    r[i] = table[0][p[0]];
    g[i] = table[1][p[1]];
    b[i] = table[2][p[2]];
  }
  return Status::ok();
}

Status preprocess(const Image& image, const PreprocessSpec& spec, std::span<float> out_chw) {
  GPULAB_TRY(check_input(image, spec, "preprocess"));
  if (static_cast<int64_t>(out_chw.size()) != spec.image_numel()) {
    return Status::invalid_argument(
        fmt::format("preprocess: output buffer holds {} floats, needs {} (3x{}x{}).", out_chw.size(),
                    spec.image_numel(), spec.output_size, spec.output_size));
  }
  const int s = spec.output_size;
  const size_t plane = static_cast<size_t>(s) * s;
  const auto [scale, bias] = normalize_coefficients(spec);
  if (spec.preset == PreprocessSpec::Preset::kTfSlim) {
    tf_slim_resize(image, spec, [&, &scale = scale, &bias = bias](int y, int x, int c, float v) {
      out_chw[c * plane + static_cast<size_t>(y) * s + x] = v * scale[c] + bias[c];
    });
    return Status::ok();
  }
  GPULAB_ASSIGN_OR_RETURN(TorchvisionResized r, torchvision_resize(image, spec));
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < s; ++y) {
      const int sy = y + r.off_y;
      for (int x = 0; x < s; ++x) {
        const int sx = x + r.off_x;
        const bool inside = sy >= 0 && sy < r.resized.height && sx >= 0 && sx < r.resized.width;
        const float p = inside ? static_cast<float>(r.resized.at(sx, sy, c)) : 0.f;  // padding is 0
        out_chw[c * plane + static_cast<size_t>(y) * s + x] = p * scale[c] + bias[c];
      }
    }
  }
  return Status::ok();
}

Result<Tensor> make_batch(std::span<const Image> images, const PreprocessSpec& spec) {
  GPULAB_TRY(spec.validate());
  if (images.empty()) return Status::invalid_argument("make_batch: no images. Pass at least one.");
  const int64_t s = spec.output_size;
  Tensor batch(DataType::kFloat32, Shape{static_cast<int64_t>(images.size()), 3, s, s});
  std::span<float> all = batch.f32();
  for (size_t i = 0; i < images.size(); ++i) {
    const Status st = preprocess(images[i], spec, all.subspan(i * spec.image_numel(), spec.image_numel()));
    if (!st.is_ok()) return st.with_context(fmt::format("batch image {}", i));
  }
  return batch;
}

Result<Image> resize_crop(const Image& image, const PreprocessSpec& spec) {
  GPULAB_TRY(check_input(image, spec, "resize_crop"));
  const int s = spec.output_size;
  Image out;
  out.width = s;
  out.height = s;
  out.rgb.assign(static_cast<size_t>(s) * s * 3, 0);
  if (spec.preset == PreprocessSpec::Preset::kTfSlim) {
    tf_slim_resize(image, spec, [&](int y, int x, int c, float v) {
      out.rgb[(static_cast<size_t>(y) * s + x) * 3 + c] =
          static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    });
    return out;
  }
  GPULAB_ASSIGN_OR_RETURN(TorchvisionResized r, torchvision_resize(image, spec));
  for (int y = 0; y < s; ++y) {
    const int sy = y + r.off_y;
    if (sy < 0 || sy >= r.resized.height) continue;
    for (int x = 0; x < s; ++x) {
      const int sx = x + r.off_x;
      if (sx < 0 || sx >= r.resized.width) continue;
      for (int c = 0; c < 3; ++c) out.rgb[(static_cast<size_t>(y) * s + x) * 3 + c] = r.resized.at(sx, sy, c);
    }
  }
  return out;
}

}  // namespace gpulab
