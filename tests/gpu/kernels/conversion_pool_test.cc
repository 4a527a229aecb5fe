// GPU tests of the conversion and pooling kernels, every dtype, on the shapes of ResNet-18 and
// MobileNetV2, against plain host loops (double accumulation) over the same rounded inputs.
#include <algorithm>
#include <limits>

#include "backends/cuda/kernels/kernels.h"
#include "kernel_test_util.h"

namespace gpulab::kernels {
namespace {

using testing::decode;
using testing::DeviceBuffer;
using testing::encode;
using testing::expect_close;
using testing::expect_exact;
using testing::expect_synced;
using testing::float_types;
using testing::random_values;
using testing::round_to;

// ---- conversion --------------------------------------------------------------------------------

// `bytes` of DeviceBuffer's poison (0xFF), to upload as an output buffer at an offset.
std::vector<std::byte> poison_bytes(size_t bytes) {
  return std::vector<std::byte>(bytes, std::byte{0xFF});
}

void check_nchw_to_nhwc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t c_out, DataType dtype,
                        size_t x_offset_bytes = 0, size_t y_offset_bytes = 0) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n" << n << " c" << c << " " << h << "x" << w
                                    << " c_out " << c_out << " x offset " << x_offset_bytes << " y offset "
                                    << y_offset_bytes);
  const std::vector<float> x = random_values(n * c * h * w, 11);
  std::vector<float> expected(n * h * w * c_out, 0.0f);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t p = 0; p < h * w; ++p)
        expected[(in * h * w + p) * c_out + ic] = x[(in * c + ic) * h * w + p];
  expected = round_to(expected, dtype);

  DeviceBuffer dx(encode(x, DataType::kFloat32), x_offset_bytes);
  DeviceBuffer dy(poison_bytes(expected.size() * dtype_size(dtype)), y_offset_bytes);
  const NchwToNhwcDesc desc{.n = n, .c = c, .h = h, .w = w, .c_out = c_out, .dtype = dtype};
  ASSERT_TRUE(launch_nchw_to_nhwc(desc, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  const std::vector<float> y = decode(dy.download(), dtype);
  expect_exact(y, expected);  // a conversion is exact: the rounding is the same on both sides
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(ConvertKernels, NchwFloatToNhwcWithChannelPadding) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_nchw_to_nhwc(2, 3, 224, 224, 3, dtype);
    check_nchw_to_nhwc(2, 3, 224, 224, 4, dtype);
    check_nchw_to_nhwc(3, 3, 31, 17, 8, dtype);
    check_nchw_to_nhwc(1, 1, 5, 7, 1, dtype);
  }
}

TEST(ConvertKernels, NchwToNhwcBatchOneAndRaggedShapes) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_nchw_to_nhwc(1, 3, 224, 224, 8, dtype);  // ResNet-18 input at batch 1, the engine's padding
    check_nchw_to_nhwc(1, 3, 224, 224, 3, dtype);
    check_nchw_to_nhwc(20, 3, 6, 10, 8, dtype);  // w % 4 != 0 but h*w % 4 == 0: tiles span images
    check_nchw_to_nhwc(1, 3, 7, 5, 4, dtype);    // h*w % 4 != 0: scalar loads, one partial tile
    check_nchw_to_nhwc(3, 3, 31, 17, 3, dtype);  // last tile's output not a whole number of vectors
    check_nchw_to_nhwc(2, 4, 13, 9, 6, dtype);   // vectors spanning pixels, c_out % 4 != 0
    check_nchw_to_nhwc(2, 8, 12, 12, 8, dtype);  // the most channels the staged kernel takes
  }
}

TEST(ConvertKernels, NchwToNhwcUnalignedPointersAndManyChannels) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    const size_t elem = dtype_size(dtype);
    check_nchw_to_nhwc(2, 3, 16, 16, 8, dtype, /*x_offset_bytes=*/4, /*y_offset_bytes=*/0);
    check_nchw_to_nhwc(2, 3, 16, 16, 8, dtype, /*x_offset_bytes=*/0, /*y_offset_bytes=*/elem);
    check_nchw_to_nhwc(1, 3, 9, 11, 4, dtype, /*x_offset_bytes=*/8, /*y_offset_bytes=*/3 * elem);
    check_nchw_to_nhwc(2, 12, 5, 6, 16, dtype);  // c > 8: the one-thread-per-pixel kernel
    check_nchw_to_nhwc(1, 3, 4, 4, 70, dtype);   // c_out > 64: likewise
  }
}

// The rewritten stem's input: expected values from the layout's definition (kernel_desc.h).
void check_space_to_depth(const SpaceToDepthDesc& d, size_t y_offset_bytes = 0) {
  SCOPED_TRACE(::testing::Message() << dtype_name(d.dtype) << " n" << d.n << " c" << d.c << " " << d.h << "x"
                                    << d.w << " block " << d.block << " pads " << d.pad_top << ","
                                    << d.pad_left << " -> " << d.out_h << "x" << d.out_w << "x" << d.c_out
                                    << " y offset " << y_offset_bytes);
  const std::vector<float> x = random_values(d.n * d.c * d.h * d.w, 13);
  std::vector<float> expected(d.n * d.out_h * d.out_w * d.c_out, 0.0f);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oy = 0; oy < d.out_h; ++oy)
      for (int64_t ox = 0; ox < d.out_w; ++ox)
        for (int64_t dy = 0; dy < d.block; ++dy)
          for (int64_t dx = 0; dx < d.block; ++dx)
            for (int64_t c = 0; c < d.c; ++c) {
              const int64_t iy = oy * d.block + dy - d.pad_top, ix = ox * d.block + dx - d.pad_left;
              if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
              expected[((n * d.out_h + oy) * d.out_w + ox) * d.c_out + (dy * d.block + dx) * d.c + c] =
                  x[((n * d.c + c) * d.h + iy) * d.w + ix];
            }
  expected = round_to(expected, d.dtype);
  DeviceBuffer dx(encode(x, DataType::kFloat32));
  DeviceBuffer dy(poison_bytes(expected.size() * dtype_size(d.dtype)), y_offset_bytes);
  ASSERT_TRUE(launch_nchw_to_space_to_depth(d, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  expect_exact(decode(dy.download(), d.dtype), expected);
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(ConvertKernels, NchwToSpaceToDepthForRewrittenStems) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    const int64_t c_out = dtype == DataType::kFloat32 ? 12 : 16;
    // ResNet-18's 7x7/2 stem (4x4 taps over 115x115), batch 2 and 1; MobileNetV2's 3x3/2.
    check_space_to_depth({2, 3, 224, 224, 2, 3, 3, 115, 115, c_out, dtype});
    check_space_to_depth({1, 3, 224, 224, 2, 3, 3, 115, 115, c_out, dtype});
    check_space_to_depth({2, 3, 224, 224, 2, 1, 1, 113, 113, c_out, dtype});
    // Odd sizes, asymmetric and no padding, stride 3, c_out not a whole number of vectors, and
    // an unaligned output (the scalar store path).
    check_space_to_depth({3, 3, 29, 31, 2, 3, 3, 17, 18, c_out, dtype});
    check_space_to_depth({2, 1, 27, 27, 3, 2, 1, 10, 9, 9, dtype});
    check_space_to_depth({1, 3, 20, 20, 2, 0, 0, 10, 10, 13, dtype});
    check_space_to_depth({2, 3, 16, 16, 2, 3, 3, 11, 11, c_out, dtype}, /*y_offset_bytes=*/dtype_size(dtype));
  }
}

void check_normalize_u8(int64_t n, int64_t h, int64_t w, int64_t c, int64_t c_out, DataType dtype,
                        size_t x_offset_bytes = 0, size_t y_offset_bytes = 0) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n" << n << " " << h << "x" << w << "x" << c
                                    << " c_out " << c_out << " x offset " << x_offset_bytes << " y offset "
                                    << y_offset_bytes);
  const NormalizeU8Desc desc{.n = n,
                             .h = h,
                             .w = w,
                             .c = c,
                             .c_out = c_out,
                             .mean = {0.485f, 0.456f, 0.406f, 0.5f},
                             .std = {0.229f, 0.224f, 0.225f, 0.25f},
                             .dtype = dtype};
  std::mt19937 rng(7);
  std::vector<std::byte> x(n * h * w * c);
  for (auto& b : x) b = static_cast<std::byte>(rng() & 0xFF);
  std::vector<float> expected(n * h * w * c_out, 0.0f);
  for (int64_t p = 0; p < n * h * w; ++p)
    for (int64_t ic = 0; ic < c; ++ic) {
      const double v = static_cast<double>(std::to_integer<int>(x[p * c + ic])) / 255.0;
      expected[p * c_out + ic] = static_cast<float>((v - desc.mean[ic]) / desc.std[ic]);
    }

  DeviceBuffer dx(x, x_offset_bytes);
  DeviceBuffer dy(poison_bytes(expected.size() * dtype_size(dtype)), y_offset_bytes);
  ASSERT_TRUE(launch_normalize_u8(desc, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  const std::vector<float> y = decode(dy.download(), dtype);
  expect_close(y, expected, dtype);
  for (int64_t p = 0; p < n * h * w; ++p)
    for (int64_t ic = c; ic < c_out; ++ic) ASSERT_EQ(y[p * c_out + ic], 0.0f) << "padding channel " << ic;
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(ConvertKernels, NormalizeUint8ImagesWithChannelPadding) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_normalize_u8(2, 224, 224, 3, 3, dtype);
    check_normalize_u8(2, 224, 224, 3, 4, dtype);
    check_normalize_u8(1, 33, 19, 3, 8, dtype);
    check_normalize_u8(3, 10, 10, 1, 1, dtype);
    check_normalize_u8(1, 9, 9, 4, 4, dtype);
    check_normalize_u8(1, 224, 224, 3, 8, dtype);  // batch 1 with the engine's padding
    check_normalize_u8(2, 7, 5, 3, 3, dtype);      // partial tile, odd byte count
  }
}

TEST(ConvertKernels, NormalizeUint8UnalignedPointersAndWideOutput) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    const size_t elem = dtype_size(dtype);
    check_normalize_u8(2, 16, 16, 3, 8, dtype, /*x_offset_bytes=*/1, /*y_offset_bytes=*/0);
    check_normalize_u8(2, 16, 16, 3, 8, dtype, /*x_offset_bytes=*/0, /*y_offset_bytes=*/elem);
    check_normalize_u8(1, 6, 7, 3, 70, dtype);  // c_out > 64: the one-thread-per-pixel kernel
  }
}

void check_nhwc_to_nchw(int64_t n, int64_t h, int64_t w, int64_t c, int64_t c_stored, DataType dtype) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n" << n << " " << h << "x" << w << "x" << c
                                    << " c_stored " << c_stored);
  const int64_t stride = c_stored == 0 ? c : c_stored;
  const std::vector<float> x = round_to(random_values(n * h * w * stride, 5), dtype);
  std::vector<float> expected(n * c * h * w);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t ic = 0; ic < c; ++ic)
        expected[(in * c + ic) * h * w + p] = x[(in * h * w + p) * stride + ic];

  DeviceBuffer dx(encode(x, dtype));
  DeviceBuffer dy(expected.size() * sizeof(float));
  const NhwcToNchwF32Desc desc{.n = n, .h = h, .w = w, .c = c, .c_stored = c_stored, .dtype = dtype};
  ASSERT_TRUE(launch_nhwc_to_nchw_f32(desc, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  expect_exact(decode(dy.download(), DataType::kFloat32), expected);
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(ConvertKernels, NhwcToNchwFloat) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_nhwc_to_nchw(4, 1, 1, 1000, 0, dtype);     // classifier logits, NC
    check_nhwc_to_nchw(3, 1, 1, 1001, 1008, dtype);  // padded logits
    check_nhwc_to_nchw(2, 7, 7, 512, 0, dtype);      // a feature map
    check_nhwc_to_nchw(2, 13, 11, 37, 40, dtype);    // ragged tiles
  }
}

// launch_float_cast: every pair of float types, element by element equal to rounding the source
// value to the target type on the host; 16-bit pairs of a multiple of 8 elements take the vector
// path, the ragged count the scalar one.
TEST(ConvertKernels, FloatCastBetweenEveryPairOfTypes) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType from : float_types())
    for (DataType to : float_types())
      for (const int64_t count : {4096, 1001}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(from) << " -> " << dtype_name(to) << ", " << count);
        const std::vector<float> x = round_to(random_values(static_cast<size_t>(count), 5, 60000.0f), from);
        DeviceBuffer dx(encode(x, from)), dy(static_cast<size_t>(count) * dtype_size(to));
        ASSERT_TRUE(
            launch_float_cast({.count = count, .from = from, .to = to}, dx.get(), dy.get(), nullptr).is_ok());
        expect_synced();
        expect_exact(decode(dy.download(), to), round_to(x, to));
        EXPECT_TRUE(dy.tail_untouched());
      }
}

// ---- pooling ---------------------------------------------------------------------------------

// NHWC pooling with PyTorch's semantics, double accumulation.
std::vector<float> reference_pool(const PoolDesc& d, const std::vector<float>& x) {
  std::vector<float> y(d.n * d.out_h * d.out_w * d.c);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oh = 0; oh < d.out_h; ++oh)
      for (int64_t ow = 0; ow < d.out_w; ++ow)
        for (int64_t c = 0; c < d.c; ++c) {
          const int64_t h0 = oh * d.stride.h - d.pads.top, w0 = ow * d.stride.w - d.pads.left;
          double acc = d.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t count = 0;
          for (int64_t kh = 0; kh < d.kernel.h; ++kh)
            for (int64_t kw = 0; kw < d.kernel.w; ++kw) {
              const int64_t ih = h0 + kh * d.dilation.h, iw = w0 + kw * d.dilation.w;
              if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
              const double v = x[((n * d.h + ih) * d.w + iw) * d.c + c];
              acc = d.kind == PoolKind::kMax ? std::max(acc, v) : acc + v;
              ++count;
            }
          if (d.kind == PoolKind::kAverage) {
            int64_t divisor = count;
            if (d.count_include_pad) {
              divisor = (std::min(h0 + d.kernel.h, d.h + d.pads.bottom) - h0) *
                        (std::min(w0 + d.kernel.w, d.w + d.pads.right) - w0);
            }
            acc /= static_cast<double>(divisor);
          }
          y[((n * d.out_h + oh) * d.out_w + ow) * d.c + c] = static_cast<float>(acc);
        }
  return y;
}

void check_pool(PoolDesc desc, size_t misalign_elems = 0) {
  desc = with_output_size(desc);
  SCOPED_TRACE(::testing::Message() << (desc.kind == PoolKind::kMax ? "max" : "avg") << " "
                                    << dtype_name(desc.dtype) << " " << desc.h << "x" << desc.w << "x"
                                    << desc.c << " k" << desc.kernel.h << " s" << desc.stride.h << " ceil "
                                    << desc.ceil_mode << " incl_pad " << desc.count_include_pad
                                    << " misalign " << misalign_elems);
  ASSERT_TRUE(validate(desc).is_ok()) << validate(desc).to_string();
  const std::vector<float> x = round_to(random_values(desc.n * desc.h * desc.w * desc.c, 3), desc.dtype);
  const std::vector<float> expected = reference_pool(desc, x);
  const size_t esize = dtype_size(desc.dtype);
  DeviceBuffer dx(encode(x, desc.dtype), misalign_elems * esize);
  DeviceBuffer dy(expected.size() * esize);
  const Status s = launch_pool(desc, dx.get(), dy.get(), nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  expect_synced();
  const std::vector<float> y = decode(dy.download(), desc.dtype);
  if (desc.kind == PoolKind::kMax) {
    expect_exact(y, expected);  // max is exact
  } else {
    expect_close(y, expected, desc.dtype);
  }
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(PoolKernels, MaxPoolResNetStem) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_pool({.kind = PoolKind::kMax,
                .n = 2,
                .h = 112,
                .w = 112,
                .c = 64,
                .kernel = {3, 3},
                .stride = {2, 2},
                .pads = {1, 1, 1, 1},
                .dtype = dtype});
  }
}

TEST(PoolKernels, MaxPoolCeilModeDilationAndOddChannels) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    // GoogLeNet-style ceil_mode pooling.
    check_pool({.kind = PoolKind::kMax,
                .n = 2,
                .h = 112,
                .w = 112,
                .c = 64,
                .kernel = {3, 3},
                .stride = {2, 2},
                .ceil_mode = true,
                .dtype = dtype});
    check_pool({.kind = PoolKind::kMax,
                .n = 1,
                .h = 15,
                .w = 14,
                .c = 24,
                .kernel = {2, 2},
                .stride = {2, 2},
                .pads = {1, 1, 1, 1},
                .ceil_mode = true,
                .dtype = dtype});
    check_pool({.kind = PoolKind::kMax,
                .n = 2,
                .h = 20,
                .w = 17,
                .c = 16,
                .kernel = {3, 2},
                .stride = {1, 2},
                .dilation = {2, 3},
                .pads = {1, 0, 2, 1},
                .dtype = dtype});
    check_pool({.kind = PoolKind::kMax,
                .n = 3,
                .h = 9,
                .w = 9,
                .c = 3,
                .kernel = {3, 3},
                .stride = {2, 2},
                .pads = {1, 1, 1, 1},
                .dtype = dtype});
  }
}

TEST(PoolKernels, AveragePool) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    for (bool include_pad : {false, true}) {
      // Inception-style 3x3 / 1 pad 1.
      check_pool({.kind = PoolKind::kAverage,
                  .n = 2,
                  .h = 35,
                  .w = 35,
                  .c = 192,
                  .kernel = {3, 3},
                  .stride = {1, 1},
                  .pads = {1, 1, 1, 1},
                  .count_include_pad = include_pad,
                  .dtype = dtype});
      // DenseNet transition 2x2 / 2.
      check_pool({.kind = PoolKind::kAverage,
                  .n = 2,
                  .h = 56,
                  .w = 56,
                  .c = 128,
                  .kernel = {2, 2},
                  .stride = {2, 2},
                  .count_include_pad = include_pad,
                  .dtype = dtype});
      // ceil_mode with an overhang, odd channels (scalar path).
      check_pool({.kind = PoolKind::kAverage,
                  .n = 1,
                  .h = 12,
                  .w = 13,
                  .c = 5,
                  .kernel = {3, 3},
                  .stride = {2, 2},
                  .pads = {1, 1, 1, 1},
                  .ceil_mode = true,
                  .count_include_pad = include_pad,
                  .dtype = dtype});
      // The global pool written as a 7x7 window (ResNet-18 exports of some opsets).
      check_pool({.kind = PoolKind::kAverage,
                  .n = 2,
                  .h = 7,
                  .w = 7,
                  .c = 512,
                  .kernel = {7, 7},
                  .count_include_pad = include_pad,
                  .dtype = dtype});
    }
  }
}

TEST(PoolKernels, UnalignedPointersTakeTheScalarPath) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_pool({.kind = PoolKind::kMax,
                .n = 1,
                .h = 16,
                .w = 16,
                .c = 32,
                .kernel = {3, 3},
                .stride = {2, 2},
                .pads = {1, 1, 1, 1},
                .dtype = dtype},
               /*misalign_elems=*/1);
  }
}

void check_global_avg_pool(int64_t n, int64_t h, int64_t w, int64_t c, DataType dtype) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n" << n << " " << h << "x" << w << "x" << c);
  const std::vector<float> x = round_to(random_values(n * h * w * c, 9), dtype);
  std::vector<float> expected(n * c);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic) {
      double sum = 0;
      for (int64_t p = 0; p < h * w; ++p) sum += x[(in * h * w + p) * c + ic];
      expected[in * c + ic] = static_cast<float>(sum / static_cast<double>(h * w));
    }
  DeviceBuffer dx(encode(x, dtype));
  DeviceBuffer dy(expected.size() * dtype_size(dtype));
  const GlobalAvgPoolDesc desc{.n = n, .h = h, .w = w, .c = c, .dtype = dtype};
  ASSERT_TRUE(launch_global_avg_pool(desc, dx.get(), dy.get(), nullptr).is_ok());
  expect_synced();
  expect_close(decode(dy.download(), dtype), expected, dtype);
  EXPECT_TRUE(dy.tail_untouched());
}

TEST(PoolKernels, GlobalAveragePool) {
  GPULAB_SKIP_WITHOUT_GPU();
  for (DataType dtype : float_types()) {
    check_global_avg_pool(3, 7, 7, 512, dtype);   // ResNet-18
    check_global_avg_pool(3, 7, 7, 1280, dtype);  // MobileNetV2
    check_global_avg_pool(2, 56, 56, 64, dtype);  // many pixels per channel
    check_global_avg_pool(2, 5, 3, 3, dtype);     // odd channels: scalar path
    check_global_avg_pool(1, 1, 1, 40, dtype);
  }
}

TEST(KernelLaunchers, RejectInvalidDescriptorsBeforeLaunching) {
  // Needs no GPU: validation comes first and touches nothing on the device.
  PoolDesc pool{
      .kind = PoolKind::kMax, .n = 1, .h = 8, .w = 8, .c = 8, .out_h = 5, .out_w = 4, .kernel = {3, 3}};
  EXPECT_EQ(launch_pool(pool, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(launch_global_avg_pool({.n = 1, .h = 0, .w = 7, .c = 8}, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      launch_nchw_to_nhwc({.n = 1, .c = 3, .h = 2, .w = 2, .c_out = 1}, nullptr, nullptr, nullptr).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(launch_topk({.rows = 1, .cols = 10, .k = 40}, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(launch_softmax({.rows = 0, .cols = 10}, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpulab::kernels
