// The fused stem's wgmma variant (stem.cu describes the kernel). wgmma is an sm_90a feature:
// this file is compiled for sm_90a alone (src/backends/cuda/CMakeLists.txt), so a GPU other than
// sm_90 finds no code here, and launch_fused_stem falls back to the mma.sync variant.
#include "backends/cuda/kernels/stem_kernel.cuh"

namespace gpulab::kernels::stem {
namespace {

__global__ void __launch_bounds__(kStemThreads, 2) fused_stem_wgmma_kernel(StemParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  fused_stem_body<true>(p);
#else
  __trap();  // no sm_90a features: launch_fused_stem never launches this
#endif
}

}  // namespace

cudaError_t wgmma_blocks_per_sm(int* blocks) {
  if (const cudaError_t e = cudaFuncSetAttribute(
          fused_stem_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
      e != cudaSuccess)
    return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, fused_stem_wgmma_kernel, kStemThreads,
                                                       kSmemBytes);
}

void launch_wgmma(const StemParams& p, int grid, cudaStream_t stream) {
  fused_stem_wgmma_kernel<<<grid, kStemThreads, kSmemBytes, stream>>>(p);
}

}  // namespace gpulab::kernels::stem
