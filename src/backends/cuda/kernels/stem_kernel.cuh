// What the fused stem's two kernels share: stem.cu (mma.sync, sm_80 and newer; its header
// comment describes the stem) and stem_rows_sm90.cu (wgmma, compiled for sm_90a alone). Their
// common parameters, the rounding of the image into space-to-depth channels, and the launch of
// the sm_90 kernel, which stem.cu calls.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quant.cuh"
#include "cute/arch/copy_sm80.hpp"

namespace gpulab::kernels::stem {
constexpr int kDataChannels = 12;  // block^2 x 3
constexpr int kOut = static_cast<int>(kStemOutChannels);

// The image, weights and output of a launch, and the shapes they share.
struct StemImage {
  const float* x;
  const __half* weight;  // [64, 4, 4, 16]
  const void* bias;      // [64] float16 or float32, or null
  bool bias_f32;
  void* y;              // __half, __nv_bfloat16 or 8-bit codes (FusedStemDesc::out_dtype)
  float inv_out_scale;  // 1 / FusedStemDesc::out_scale, for 8-bit outputs
  int c, h, w, pad_top, pad_left, conv_h, conv_w, out_h, out_w;
  bool vec16;  // w % 4 == 0 and x 16-byte aligned: image rows arrive in 16-byte pieces
};

// The 8-bit outputs' element type: the byte quantize_q8<kFp8> (quant.cuh) makes of the float16 result.
template <bool kFp8>
struct Q8Out {
  uint8_t bits;
};

// One output element from the float16 result `v` (as a float): TOut __half, __nv_bfloat16 (rounded
// from it) or Q8Out (quantized at inv_out_scale, as the cast kernel would).
template <typename TOut>
__device__ __forceinline__ TOut stem_out(float v, float inv_out_scale) {
  if constexpr (std::is_same_v<TOut, Q8Out<false>> || std::is_same_v<TOut, Q8Out<true>>) {
    return TOut{quantize_q8<std::is_same_v<TOut, Q8Out<true>>>(v, inv_out_scale)};
  } else {
    return from_float<TOut>(v);
  }
}
// Calls f with a value of the element type that stores `out` (FusedStemDesc::out_dtype), to pick a
// kernel's instantiation: __half, __nv_bfloat16, Q8Out<false> (int8) or Q8Out<true> (fp8e4m3).
template <typename F>
void with_out_type(DataType out, F&& f) {
  switch (out) {
    case DataType::kBFloat16: f(__nv_bfloat16{}); break;
    case DataType::kInt8: f(Q8Out<false>{}); break;
    case DataType::kFp8E4M3: f(Q8Out<true>{}); break;
    default: f(__half{}); break;
  }
}
// Eight output elements: 16 bytes of 16-bit types, 8 bytes of 8-bit ones.
template <typename TOut>
using StemOut8 = std::conditional_t<sizeof(TOut) == 1, uint2, uint4>;

__device__ __forceinline__ uint32_t load_u32(const __half* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// One space-to-depth pixel's 12 channels from float32 image rows in shared memory (r: its top-left
// image pixel of channel 0; channels kChannelStride floats apart, rows kRowStride), (dy * 2 + dx)
// * C + ci, rounded to float16; channels 4C..11 are 0.
template <int C, int kChannelStride, int kRowStride>
__device__ __forceinline__ void s2d_pixel(const float* r, __half* v) {
#pragma unroll
  for (int ch = 4 * C; ch < kDataChannels; ++ch) v[ch] = __float2half(0.0f);
#pragma unroll
  for (int ci = 0; ci < C; ++ci)
#pragma unroll
    for (int dy = 0; dy < 2; ++dy)
#pragma unroll
      for (int dx = 0; dx < 2; ++dx)
        v[(dy * 2 + dx) * C + ci] = __float2half_rn(r[ci * kChannelStride + dy * kRowStride + dx]);
}

// The row-streaming kernel (stem_rows_sm90.cu). A work item is a strip of up to kRowsStripPooled
// pooled columns of one image by chunk_rows pooled rows (plan_stem_rows, kernel_desc.h); items are
// numbered image-major, then chunk, then strip.
constexpr int kRowsStripPooled = static_cast<int>(kStemStripPooled), kRowsConsumers = 2;
struct RowsParams : StemImage {
  int strips, chunk_rows, chunks, items;  // items = n * chunks * strips
};
// How many of its blocks fit on an SM of the current device (after setting its shared-memory
// limit); fails (cudaErrorNoKernelImageForDevice or similar) on GPUs other than sm_90, for which
// it has no code. And its launch, whose error the caller reads (check_launch).
cudaError_t rows_blocks_per_sm(int* blocks);
// The kernel that stores `out` (FusedStemDesc::out_dtype: float16, bfloat16, int8 or fp8e4m3).
void launch_rows(const RowsParams& p, int grid, DataType out, cudaStream_t stream);

}  // namespace gpulab::kernels::stem
