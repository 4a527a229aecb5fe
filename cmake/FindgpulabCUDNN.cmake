# FindgpulabCUDNN: cuDNN 9 (header and library) as the imported target CUDNN::cudnn, for gpulab's
# build and for a consumer of its installed CMake package (gpulabConfig.cmake finds it the same way).
#
# Searched: $CUDNN_ROOT (the GPU host's Python wheel, set by enter.sh), then the CUDA toolkit's
# folders (find_package(CUDAToolkit) first), then the system (NVIDIA's libcudnn9-dev-cuda-* packages
# put cudnn.h in /usr/include and the library in /usr/lib/<arch>). The wheel has no unversioned
# libcudnn.so, hence libcudnn.so.9.
# Sets gpulabCUDNN_FOUND, gpulabCUDNN_VERSION ("9.19.0"), GPULAB_CUDNN_INCLUDE_DIR,
# GPULAB_CUDNN_LIBRARY. A CUDNN::cudnn that already exists (cuDNN frontend's CMake makes one) is
# kept.
find_path(GPULAB_CUDNN_INCLUDE_DIR cudnn.h HINTS $ENV{CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
find_library(GPULAB_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
             HINTS $ENV{CUDNN_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})

if(GPULAB_CUDNN_INCLUDE_DIR AND EXISTS ${GPULAB_CUDNN_INCLUDE_DIR}/cudnn_version.h)
  file(STRINGS ${GPULAB_CUDNN_INCLUDE_DIR}/cudnn_version.h gpulab_cudnn_defines
       REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} +([0-9]+)" _ "${gpulab_cudnn_defines}")
    set(gpulab_cudnn_${part} ${CMAKE_MATCH_1})
  endforeach()
  set(gpulabCUDNN_VERSION ${gpulab_cudnn_MAJOR}.${gpulab_cudnn_MINOR}.${gpulab_cudnn_PATCHLEVEL})
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(gpulabCUDNN
  REQUIRED_VARS GPULAB_CUDNN_LIBRARY GPULAB_CUDNN_INCLUDE_DIR
  VERSION_VAR gpulabCUDNN_VERSION
  REASON_FAILURE_MESSAGE "cuDNN 9 not found (cudnn.h / libcudnn). Install cuDNN or set CUDNN_ROOT.")

if(gpulabCUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION ${GPULAB_CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GPULAB_CUDNN_INCLUDE_DIR})
endif()
