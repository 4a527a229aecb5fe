#include "doctor/versions.h"

#include <fmt/format.h>

#include "gpulab/build_versions.h"
#include "telemetry/cuda_driver.h"

namespace gpulab::doctor {
namespace {

// A library's row: found or why not.
ComponentVersion library_row(std::string name, std::string built, const LibraryProbe& probe) {
  ComponentVersion row{.component = std::move(name), .built = std::move(built)};
  if (probe.found) {
    row.found = probe.version.empty() ? "?" : probe.version;
    row.detail = probe.path_or_error;
  } else {
    row.detail = "not found: " + probe.path_or_error;
  }
  return row;
}

ComponentVersion header_only_row(std::string name, std::string built) {
  ComponentVersion row{.component = std::move(name), .built = std::move(built)};
  row.found = row.built;
  row.detail = row.built.empty() ? "not used by this build" : "header-only: compiled in";
  return row;
}

}  // namespace

BuiltVersions BuiltVersions::of_this_build() {
  return {.cuda = GPULAB_BUILT_CUDA,
          .cudnn = GPULAB_BUILT_CUDNN,
          .cublas = GPULAB_BUILT_CUBLAS,
          .cudnn_frontend = GPULAB_BUILT_CUDNN_FRONTEND,
          .cutlass = GPULAB_BUILT_CUTLASS};
}

FoundVersions FoundVersions::probe() {
  FoundVersions f;
  auto driver = telemetry::cuda::Driver::driver_version();
  if (driver.is_ok()) {
    f.cuda_driver = driver.value();
  } else {
    f.cuda_driver_error = driver.status().message();
  }
  f.cuda_runtime = probe_cuda_runtime();
  f.cudnn = probe_cudnn();
  f.cublas = probe_cublas();
  return f;
}

std::vector<ComponentVersion> component_versions(const BuiltVersions& built, const FoundVersions& found) {
  std::vector<ComponentVersion> rows;
  rows.push_back(library_row("CUDA runtime", built.cuda, found.cuda_runtime));
  ComponentVersion driver{.component = "CUDA driver"};
  if (found.cuda_driver) {
    driver.found = cuda_version_text(*found.cuda_driver);
    driver.detail = "the CUDA version libcuda.so.1 supports";
  } else {
    driver.detail =
        "not found: " + (found.cuda_driver_error.empty() ? "libcuda.so.1" : found.cuda_driver_error);
  }
  rows.push_back(std::move(driver));
  rows.push_back(library_row("cuDNN", built.cudnn, found.cudnn));
  rows.push_back(library_row("cuBLAS", built.cublas, found.cublas));
  rows.push_back(header_only_row("cuDNN frontend", built.cudnn_frontend));
  rows.push_back(header_only_row("CUTLASS", built.cutlass));
  return rows;
}

std::string format_versions(const std::string& headline, const std::vector<ComponentVersion>& rows) {
  std::string out = headline + "\n";
  out += fmt::format("{:<16}{:<12}{:<12}{}\n", "component", "built with", "found", "detail");
  for (const ComponentVersion& r : rows)
    out += fmt::format("{:<16}{:<12}{:<12}{}\n", r.component, r.built.empty() ? "-" : r.built,
                       r.found.empty() ? "-" : r.found, r.detail);
  return out;
}

nlohmann::json versions_to_json(const std::vector<ComponentVersion>& rows) {
  nlohmann::json out = nlohmann::json::array();
  const auto text_or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  for (const ComponentVersion& r : rows)
    out.push_back({{"component", r.component},
                   {"built", text_or_null(r.built)},
                   {"found", text_or_null(r.found)},
                   {"detail", r.detail}});
  return out;
}

}  // namespace gpulab::doctor
