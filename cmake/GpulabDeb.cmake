# `cpack` in a build folder (after the build) writes packages/gpulab_<version>_<arch>.deb: what
# `cmake --install` puts under the prefix, under /usr. scripts/package.sh builds it, unpacks it
# and runs it.
#
# Depends: dpkg-shlibdeps reads the binary's shared libraries and names the Debian packages that
# hold them (libprotobuf, libonnx, libfmt, libpng, libturbojpeg, cpp-httplib, libstdc++, libc). A
# library no package owns (the CUDA libraries under /usr/local/cuda) is left out; a CUDA build
# recommends NVIDIA's packages of them instead, as named in NVIDIA's CUDA repository (the CUDA
# container images have them installed). Suggests: the -dev packages find_package(gpulab) needs to
# link the static libraries (Debian 12 names).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpulab)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "gpulab developers")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "${PROJECT_DESCRIPTION}\n"
  " gpulab turns ONNX image classifiers into optimized GPU plans and tells why they run as\n"
  " fast as they do: doctor, classify, inspect, build, bench, sweep, monitor, bandwidth. A CPU\n"
  " reference backend runs every model without a GPU. The package holds the gpulab program,\n"
  " the C++ headers, static libraries and CMake package (find_package(gpulab), target\n"
  " gpulab::engine), a MobileNetV2 ImageNet model and sample photos with their licence notices\n"
  " (/usr/share/gpulab), and the documentation.")
string(REPLACE ";" "" CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "cmake, g++, pkg-config, libfmt-dev, nlohmann-json3-dev, libprotobuf-dev, libonnx-dev, libpng-dev, libturbojpeg0-dev, libcpp-httplib-dev")
if(GPULAB_WITH_CUDA)
  set(gpulab_cuda_mm ${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR})
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
      "cuda-cudart-${gpulab_cuda_mm}, libcublas-${gpulab_cuda_mm}, cuda-nvrtc-${gpulab_cuda_mm}, libcudnn9-cuda-${CUDAToolkit_VERSION_MAJOR}")
endif()
include(CPack)
