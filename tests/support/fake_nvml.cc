// A stand-in libnvidia-ml.so.1 for tests on machines without a GPU: gpulab loads it through the
// same dlopen path as the real library (GPULAB_NVML_LIBRARY=<path>, or LD_LIBRARY_PATH naming its
// folder), so the sampler, `monitor`, `doctor` and `sweep` run their NVML code for real.
//
// Without a scenario it is one "NVIDIA H200" with fixed readings, and implements only part of the
// API (no energy or PCIe throughput; power draw answers NOT_SUPPORTED; clock reasons only under the
// pre-535 "Throttle" name) so that tests see gpulab report those fields as unsupported, never as
// zero. GPULAB_FAKE_NVML_SCENARIO=<file.json> changes that; every key is optional:
//
//   {"driver_version": "550.54.14", "nvml_version": "12.550.54.14", "cuda_driver_version": 12040,
//    "init_error": 9,                        nvmlInit_v2 fails with this nvmlReturn_t
//    "state_file": "/tmp/x/state.json",      power limits set by gpulab are written here (crash-safe)
//                                            and read back at nvmlInit, as a driver keeps them
//    "devices": [{"name": ..., "uuid": ..., "compute_capability": [9, 0], "memory_total_mib": 143771,
//                 "power_limit_w": 700, "power_default_limit_w": 700,
//                 "power_limit_min_w": 200, "power_limit_max_w": 700,
//                 "set_power_limit": "ok" | "no_permission" | "not_supported",
//                 "max_clocks_mhz": {"sm": 1980, "memory": 3201, "graphics": 1980},
//                 "pcie_gen_max": 5, "pcie_width_max": 16,
//                 "processes": [{"pid": 4242, "used_mib": 512}],
//                 "pci_bus_id": "00000000:1B:00.0",   (default from the device's index)
//                 "cpu_affinity": [0, 1, 2, 3], "numa_node": 0,   (absent: NOT_SUPPORTED)
//                 "nvlinks": {"1": 4},                  active NVLinks to device 1
//                 "topology": {"1": 20},                nvmlGpuTopologyLevel_t to device 1
//                 "readings": {...},             what each getter answers; null = NOT_SUPPORTED
//                 "phases": [{"after_ms": 500, "readings": {...}}]}]}
//                                               from after_ms (since nvmlInit) on, these readings
//                                               replace the base ones key by key
//
// Reading keys: gpu_util_pct, memory_util_pct, memory_used_mib, power_w, energy_w (the energy
// counter grows at this many watts from 0 at nvmlInit; absent: NOT_SUPPORTED), sm_clock_mhz,
// memory_clock_mhz, graphics_clock_mhz, clock_event_reasons (bit mask), temperature_c,
// pcie_tx_kb_s, pcie_rx_kb_s, pcie_gen, pcie_width, pstate.
//
// The current enforced power limit is what nvmlDeviceSetPowerManagementLimit last set (or
// power_limit_w); power_w is capped at it. A malformed scenario makes nvmlInit_v2 fail with
// NVML_ERROR_UNKNOWN (999) and a line on stderr, so a test cannot mistake it for the default.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Ret = int;
constexpr Ret kSuccess = 0;
constexpr Ret kInvalidArgument = 2;
constexpr Ret kNotSupported = 3;
constexpr Ret kNoPermission = 4;
constexpr Ret kInsufficientSize = 7;
constexpr Ret kUnknown = 999;

using nlohmann::json;

const json kDefaultReadings = {
    {"gpu_util_pct", 42},         {"memory_util_pct", 17},
    {"memory_used_mib", 1024},    {"power_w", nullptr},
    {"sm_clock_mhz", 1980},       {"memory_clock_mhz", 2619},
    {"graphics_clock_mhz", 1980}, {"clock_event_reasons", 1},
    {"temperature_c", 35},        {"pcie_gen", 5},
    {"pcie_width", 16},           {"pstate", 0},
};

struct FakeDevice {
  json config;
  unsigned power_limit_mw = 700000;
};

struct State {
  std::mutex mutex;
  bool loaded = false;
  Ret init_result = kSuccess;
  json scenario = json::object();
  std::vector<FakeDevice> devices;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::string state_file;
};

State& state() {
  static State s;
  return s;
}

double elapsed_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - state().t0).count();
}

void write_state_file() {
  State& s = state();
  if (s.state_file.empty()) return;
  json limits = json::array();
  for (const FakeDevice& d : s.devices) limits.push_back(d.power_limit_mw / 1000.0);
  const std::string tmp = s.state_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json{{"power_limit_w", limits}}.dump() << "\n";
  }
  std::rename(tmp.c_str(), s.state_file.c_str());
}

// Reads the scenario once per process (at the first nvmlInit_v2).
Ret load_scenario() {
  State& s = state();
  if (s.loaded) return s.init_result;
  s.loaded = true;
  s.t0 = std::chrono::steady_clock::now();
  if (const char* path = std::getenv("GPULAB_FAKE_NVML_SCENARIO"); path != nullptr && *path != '\0') {
    std::ifstream in(path);
    s.scenario = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!in || !s.scenario.is_object()) {
      std::fprintf(stderr, "fake NVML: scenario '%s' is missing or not a JSON object\n", path);
      s.init_result = kUnknown;
      return s.init_result;
    }
  }
  const json devices = s.scenario.value("devices", json::array({json::object()}));
  for (const json& d : devices) {
    FakeDevice fake{.config = d};
    fake.power_limit_mw = static_cast<unsigned>(d.value("power_limit_w", 700.0) * 1000.0);
    s.devices.push_back(std::move(fake));
  }
  s.state_file = s.scenario.value("state_file", "");
  if (!s.state_file.empty() && std::filesystem::exists(s.state_file)) {
    std::ifstream in(s.state_file);
    const json saved = json::parse(in, nullptr, false);
    if (saved.is_object() && saved.contains("power_limit_w")) {
      const json& limits = saved["power_limit_w"];
      for (size_t i = 0; i < s.devices.size() && i < limits.size(); ++i) {
        s.devices[i].power_limit_mw = static_cast<unsigned>(limits[i].get<double>() * 1000.0);
      }
    }
  }
  s.init_result = s.scenario.value("init_error", kSuccess);
  return s.init_result;
}

FakeDevice* device(void* handle) {
  return static_cast<FakeDevice*>(handle);
}

// The reading `key` of a device now: the last phase that has started and names it, else the base
// readings, else the default. nullptr = not supported.
json reading(const FakeDevice* d, const char* key) {
  const double now = elapsed_ms();
  json value = kDefaultReadings.contains(key) ? kDefaultReadings[key] : json(nullptr);
  if (d->config.contains("readings") && d->config["readings"].contains(key))
    value = d->config["readings"][key];
  if (d->config.contains("phases")) {
    for (const json& phase : d->config["phases"]) {
      if (phase.value("after_ms", 0.0) <= now && phase.contains("readings") &&
          phase["readings"].contains(key)) {
        value = phase["readings"][key];
      }
    }
  }
  return value;
}

template <typename T>
Ret answer(const FakeDevice* d, const char* key, T* out) {
  const json v = reading(d, key);
  if (v.is_null()) return kNotSupported;
  *out = v.get<T>();
  return kSuccess;
}

std::string fmt_bus_id(unsigned index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "00000000:%02X:00.0", 0x1B + 0x10 * index);
  return buf;
}

Ret copy(char* dst, unsigned len, const std::string& src) {
  if (src.size() + 1 > len) return kInsufficientSize;
  std::memcpy(dst, src.c_str(), src.size() + 1);
  return kSuccess;
}

std::string pci_bus_id(const FakeDevice* d) {
  const auto index = static_cast<unsigned>(d - state().devices.data());
  return d->config.value("pci_bus_id", fmt_bus_id(index));
}
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
// Link k of a device: the peers of "nvlinks" in index order, each taking its count of links.
int nvlink_peer(const FakeDevice* d, unsigned link) {
  const json links = d->config.value("nvlinks", json::object());
  unsigned seen = 0;
  for (unsigned peer = 0; peer < state().devices.size(); ++peer) {
    const std::string key = std::to_string(peer);
    if (!links.contains(key)) continue;
    seen += links[key].get<unsigned>();
    if (link < seen) return static_cast<int>(peer);
  }
  return -1;
}
}  // namespace

extern "C" {

Ret nvmlInit_v2() {
  std::lock_guard lock(state().mutex);
  return load_scenario();
}
Ret nvmlShutdown() {
  return kSuccess;
}
const char* nvmlErrorString(Ret r) {
  switch (r) {
    case kNotSupported: return "Not Supported";
    case kNoPermission: return "Insufficient Permissions";
    case 9: return "Driver Not Loaded";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Fake Error";
  }
}
Ret nvmlSystemGetDriverVersion(char* v, unsigned len) {
  return copy(v, len, state().scenario.value("driver_version", "550.54.14"));
}
Ret nvmlSystemGetNVMLVersion(char* v, unsigned len) {
  return copy(v, len, state().scenario.value("nvml_version", "12.550.54.14"));
}
Ret nvmlSystemGetCudaDriverVersion_v2(int* v) {
  *v = state().scenario.value("cuda_driver_version", 12040);
  return kSuccess;
}
Ret nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(state().devices.size());
  return kSuccess;
}
Ret nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (i >= state().devices.size()) return kInvalidArgument;
  *d = &state().devices[i];
  return kSuccess;
}
Ret nvmlDeviceGetName(void* d, char* n, unsigned len) {
  return copy(n, len, device(d)->config.value("name", "NVIDIA H200"));
}
Ret nvmlDeviceGetUUID(void* d, char* u, unsigned len) {
  return copy(u, len, device(d)->config.value("uuid", "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"));
}
Ret nvmlDeviceGetCudaComputeCapability(void* d, int* major, int* minor) {
  const json cc = device(d)->config.value("compute_capability", json::array({9, 0}));
  *major = cc.at(0).get<int>();
  *minor = cc.at(1).get<int>();
  return kSuccess;
}
struct Util {
  unsigned gpu, memory;
};
Ret nvmlDeviceGetUtilizationRates(void* d, Util* u) {
  if (answer(device(d), "gpu_util_pct", &u->gpu) != kSuccess) return kNotSupported;
  return answer(device(d), "memory_util_pct", &u->memory);
}
struct Mem {
  unsigned long long total, free, used;
};
Ret nvmlDeviceGetMemoryInfo(void* d, Mem* m) {
  unsigned long long used_mib = 0;
  if (answer(device(d), "memory_used_mib", &used_mib) != kSuccess) return kNotSupported;
  m->total = device(d)->config.value("memory_total_mib", 143771ULL) << 20;
  m->used = used_mib << 20;
  m->free = m->total - m->used;
  return kSuccess;
}
struct Proc {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
Ret nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, Proc* p) {
  const json procs =
      device(d)->config.value("processes", json::array({json{{"pid", 4242}, {"used_mib", 512}}}));
  if (*count < procs.size()) {
    *count = static_cast<unsigned>(procs.size());
    return kInsufficientSize;
  }
  *count = static_cast<unsigned>(procs.size());
  for (size_t i = 0; i < procs.size(); ++i) {
    p[i] = Proc{procs[i].value("pid", 0u), procs[i].value("used_mib", 0ULL) << 20, 0, 0};
  }
  return kSuccess;
}
Ret nvmlDeviceGetPowerUsage(void* d, unsigned* mw) {
  double w = 0;
  if (answer(device(d), "power_w", &w) != kSuccess) return kNotSupported;
  std::lock_guard lock(state().mutex);
  *mw = std::min(static_cast<unsigned>(w * 1000.0), device(d)->power_limit_mw);
  return kSuccess;
}
Ret nvmlDeviceGetTotalEnergyConsumption(void* d, unsigned long long* mj) {
  double w = 0;
  if (answer(device(d), "energy_w", &w) != kSuccess) return kNotSupported;
  *mj = static_cast<unsigned long long>(w * elapsed_ms());  // W x ms = mJ
  return kSuccess;
}
Ret nvmlDeviceGetEnforcedPowerLimit(void* d, unsigned* mw) {
  std::lock_guard lock(state().mutex);
  *mw = device(d)->power_limit_mw;
  return kSuccess;
}
Ret nvmlDeviceGetPowerManagementLimit(void* d, unsigned* mw) {
  return nvmlDeviceGetEnforcedPowerLimit(d, mw);
}
Ret nvmlDeviceGetPowerManagementDefaultLimit(void* d, unsigned* mw) {
  *mw = static_cast<unsigned>(device(d)->config.value("power_default_limit_w", 700.0) * 1000.0);
  return kSuccess;
}
Ret nvmlDeviceGetPowerManagementLimitConstraints(void* d, unsigned* min_mw, unsigned* max_mw) {
  *min_mw = static_cast<unsigned>(device(d)->config.value("power_limit_min_w", 200.0) * 1000.0);
  *max_mw = static_cast<unsigned>(device(d)->config.value("power_limit_max_w", 700.0) * 1000.0);
  return kSuccess;
}
Ret nvmlDeviceSetPowerManagementLimit(void* d, unsigned mw) {
  const std::string mode = device(d)->config.value("set_power_limit", "ok");
  if (mode == "no_permission") return kNoPermission;
  if (mode != "ok") return kNotSupported;
  unsigned min_mw = 0, max_mw = 0;
  nvmlDeviceGetPowerManagementLimitConstraints(d, &min_mw, &max_mw);
  if (mw < min_mw || mw > max_mw) return kInvalidArgument;
  std::lock_guard lock(state().mutex);
  device(d)->power_limit_mw = mw;
  write_state_file();
  return kSuccess;
}
Ret nvmlDeviceGetClockInfo(void* d, int type, unsigned* mhz) {
  static const char* kKeys[] = {"graphics_clock_mhz", "sm_clock_mhz", "memory_clock_mhz"};
  if (type < 0 || type > 2) return kInvalidArgument;
  return answer(device(d), kKeys[type], mhz);
}
Ret nvmlDeviceGetMaxClockInfo(void* d, int type, unsigned* mhz) {
  static const char* kKeys[] = {"graphics", "sm", "memory"};
  static const unsigned kDefaults[] = {1980, 1980, 3201};
  if (type < 0 || type > 2) return kInvalidArgument;
  const json clocks = device(d)->config.value("max_clocks_mhz", json::object());
  *mhz = clocks.value(kKeys[type], kDefaults[type]);
  return kSuccess;
}
Ret nvmlDeviceGetCurrentClocksThrottleReasons(void* d, unsigned long long* r) {
  return answer(device(d), "clock_event_reasons", r);
}
Ret nvmlDeviceGetTemperature(void* d, int, unsigned* c) {
  return answer(device(d), "temperature_c", c);
}
Ret nvmlDeviceGetPcieThroughput(void* d, int counter, unsigned* kb_s) {
  return answer(device(d), counter == 0 ? "pcie_tx_kb_s" : "pcie_rx_kb_s", kb_s);
}
Ret nvmlDeviceGetCurrPcieLinkGeneration(void* d, unsigned* g) {
  return answer(device(d), "pcie_gen", g);
}
Ret nvmlDeviceGetMaxPcieLinkGeneration(void* d, unsigned* g) {
  *g = device(d)->config.value("pcie_gen_max", 5u);
  return kSuccess;
}
Ret nvmlDeviceGetCurrPcieLinkWidth(void* d, unsigned* w) {
  return answer(device(d), "pcie_width", w);
}
Ret nvmlDeviceGetMaxPcieLinkWidth(void* d, unsigned* w) {
  *w = device(d)->config.value("pcie_width_max", 16u);
  return kSuccess;
}
Ret nvmlDeviceGetEccMode(void*, int* cur, int* pending) {
  *cur = 1;
  *pending = 1;
  return kSuccess;
}
Ret nvmlDeviceGetTotalEccErrors(void*, int, int, unsigned long long* n) {
  *n = 0;
  return kSuccess;
}
Ret nvmlDeviceGetPerformanceState(void* d, int* p) {
  return answer(device(d), "pstate", p);
}
Ret nvmlDeviceGetPciInfo_v3(void* d, PciInfo* pci) {
  *pci = PciInfo{};
  const std::string id = pci_bus_id(device(d));
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", id.c_str());
  return kSuccess;
}
Ret nvmlDeviceGetTopologyCommonAncestor(void* a, void* b, int* level) {
  const auto peer = static_cast<unsigned>(device(b) - state().devices.data());
  const json topo = device(a)->config.value("topology", json::object());
  const std::string key = std::to_string(peer);
  if (!topo.contains(key)) return kNotSupported;
  *level = topo[key].get<int>();
  return kSuccess;
}
Ret nvmlDeviceGetCpuAffinity(void* d, unsigned words, unsigned long* set) {
  const json cpus = device(d)->config.value("cpu_affinity", json());
  if (!cpus.is_array()) return kNotSupported;
  for (unsigned w = 0; w < words; ++w) set[w] = 0;
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  for (const json& c : cpus) {
    const auto cpu = c.get<unsigned>();
    if (cpu / kBits < words) set[cpu / kBits] |= 1UL << (cpu % kBits);
  }
  return kSuccess;
}
Ret nvmlDeviceGetNumaNodeId(void* d, unsigned* node) {
  const json n = device(d)->config.value("numa_node", json());
  if (!n.is_number_integer()) return kNotSupported;
  *node = n.get<unsigned>();
  return kSuccess;
}
Ret nvmlDeviceGetNvLinkState(void* d, unsigned link, int* active) {
  if (!device(d)->config.contains("nvlinks")) return kNotSupported;
  *active = nvlink_peer(device(d), link) >= 0 ? 1 : 0;
  return kSuccess;
}
Ret nvmlDeviceGetNvLinkRemotePciInfo_v2(void* d, unsigned link, PciInfo* pci) {
  const int peer = nvlink_peer(device(d), link);
  if (peer < 0) return kInvalidArgument;
  *pci = PciInfo{};
  const std::string id = pci_bus_id(&state().devices[static_cast<size_t>(peer)]);
  std::snprintf(pci->bus_id, sizeof(pci->bus_id), "%s", id.c_str());
  return kSuccess;
}
Ret nvmlDeviceGetPersistenceMode(void*, int* m) {
  *m = 1;
  return kSuccess;
}

}  // extern "C"
