# gpulab_target_defaults(target): include paths, warnings, -Werror when asked.
function(gpulab_target_defaults target)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:include>)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers
      # GCC 12 reports false -Wrestrict positives inside std::string operator+ (GCC bug 105329).
      $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${GPULAB_WERROR}>>:-Werror>)
endfunction()

# gpulab_add_library(name SOURCES ... DEPS ...): one static library per source folder, installed and
# exported as gpulab::<name> (cmake/GpulabPackage.cmake).
function(gpulab_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(gpulab_${name} STATIC ${ARG_SOURCES})
  add_library(gpulab::${name} ALIAS gpulab_${name})
  gpulab_target_defaults(gpulab_${name})
  target_link_libraries(gpulab_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  gpulab_install_library(gpulab_${name} ${name})
endfunction()
