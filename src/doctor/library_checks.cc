// Checks of the CUDA libraries: driver API version, CUDA runtime, cuDNN, cuBLAS (all loaded with dlopen).
#include <dlfcn.h>
#include <link.h>

#include <fmt/format.h>

#include "doctor/doctor.h"
#include "telemetry/cuda_driver.h"

namespace gpulab::doctor {
namespace {

struct Loaded {
  void* handle = nullptr;
  std::string path;
};

// Tries each soname, first through the loader's search path, then in /usr/local/cuda/lib64.
Loaded open_first(std::initializer_list<const char*> sonames, std::string* errors) {
  for (const char* dir : {"", "/usr/local/cuda/lib64/"}) {
    for (const char* so : sonames) {
      const std::string name = std::string(dir) + so;
      void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        if (const char* e = dlerror(); e && errors->size() < 600) *errors += std::string(e) + "; ";
        continue;
      }
      Loaded l{h, name};
      struct link_map* map = nullptr;
      if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name && *map->l_name)
        l.path = map->l_name;
      return l;
    }
  }
  return {};
}

}  // namespace

std::string cuda_version_text(int cuda_version) {
  return fmt::format("{}.{}", cuda_version / 1000, (cuda_version % 1000) / 10);
}

std::optional<int> built_cuda_version() {
#ifdef GPULAB_CUDA_BUILD_VERSION
  return GPULAB_CUDA_BUILD_VERSION;
#else
  return std::nullopt;
#endif
}

Finding judge_cuda_driver(std::optional<int> driver_version, std::optional<int> built_version,
                          const std::string& load_error) {
  Finding f{.check = "CUDA driver version"};
  if (!driver_version) {
    f.status = Severity::kFail;
    f.detail = load_error.empty() ? "libcuda.so.1 not usable" : load_error;
    f.fix =
        "Install the NVIDIA driver (it provides libcuda.so.1); in a container use the NVIDIA "
        "container runtime (--gpus all)";
    return f;
  }
  if (!built_version) {
    f.status = Severity::kPass;
    f.detail = fmt::format("driver supports CUDA {} (gpulab's build CUDA version unknown)",
                           cuda_version_text(*driver_version));
    return f;
  }
  if (*driver_version < *built_version) {
    f.status = Severity::kFail;
    f.detail = fmt::format("driver supports CUDA {}, gpulab was built with CUDA {}",
                           cuda_version_text(*driver_version), cuda_version_text(*built_version));
    f.fix = fmt::format(
        "Upgrade the NVIDIA driver to one that supports CUDA {} (see the CUDA toolkit "
        "release notes, table of minimum driver versions), or build gpulab with CUDA {}",
        cuda_version_text(*built_version), cuda_version_text(*driver_version));
    return f;
  }
  f.status = Severity::kPass;
  f.detail = fmt::format("driver supports CUDA {} >= CUDA {} gpulab was built with",
                         cuda_version_text(*driver_version), cuda_version_text(*built_version));
  return f;
}

Finding judge_library(std::string_view name, const LibraryProbe& probe, std::optional<int> built_cuda_major) {
  Finding f{.check = std::string(name)};
  if (!probe.found) {
    f.status = Severity::kFail;
    f.detail = fmt::format("not found ({})", probe.path_or_error);
    f.fix = name == "cuDNN"
                ? "Install cuDNN 9 for your CUDA major (e.g. `sudo apt install cudnn9-cuda-12` from NVIDIA's "
                  "repository) or add its lib directory to LD_LIBRARY_PATH"
                : "Install the CUDA toolkit's cuBLAS (e.g. `sudo apt install libcublas-12-x`) or add "
                  "/usr/local/cuda/lib64 to LD_LIBRARY_PATH";
    return f;
  }
  f.detail = fmt::format("{} {}", probe.version, probe.path_or_error);
  if (probe.cuda_major && built_cuda_major && *probe.cuda_major != *built_cuda_major) {
    f.status = Severity::kFail;
    f.detail +=
        fmt::format(", built for CUDA {} but gpulab uses CUDA {}", *probe.cuda_major, *built_cuda_major);
    f.fix = fmt::format("Install the {} build for CUDA {} (the library's CUDA major must match gpulab's)",
                        name, *built_cuda_major);
    return f;
  }
  if (probe.cuda_major) f.detail += fmt::format(", CUDA {}", *probe.cuda_major);
  f.status = Severity::kPass;
  return f;
}

LibraryProbe probe_cudnn() {
  LibraryProbe p;
  std::string errors;
  Loaded l = open_first({"libcudnn.so.9", "libcudnn.so.8"}, &errors);
  if (l.handle == nullptr) {
    p.path_or_error = errors.empty() ? "libcudnn.so.9 not found" : errors.substr(0, errors.size() - 2);
    return p;
  }
  p.found = true;
  p.path_or_error = l.path;
  auto get_version = reinterpret_cast<size_t (*)()>(dlsym(l.handle, "cudnnGetVersion"));
  auto get_cudart = reinterpret_cast<size_t (*)()>(dlsym(l.handle, "cudnnGetCudartVersion"));
  if (get_version != nullptr) {
    const size_t v = get_version();
    // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 major*1000 + minor*100 + patch.
    if (v >= 90000)
      p.version = fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
    else
      p.version = fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
  }
  if (get_cudart != nullptr) p.cuda_major = static_cast<int>(get_cudart() / 1000);
  dlclose(l.handle);
  return p;
}

LibraryProbe probe_cublas() {
  LibraryProbe p;
  std::string errors;
  Loaded l = open_first({"libcublas.so.13", "libcublas.so.12", "libcublas.so.11"}, &errors);
  if (l.handle == nullptr) {
    p.path_or_error = errors.empty() ? "libcublas.so not found" : errors.substr(0, errors.size() - 2);
    return p;
  }
  p.found = true;
  p.path_or_error = l.path;
  // cublasGetProperty(libraryPropertyType, int*): MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2.
  auto get_property = reinterpret_cast<int (*)(int, int*)>(dlsym(l.handle, "cublasGetProperty"));
  if (get_property != nullptr) {
    int major = 0, minor = 0, patch = 0;
    if (get_property(0, &major) == 0 && get_property(1, &minor) == 0 && get_property(2, &patch) == 0) {
      p.version = fmt::format("{}.{}.{}", major, minor, patch);
      p.cuda_major = major;  // cuBLAS's major version is the CUDA major it ships with
    }
  }
  dlclose(l.handle);
  return p;
}

LibraryProbe probe_cuda_runtime() {
  LibraryProbe p;
  std::string errors;
  Loaded l = open_first({"libcudart.so.13", "libcudart.so.12"}, &errors);
  if (l.handle == nullptr) {
    p.path_or_error = errors.empty() ? "libcudart.so.13 not found" : errors.substr(0, errors.size() - 2);
    return p;
  }
  p.found = true;
  p.path_or_error = l.path;
  auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(l.handle, "cudaRuntimeGetVersion"));
  int v = 0;
  if (get_version != nullptr && get_version(&v) == 0) {  // 0: cudaSuccess
    p.version = cuda_version_text(v);
    p.cuda_major = v / 1000;
  }
  dlclose(l.handle);
  return p;
}

}  // namespace gpulab::doctor
