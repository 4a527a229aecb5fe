#include "telemetry/device_facts.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

namespace gpulab::telemetry {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string architecture_name(ComputeCapability cc) {
  switch (cc.major) {
    case 6: return "Pascal";
    case 7: return cc.minor >= 5 ? "Turing" : "Volta";
    case 8: return cc.minor == 9 ? "Ada Lovelace" : "Ampere";
    case 9: return "Hopper";
    case 10:
    case 11:
    case 12: return "Blackwell";
    default: return fmt::format("unknown (sm_{}{})", cc.major, cc.minor);
  }
}

int cuda_cores_per_sm(ComputeCapability cc) {
  // CUDA C Programming Guide, "Arithmetic Instructions" throughput table (FP32 lanes per SM).
  switch (cc.as_int()) {
    case 60: return 64;
    case 61:
    case 62: return 128;
    case 70:
    case 72:
    case 75: return 64;
    case 80: return 64;
    case 86:
    case 87:
    case 89: return 128;
    case 90: return 128;
    case 100:
    case 101:
    case 103:
    case 110:
    case 120:
    case 121: return 128;
    default: return 0;
  }
}

int tensor_core_generation(ComputeCapability cc) {
  const int v = cc.as_int();
  if (v >= 100) return 5;  // Blackwell
  if (v >= 89) return 4;   // Ada Lovelace (sm_89) and Hopper (sm_90)
  if (v >= 80) return 3;   // Ampere
  if (v >= 75) return 2;   // Turing
  if (v >= 70) return 1;   // Volta
  return 0;
}

std::vector<std::string> supported_precisions(ComputeCapability cc) {
  const int v = cc.as_int();
  std::vector<std::string> p{"FP32"};
  if (v >= 80) p.push_back("TF32");
  if (v >= 53) p.push_back("FP16");
  if (v >= 80) p.push_back("BF16");
  if (v >= 61) p.push_back("INT8");  // DP4A from sm_61, INT8 tensor cores from sm_75
  if (v >= 89) p.push_back("FP8");
  if (v >= 100) p.push_back("FP4");
  return p;
}

const std::vector<KnownGpu>& known_gpus() {
  // Datasheet / whitepaper numbers (NVIDIA Ampere GA102, Ada, Hopper, Blackwell whitepapers and
  // product datasheets). Dense rates; GeForce tensor rates with FP32 accumulation.
  // Order: most specific match first.
  static const std::vector<KnownGpu> kTable = {
      // match, model, cc, SMs, GiB, bus bits, GB/s, FP32, FP16 TC, INT8 TC, FP8 TC, PCIe gen
      {"rtx 5090", "GeForce RTX 5090", {12, 0}, 170, 32, 512, 1792, 104.8, 209.5, 838, 419, 5},
      {"rtx 4090", "GeForce RTX 4090", {8, 9}, 128, 24, 384, 1008, 82.6, 165.2, 660.6, 330.3, 4},
      {"rtx 3090 ti", "GeForce RTX 3090 Ti", {8, 6}, 84, 24, 384, 1008, 40.0, 80.0, 320, std::nullopt, 4},
      {"rtx 3090", "GeForce RTX 3090", {8, 6}, 82, 24, 384, 936, 35.6, 71.0, 284, std::nullopt, 4},
      {"l40s", "L40S", {8, 9}, 142, 48, 384, 864, 91.6, 362.05, 733, 733, 4},
      {"l4", "L4", {8, 9}, 58, 24, 192, 300, 30.3, 121, 242.5, 242.5, 4},
      {"a100 80gb pcie", "A100 80GB PCIe", {8, 0}, 108, 80, 5120, 1935, 19.5, 312, 624, std::nullopt, 4},
      {"a100 80gb", "A100 80GB SXM", {8, 0}, 108, 80, 5120, 2039, 19.5, 312, 624, std::nullopt, 4},
      {"a100", "A100 40GB", {8, 0}, 108, 40, 5120, 1555, 19.5, 312, 624, std::nullopt, 4},
      {"h100 pcie", "H100 PCIe", {9, 0}, 114, 80, 5120, 2000, 51, 756, 1513, 1513, 5},
      {"h100 nvl", "H100 NVL", {9, 0}, 132, 94, 6144, 3900, 60, 835, 1670, 1670, 5},
      {"h100", "H100 SXM", {9, 0}, 132, 80, 5120, 3350, 67, 989.4, 1979, 1979, 5},
      {"h200 nvl", "H200 NVL", {9, 0}, 132, 141, 6144, 4800, 60, 835, 1670, 1670, 5},
      {"h200", "H200 SXM", {9, 0}, 132, 141, 6144, 4800, 67, 989.4, 1979, 1979, 5},
      {"b200", "B200", {10, 0}, 148, 180, 8192, 8000, 75, 2250, 4500, 4500, 5},
  };
  return kTable;
}

const KnownGpu* find_known_gpu(std::string_view name) {
  const std::string n = lower(name);
  for (const KnownGpu& g : known_gpus()) {
    bool all = true;
    std::string_view rest = g.match;
    while (!rest.empty() && all) {
      const size_t sp = rest.find(' ');
      const std::string_view token = rest.substr(0, sp);
      // Whole-token match, so "l4" does not match "l40s" and "a100" does not match "a1000".
      size_t pos = 0;
      bool found = false;
      while ((pos = n.find(token, pos)) != std::string::npos) {
        const bool left_ok = pos == 0 || !std::isalnum(static_cast<unsigned char>(n[pos - 1]));
        const size_t end = pos + token.size();
        const bool right_ok = end == n.size() || !std::isalnum(static_cast<unsigned char>(n[end]));
        if (left_ok && right_ok) {
          found = true;
          break;
        }
        ++pos;
      }
      all = found;
      rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    }
    if (all) return &g;
  }
  return nullptr;
}

DeviceFacts make_device_facts(const DeviceFactsInput& in) {
  DeviceFacts f;
  f.name = in.name;
  const KnownGpu* known = find_known_gpu(in.name);
  if (in.cc)
    f.cc = *in.cc;
  else if (known)
    f.cc = known->cc;
  // A table row only applies when its compute capability agrees with the device's.
  if (known && in.cc && !(known->cc == *in.cc)) known = nullptr;
  f.architecture = architecture_name(f.cc);
  f.cuda_cores_per_sm = cuda_cores_per_sm(f.cc);
  f.tensor_core_generation = tensor_core_generation(f.cc);
  f.precisions = supported_precisions(f.cc);
  f.sm_count = in.sm_count;
  if (!f.sm_count && known) f.sm_count = known->sm_count;
  if (f.sm_count && f.cuda_cores_per_sm > 0) f.cuda_cores = *f.sm_count * f.cuda_cores_per_sm;
  f.memory_bytes = in.memory_bytes;
  if (!f.memory_bytes && known)
    f.memory_bytes = static_cast<std::uint64_t>(known->memory_gib * 1024.0 * 1024.0 * 1024.0);
  f.memory_bus_width_bits = in.memory_bus_width_bits;
  if (!f.memory_bus_width_bits && known) f.memory_bus_width_bits = known->memory_bus_width_bits;
  if (known) {
    f.from_table = true;
    f.memory_bandwidth_gb_s = known->memory_bandwidth_gb_s;
    f.fp32_tflops = known->fp32_tflops;
    f.fp16_tensor_tflops = known->fp16_tensor_tflops;
    f.int8_tensor_tops = known->int8_tensor_tops;
    f.fp8_tensor_tflops = known->fp8_tensor_tflops;
  }
  return f;
}

std::optional<double> pcie_bandwidth_gb_s(int generation, int width_lanes) {
  // Per lane, per direction, in GB/s: transfer rate (GT/s) x encoding efficiency / 8 bits.
  double lane_gb_s = 0;
  switch (generation) {
    case 1: lane_gb_s = 2.5 * 8.0 / 10.0 / 8.0; break;
    case 2: lane_gb_s = 5.0 * 8.0 / 10.0 / 8.0; break;
    case 3: lane_gb_s = 8.0 * 128.0 / 130.0 / 8.0; break;
    case 4: lane_gb_s = 16.0 * 128.0 / 130.0 / 8.0; break;
    case 5: lane_gb_s = 32.0 * 128.0 / 130.0 / 8.0; break;
    case 6: lane_gb_s = 64.0 * 242.0 / 256.0 / 8.0; break;
    default: return std::nullopt;
  }
  if (width_lanes <= 0) return std::nullopt;
  return lane_gb_s * width_lanes;
}

std::string describe(const DeviceFacts& f) {
  std::string s = fmt::format("{}: {} (sm_{}{})", f.name, f.architecture, f.cc.major, f.cc.minor);
  if (f.sm_count) s += fmt::format(", {} SMs", *f.sm_count);
  if (f.cuda_cores) s += fmt::format(", {} CUDA cores", *f.cuda_cores);
  if (f.tensor_core_generation > 0) {
    const int g = f.tensor_core_generation;
    const char* suffix = g == 1 ? "st" : g == 2 ? "nd" : g == 3 ? "rd" : "th";
    s += fmt::format(", {}{}-gen tensor cores", g, suffix);
  }
  s += ", precisions";
  for (const auto& p : f.precisions) s += " " + p;
  if (f.memory_bytes) s += fmt::format(", {:.0f} GiB", static_cast<double>(*f.memory_bytes) / (1ULL << 30));
  if (f.memory_bandwidth_gb_s) s += fmt::format(", {:.0f} GB/s", *f.memory_bandwidth_gb_s);
  return s;
}

}  // namespace gpulab::telemetry
