// What gpulab was built with and what it finds at run time, per component: the table of
// `gpulab --version` (and `gpulab version --json`).
//
// Built: the versions this build compiled against, read from the headers at configure time
// (cmake/GpulabBuildVersions.cmake); "" for a component this build does not use (a build without
// CUDA uses none). Found: the CUDA runtime, cuDNN and cuBLAS loaded with dlopen, the CUDA version
// the driver supports (libcuda.so.1), as doctor does, so a build without CUDA reports them too.
// The cuDNN frontend and CUTLASS are header-only: what is compiled in is what runs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "doctor/doctor.h"

namespace gpulab::doctor {

struct BuiltVersions {
  std::string cuda;  // toolkit, "13.0.48"
  std::string cudnn;
  std::string cublas;
  std::string cudnn_frontend;
  std::string cutlass;
  static BuiltVersions of_this_build();
};

struct FoundVersions {
  std::optional<int> cuda_driver;  // CUDA version the driver supports, 13000 = 13.0
  std::string cuda_driver_error;   // why it is unknown
  LibraryProbe cuda_runtime, cudnn, cublas;
  // Loads each library (dlopen) and asks it; never fails.
  static FoundVersions probe();
};

struct ComponentVersion {
  std::string component;  // "CUDA runtime", "CUDA driver", "cuDNN", "cuBLAS", "cuDNN frontend", "CUTLASS"
  std::string built;      // "" = not part of this build
  std::string found;      // "" = not found at run time
  std::string detail;     // the file loaded, why none was, or how a header-only library runs
};

std::vector<ComponentVersion> component_versions(const BuiltVersions& built, const FoundVersions& found);

// "gpulab <version> (commit <commit>, <build type>, <with or without CUDA>)" and one row per component.
std::string format_versions(const std::string& headline, const std::vector<ComponentVersion>& rows);
nlohmann::json versions_to_json(const std::vector<ComponentVersion>& rows);

}  // namespace gpulab::doctor
