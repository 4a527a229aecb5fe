// What the fused stem's two kernels share: stem.cu (mma.sync, sm_80 and newer; its header
// comment describes the stem) and stem_rows_sm90.cu (wgmma, compiled for sm_90a alone). Their
// common parameters, the rounding of the image into space-to-depth channels, and the launch of
// the sm_90 kernel, which stem.cu calls.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels/common.cuh"
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
  void* y;  // __half or __nv_bfloat16 (FusedStemDesc::out_dtype)
  int c, h, w, pad_top, pad_left, conv_h, conv_w, out_h, out_w;
  bool vec16;  // w % 4 == 0 and x 16-byte aligned: image rows arrive in 16-byte pieces
};

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
// bf16: the kernel that stores bfloat16 (FusedStemDesc::out_dtype), else float16.
void launch_rows(const RowsParams& p, int grid, bool bf16, cudaStream_t stream);

}  // namespace gpulab::kernels::stem
