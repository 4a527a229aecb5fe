// What a GPU is: architecture, compute units, tensor cores, precisions and theoretical rates.
//
// Facts come from two places: rules by compute capability (architecture, CUDA cores per SM,
// tensor-core generation, precisions), and a table of known GPUs with datasheet numbers (SMs,
// memory, bus width, bandwidth, dense peak rates). A GPU missing from the table still gets the
// compute-capability facts; the datasheet fields are then nullopt, never zero.
// Pure functions, no NVML or CUDA; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpulab::telemetry {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  int as_int() const { return major * 10 + minor; }  // 89 for sm_89
  friend bool operator==(const ComputeCapability&, const ComputeCapability&) = default;
};

// Datasheet numbers of one GPU model. Rates are dense (no structured sparsity); tensor rates
// are with FP32 accumulation where the datasheet distinguishes (GeForce parts), in 1e12 op/s.
struct KnownGpu {
  std::string_view match;  // every space-separated token must occur in the NVML name
  std::string_view model;  // display name
  ComputeCapability cc;
  int sm_count;
  double memory_gib;
  int memory_bus_width_bits;
  double memory_bandwidth_gb_s;  // 1e9 bytes/s
  double fp32_tflops;
  double fp16_tensor_tflops;
  double int8_tensor_tops;
  std::optional<double> fp8_tensor_tflops;
  int pcie_gen_max;  // host interface generation (x16)
};

struct DeviceFacts {
  std::string name;          // as NVML/CUDA report it, e.g. "NVIDIA H200"
  std::string architecture;  // "Hopper"
  ComputeCapability cc;
  int cuda_cores_per_sm = 0;            // FP32 lanes per SM
  int tensor_core_generation = 0;       // 0: none
  std::vector<std::string> precisions;  // "FP32", "TF32", "FP16", "BF16", "INT8", "FP8", "FP4"
  std::optional<int> sm_count;
  std::optional<int> cuda_cores;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<int> memory_bus_width_bits;
  std::optional<double> memory_bandwidth_gb_s;
  std::optional<double> fp32_tflops;
  std::optional<double> fp16_tensor_tflops;
  std::optional<double> int8_tensor_tops;
  std::optional<double> fp8_tensor_tflops;
  bool from_table = false;  // the datasheet fields came from the known-GPU table
};

// "Ampere", "Ada Lovelace", "Hopper", "Blackwell", ...; "unknown (sm_XY)" for others.
std::string architecture_name(ComputeCapability cc);
// FP32 CUDA cores per SM; 0 when unknown.
int cuda_cores_per_sm(ComputeCapability cc);
// 1 Volta, 2 Turing, 3 Ampere, 4 Ada/Hopper, 5 Blackwell; 0 without tensor cores.
int tensor_core_generation(ComputeCapability cc);
// Precisions the tensor cores (or, for FP32/FP16, the CUDA cores) run natively.
std::vector<std::string> supported_precisions(ComputeCapability cc);
// The known-GPU row whose tokens all occur in `name` (case-insensitive), most specific first.
const KnownGpu* find_known_gpu(std::string_view name);
const std::vector<KnownGpu>& known_gpus();

// Facts for a device. The measured values (SM count, memory, bus width) win over the table when
// given; `cc` is taken from the table when not given.
struct DeviceFactsInput {
  std::string name;
  std::optional<ComputeCapability> cc;
  std::optional<int> sm_count;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<int> memory_bus_width_bits;
};
DeviceFacts make_device_facts(const DeviceFactsInput& in);

// Theoretical PCIe rate per direction in GB/s (1e9 bytes/s) after line encoding
// (8b/10b for gen 1-2, 128b/130b for gen 3-5, FLIT 242/256 for gen 6). nullopt for unknown gens.
std::optional<double> pcie_bandwidth_gb_s(int generation, int width_lanes);

// One line: "NVIDIA H200: Hopper (sm_90), 132 SMs, 16896 CUDA cores, 4th-gen tensor cores,
// precisions FP32 TF32 FP16 BF16 INT8 FP8, 141 GiB, 4800 GB/s".
std::string describe(const DeviceFacts& facts);

}  // namespace gpulab::telemetry
