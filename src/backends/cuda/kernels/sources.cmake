# gpulab's own CUDA kernels (owned by the kernels area). src/backends/cuda/CMakeLists.txt
# include()s this file and adds ${GPULAB_CUDA_KERNEL_SOURCES} to the gpulab::cuda library.
# kernel_desc.cc is plain C++ (descriptor validation), also compiled into the CPU-only unit test.
set(GPULAB_CUDA_KERNEL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/kernel_desc.cc
  ${CMAKE_CURRENT_LIST_DIR}/quant_desc.cc
  ${CMAKE_CURRENT_LIST_DIR}/quant.cu
  ${CMAKE_CURRENT_LIST_DIR}/quant_mma.cu
  ${CMAKE_CURRENT_LIST_DIR}/q8_check.cu
  ${CMAKE_CURRENT_LIST_DIR}/convert.cu
  ${CMAKE_CURRENT_LIST_DIR}/pool.cu
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/softmax_topk.cu
  ${CMAKE_CURRENT_LIST_DIR}/linear.cu
  ${CMAKE_CURRENT_LIST_DIR}/stem.cu
  ${CMAKE_CURRENT_LIST_DIR}/preprocess.cu
  ${CMAKE_CURRENT_LIST_DIR}/view_kernel_desc.cc
  ${CMAKE_CURRENT_LIST_DIR}/view_kernels.cu)
# Compiled for sm_90a alone, into an object library of its own (src/backends/cuda/CMakeLists.txt).
set(GPULAB_CUDA_SM90A_SOURCES ${CMAKE_CURRENT_LIST_DIR}/stem_rows_sm90.cu
                              ${CMAKE_CURRENT_LIST_DIR}/quant_wgmma_sm90.cu
                              ${CMAKE_CURRENT_LIST_DIR}/quant_cutlass_sm90.cu)
