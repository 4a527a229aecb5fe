// Device helpers shared by gpulab's sm_90a kernels (wgmma_conv.cu, kernels/stem_rows_sm90.cu):
// a named barrier among some of a block's warps, and wgmma's shared-memory operand descriptors.
#pragma once

#include <cstdint>

#include "cute/arch/mma_sm90_desc.hpp"
#include "cute/arch/util.hpp"

namespace gpulab::kernels::sm90 {

// Named barrier `id` (1..15; 0 is __syncthreads') for `threads` threads, a multiple of 32.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// A no-swizzle K-major wgmma descriptor: start address, leading (K half) and stride (8-row group)
// offsets, all in bytes.
__device__ __forceinline__ uint64_t make_desc(const void* smem, int lead_bytes, int stride_bytes) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(cute::cast_smem_ptr_to_uint(smem) >> 4);
  desc.bitfield.leading_byte_offset_ = static_cast<uint16_t>(lead_bytes >> 4);
  desc.bitfield.stride_byte_offset_ = static_cast<uint16_t>(stride_bytes >> 4);
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::INTERLEAVE);
  return desc.desc_;
}

// A K-major wgmma descriptor for the 128-byte swizzle: rows of 128 bytes, each 16-byte chunk c of
// row r stored at chunk c ^ (r % 8), in 1024-byte atoms of 8 rows (`smem` within an atom aligned to
// 1024 but for the K offset of the step, 32 bytes a step of 32 bytes); the stride offset is between
// 8-row groups, the leading offset unused by this layout (16 bytes, as CUTLASS writes it).
__device__ __forceinline__ uint64_t make_desc_sw128(const void* smem, int stride_bytes) {
  cute::GmmaDescriptor desc;
  desc.bitfield.start_address_ = static_cast<uint16_t>(cute::cast_smem_ptr_to_uint(smem) >> 4);
  desc.bitfield.leading_byte_offset_ = 1;
  desc.bitfield.stride_byte_offset_ = static_cast<uint16_t>(stride_bytes >> 4);
  desc.bitfield.base_offset_ = 0;
  desc.bitfield.layout_type_ = static_cast<uint8_t>(cute::SM90::GMMA::LayoutType::B128);
  return desc.desc_;
}

}  // namespace gpulab::kernels::sm90
