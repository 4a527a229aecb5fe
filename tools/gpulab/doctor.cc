// gpulab doctor: is this machine set up right? Findings as a table or JSON; the exit code is 1
// when a check failed (also on a warning with --strict), else 0.
#ifdef GPULAB_HAVE_DOCTOR

#include <cstdio>

#include "cli.h"
#include "doctor/doctor.h"
#include "telemetry/telemetry.h"
#include "telemetry/topology.h"

namespace gpulab::cli {

void add_doctor_command(CLI::App& app) {
  struct Options {
    bool json = false;
    bool strict = false;
    bool no_gpu = false;
    bool no_libraries = false;
    int pcie_load_ms = 400;
    std::string root;
    bool topology = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "doctor",
      "Check driver, CUDA/cuDNN/cuBLAS versions, Secure Boot, nouveau, containers, PCIe link, "
      "throttling, ECC and free memory; exit 1 when a check fails");
  sub->add_flag("--json", opts->json, "Print the findings as JSON");
  sub->add_flag("--strict", opts->strict, "Exit 1 on warnings too");
  sub->add_flag("--no-gpu", opts->no_gpu, "Skip NVML and the per-GPU checks");
  sub->add_flag("--no-libraries", opts->no_libraries, "Skip the CUDA driver, cuDNN and cuBLAS checks");
  sub->add_option("--pcie-load-ms", opts->pcie_load_ms,
                  "Duration of the transfer that wakes the PCIe link before reading it (0: read it idle)")
      ->check(CLI::Range(0, 10000));
  sub->add_flag(
      "--topology", opts->topology,
      "Print how the GPUs connect (NVLink, PCIe switches, host bridges, NUMA) and each GPU's CPUs, as "
      "`nvidia-smi topo -m` does, and exit");
  sub->add_option("--root", opts->root,
                  "Read /proc, /sys, /dev and container markers below this directory (for tests)")
      ->check(CLI::ExistingDirectory);
  on_run(sub, [opts] {
    if (opts->topology) {
      GPULAB_ASSIGN_OR_REPORT(auto nvml, telemetry::Telemetry::open());
      GPULAB_ASSIGN_OR_REPORT(const telemetry::Topology topo, telemetry::read_topology(*nvml));
      if (opts->json) {
        std::printf("%s\n", telemetry::to_json(topo).dump(2).c_str());
      } else {
        std::printf("%s", telemetry::format_topology(topo).c_str());
      }
      return 0;
    }
    doctor::DoctorOptions options;
    if (!opts->root.empty()) {
      options.system = doctor::SystemView{};
      options.system.root = opts->root;
    }
    options.gpu_checks = !opts->no_gpu;
    options.library_checks = !opts->no_libraries;
    options.pcie_load_ms = opts->pcie_load_ms;
    const auto findings = doctor::run_doctor(options);
    if (opts->json) {
      std::printf("%s\n", doctor::to_json(findings).dump(2).c_str());
    } else {
      std::printf("%s", doctor::format_table(findings).c_str());
    }
    std::fflush(stdout);
    return doctor::exit_code(findings, opts->strict);
  });
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_DOCTOR
