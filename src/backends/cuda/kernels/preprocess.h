// Host-callable launchers of the input pipeline's GPU preprocessing (preprocess.cu). Plain C++
// apart from the CUDA runtime API types. Same contract as kernels.h: validate first, never
// allocate or synchronize, queue on `stream`, check the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "gpulab/status.h"

namespace gpulab::kernels {

// One image of a batch, filled on the host from CropGeometry (image/preprocess.h) and uploaded
// with the pixels.
struct PreprocessImage {
  int64_t offset = 0;             // byte offset of its uint8 HWC RGB pixels (rows packed) in `pixels`
  int32_t width = 0, height = 0;  // the pixels' size
  // kTorchvision: the size PIL resizes the pixels to and the crop corner in it. kTfSlim: the
  // central crop's size and corner in the pixels.
  int32_t resized_width = 0, resized_height = 0;
  int32_t crop_x = 0, crop_y = 0;
  // 1: the pixels already are the output_size x output_size crop (resized on the CPU), copied as
  // they are. 0 with valid 0: a failed image, whose output is the normalization of 0.
  int32_t precropped = 0;
  int32_t valid = 1;
};

enum class PreprocessMode : int32_t { kTorchvision = 0, kTfSlim = 1 };

struct PreprocessBatchDesc {
  int64_t n = 0;       // images
  int32_t size = 224;  // output side
  PreprocessMode mode = PreprocessMode::kTorchvision;
  std::array<float, 3> scale{1.f, 1.f, 1.f};  // x = pixel * scale[c] + bias[c]
  std::array<float, 3> bias{};
};
Status validate(const PreprocessBatchDesc& desc);

// images: device [n] PreprocessImage; pixels: device bytes; y: float32 NCHW [n, 3, size, size].
// kTorchvision: PIL's antialiased bilinear resize (22-bit fixed-point weights, each pass rounded
// to uint8, a pass skipped where its size does not change), computed per output pixel for the
// crop window only, then normalized: within one 8-bit level of the CPU's resize_crop_into()
// (the weights are computed in double on the device; a last-bit difference can move a rounding).
// kTfSlim: TF1 bilinear (no antialiasing) over the central crop in float32, normalized without
// rounding, as preprocess() computes it.
Status launch_preprocess_batch(const PreprocessBatchDesc& desc, const PreprocessImage* images,
                               const uint8_t* pixels, float* y, cudaStream_t stream);

// The kernel's computation of output pixel (y, x) of one image, before normalization (0..255 per
// channel), run on the host: the same code, compiled for the CPU, so that tests check the
// algorithm on machines without a GPU. `pixels` points at the image's own pixels.
void preprocess_pixel_on_host(const PreprocessImage& image, const uint8_t* pixels, PreprocessMode mode,
                              int size, int y, int x, float out[3]);

// out[r, j] = x[r, index[r, j]] for r < rows, j < k: the probabilities at the top-k classes.
Status launch_gather_rows(const float* x, int64_t rows, int64_t cols, const int32_t* index, int k, float* out,
                          cudaStream_t stream);

}  // namespace gpulab::kernels
