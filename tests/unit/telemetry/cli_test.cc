// `gpulab monitor`, `bandwidth` and `doctor` end to end: every command prints a clear message and
// the right exit code, also on a machine without a GPU or driver. Runs the built gpulab binary.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

using testing::CliRun;
using testing::run_gpulab;

bool has_library(const char* soname) {
  void* h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

class GpulabCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(testing::gpulab_exe()))
      GTEST_SKIP() << "gpulab binary not built at " << testing::gpulab_exe();
  }
};

TEST_F(GpulabCli, MonitorWithoutDriverSaysWhyAndFails) {
  if (has_library("libnvidia-ml.so.1")) GTEST_SKIP() << "NVML present: this covers the driverless machine";
  const CliRun r = run_gpulab("monitor --count 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no NVIDIA driver: libnvidia-ml.so.1 not found"), std::string::npos) << r.output;
  const CliRun csv = run_gpulab("monitor --csv --count 2");
  EXPECT_NE(csv.exit_code, 0);
  EXPECT_NE(csv.output.find("libnvidia-ml.so.1"), std::string::npos);
}

TEST_F(GpulabCli, MonitorRejectsBadFlagsBeforeLookingForTheDriver) {
  const CliRun fields = run_gpulab("monitor --csv --fields index,bogus");
  EXPECT_NE(fields.exit_code, 0);
  EXPECT_NE(fields.output.find("unknown field 'bogus'"), std::string::npos) << fields.output;
  const CliRun serve = run_gpulab("monitor --serve nonsense");
  EXPECT_NE(serve.exit_code, 0);
  EXPECT_NE(serve.output.find("is not ADDR:PORT"), std::string::npos) << serve.output;
  const CliRun both = run_gpulab("monitor --csv --json");
  EXPECT_NE(both.exit_code, 0);
  const CliRun interval = run_gpulab("monitor --interval-ms 0");
  EXPECT_NE(interval.exit_code, 0);
}

TEST_F(GpulabCli, BandwidthWithoutDriverSaysWhyAndFails) {
  if (has_library("libcuda.so.1")) GTEST_SKIP() << "CUDA driver present: this covers the driverless machine";
  const CliRun r = run_gpulab("bandwidth --sizes 4K");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no NVIDIA driver: libcuda.so.1 not found"), std::string::npos) << r.output;
}

TEST_F(GpulabCli, BandwidthRejectsBadSizes) {
  const CliRun r = run_gpulab("bandwidth --sizes 4X");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--sizes: '4X'"), std::string::npos) << r.output;
  const CliRun k = run_gpulab("bandwidth --copies up");
  EXPECT_NE(k.exit_code, 0);
  EXPECT_NE(k.output.find("--copies: unknown value 'up'"), std::string::npos) << k.output;
}

TEST_F(GpulabCli, DoctorOnThisMachineReportsFailuresWithFixes) {
  if (has_library("libnvidia-ml.so.1")) GTEST_SKIP() << "NVML present: this covers the driverless machine";
  const CliRun r = run_gpulab("doctor --pcie-load-ms 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.out.find("NVML"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
  EXPECT_NE(r.out.find("fix: "), std::string::npos);
  EXPECT_NE(r.out.find("per-GPU checks need NVML"), std::string::npos);
}

TEST_F(GpulabCli, DoctorJsonOnAFakeTree) {
  const fs::path root = fs::temp_directory_path() / ("gpulab-cli-root-" + std::to_string(getpid()));
  fs::create_directories(root / "proc/driver/nvidia");
  std::ofstream(root / "proc/modules") << "nouveau 2805760 0 - Live 0x0\nnvidia 62263296 0 - Live 0x0\n";
  std::ofstream(root / "proc/driver/nvidia/version")
      << "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n";
  const CliRun bad = run_gpulab("doctor --json --no-gpu --no-libraries --root " + root.string());
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  const auto j = nlohmann::json::parse(bad.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << bad.out;
  bool nouveau_failed = false;
  for (const auto& f : j) {
    ASSERT_TRUE(f.contains("check") && f.contains("status") && f.contains("detail") && f.contains("fix"));
    if (f.at("check") == "nouveau") nouveau_failed = f.at("status") == "fail";
  }
  EXPECT_TRUE(nouveau_failed) << bad.out;

  std::ofstream(root / "proc/modules") << "nvidia 62263296 0 - Live 0x0\n";
  const CliRun good = run_gpulab("doctor --no-gpu --no-libraries --root " + root.string());
  EXPECT_EQ(good.exit_code, 0) << good.output;
  EXPECT_NE(good.out.find("loaded, version 550.54.14"), std::string::npos) << good.out;
  const CliRun missing_root = run_gpulab("doctor --root /nonexistent/gpulab");
  EXPECT_NE(missing_root.exit_code, 0);
  fs::remove_all(root);
}

// With the stand-in libnvidia-ml.so.1 (tests/support/fake_nvml.cc: one "NVIDIA H200",
// power draw unsupported, no energy/PCIe throughput entry points).
// Prepended, so that the libraries gpulab itself needs stay found (on the GPU host they live in
// a prefix named by LD_LIBRARY_PATH).
const std::string kFakeNvml =
    std::string("LD_LIBRARY_PATH=") + GPULAB_FAKE_NVML_DIR + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}";

TEST_F(GpulabCli, MonitorCsvWithFakeNvmlReportsUnsupportedAsNA) {
  const CliRun r = run_gpulab(
      "monitor --csv --count 2 --interval-ms 10 --fields index,name,utilization.gpu,memory.used,power.draw,"
      "power.limit,energy.total,pcie.rx,pcie.link.gen.current,clocks_event_reasons.names,pstate",
      kFakeNvml);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string expected_row = "0, NVIDIA H200, 42, 1024, N/A, 700.00, N/A, N/A, 5, gpu_idle, P0";
  EXPECT_EQ(r.out,
            "index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], power.limit [W], "
            "energy.total [mJ], pcie.rx [KB/s], pcie.link.gen.current, clocks_event_reasons.names, pstate\n" +
                expected_row + "\n" + expected_row + "\n");
}

TEST_F(GpulabCli, MonitorJsonAndLiveViewWithFakeNvml) {
  const CliRun j = run_gpulab("monitor --json --count 1", kFakeNvml);
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const auto doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.out;
  const auto& gpu = doc.at("gpus").at(0);
  EXPECT_EQ(gpu.at("name"), "NVIDIA H200");
  EXPECT_TRUE(gpu.at("power.draw").is_null());
  EXPECT_TRUE(gpu.at("energy.total").is_null());
  EXPECT_EQ(gpu.at("memory.total"), 143771);
  EXPECT_EQ(gpu.at("processes").at(0).at("pid"), 4242);
  EXPECT_EQ(gpu.at("processes").at(0).at("used_memory_mib"), 512);
  const CliRun live = run_gpulab("monitor --count 1", kFakeNvml);
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.out.find("NVIDIA H200"), std::string::npos) << live.out;
  EXPECT_NE(live.out.find("power N/A/700 W"), std::string::npos) << live.out;
  EXPECT_NE(live.out.find("pid    4242"), std::string::npos) << live.out;
  const CliRun bad_gpu = run_gpulab("monitor --gpu 3 --count 1", kFakeNvml);
  EXPECT_EQ(bad_gpu.exit_code, 2) << bad_gpu.output;
  EXPECT_NE(bad_gpu.output.find("--gpu: index 3 out of range (1 GPUs)"), std::string::npos);
}

// `monitor --csv > file` (and --serve) interrupted by SIGINT or SIGTERM from a test: exits within a
// second with 128 + the signal, and the file holds the header and whole rows only.
struct Interrupted {
  int exit_code = -1;
  int64_t exit_ms = -1;  // from the signal to the process's end
  std::string out;
};
Interrupted interrupt_monitor(const std::string& args, const char* signal_name) {
  const fs::path dir = fs::temp_directory_path() / ("gpulab_monitor_sig_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "monitor.csv", result = dir / "result.txt";
  // Job control on (set -m), so that the background job keeps SIGINT (a non-interactive shell
  // starts `cmd &` with SIGINT ignored, and gpulab leaves an ignored signal ignored).
  // A command that ignored the signal is killed after 5 s (exit 137), so the test cannot hang.
  const std::string script =
      "set -m; " + kFakeNvml + " '" + testing::gpulab_exe().string() + "' monitor " + args + " >'" +
      out.string() + "' 2>/dev/null & pid=$!; sleep 0.7; t0=$(date +%s%N); kill -" + signal_name +
      " $pid; for i in $(seq 500); do kill -0 $pid 2>/dev/null || break; sleep 0.01; "
      "done; t1=$(date +%s%N); kill -9 $pid 2>/dev/null; wait $pid; rc=$?; echo $rc $(( "
      "(t1 - t0) / 1000000 )) >'" +
      result.string() + "'";
  Interrupted r;
  const fs::path script_file = dir / "interrupt.sh";
  std::ofstream(script_file) << script << "\n";
  if (std::system(("bash '" + script_file.string() + "'").c_str()) != 0) return r;
  std::ifstream(result) >> r.exit_code >> r.exit_ms;
  std::ifstream in(out);
  r.out.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove_all(dir);
  return r;
}

TEST_F(GpulabCli, MonitorCsvStopsOnSigintOrSigtermWithWholeRows) {
  for (const auto& [name, code] : std::vector<std::pair<const char*, int>>{{"INT", 130}, {"TERM", 143}}) {
    const Interrupted r = interrupt_monitor("--csv --interval-ms 20 --fields index,name,memory.used", name);
    EXPECT_EQ(r.exit_code, code) << "SIG" << name;
    EXPECT_GE(r.exit_ms, 0);
    EXPECT_LT(r.exit_ms, 1000) << "SIG" << name << ": not prompt";
    ASSERT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.back(), '\n') << "the last row is cut";
    std::istringstream lines(r.out);
    std::string line;
    std::getline(lines, line);
    EXPECT_EQ(line, "index, name, memory.used [MiB]");
    int rows = 0;
    while (std::getline(lines, line)) {
      EXPECT_EQ(line, "0, NVIDIA H200, 1024") << "row " << rows;
      ++rows;
    }
    EXPECT_GE(rows, 3) << "SIG" << name;
  }
}

TEST_F(GpulabCli, MonitorServeStopsOnSigterm) {
  const Interrupted served =
      interrupt_monitor("--serve 127.0.0.1:" + std::to_string(20000 + ::getpid() % 20000), "TERM");
  EXPECT_EQ(served.exit_code, 143);
  EXPECT_GE(served.exit_ms, 0);
  EXPECT_LT(served.exit_ms, 1000);
}

TEST_F(GpulabCli, DoctorGpuChecksWithFakeNvml) {
  const CliRun r = run_gpulab("doctor --json --no-libraries --pcie-load-ms 0", kFakeNvml);
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(doc.is_array()) << r.output;
  std::map<std::string, nlohmann::json> by_check;
  for (const auto& f : doc) by_check[f.at("check").get<std::string>()] = f;
  ASSERT_TRUE(by_check.count("NVML")) << r.out;
  EXPECT_EQ(by_check["NVML"].at("status"), "pass") << by_check["NVML"];
  ASSERT_TRUE(by_check.count("GPU 0 architecture")) << r.out;
  const std::string arch = by_check["GPU 0 architecture"].at("detail");
  EXPECT_NE(arch.find("Hopper (sm_90)"), std::string::npos) << arch;
  EXPECT_NE(arch.find("4th-gen tensor cores"), std::string::npos) << arch;
  EXPECT_NE(arch.find("FP8"), std::string::npos) << arch;
  EXPECT_EQ(by_check["GPU 0 persistence mode"].at("status"), "pass");
  EXPECT_EQ(by_check["GPU 0 PCIe link"].at("status"), "pass") << by_check["GPU 0 PCIe link"];
  EXPECT_EQ(by_check["GPU 0 clock-event reasons"].at("detail"), "gpu_idle");
  EXPECT_EQ(by_check["GPU 0 ECC"].at("status"), "pass");
  EXPECT_EQ(by_check["GPU 0 free memory"].at("status"), "pass");
  EXPECT_NE(by_check["GPU 0 free memory"].at("detail").get<std::string>().find("pid 4242 512 MiB"),
            std::string::npos);
}

// The fake NVML driven by a scenario file (GPULAB_FAKE_NVML_SCENARIO): readings that change over
// time reach monitor's CSV, and a degraded machine (a PCIe link at x8 gen3 of x16 gen5, hardware
// thermal slowdown) is what doctor reports, with the fix.
class FakeNvmlScenario : public GpulabCli {
 protected:
  std::string env(const nlohmann::json& scenario) {
    path_ = fs::temp_directory_path() / ("gpulab-nvml-scenario-" + std::to_string(getpid()) + ".json");
    std::ofstream(path_) << scenario.dump();
    return kFakeNvml + " GPULAB_FAKE_NVML_SCENARIO='" + path_.string() + "'";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  fs::path path_;
};

TEST_F(FakeNvmlScenario, MonitorFollowsTheReadingsOverTime) {
  const nlohmann::json scenario = {
      {"devices",
       {{{"name", "NVIDIA L4"},
         {"readings", {{"power_w", 30}, {"gpu_util_pct", 0}, {"pcie_rx_kb_s", 0}}},
         {"phases",
          {{{"after_ms", 150},
            {"readings", {{"power_w", 70}, {"gpu_util_pct", 97}, {"pcie_rx_kb_s", 900000}}}}}}}}}};
  const CliRun r =
      run_gpulab("monitor --csv --count 6 --interval-ms 50 --fields name,power.draw,utilization.gpu,pcie.rx",
                 env(scenario));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.out.find("NVIDIA L4, 30.00, 0, 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA L4, 70.00, 97, 900000"), std::string::npos) << r.out;
}

TEST_F(FakeNvmlScenario, DoctorReportsADegradedLinkAndThermalSlowdown) {
  const nlohmann::json scenario = {
      {"devices",
       {{{"pcie_gen_max", 5},
         {"pcie_width_max", 16},
         {"readings", {{"pcie_gen", 3}, {"pcie_width", 8}, {"clock_event_reasons", 0x40}}}}}}};
  const CliRun r = run_gpulab("doctor --json --no-libraries --pcie-load-ms 0", env(scenario));
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(doc.is_array()) << r.output;
  std::map<std::string, nlohmann::json> by_check;
  for (const auto& f : doc) by_check[f.at("check").get<std::string>()] = f;
  EXPECT_EQ(by_check["GPU 0 PCIe link"].at("status"), "warn") << by_check["GPU 0 PCIe link"];
  EXPECT_NE(by_check["GPU 0 PCIe link"].at("detail").get<std::string>().find("x8 gen3 instead of x16 gen5"),
            std::string::npos);
  EXPECT_EQ(by_check["GPU 0 clock-event reasons"].at("status"), "fail");
  EXPECT_EQ(by_check["GPU 0 clock-event reasons"].at("detail"), "hw_thermal_slowdown");
  EXPECT_NE(by_check["GPU 0 clock-event reasons"].at("fix").get<std::string>().find("check cooling"),
            std::string::npos);
  EXPECT_EQ(r.exit_code, 1);  // a check failed
}

TEST_F(FakeNvmlScenario, AMalformedScenarioFailsNvmlInit) {
  path_ = fs::temp_directory_path() / ("gpulab-nvml-scenario-" + std::to_string(getpid()) + ".json");
  std::ofstream(path_) << "{not json";
  const CliRun r =
      run_gpulab("monitor --count 1", kFakeNvml + " GPULAB_FAKE_NVML_SCENARIO='" + path_.string() + "'");
  EXPECT_EQ(r.exit_code, 8) << r.output;
  EXPECT_NE(r.err.find("nvmlInit failed"), std::string::npos) << r.err;
}

// Four fake GPUs: two joined by NVLink, two behind a PCIe switch on the other NUMA node, one at x8
// and one with a lower power limit.
const nlohmann::json kFourGpus = {{"devices",
                                   {{{"cpu_affinity", {0, 1}},
                                     {"numa_node", 0},
                                     {"nvlinks", {{"1", 18}}},
                                     {"topology", {{"1", 30}, {"2", 50}, {"3", 50}}}},
                                    {{"cpu_affinity", {0, 1}},
                                     {"numa_node", 0},
                                     {"nvlinks", {{"0", 18}}},
                                     {"topology", {{"0", 30}, {"2", 50}, {"3", 50}}}},
                                    {{"cpu_affinity", {2, 3}},
                                     {"numa_node", 1},
                                     {"topology", {{"0", 50}, {"1", 50}, {"3", 10}}},
                                     {"readings", {{"pcie_width", 8}}}},
                                    {{"cpu_affinity", {2, 3}},
                                     {"numa_node", 1},
                                     {"topology", {{"0", 50}, {"1", 50}, {"2", 10}}},
                                     {"power_limit_w", 500}}}}};

TEST_F(FakeNvmlScenario, DoctorShowsTheTopologyAndAGpuBelowItsPeers) {
  const CliRun r = run_gpulab("doctor --json --no-libraries --pcie-load-ms 0", env(kFourGpus));
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(doc.is_array()) << r.output;
  std::map<std::string, nlohmann::json> by_check;
  for (const auto& f : doc) by_check[f.at("check").get<std::string>()] = f;
  EXPECT_EQ(by_check["GPU topology"].at("detail"),
            "GPU0-GPU1 NV18, GPU0-GPU2 SYS, GPU0-GPU3 SYS, GPU1-GPU2 SYS, GPU1-GPU3 SYS, GPU2-GPU3 PIX");
  EXPECT_EQ(by_check["GPU 2 NUMA affinity"].at("detail"), "CPUs 2-3, NUMA node 1");
  EXPECT_EQ(by_check["GPU 2 vs its peers"].at("status"), "warn");
  EXPECT_EQ(by_check["GPU 2 vs its peers"].at("detail"), "PCIe x8 where a peer has x16");
  EXPECT_EQ(by_check["GPU 3 vs its peers"].at("detail"), "power limit 500 W where a peer has 700 W");
  EXPECT_EQ(by_check.count("GPU 0 vs its peers"), 0u);

  const CliRun matrix = run_gpulab("doctor --topology", env(kFourGpus));
  ASSERT_EQ(matrix.exit_code, 0) << matrix.output;
  EXPECT_NE(matrix.out.find("GPU2     SYS   SYS     X   PIX  2-3               1"), std::string::npos)
      << matrix.out;
  const CliRun json = run_gpulab("doctor --topology --json", env(kFourGpus));
  const auto topo = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(topo.is_object()) << json.output;
  EXPECT_EQ(topo["links"][0][1], "NV18");
}

TEST_F(FakeNvmlScenario, MonitorReadsEveryGpu) {
  const CliRun r = run_gpulab("monitor --csv --count 1 --fields index,pcie.link.width.current,power.limit",
                              env(kFourGpus));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.out.find("\n0, 16, 700.00\n1, 16, 700.00\n2, 8, 700.00\n3, 16, 500.00\n"), std::string::npos)
      << r.out;
}

TEST_F(FakeNvmlScenario, BenchOnSeveralGpusChecksItsFlags) {
  const CliRun bad = run_gpulab("bench --gpus 0,9 --model /nonexistent.onnx", env(kFourGpus));
  EXPECT_NE(bad.exit_code, 0);
  const CliRun profile = run_gpulab("bench --gpus all --model x.onnx --profile", env(kFourGpus));
  EXPECT_EQ(profile.exit_code, 2) << profile.output;
  EXPECT_NE(profile.err.find("--profile is per GPU"), std::string::npos) << profile.err;
  const CliRun both = run_gpulab("bench --gpus all --device 1 --model x.onnx", env(kFourGpus));
  EXPECT_NE(both.exit_code, 0);
}

}  // namespace
}  // namespace gpulab
