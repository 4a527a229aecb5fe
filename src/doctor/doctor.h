// `gpulab doctor`: is this machine set up right for gpulab?
//
// Every check returns Findings {check, status, detail, fix}. The checks that read the system
// (/proc, /sys, efivars, container markers) take a SystemView whose root defaults to "/", so
// tests point them at a temporary directory laid out like a real system. Library, driver and
// GPU checks load their libraries at run time (dlopen) and report "fail" or "skip" with the
// reason when they are missing; nothing here aborts. Not thread-safe across concurrent
// run_doctor calls on one GPU (the PCIe check drives transfers).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"

namespace gpulab::doctor {

enum class Severity { kPass = 0, kSkip = 1, kWarn = 2, kFail = 3 };  // ordered by badness
std::string_view severity_name(Severity s);                          // "pass", "skip", "warn", "fail"

struct Finding {
  std::string check;  // "nouveau", "secure boot", "GPU 0 PCIe link"
  Severity status = Severity::kPass;
  std::string detail;  // what was found, with values
  std::string fix;     // what to do; empty for pass/skip
};

// Where the system files are read from, and the environment to judge.
struct SystemView {
  std::filesystem::path root = "/";        // prefix for /proc, /sys, /dev, /run, /.dockerenv
  std::map<std::string, std::string> env;  // NVIDIA_VISIBLE_DEVICES, container, ...
  bool run_commands = false;               // may run mokutil / modinfo (only with root "/")
  std::filesystem::path path(std::string_view absolute) const;  // root + absolute
  // The current process's view: root "/", env from the process, commands allowed.
  static SystemView host();
};

// Kernel module checks: nvidia loaded and its version, nouveau loaded.
Finding check_nvidia_module(const SystemView& sys);
Finding check_nouveau(const SystemView& sys);
// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ..." -> "550.54.14".
std::optional<std::string> parse_nvidia_module_version(std::string_view proc_version_text);
// Secure Boot state from efivars (5th byte of SecureBoot-8be4df61-...), mokutil when allowed,
// then whether the nvidia module can load under it (signed: no 'E' taint, modinfo sig_id).
std::vector<Finding> check_secure_boot(const SystemView& sys);
// Inside a container or not, and the NVIDIA container runtime's traces.
std::vector<Finding> check_container(const SystemView& sys);

// Versions are CUDA-style integers: 12040 = 12.4.
std::string cuda_version_text(int cuda_version);  // 12040 -> "12.4"
// CUDA driver API version vs the CUDA version gpulab was built with (nullopt: unknown).
Finding judge_cuda_driver(std::optional<int> driver_version, std::optional<int> built_version,
                          const std::string& load_error);
// cuDNN / cuBLAS found, version, and its CUDA major vs the one gpulab was built with.
struct LibraryProbe {
  bool found = false;
  std::string path_or_error;      // the file loaded, or why none was
  std::string version;            // "9.1.0"
  std::optional<int> cuda_major;  // CUDA major the library belongs to / was built for
};
Finding judge_library(std::string_view name, const LibraryProbe& probe, std::optional<int> built_cuda_major);
LibraryProbe probe_cudnn();
LibraryProbe probe_cublas();
LibraryProbe probe_cuda_runtime();  // libcudart.so.13 / .12: cudaRuntimeGetVersion
// The CUDA version gpulab was built against (from the toolkit found at configure time).
std::optional<int> built_cuda_version();

struct DoctorOptions {
  SystemView system = SystemView::host();
  bool library_checks = true;  // dlopen cuDNN, cuBLAS, CUDA driver
  bool gpu_checks = true;      // NVML and per-GPU checks
  int pcie_load_ms = 400;      // duration of the transfer that wakes the PCIe link; 0 to skip
};

std::vector<Finding> run_doctor(const DoctorOptions& options);

// 0 when no finding failed (warnings count as failures with strict), else 1.
int exit_code(const std::vector<Finding>& findings, bool strict);
std::string format_table(const std::vector<Finding>& findings);
nlohmann::json to_json(const std::vector<Finding>& findings);
// Reads `doctor --json` back (gpulab report): kInvalidFile naming the finding and field that is
// missing, of the wrong type, or a status other than pass/skip/warn/fail. Never throws.
Result<std::vector<Finding>> findings_from_json(const nlohmann::json& doc);

}  // namespace gpulab::doctor
