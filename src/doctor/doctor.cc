#include "doctor/doctor.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/affinity.h"
#include "core/json_reader.h"
#include "measure/bandwidth.h"
#include "telemetry/cuda_driver.h"
#include "telemetry/telemetry.h"
#include "telemetry/topology.h"

namespace gpulab::doctor {
namespace {

std::string gpu_check(std::uint32_t index, std::string_view what) {
  return fmt::format("GPU {} {}", index, what);
}

void add(std::vector<Finding>& out, std::vector<Finding> more) {
  for (auto& f : more) out.push_back(std::move(f));
}

// Major part of a driver version string: "550.54.14" -> "550.54.14" (compared whole).
Finding check_nvml(const std::string& module_detail, Result<std::shared_ptr<telemetry::Telemetry>>& nvml) {
  Finding f{.check = "NVML"};
  if (!nvml.is_ok()) {
    f.status = Severity::kFail;
    f.detail = nvml.status().message();
    const bool mismatch = f.detail.find("version mismatch") != std::string::npos;
    f.fix = mismatch ? "Reboot, or unload and reload the nvidia modules (sudo rmmod nvidia_uvm nvidia_drm "
                       "nvidia_modeset nvidia && sudo modprobe nvidia), so that kernel module and user-space "
                       "driver have the same version"
                     : "Install the NVIDIA driver (it provides libnvidia-ml.so.1) and check `nvidia-smi`";
    return f;
  }
  const auto& t = *nvml.value();
  f.status = Severity::kPass;
  f.detail =
      fmt::format("NVML {}, driver {}, {} GPU(s)", t.nvml_version(), t.driver_version(), t.device_count());
  // The kernel module and the user-space driver must be the same version.
  const std::string driver = t.driver_version();
  const size_t v = module_detail.find("version ");
  if (!driver.empty() && v != std::string::npos) {
    const std::string module_version = module_detail.substr(v + 8);
    if (module_version != "unknown" && module_version != driver) {
      f.status = Severity::kWarn;
      f.detail += fmt::format("; kernel module is {}", module_version);
      f.fix = "Reboot after the driver upgrade so that the kernel module matches the user-space driver";
    }
  }
  return f;
}

Finding check_architecture(std::uint32_t index, const telemetry::DeviceFacts& facts) {
  Finding arch{.check = gpu_check(index, "architecture"), .status = Severity::kPass};
  arch.detail = telemetry::describe(facts);
  if (!facts.from_table) arch.detail += " (not in gpulab's datasheet table: peak rates unknown)";
  return arch;
}

Finding check_persistence_mode(std::uint32_t index, const telemetry::DeviceInfo& info) {
  Finding pm{.check = gpu_check(index, "persistence mode")};
  if (!info.persistence_mode) {
    pm.status = Severity::kSkip;
    pm.detail = "not supported or not readable";
  } else if (*info.persistence_mode) {
    pm.status = Severity::kPass;
    pm.detail = "enabled";
  } else {
    pm.status = Severity::kWarn;
    pm.detail =
        "disabled: the driver tears the GPU down when no client is attached, so every start pays "
        "seconds of initialisation and clocks/ECC state reset";
    pm.fix = "Enable it: `sudo systemctl enable --now nvidia-persistenced` (or `sudo nvidia-smi -pm 1`)";
  }
  return pm;
}

// The link's generation and width, the highest seen (an idle link drops to a lower generation to
// save power); `load_note` says whether they were seen under load.
struct LinkObservation {
  std::optional<std::uint32_t> gen, width;
  std::string load_note;
};

// Samples the link, and again under a host-to-device transfer of `pcie_load_ms` when it is not at
// its maximum idle.
LinkObservation observe_pcie_link(const telemetry::Telemetry& t, std::uint32_t index,
                                  const telemetry::DeviceInfo& info, int pcie_load_ms) {
  LinkObservation seen;
  auto observe = [&] {
    auto s = t.sample(index, {.processes = false});
    if (!s.is_ok()) return;
    if (s->pcie_gen) seen.gen = std::max(seen.gen.value_or(0), *s->pcie_gen);
    if (s->pcie_width) seen.width = std::max(seen.width.value_or(0), *s->pcie_width);
  };
  observe();
  const bool at_max_idle = seen.gen && seen.width && info.pcie_gen_max && info.pcie_width_max &&
                           *seen.gen >= *info.pcie_gen_max && *seen.width >= *info.pcie_width_max;
  if (!at_max_idle && pcie_load_ms > 0) {
    Status load = Status::ok();
    auto driver = telemetry::cuda::Driver::load();
    if (!driver.is_ok()) {
      load = driver.status();
    } else if (auto dev = driver.value()->device_by_uuid(info.uuid); !dev.is_ok()) {
      load = dev.status();
    } else {
      load = measure::run_transfer_load(dev.value(), pcie_load_ms, observe);
    }
    seen.load_note = load.is_ok() ? fmt::format(" (under a {} ms host-to-device transfer)", pcie_load_ms)
                                  : fmt::format(" (idle: could not load the link: {})", load.message());
  }
  return seen;
}

// PCIe link under load against the link's maximum.
Finding check_pcie_link(const telemetry::Telemetry& t, std::uint32_t index, const telemetry::DeviceInfo& info,
                        int pcie_load_ms) {
  Finding link{.check = gpu_check(index, "PCIe link")};
  const LinkObservation seen = observe_pcie_link(t, index, info, pcie_load_ms);
  const auto& gen = seen.gen;
  const auto& width = seen.width;
  const std::string& load_note = seen.load_note;
  if (!gen || !width || !info.pcie_gen_max || !info.pcie_width_max) {
    link.status = Severity::kSkip;
    link.detail = "PCIe link generation/width not reported (not a PCIe device, or NVML lacks it)";
  } else {
    const auto rate = telemetry::pcie_bandwidth_gb_s(static_cast<int>(*gen), static_cast<int>(*width));
    const auto max_rate = telemetry::pcie_bandwidth_gb_s(static_cast<int>(*info.pcie_gen_max),
                                                         static_cast<int>(*info.pcie_width_max));
    link.detail = fmt::format("gen{} x{} of max gen{} x{}{}", *gen, *width, *info.pcie_gen_max,
                              *info.pcie_width_max, load_note);
    if (rate && max_rate)
      link.detail += fmt::format(", {:.1f} of {:.1f} GB/s per direction", *rate, *max_rate);
    if (*gen >= *info.pcie_gen_max && *width >= *info.pcie_width_max) {
      link.status = Severity::kPass;
    } else if (load_note.find("idle") != std::string::npos && *width >= *info.pcie_width_max) {
      link.status = Severity::kSkip;  // generation below max at idle is power saving, not a fault
    } else {
      link.status = Severity::kWarn;
      link.detail = fmt::format("x{} gen{} instead of x{} gen{}{}", *width, *gen, *info.pcie_width_max,
                                *info.pcie_gen_max, load_note);
      link.fix =
          "Check the slot (use a CPU-attached x16 slot, not a chipset or x8 one), the riser cable, "
          "and the BIOS PCIe settings (link speed Auto/GenN, bifurcation); reseat the card";
    }
  }
  return link;
}

Finding check_clock_events(std::uint32_t index, const telemetry::GpuSample& s) {
  Finding thr{.check = gpu_check(index, "clock-event reasons")};
  if (!s.clock_event_reasons) {
    thr.status = Severity::kSkip;
    thr.detail = "not supported";
  } else {
    using namespace telemetry::clock_event;
    const std::uint64_t r = *s.clock_event_reasons;
    thr.detail = telemetry::clock_event_reasons_string(r);
    if (r & (kHwSlowdown | kHwThermalSlowdown | kHwPowerBrakeSlowdown)) {
      thr.status = Severity::kFail;
      thr.fix =
          "Hardware slowdown: check cooling (fans, airflow, ambient temperature) and power delivery "
          "(PCIe power cables, PSU capacity); see `nvidia-smi -q -d PERFORMANCE`";
    } else if (r & (kSwThermalSlowdown | kSwPowerCap)) {
      thr.status = Severity::kWarn;
      thr.fix =
          "The GPU is held below its clocks by the power limit or temperature; check cooling and "
          "`nvidia-smi -q -d POWER` (raise the limit with `sudo nvidia-smi -pl <W>` if allowed)";
    } else {
      thr.status = Severity::kPass;
    }
  }
  return thr;
}

Finding check_ecc(std::uint32_t index, const telemetry::GpuSample& s) {
  Finding ecc{.check = gpu_check(index, "ECC")};
  if (!s.ecc_enabled) {
    ecc.status = Severity::kSkip;
    ecc.detail = "ECC not supported on this GPU";
  } else if (!*s.ecc_enabled) {
    ecc.status = Severity::kPass;
    ecc.detail = "ECC disabled";
  } else {
    const auto unc = s.ecc_uncorrected_volatile.value_or(0);
    const auto corr = s.ecc_corrected_volatile.value_or(0);
    const bool pending = s.remap_pending.value_or(false);
    ecc.detail = fmt::format("enabled; volatile corrected {}, uncorrected {}", corr, unc);
    if (s.remapped_rows_correctable || s.remapped_rows_uncorrectable)
      ecc.detail += fmt::format("; remapped rows {} correctable, {} uncorrectable{}",
                                s.remapped_rows_correctable.value_or(0),
                                s.remapped_rows_uncorrectable.value_or(0), pending ? ", remap pending" : "");
    if (s.retired_pages_sbe || s.retired_pages_dbe)
      ecc.detail += fmt::format("; retired pages {} sbe, {} dbe", s.retired_pages_sbe.value_or(0),
                                s.retired_pages_dbe.value_or(0));
    if (unc > 0 || pending) {
      ecc.status = Severity::kFail;
      ecc.fix =
          "Uncorrected memory errors: drain the GPU and reset it (`sudo nvidia-smi -r -i N`) so that "
          "the affected rows are remapped; if errors recur, contact the vendor (RMA)";
    } else {
      ecc.status = Severity::kPass;
    }
  }
  return ecc;
}

Finding check_free_memory(std::uint32_t index, const telemetry::GpuSample& s) {
  Finding mem{.check = gpu_check(index, "free memory")};
  if (!s.memory_total_bytes || !s.memory_used_bytes) {
    mem.status = Severity::kSkip;
    mem.detail = "memory usage not reported";
  } else {
    const double total = static_cast<double>(*s.memory_total_bytes);
    const double free_bytes = total - static_cast<double>(*s.memory_used_bytes);
    mem.detail = fmt::format("{:.0f} of {:.0f} MiB free ({:.0f}%)", free_bytes / (1 << 20), total / (1 << 20),
                             100.0 * free_bytes / total);
    if (s.processes && !s.processes->empty()) {
      std::vector<std::string> procs;
      for (const auto& p : *s.processes)
        procs.push_back(fmt::format("pid {} {} MiB", p.pid,
                                    p.used_bytes ? std::to_string(*p.used_bytes >> 20) : std::string("?")));
      mem.detail += fmt::format("; processes: {}", fmt::join(procs, ", "));
    }
    if (free_bytes < 0.1 * total) {
      mem.status = Severity::kWarn;
      mem.fix =
          "Other processes hold most of the GPU's memory; stop them (see `gpulab monitor`) before "
          "benchmarking, or gpulab's batch sizes will be limited";
    } else {
      mem.status = Severity::kPass;
    }
  }
  return mem;
}

std::vector<Finding> check_gpu(const telemetry::Telemetry& t, std::uint32_t index, int pcie_load_ms) {
  std::vector<Finding> out;
  auto info_r = t.device_info(index);
  if (!info_r.is_ok()) {
    out.push_back({gpu_check(index, "info"), Severity::kFail, info_r.status().message(),
                   "Check `nvidia-smi` and `sudo dmesg | grep -i xid`"});
    return out;
  }
  const telemetry::DeviceInfo& info = info_r.value();
  out.push_back(check_architecture(index, info.facts));
  out.push_back(check_persistence_mode(index, info));
  out.push_back(check_pcie_link(t, index, info, pcie_load_ms));
  auto sample_r = t.sample(index, {.processes = true});
  if (!sample_r.is_ok()) {
    out.push_back({gpu_check(index, "state"), Severity::kFail, sample_r.status().message(),
                   "Check `nvidia-smi` and `sudo dmesg | grep -i xid`"});
    return out;
  }
  const telemetry::GpuSample& s = sample_r.value();
  out.push_back(check_clock_events(index, s));
  out.push_back(check_ecc(index, s));
  out.push_back(check_free_memory(index, s));
  return out;
}

// What differs between a GPU and the best of its peers, as text ("" when nothing does): a
// narrower or older PCIe link, a lower maximum SM clock, a lower power limit.
std::string below_peers(const telemetry::Topology& topo, size_t i) {
  const telemetry::GpuPlace& g = topo.gpus[i];
  std::uint32_t best_width = 0, best_gen = 0, best_clock = 0;
  double best_power = 0;
  for (size_t j = 0; j < topo.gpus.size(); ++j) {
    if (j == i) continue;
    const telemetry::GpuPlace& p = topo.gpus[j];
    best_width = std::max(best_width, p.pcie_width.value_or(0));
    best_gen = std::max(best_gen, p.pcie_gen_max.value_or(0));
    best_clock = std::max(best_clock, p.sm_clock_max_mhz.value_or(0));
    best_power = std::max(best_power, p.power_limit_w.value_or(0));
  }
  std::vector<std::string> parts;
  if (g.pcie_width && *g.pcie_width < best_width) {
    parts.push_back(fmt::format("PCIe x{} where a peer has x{}", *g.pcie_width, best_width));
  }
  if (g.pcie_gen_max && *g.pcie_gen_max < best_gen) {
    parts.push_back(fmt::format("PCIe gen{} at most where a peer has gen{}", *g.pcie_gen_max, best_gen));
  }
  if (g.sm_clock_max_mhz && *g.sm_clock_max_mhz < best_clock) {
    parts.push_back(
        fmt::format("max SM clock {} MHz where a peer has {} MHz", *g.sm_clock_max_mhz, best_clock));
  }
  if (g.power_limit_w && *g.power_limit_w + 0.5 < best_power) {
    parts.push_back(
        fmt::format("power limit {:.0f} W where a peer has {:.0f} W", *g.power_limit_w, best_power));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

// Several GPUs: how they connect, which CPUs feed each, and any GPU that is below its peers.
std::vector<Finding> check_topology(const telemetry::Telemetry& t) {
  std::vector<Finding> out;
  auto topo = telemetry::read_topology(t);
  if (!topo.is_ok()) {
    out.push_back({"GPU topology", Severity::kSkip, topo.status().message(), ""});
    return out;
  }
  std::vector<std::string> pairs;
  for (size_t i = 0; i < topo->gpus.size(); ++i) {
    for (size_t j = i + 1; j < topo->gpus.size(); ++j) {
      pairs.push_back(fmt::format("GPU{}-GPU{} {}", i, j, telemetry::link_name(topo->links[i][j])));
    }
  }
  out.push_back({"GPU topology", Severity::kPass, fmt::format("{}", fmt::join(pairs, ", ")), ""});
  for (size_t i = 0; i < topo->gpus.size(); ++i) {
    const telemetry::GpuPlace& g = topo->gpus[i];
    Finding numa{.check = gpu_check(g.index, "NUMA affinity")};
    if (g.cpus.empty()) {
      numa.status = Severity::kSkip;
      numa.detail = "NVML does not give this GPU's CPU affinity";
    } else {
      numa.status = Severity::kPass;
      numa.detail = fmt::format("CPUs {}{}", format_cpu_list(g.cpus),
                                g.numa_node ? fmt::format(", NUMA node {}", *g.numa_node) : "");
    }
    out.push_back(std::move(numa));
    if (const std::string below = below_peers(*topo, i); !below.empty()) {
      out.push_back({gpu_check(g.index, "vs its peers"), Severity::kWarn, below,
                     "A GPU below its peers holds back work split evenly across them: check its slot (x16, "
                     "CPU-attached), `nvidia-smi -q -d CLOCK,POWER` for application clocks or a lower power "
                     "limit, and its cooling"});
    }
  }
  return out;
}

}  // namespace

std::vector<Finding> run_doctor(const DoctorOptions& options) {
  std::vector<Finding> out;
  const Finding module = check_nvidia_module(options.system);
  out.push_back(module);
  out.push_back(check_nouveau(options.system));
  add(out, check_secure_boot(options.system));
  add(out, check_container(options.system));
  if (options.library_checks) {
    auto driver_version = telemetry::cuda::Driver::driver_version();
    out.push_back(judge_cuda_driver(
        driver_version.is_ok() ? std::optional<int>(driver_version.value()) : std::nullopt,
        built_cuda_version(), driver_version.is_ok() ? "" : driver_version.status().message()));
    std::optional<int> built_major;
    if (auto b = built_cuda_version()) built_major = *b / 1000;
    out.push_back(judge_library("cuDNN", probe_cudnn(), built_major));
    out.push_back(judge_library("cuBLAS", probe_cublas(), built_major));
  }
  if (!options.gpu_checks) return out;
  auto nvml = telemetry::Telemetry::open();
  out.push_back(check_nvml(module.detail, nvml));
  if (!nvml.is_ok()) {
    out.push_back({"GPUs", Severity::kSkip, "per-GPU checks need NVML (see above)", ""});
    return out;
  }
  if (nvml.value()->device_count() == 0) {
    out.push_back(
        {"GPUs", Severity::kFail, "the driver sees no GPU",
         "Check `lspci | grep -i nvidia`, the card's power cables, and `sudo dmesg | grep -i nvidia`"});
    return out;
  }
  for (std::uint32_t i = 0; i < nvml.value()->device_count(); ++i)
    add(out, check_gpu(*nvml.value(), i, options.pcie_load_ms));
  if (nvml.value()->device_count() > 1) add(out, check_topology(*nvml.value()));
  return out;
}

int exit_code(const std::vector<Finding>& findings, bool strict) {
  Severity worst = Severity::kPass;
  for (const auto& f : findings) worst = std::max(worst, f.status);
  if (worst == Severity::kFail) return 1;
  if (worst == Severity::kWarn && strict) return 1;
  return 0;
}

std::string format_table(const std::vector<Finding>& findings) {
  size_t width = 5;
  for (const auto& f : findings) width = std::max(width, f.check.size());
  std::string out = fmt::format("{:<{}}  {:<6} {}\n", "CHECK", width, "STATUS", "DETAIL");
  int counts[4] = {0, 0, 0, 0};
  for (const auto& f : findings) {
    ++counts[static_cast<int>(f.status)];
    std::string status(severity_name(f.status));
    for (char& c : status) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out += fmt::format("{:<{}}  {:<6} {}\n", f.check, width, status, f.detail);
    if (!f.fix.empty()) out += fmt::format("{:<{}}  {:<6} fix: {}\n", "", width, "", f.fix);
  }
  out += fmt::format("{} pass, {} warn, {} fail, {} skip\n", counts[0], counts[2], counts[3], counts[1]);
  return out;
}

nlohmann::json to_json(const std::vector<Finding>& findings) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& f : findings)
    arr.push_back(
        {{"check", f.check}, {"status", severity_name(f.status)}, {"detail", f.detail}, {"fix", f.fix}});
  return arr;
}

Result<std::vector<Finding>> findings_from_json(const nlohmann::json& doc) {
  if (!doc.is_array()) return Status::invalid_file("doctor: not a JSON array of findings");
  std::vector<Finding> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const JsonReader r{doc[i], fmt::format("doctor[{}]", i)};
    if (!r.doc.is_object()) return r.bad("", "not an object");
    Finding f;
    GPULAB_ASSIGN_OR_RETURN(f.check, r.text("check"));
    GPULAB_ASSIGN_OR_RETURN(const std::string status, r.text("status"));
    bool known = false;
    for (Severity s : {Severity::kPass, Severity::kSkip, Severity::kWarn, Severity::kFail}) {
      if (severity_name(s) != status) continue;
      f.status = s;
      known = true;
    }
    if (!known) return r.bad("status", fmt::format("'{}' is not pass, skip, warn or fail", status));
    GPULAB_ASSIGN_OR_RETURN(f.detail, r.text("detail"));
    GPULAB_ASSIGN_OR_RETURN(f.fix, r.text("fix"));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gpulab::doctor
