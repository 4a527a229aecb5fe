// Classifier preprocessing: resize, crop and normalize an RGB image into a model's float input.
//
// Two presets reproduce the evaluation transforms that pretrained ImageNet classifiers were
// trained with; using the wrong one costs accuracy silently, so a model should say which it needs
// (preprocess.* metadata, see preprocess_from_metadata).
//
//  kTorchvision  torchvision's eval transform, Resize(resize_shorter) + CenterCrop(output_size)
//                + ToTensor + Normalize(mean, std), on a PIL image:
//                1. resize so the shorter side is resize_shorter, the longer one
//                   int(resize_shorter * long / short), with PIL's antialiased bilinear filter
//                   (a triangle filter whose support grows with the downscale factor), horizontal
//                   pass then vertical, each rounded to uint8 with PIL's 22-bit fixed-point
//                   weights, so the result is PIL's bit for bit;
//                2. center crop output_size x output_size at int(round((side - size) / 2)) with
//                   Python's round-half-to-even; zero padding where the image is smaller;
//                3. x = (pixel / 255 - mean[c]) / std[c].
//  kTfSlim       TF-Slim's Inception/MobileNet eval preprocessing:
//                1. tf.image.central_crop(central_fraction): per axis, start =
//                   int((side - side * fraction) / 2) (double), size = side - 2 * start;
//                2. TF1 resize_bilinear to output_size x output_size, align_corners=False,
//                   half_pixel_centers=False: src = dst * (in / out) in float32, lo = floor(src),
//                   hi = min(lo + 1, in - 1), no antialiasing, no rounding to uint8;
//                3. x = (pixel / 255 - mean[c]) / std[c] (tf_slim_inception(): mean = std = 0.5,
//                   i.e. (x/255 - 0.5) * 2, range [-1, 1]).
//
// Output of preprocess()/make_batch(): float32, planar CHW (NCHW for a batch), channels R, G, B.
// All functions are thread-safe and do not keep state; they allocate only their results and
// temporary buffers.
#pragma once

#include <array>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "image/decode.h"

namespace gpulab {

struct PreprocessSpec {
  enum class Preset { kTorchvision, kTfSlim };

  Preset preset = Preset::kTorchvision;
  int output_size = 224;            // side of the square model input, pixels
  int resize_shorter = 256;         // kTorchvision only: shorter side after the resize, pixels
  float central_fraction = 0.875f;  // kTfSlim only: fraction of each side kept by the crop
  // Per channel (R, G, B), in units of the 0..1 pixel range: x = (pixel / 255 - mean) / std.
  std::array<float, 3> mean{0.f, 0.f, 0.f};
  std::array<float, 3> std{1.f, 1.f, 1.f};

  // torchvision ImageNet eval: resize 256, crop 224, mean (0.485, 0.456, 0.406),
  // std (0.229, 0.224, 0.225).
  static PreprocessSpec torchvision_imagenet();
  // TF-Slim Inception eval: central crop 0.875, bilinear 224, (x/255 - 0.5) * 2.
  static PreprocessSpec tf_slim_inception();

  // Elements of one preprocessed image: 3 * output_size^2.
  int64_t image_numel() const { return int64_t{3} * output_size * output_size; }
  // One line, e.g. "tf-slim: central crop 0.875, bilinear 224x224, mean (0.502,...) std (...)".
  std::string describe() const;
  // kInvalidArgument when a size, fraction or std is out of range.
  Status validate() const;
};

// "torchvision" or "tf-slim" (also "tf_slim", "inception") -> the named constructor's spec.
Result<PreprocessSpec> preprocess_from_name(std::string_view name);

// Reads a model's `preprocess.*` metadata (ONNX metadata_props):
//   preprocess.resize         "center_crop_<fraction>_then_resize_<size>"  -> kTfSlim
//                             "resize_<shorter>_then_center_crop_<size>"   -> kTorchvision
//   preprocess.mean, .std     "a,b,c" per channel R,G,B, in the units of preprocess.pixel_range
//   preprocess.pixel_range    "0-255" (default) or "0-1"
//   preprocess.layout         "RGB" (the only layout supported)
//   preprocess.interpolation  must start with "bilinear" (free text after it is documentation)
//   preprocess.input          free text, not interpreted
// Keys without the "preprocess." prefix are ignored. Missing preprocess.resize: kNotFound; an
// unknown preprocess.* key or value: kUnsupported; a malformed number: kInvalidModel.
Result<PreprocessSpec> preprocess_from_metadata(const std::map<std::string, std::string>& metadata_props);

// Preprocesses one image into `out_chw`, which must hold exactly spec.image_numel() floats.
Status preprocess(const Image& image, const PreprocessSpec& spec, std::span<float> out_chw);

// Preprocesses each image into one float32 tensor [N, 3, output_size, output_size].
Result<Tensor> make_batch(std::span<const Image> images, const PreprocessSpec& spec);

// Steps 1-2 only (resize and crop), as uint8 HWC RGB output_size x output_size, for pipelines that
// upload uint8 and normalize on the GPU. kTorchvision: exactly the pixels preprocess() normalizes.
// kTfSlim: the float resize rounded to the nearest integer (within 0.5 of what preprocess() uses).
Result<Image> resize_crop(const Image& image, const PreprocessSpec& spec);

// A preset's geometry for an image of source_width x source_height:
//  - kTorchvision: the size its shorter side is resized to (resized_width x resized_height) and
//    the crop's top-left corner in the resized image (negative where the crop is larger than it,
//    which pads);
//  - kTfSlim: the central crop's corner (crop_x, crop_y) and size (resized_width x
//    resized_height) in the image, which is then resized to output_size.
// kInvalidArgument for non-positive sizes or a resize too large.
struct CropGeometry {
  int resized_width = 0, resized_height = 0;
  int crop_x = 0, crop_y = 0;
};
Result<CropGeometry> crop_geometry(int source_width, int source_height, const PreprocessSpec& spec);

// Reusable buffers of resize_crop_into(), so that a loop over images reaches a steady state
// without allocating pixel buffers. One per thread; the contents between calls mean nothing.
struct ResizeScratch {
  std::vector<uint8_t> rows;  // the horizontal pass's output rows
  std::vector<int32_t> acc;   // the vertical pass's accumulators
};

// resize_crop() into `out_hwc` (exactly output_size^2 * 3 bytes, uint8 HWC RGB), for an image that
// may have been decoded at a reduced size (DecodeOptions::min_shorter_side):
//  - kTorchvision: the geometry, i.e. the resized size and the crop offsets, comes from the
//    file's `source_width` x `source_height`, the pixels from `image`, which PIL's antialiased
//    bilinear filter takes to that resized size. Only the pixels inside the crop window are
//    computed (both passes restricted to the rows and columns it needs), each one exactly as
//    resize_crop() computes it, so with `image` at its source size the bytes equal resize_crop()'s
//    and normalize_into() of them equals preprocess().
//  - kTfSlim: as resize_crop() on `image` (source size unused).
Status resize_crop_into(const Image& image, int source_width, int source_height, const PreprocessSpec& spec,
                        std::span<uint8_t> out_hwc, ResizeScratch* scratch);

// Step 3 alone: uint8 HWC RGB output_size^2 pixels -> float32 CHW (spec.image_numel() floats),
// x = p * (1 / (255 std)) - mean / std, the arithmetic preprocess() uses.
Status normalize_into(std::span<const uint8_t> hwc, const PreprocessSpec& spec, std::span<float> out_chw);

// PIL's Image.resize((width, height), Image.BILINEAR) on an RGB image (antialiased when
// downscaling; see kTorchvision step 1). kInvalidArgument for non-positive sizes.
Result<Image> resize_bilinear_pil(const Image& image, int width, int height);

}  // namespace gpulab
