/* The input pipeline's GPU preprocessing: decoded uint8 RGB images of any size -> the model's
 * float32 NCHW input, resize + crop + normalize in one kernel; and a row gather for the top-k's
 * probabilities.
 *
 * Algorithm (kTorchvision): one thread per output pixel (all three channels). For output pixel
 *   (y, x) the resized image's pixel (Y, X) = (y + crop_y, x + crop_x) is computed as PIL computes
 *   it: the vertical filter's taps over input rows, each tap the horizontal filter's taps over
 *   that row, each pass rounded and clamped to uint8 with PIL's 22-bit fixed-point weights
 *   (PRECISION_BITS), the triangle filter's support stretched by the downscale factor. Weights
 *   are computed on the fly in double, as the CPU computes them. A pass whose size does not
 *   change is skipped, as PIL skips it. Outside the resized image (a crop larger than it): 0.
 *   Work per pixel: taps_y * taps_x multiply-adds per channel (2x downscale: 5 * 5).
 * Algorithm (kTfSlim): TF1 resize_bilinear (align_corners = false, half_pixel_centers = false)
 *   of the central crop, float32 with explicit round-to-nearest intrinsics (no FMA contraction),
 *   the CPU's operation order.
 * Layout: pixels uint8 HWC, rows packed, each image at its own offset; y float32 NCHW.
 * Launch: grid (ceil(size^2 / 256), n), 256 threads; images beyond 65535 in grid.y loop.
 * Tolerance vs the reference (image/preprocess.h): kTorchvision within one 8-bit level per pixel
 *   before normalization; kTfSlim float32 within 1e-5 relative.
 */
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/kernels/preprocess.h"

namespace gpulab::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPrecisionBits = 22;

struct Norm {
  float scale[3], bias[3];
};

// float32 arithmetic rounded once per operation on the device (no FMA contraction), as the host
// computes it (x86-64 host code has no FMA unless asked for).
__host__ __device__ inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ inline float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The filter of output index o of an axis resized from in_size to out_size (PIL's precompute).
struct Filter {
  int lo = 0, n = 0;
  double center = 0, inv_scale = 1, total = 0;
};

__host__ __device__ Filter axis_filter(int in_size, int out_size, int o) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = scale > 1.0 ? scale : 1.0;
  const double support = filter_scale;
  Filter f;
  f.center = (o + 0.5) * scale;
  f.inv_scale = 1.0 / filter_scale;
  const int lo = static_cast<int>(f.center - support + 0.5);
  const int hi = static_cast<int>(f.center + support + 0.5);
  f.lo = lo > 0 ? lo : 0;
  const int max_count = static_cast<int>(ceil(support)) * 2 + 1;
  const int n = (hi < in_size ? hi : in_size) - f.lo;
  f.n = n < max_count ? n : max_count;
  for (int i = 0; i < f.n; ++i) {
    const double t = fabs((f.lo + i - f.center + 0.5) * f.inv_scale);
    f.total += t < 1.0 ? 1.0 - t : 0.0;
  }
  return f;
}

__host__ __device__ int32_t tap_weight(const Filter& f, int i) {
  const double t = fabs((f.lo + i - f.center + 0.5) * f.inv_scale);
  const double k = t < 1.0 ? 1.0 - t : 0.0;
  const double v = f.total != 0.0 ? k / f.total : 0.0;
  const double fixed = v * (1 << kPrecisionBits);
  return static_cast<int32_t>(v < 0 ? fixed - 0.5 : fixed + 0.5);
}

__host__ __device__ uint8_t clamp_fixed(int32_t acc) {
  if (acc <= 0) return 0;
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v > 255 ? 255 : v);
}

// The horizontal pass at resized column X of input row r (or the pixel itself without one).
__host__ __device__ void horizontal(const uint8_t* img, int width, int row, const Filter& fx, bool resample_x,
                                    int X, uint8_t out[3]) {
  const uint8_t* p = img + static_cast<int64_t>(row) * width * 3;
  if (!resample_x) {
    for (int c = 0; c < 3; ++c) out[c] = p[X * 3 + c];
    return;
  }
  int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
  for (int i = 0; i < fx.n; ++i) {
    const int32_t k = tap_weight(fx, i);
    const uint8_t* q = p + (fx.lo + i) * 3;
    for (int c = 0; c < 3; ++c) acc[c] += q[c] * k;
  }
  for (int c = 0; c < 3; ++c) out[c] = clamp_fixed(acc[c]);
}

__host__ __device__ void torchvision_pixel(const PreprocessImage& im, const uint8_t* img, int y, int x,
                                           uint8_t out[3]) {
  const int X = x + im.crop_x, Y = y + im.crop_y;
  out[0] = out[1] = out[2] = 0;
  if (X < 0 || Y < 0 || X >= im.resized_width || Y >= im.resized_height) return;
  const bool resample_x = im.width != im.resized_width;
  const Filter fx = resample_x ? axis_filter(im.width, im.resized_width, X) : Filter{};
  if (im.height == im.resized_height) {
    horizontal(img, im.width, Y, fx, resample_x, X, out);
    return;
  }
  const Filter fy = axis_filter(im.height, im.resized_height, Y);
  int32_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
  for (int i = 0; i < fy.n; ++i) {
    uint8_t h[3];
    horizontal(img, im.width, fy.lo + i, fx, resample_x, X, h);
    const int32_t k = tap_weight(fy, i);
    for (int c = 0; c < 3; ++c) acc[c] += h[c] * k;
  }
  for (int c = 0; c < 3; ++c) out[c] = clamp_fixed(acc[c]);
}

// TF1 resize_bilinear sampling of output index o over a crop axis of in_size (float32, as TF).
__host__ __device__ void tf_axis(int in_size, int out_size, int o, int* lo, int* hi, float* lerp) {
  const float scale = div_rn(static_cast<float>(in_size), static_cast<float>(out_size));
  const float src = mul_rn(static_cast<float>(o), scale);
  const float floor_src = floorf(src);
  *lo = static_cast<int>(floor_src) > 0 ? static_cast<int>(floor_src) : 0;
  *hi = *lo + 1 < in_size - 1 ? *lo + 1 : in_size - 1;
  *lerp = sub_rn(src, floor_src);
}

__host__ __device__ void tf_slim_pixel(const PreprocessImage& im, const uint8_t* img, int size, int y, int x,
                                       float out[3]) {
  int ylo, yhi, xlo, xhi;
  float yl, xl;
  tf_axis(im.resized_height, size, y, &ylo, &yhi, &yl);
  tf_axis(im.resized_width, size, x, &xlo, &xhi, &xl);
  auto px = [&](int r, int col, int c) {
    return static_cast<float>(
        img[(static_cast<int64_t>(im.crop_y + r) * im.width + im.crop_x + col) * 3 + c]);
  };
  for (int c = 0; c < 3; ++c) {
    const float tl = px(ylo, xlo, c), tr = px(ylo, xhi, c), bl = px(yhi, xlo, c), br = px(yhi, xhi, c);
    const float top = add_rn(tl, mul_rn(sub_rn(tr, tl), xl));
    const float bottom = add_rn(bl, mul_rn(sub_rn(br, bl), xl));
    out[c] = add_rn(top, mul_rn(sub_rn(bottom, top), yl));
  }
}

// Output pixel (y, x) of one image before normalization, 0..255.
__host__ __device__ void pixel_value(const PreprocessImage& im, const uint8_t* img, PreprocessMode mode,
                                     int size, int y, int x, float v[3]) {
  v[0] = v[1] = v[2] = 0.f;
  if (!im.valid) return;
  if (im.precropped) {
    for (int c = 0; c < 3; ++c) v[c] = img[(static_cast<int64_t>(y) * size + x) * 3 + c];
  } else if (mode == PreprocessMode::kTfSlim) {
    tf_slim_pixel(im, img, size, y, x, v);
  } else {
    uint8_t u[3];
    torchvision_pixel(im, img, y, x, u);
    for (int c = 0; c < 3; ++c) v[c] = u[c];
  }
}

__global__ void preprocess_batch_kernel(const PreprocessImage* __restrict__ images,
                                        const uint8_t* __restrict__ pixels, float* __restrict__ y, int64_t n,
                                        int size, PreprocessMode mode, Norm norm) {
  const int64_t plane = static_cast<int64_t>(size) * size;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= plane) return;
  const int oy = static_cast<int>(p / size), ox = static_cast<int>(p % size);
  for (int64_t b = blockIdx.y; b < n; b += gridDim.y) {
    const PreprocessImage im = images[b];
    const uint8_t* img = pixels + im.offset;
    float v[3];
    pixel_value(im, img, mode, size, oy, ox, v);
    float* out = y + b * 3 * plane + p;
    for (int c = 0; c < 3; ++c) out[c * plane] = add_rn(mul_rn(v[c], norm.scale[c]), norm.bias[c]);
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t rows, int64_t cols,
                                   const int32_t* __restrict__ index, int k, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * k) return;
  const int64_t r = i / k;
  const int32_t col = index[i];
  out[i] = col >= 0 && col < cols ? x[r * cols + col] : 0.f;
}

Status check(const char* launcher, const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status::device_error(std::string(launcher) + ": kernel '" + kernel +
                              "' failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                              "). Check the pointers and the stream.");
}

}  // namespace

Status validate(const PreprocessBatchDesc& d) {
  if (d.n < 1 || d.size < 1 || d.size > 8192)
    return Status::invalid_argument("PreprocessBatchDesc: n " + std::to_string(d.n) + " and size " +
                                    std::to_string(d.size) + " must be >= 1 (size <= 8192).");
  if (d.mode != PreprocessMode::kTorchvision && d.mode != PreprocessMode::kTfSlim)
    return Status::invalid_argument("PreprocessBatchDesc: unknown mode.");
  return Status::ok();
}

Status launch_preprocess_batch(const PreprocessBatchDesc& desc, const PreprocessImage* images,
                               const uint8_t* pixels, float* y, cudaStream_t stream) {
  GPULAB_TRY(validate(desc));
  Norm norm{};
  for (int c = 0; c < 3; ++c) {
    norm.scale[c] = desc.scale[c];
    norm.bias[c] = desc.bias[c];
  }
  const int64_t plane = static_cast<int64_t>(desc.size) * desc.size;
  const dim3 grid(static_cast<unsigned>((plane + kThreads - 1) / kThreads),
                  static_cast<unsigned>(desc.n < 65535 ? desc.n : 65535));
  preprocess_batch_kernel<<<grid, kThreads, 0, stream>>>(images, pixels, y, desc.n, desc.size, desc.mode,
                                                         norm);
  return check("launch_preprocess_batch", "preprocess_batch_kernel");
}

void preprocess_pixel_on_host(const PreprocessImage& image, const uint8_t* pixels, PreprocessMode mode,
                              int size, int y, int x, float out[3]) {
  pixel_value(image, pixels, mode, size, y, x, out);
}

Status launch_gather_rows(const float* x, int64_t rows, int64_t cols, const int32_t* index, int k, float* out,
                          cudaStream_t stream) {
  if (rows < 1 || cols < 1 || k < 1)
    return Status::invalid_argument("launch_gather_rows: rows, cols and k must be >= 1.");
  const int64_t total = rows * k;
  gather_rows_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, rows, cols, index, k, out);
  return check("launch_gather_rows", "gather_rows_kernel");
}

}  // namespace gpulab::kernels
