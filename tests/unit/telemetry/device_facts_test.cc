#include "telemetry/device_facts.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpulab::telemetry {
namespace {

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(DeviceFacts, ArchitectureByComputeCapability) {
  EXPECT_EQ(architecture_name({7, 0}), "Volta");
  EXPECT_EQ(architecture_name({7, 5}), "Turing");
  EXPECT_EQ(architecture_name({8, 0}), "Ampere");
  EXPECT_EQ(architecture_name({8, 6}), "Ampere");
  EXPECT_EQ(architecture_name({8, 9}), "Ada Lovelace");
  EXPECT_EQ(architecture_name({9, 0}), "Hopper");
  EXPECT_EQ(architecture_name({10, 0}), "Blackwell");
  EXPECT_EQ(architecture_name({12, 0}), "Blackwell");
  EXPECT_EQ(architecture_name({3, 5}), "unknown (sm_35)");
}

TEST(DeviceFacts, CoresPerSmAndTensorCoreGeneration) {
  EXPECT_EQ(cuda_cores_per_sm({8, 0}), 64);
  EXPECT_EQ(cuda_cores_per_sm({8, 6}), 128);
  EXPECT_EQ(cuda_cores_per_sm({9, 0}), 128);
  EXPECT_EQ(cuda_cores_per_sm({2, 0}), 0);
  EXPECT_EQ(tensor_core_generation({7, 0}), 1);
  EXPECT_EQ(tensor_core_generation({7, 5}), 2);
  EXPECT_EQ(tensor_core_generation({8, 6}), 3);
  EXPECT_EQ(tensor_core_generation({8, 9}), 4);
  EXPECT_EQ(tensor_core_generation({9, 0}), 4);
  EXPECT_EQ(tensor_core_generation({10, 0}), 5);
  EXPECT_EQ(tensor_core_generation({6, 1}), 0);
}

TEST(DeviceFacts, Fp8FromSm89AndFp4FromBlackwell) {
  EXPECT_FALSE(has(supported_precisions({8, 6}), "FP8"));
  EXPECT_TRUE(has(supported_precisions({8, 9}), "FP8"));
  EXPECT_TRUE(has(supported_precisions({9, 0}), "FP8"));
  EXPECT_FALSE(has(supported_precisions({9, 0}), "FP4"));
  EXPECT_TRUE(has(supported_precisions({10, 0}), "FP4"));
  EXPECT_TRUE(has(supported_precisions({8, 0}), "BF16"));
  EXPECT_TRUE(has(supported_precisions({8, 0}), "TF32"));
  EXPECT_FALSE(has(supported_precisions({7, 5}), "BF16"));
  EXPECT_TRUE(has(supported_precisions({7, 5}), "INT8"));
}

struct Expect {
  const char* nvml_name;
  const char* model;
  int sm_count;
  double bandwidth_gb_s;
  const char* architecture;
};

TEST(DeviceFacts, KnownGpusMatchTheirNvmlNames) {
  const Expect cases[] = {
      {"NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 128, 1008, "Ada Lovelace"},
      {"NVIDIA GeForce RTX 3090", "GeForce RTX 3090", 82, 936, "Ampere"},
      {"NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 108, 2039, "Ampere"},
      {"NVIDIA A100-PCIE-40GB", "A100 40GB", 108, 1555, "Ampere"},
      {"NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 108, 1935, "Ampere"},
      {"NVIDIA H100 80GB HBM3", "H100 SXM", 132, 3350, "Hopper"},
      {"NVIDIA H100 PCIe", "H100 PCIe", 114, 2000, "Hopper"},
      {"NVIDIA H200", "H200 SXM", 132, 4800, "Hopper"},
      {"NVIDIA L4", "L4", 58, 300, "Ada Lovelace"},
      {"NVIDIA L40S", "L40S", 142, 864, "Ada Lovelace"},
      {"NVIDIA GeForce RTX 5090", "GeForce RTX 5090", 170, 1792, "Blackwell"},
      {"NVIDIA B200", "B200", 148, 8000, "Blackwell"},
  };
  for (const Expect& e : cases) {
    const KnownGpu* g = find_known_gpu(e.nvml_name);
    ASSERT_NE(g, nullptr) << e.nvml_name;
    EXPECT_EQ(g->model, e.model) << e.nvml_name;
    const DeviceFacts f = make_device_facts({.name = e.nvml_name});
    EXPECT_EQ(f.sm_count, e.sm_count) << e.nvml_name;
    EXPECT_EQ(f.memory_bandwidth_gb_s, e.bandwidth_gb_s) << e.nvml_name;
    EXPECT_EQ(f.architecture, e.architecture) << e.nvml_name;
    EXPECT_TRUE(f.from_table);
    EXPECT_GT(*f.fp32_tflops, 0);
    EXPECT_GT(*f.fp16_tensor_tflops, *f.fp32_tflops) << e.nvml_name;
    EXPECT_GE(*f.int8_tensor_tops, *f.fp16_tensor_tflops) << e.nvml_name;
  }
}

TEST(DeviceFacts, Rtx4090IsAdaWithFourthGenTensorCoresAndFp8) {
  const DeviceFacts f = make_device_facts({.name = "NVIDIA GeForce RTX 4090", .cc = ComputeCapability{8, 9}});
  EXPECT_EQ(f.cuda_cores, 16384);
  EXPECT_EQ(f.tensor_core_generation, 4);
  EXPECT_TRUE(has(f.precisions, "FP8"));
  const std::string d = describe(f);
  EXPECT_NE(d.find("Ada Lovelace (sm_89)"), std::string::npos) << d;
  EXPECT_NE(d.find("4th-gen tensor cores"), std::string::npos) << d;
  EXPECT_NE(d.find("FP8"), std::string::npos) << d;
  EXPECT_NE(d.find("16384 CUDA cores"), std::string::npos) << d;
}

TEST(DeviceFacts, H200FactsAndHopperCores) {
  const DeviceFacts f = make_device_facts({.name = "NVIDIA H200", .cc = ComputeCapability{9, 0}});
  EXPECT_EQ(f.cuda_cores, 16896);
  EXPECT_EQ(f.memory_bus_width_bits, 6144);
  EXPECT_EQ(f.fp8_tensor_tflops, 1979);
}

TEST(DeviceFacts, TokenMatchingDoesNotConfuseSimilarNames) {
  EXPECT_EQ(find_known_gpu("NVIDIA L40S")->model, "L40S");
  EXPECT_EQ(find_known_gpu("NVIDIA L4")->model, "L4");
  EXPECT_EQ(find_known_gpu("NVIDIA L40"), nullptr);
  EXPECT_EQ(find_known_gpu("NVIDIA RTX A1000"), nullptr);
  EXPECT_EQ(find_known_gpu("nvidia geforce rtx 3090 ti")->model, "GeForce RTX 3090 Ti");
}

TEST(DeviceFacts, UnknownGpuKeepsCapabilityFactsAndLeavesRatesUnknown) {
  const DeviceFacts f = make_device_facts({.name = "NVIDIA Future GPU",
                                           .cc = ComputeCapability{9, 0},
                                           .sm_count = 100,
                                           .memory_bytes = 64ULL << 30});
  EXPECT_FALSE(f.from_table);
  EXPECT_EQ(f.architecture, "Hopper");
  EXPECT_EQ(f.cuda_cores, 12800);
  EXPECT_FALSE(f.memory_bandwidth_gb_s.has_value());
  EXPECT_FALSE(f.fp32_tflops.has_value());
  EXPECT_FALSE(f.memory_bus_width_bits.has_value());
}

TEST(DeviceFacts, TableRowIgnoredWhenComputeCapabilityDisagrees) {
  const DeviceFacts f = make_device_facts({.name = "NVIDIA H200", .cc = ComputeCapability{8, 0}});
  EXPECT_FALSE(f.from_table);
  EXPECT_EQ(f.architecture, "Ampere");
}

TEST(DeviceFacts, MeasuredValuesWinOverTheTable) {
  const DeviceFacts f = make_device_facts({.name = "NVIDIA H200",
                                           .cc = ComputeCapability{9, 0},
                                           .sm_count = 132,
                                           .memory_bytes = 150000000000ULL});
  EXPECT_EQ(f.memory_bytes, 150000000000ULL);
}

TEST(DeviceFacts, PcieTheoreticalRates) {
  EXPECT_NEAR(*pcie_bandwidth_gb_s(5, 16), 63.015, 0.01);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(4, 16), 31.508, 0.01);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(4, 8), 15.754, 0.01);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(3, 16), 15.754, 0.01);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(2, 16), 8.0, 1e-9);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(1, 1), 0.25, 1e-9);
  EXPECT_NEAR(*pcie_bandwidth_gb_s(6, 16), 121.0, 0.01);
  EXPECT_FALSE(pcie_bandwidth_gb_s(0, 16).has_value());
  EXPECT_FALSE(pcie_bandwidth_gb_s(7, 16).has_value());
  EXPECT_FALSE(pcie_bandwidth_gb_s(4, 0).has_value());
}

}  // namespace
}  // namespace gpulab::telemetry
