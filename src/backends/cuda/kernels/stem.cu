/*
 * The fused stem (kernel_desc.h, FusedStemDesc): float32 NCHW image -> space-to-depth ->
 * 4x4/1 convolution + bias + ReLU -> 3x3/2 max pool -> float16 NHWC, in one kernel.
 *
 * Why: unfused, ResNet-18's stem at batch 256 writes a 411 MB convolution output and reads it
 * back for the pool, and cuDNN runs the 12-channel convolution about five times slower than its
 * memory roofline. Here each thread block keeps one tile's convolution output in shared memory
 * and pools it there; only the pooled tile (a quarter of the pixels) reaches global memory.
 *
 * Work decomposition. A tile is 8 x 7 pooled pixels of one image, all 64 channels. Its pool
 * windows cover 17 x 15 convolution pixels (the 1-pixel halo is recomputed by the neighbouring
 * tile, 14% more arithmetic than the layer's own), which read 20 x 18 space-to-depth pixels,
 * that is 40 x 36 image pixels. Per tile:
 *   1. the float32 image patch arrives in shared memory by asynchronous copies (cp.async, zero
 *      fill outside the image; 16-byte pieces when the image width is a multiple of 4) issued
 *      while the previous tile computed; it is rounded to float16 into a second buffer in
 *      space-to-depth order: pixel (Y, X), channel (dy * 2 + dx) * c + ci;
 *   2. the convolution is an implicit GEMM, M = 256 pixels (255 and a spare), N = 64, K = 192
 *      (16 taps x the 12 data channels; the weights' padding channels 12..15 are dropped, and so
 *      are the K pairs whose weights are all 0: ResNet's 7x7 in its 8x8 window leaves 154 of the
 *      192, that is 10 K steps of 16 instead of 12). The A operand comes straight from the patch
 *      (an im2col view: 32-bit loads at offsets listed once per block) into registers; the B
 *      operand is the weights, compacted into shared memory once per block. FP16 inputs, FP32
 *      accumulators. Two variants (stem_kernel.cuh holds their common body):
 *      - mma.sync (sm_80 and newer): each of the 8 warps owns 32 pixels x 64 channels and runs
 *        CuTe's m16n8k16 atom, loading B with ldmatrix (every warp reads all the weights);
 *      - wgmma (sm_90, stem_sm90.cu, compiled for sm_90a only): each of the 2 warpgroups owns 128
 *        pixels as two m64n64k16 warpgroup MMAs per K step, which read B from shared memory once
 *        per warpgroup and run asynchronously while the next step's A fragments load;
 *   3. bias and ReLU, rounded to float16 into shared memory; pixels outside the convolution's
 *      output are stored as 0, which a max over ReLU outputs ignores (every window holds at least
 *      one real pixel);
 *   4. the max pool reads 16-byte vectors from shared memory and writes 128 contiguous bytes per
 *      pooled pixel.
 * Blocks are persistent (as many as fit on the GPU: two per SM, 97 KiB of shared memory each)
 * and loop over tiles.
 *
 * Shared memory strides are padded so that the fragment loads hit distinct banks: 24 halves per
 * space-to-depth pixel (8 consecutive pixels' 48-byte rows tile the 32 banks), 200 halves per
 * weight row (mma.sync; wgmma's weights are in its canonical layout), 72 halves per convolution
 * pixel.
 */
#include "backends/cuda/kernels/stem_kernel.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"

namespace gpulab::kernels {
namespace {

using namespace stem;

__global__ void __launch_bounds__(kStemThreads, 2) fused_stem_kernel(StemParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  fused_stem_body<false>(p);
#else
  __trap();  // launch_fused_stem refuses GPUs below sm_80
#endif
}

// Per device ordinal and variant (0 mma.sync, 1 wgmma): persistent blocks to launch (SMs x blocks
// per SM), 0 until known, -1 when the GPU cannot run that variant.
constexpr int kMaxDevices = 64;
std::atomic<int> g_persistent_blocks[kMaxDevices][2];

// The first call per device and variant sets the kernel's shared-memory limit and queries its
// occupancy.
Result<int> persistent_blocks(bool wgmma) {
  int device = 0;
  GPULAB_CUDA_TRY(cudaGetDevice(&device));
  std::atomic<int>* known =
      device >= 0 && device < kMaxDevices ? &g_persistent_blocks[device][wgmma] : nullptr;
  const int before = known ? known->load(std::memory_order_relaxed) : 0;
  if (before > 0) return before;
  const Status no_wgmma = Status::unsupported(
      "launch_fused_stem: the wgmma variant needs an sm_90 GPU (Hopper) and this gpulab's sm_90a code.");
  if (before < 0) return no_wgmma;
  int major = 0, minor = 0, sms = 0, per_sm = 0;
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major < 8)
    return Status::unsupported(
        "launch_fused_stem: the fused stem needs an sm_80 or newer GPU (tensor-core "
        "mma.sync with FP32 accumulation); build the plan without it.");
  GPULAB_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (wgmma) {
    // sm_90a code runs on compute capability 9.0 alone; elsewhere it is not even tried.
    const cudaError_t e =
        major == 9 && minor == 0 ? wgmma_blocks_per_sm(&per_sm) : cudaErrorNoKernelImageForDevice;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so that later checks do not see it
      if (known) known->store(-1, std::memory_order_relaxed);
      return no_wgmma;
    }
  } else {
    GPULAB_CUDA_TRY(cudaFuncSetAttribute(fused_stem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kSmemBytes)));
    GPULAB_CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_stem_kernel, kStemThreads, kSmemBytes));
  }
  if (per_sm < 1)
    return Status::unsupported("launch_fused_stem: a block (" + std::to_string(kSmemBytes) +
                               " bytes of shared memory) does not fit on an SM of this GPU.");
  if (known) known->store(sms * per_sm, std::memory_order_relaxed);
  return sms * per_sm;
}

}  // namespace

Status launch_fused_stem(const FusedStemDesc& d, const void* x, const void* weight, const void* bias, void* y,
                         cudaStream_t stream, StemKernel kernel) {
  GPULAB_TRY(validate(d));
  if (x == nullptr || weight == nullptr || y == nullptr)
    return Status::invalid_argument("launch_fused_stem: null input, weight or output pointer.");
  if (!is_aligned(weight, 16) || !is_aligned(y, 16) || !is_aligned(x, 4) ||
      !is_aligned(bias, d.bias_float32 ? 4 : 2))
    return Status::invalid_argument(
        "launch_fused_stem: weight and output must be 16-byte aligned, the input and bias aligned to their "
        "element size.");
  // GPULAB_FUSED_STEM=mma makes kAuto take the mma.sync variant (to compare the two).
  static const bool auto_mma = [] {
    const char* env = std::getenv("GPULAB_FUSED_STEM");
    return env != nullptr && std::string_view(env) == "mma";
  }();
  const bool wgmma = kernel == StemKernel::kWgmma ||
                     (kernel == StemKernel::kAuto && !auto_mma && persistent_blocks(true).is_ok());
  GPULAB_ASSIGN_OR_RETURN(const int blocks, persistent_blocks(wgmma));
  StemParams p{};
  p.x = static_cast<const float*>(x);
  p.weight = static_cast<const __half*>(weight);
  p.bias = bias;
  p.bias_f32 = d.bias_float32;
  p.y = static_cast<__half*>(y);
  p.c = static_cast<int>(d.c);
  p.h = static_cast<int>(d.h);
  p.w = static_cast<int>(d.w);
  p.pad_top = static_cast<int>(d.pad_top);
  p.pad_left = static_cast<int>(d.pad_left);
  p.conv_h = static_cast<int>(d.conv_h);
  p.conv_w = static_cast<int>(d.conv_w);
  p.out_h = static_cast<int>(d.out_h);
  p.out_w = static_cast<int>(d.out_w);
  const int64_t tiles_x = (d.out_w + kTileW - 1) / kTileW,
                tiles_per_image = (d.out_h + kTileH - 1) / kTileH * tiles_x;
  p.tiles_x = static_cast<int>(tiles_x);
  p.tiles_per_image = static_cast<int>(tiles_per_image);
  p.tiles = static_cast<int>(d.n * tiles_per_image);  // < 2^30: validate bounds the pooled pixels
  p.vec16 = d.w % 4 == 0 && is_aligned(x, 16);
  const int grid = std::min(p.tiles, blocks);
  if (wgmma) {
    launch_wgmma(p, grid, stream);
    return check_launch("launch_fused_stem", "fused_stem_wgmma_kernel");
  }
  fused_stem_kernel<<<grid, kStemThreads, kSmemBytes, stream>>>(p);
  return check_launch("launch_fused_stem", "fused_stem_kernel");
}

}  // namespace gpulab::kernels
