# Installing and exporting gpulab: every library made by gpulab_add_library is installed into the
# export set gpulabTargets (as gpulab::<name>), and every package those libraries link is found
# through gpulab_find_package / gpulab_pkg_check_modules, which also write the same call into the
# installed gpulabConfig.cmake. A new module therefore installs and exports itself; a dependency
# found with plain find_package() is reported at configure time by
# gpulab_check_exported_dependencies (gpulabConfig.cmake would not recreate it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GPULAB_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpulab)

# gpulab_find_package(<package> [find_package arguments]): find_package in the caller's scope (a
# macro, so that <package>_FOUND, versions and paths stay visible there), recording the imported
# targets it created and the find_dependency() call that recreates them for a consumer.
macro(gpulab_find_package gpulab_fp_package)
  get_property(gpulab_fp_before DIRECTORY PROPERTY IMPORTED_TARGETS)
  find_package(${gpulab_fp_package} ${ARGN})
  get_property(gpulab_fp_after DIRECTORY PROPERTY IMPORTED_TARGETS)
  if(gpulab_fp_before)
    list(REMOVE_ITEM gpulab_fp_after ${gpulab_fp_before})
  endif()
  set_property(GLOBAL APPEND PROPERTY GPULAB_DEPENDENCY_TARGETS ${gpulab_fp_after})
  set(gpulab_fp_args ${ARGN})
  list(REMOVE_ITEM gpulab_fp_args REQUIRED QUIET)  # find_dependency forwards the consumer's own
  list(JOIN gpulab_fp_args " " gpulab_fp_args)
  string(STRIP "find_dependency(${gpulab_fp_package} ${gpulab_fp_args}" gpulab_fp_call)
  gpulab_record_dependency_call("${gpulab_fp_call})")
endmacro()

# gpulab_pkg_check_modules(<prefix> <module>): a pkg-config module as the imported (global) target
# PkgConfig::<prefix>, recreated the same way by gpulabConfig.cmake.
function(gpulab_pkg_check_modules prefix module)
  if(NOT TARGET PkgConfig::${prefix})
    find_package(PkgConfig REQUIRED)
    pkg_check_modules(${prefix} REQUIRED IMPORTED_TARGET GLOBAL ${module})
  endif()
  set_property(GLOBAL APPEND PROPERTY GPULAB_DEPENDENCY_TARGETS PkgConfig::${prefix})
  gpulab_record_dependency_call("find_dependency(PkgConfig)")
  gpulab_record_dependency_call(
    "pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})\n"
    "if(NOT ${prefix}_FOUND)\n"
    "  set(gpulab_FOUND FALSE)\n"
    "  set(gpulab_NOT_FOUND_MESSAGE \"gpulab needs the pkg-config module ${module} (install its -dev package)\")\n"
    "  return()\n"
    "endif()")
endfunction()

function(gpulab_record_dependency_call)
  string(CONCAT call ${ARGN})
  get_property(calls GLOBAL PROPERTY GPULAB_DEPENDENCY_CALLS)
  if(NOT "${call}" IN_LIST calls)
    set_property(GLOBAL APPEND PROPERTY GPULAB_DEPENDENCY_CALLS "${call}")
  endif()
endfunction()

# gpulab_install_library(<target> <export name>): static library into lib/, exported as
# gpulab::<export name>.
function(gpulab_install_library target export_name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  install(TARGETS ${target} EXPORT gpulabTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT gpulab
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT gpulab)
  set_property(GLOBAL APPEND PROPERTY GPULAB_EXPORTED_TARGETS ${target})
endfunction()

# Fails the configure step when an exported library links an imported target that no
# gpulab_find_package / gpulab_pkg_check_modules call recorded, or a target of this project that
# is not exported: gpulabConfig.cmake could not give a consumer either.
function(gpulab_check_exported_dependencies)
  get_property(exported GLOBAL PROPERTY GPULAB_EXPORTED_TARGETS)
  get_property(known GLOBAL PROPERTY GPULAB_DEPENDENCY_TARGETS)
  foreach(target IN LISTS exported)
    get_target_property(links ${target} LINK_LIBRARIES)
    get_target_property(interface_links ${target} INTERFACE_LINK_LIBRARIES)
    foreach(item IN LISTS links interface_links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
      if(item MATCHES "\\$<" OR NOT TARGET "${item}")
        continue()  # a plain library name (dl), a flag, or a generator expression
      endif()
      get_target_property(aliased ${item} ALIASED_TARGET)
      if(aliased)
        set(item ${aliased})
      endif()
      get_target_property(imported ${item} IMPORTED)
      if(imported AND NOT item IN_LIST known)
        message(FATAL_ERROR
          "gpulab: ${target} links ${item}, which the installed gpulabConfig.cmake would not find for "
          "a consumer. Find its package with gpulab_find_package() or gpulab_pkg_check_modules() "
          "(cmake/GpulabPackage.cmake) instead of find_package() / pkg_check_modules().")
      elseif(NOT imported AND NOT item IN_LIST exported)
        message(FATAL_ERROR
          "gpulab: ${target} links ${item}, a target that is not installed. Create it with "
          "gpulab_add_library() so that it is installed and exported too.")
      endif()
    endforeach()
  endforeach()
endfunction()

# gpulab_install_package(): public headers, the export set, gpulabConfig.cmake and its version
# file, and the find module for cuDNN. Called once, after every module has been added.
function(gpulab_install_package)
  gpulab_check_exported_dependencies()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gpulab DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT gpulab)
  install(FILES ${PROJECT_BINARY_DIR}/generated/gpulab/version.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpulab COMPONENT gpulab)
  install(EXPORT gpulabTargets NAMESPACE gpulab:: DESTINATION ${GPULAB_INSTALL_CMAKEDIR}
          COMPONENT gpulab)

  get_property(calls GLOBAL PROPERTY GPULAB_DEPENDENCY_CALLS)
  list(JOIN calls "\n" GPULAB_CONFIG_DEPENDENCIES)
  set(GPULAB_CONFIG_WITH_CUDA ${GPULAB_WITH_CUDA})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gpulabConfig.cmake.in
    ${PROJECT_BINARY_DIR}/package/gpulabConfig.cmake
    INSTALL_DESTINATION ${GPULAB_INSTALL_CMAKEDIR})
  # 0.x: a minor release may change the API, so only the same major.minor is compatible.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/gpulabConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/package/gpulabConfig.cmake
                ${PROJECT_BINARY_DIR}/package/gpulabConfigVersion.cmake
                ${PROJECT_SOURCE_DIR}/cmake/FindgpulabCUDNN.cmake
          DESTINATION ${GPULAB_INSTALL_CMAKEDIR} COMPONENT gpulab)
endfunction()
