// Doctor's checks against fake system trees (a temporary directory standing in for /).
#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace gpulab::doctor {
namespace {

namespace fs = std::filesystem;

// A temporary root with files placed at absolute-looking paths; removed on destruction.
class FakeRoot {
 public:
  FakeRoot() {
    std::string templ = (fs::temp_directory_path() / "gpulab-doctor-XXXXXX").string();
    root_ = mkdtemp(templ.data());
  }
  ~FakeRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  FakeRoot& write(const std::string& absolute, const std::string& content) {
    const fs::path p = root_ / absolute.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return *this;
  }
  SystemView view(std::map<std::string, std::string> env = {}) const {
    SystemView v;
    v.root = root_;
    v.env = std::move(env);
    v.run_commands = false;
    return v;
  }

 private:
  fs::path root_;
};

const char* kProcVersionProprietary =
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
const char* kProcVersionOpen =
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 2025\n";
const char* kModulesWithNvidia =
    "nvidia_uvm 1794048 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia 62263296 2 nvidia_uvm, Live 0x0000000000000000 (POE)\n"
    "snd_hda_intel 57344 0 - Live 0x0000000000000000\n";
const char* kModulesWithNouveau =
    "nouveau 2805760 0 - Live 0x0000000000000000\n"
    "drm_ttm_helper 16384 1 nouveau, Live 0x0000000000000000\n";
const std::string kEfiSecureBootOn("\x06\x00\x00\x00\x01", 5);
const std::string kEfiSecureBootOff("\x06\x00\x00\x00\x00", 5);
const char* kSecureBootPath = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e98032b8a8c4";

const Finding* find(const std::vector<Finding>& fs, const std::string& check) {
  for (const auto& f : fs)
    if (f.check == check) return &f;
  return nullptr;
}

TEST(DoctorNvidiaModule, ParsesProprietaryAndOpenVersionLines) {
  EXPECT_EQ(parse_nvidia_module_version(kProcVersionProprietary), "550.54.14");
  EXPECT_EQ(parse_nvidia_module_version(kProcVersionOpen), "570.86.15");
  EXPECT_EQ(parse_nvidia_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104  x"),
            "535.104");
  EXPECT_FALSE(parse_nvidia_module_version("garbage").has_value());
  EXPECT_FALSE(parse_nvidia_module_version("").has_value());
}

TEST(DoctorNvidiaModule, LoadedWithVersionFromProc) {
  FakeRoot root;
  root.write("/proc/driver/nvidia/version", kProcVersionProprietary)
      .write("/proc/modules", kModulesWithNvidia);
  const Finding f = check_nvidia_module(root.view());
  EXPECT_EQ(f.status, Severity::kPass);
  EXPECT_EQ(f.detail, "loaded, version 550.54.14");
}

TEST(DoctorNvidiaModule, VersionFromSysWhenProcLacksIt) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNvidia).write("/sys/module/nvidia/version", "560.35.03\n");
  const Finding f = check_nvidia_module(root.view());
  EXPECT_EQ(f.status, Severity::kPass);
  EXPECT_EQ(f.detail, "loaded, version 560.35.03");
}

TEST(DoctorNvidiaModule, NotLoadedFailsWithFix) {
  FakeRoot root;
  root.write("/proc/modules", "snd 1 0 - Live 0x0\n");
  const Finding f = check_nvidia_module(root.view());
  EXPECT_EQ(f.status, Severity::kFail);
  EXPECT_NE(f.fix.find("modprobe nvidia"), std::string::npos);
}

TEST(DoctorNouveau, LoadedFailsWithBlacklistFix) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNouveau);
  const Finding f = check_nouveau(root.view());
  EXPECT_EQ(f.status, Severity::kFail);
  EXPECT_NE(f.fix.find("blacklist nouveau"), std::string::npos);
  EXPECT_NE(f.fix.find("update-initramfs"), std::string::npos);
}

TEST(DoctorNouveau, NotLoadedPassesAndUnreadableSkips) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNvidia);
  EXPECT_EQ(check_nouveau(root.view()).status, Severity::kPass);
  FakeRoot empty;
  EXPECT_EQ(check_nouveau(empty.view()).status, Severity::kSkip);
}

TEST(DoctorSecureBoot, OffNeedsNoSignature) {
  FakeRoot root;
  root.write(kSecureBootPath, kEfiSecureBootOff).write("/proc/modules", kModulesWithNvidia);
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, Severity::kPass);
  EXPECT_EQ(f[0].detail, "disabled (from efivars)");
}

TEST(DoctorSecureBoot, OnWithSignedModuleLoadedPasses) {
  FakeRoot root;
  root.write(kSecureBootPath, kEfiSecureBootOn)
      .write("/proc/modules", kModulesWithNvidia)
      .write("/sys/module/nvidia/taint", "PO\n");
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].detail, "enabled (from efivars)");
  EXPECT_EQ(f[1].check, "nvidia module signature");
  EXPECT_EQ(f[1].status, Severity::kPass);
}

TEST(DoctorSecureBoot, OnWithUnsignedModuleLoadedWarns) {
  FakeRoot root;
  root.write(kSecureBootPath, kEfiSecureBootOn)
      .write("/proc/modules", kModulesWithNvidia)
      .write("/sys/module/nvidia/taint", "POE\n");
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].status, Severity::kWarn);
  EXPECT_NE(f[1].fix.find("mokutil"), std::string::npos);
}

TEST(DoctorSecureBoot, OnWithModuleNotLoadedFailsWithMokFix) {
  FakeRoot root;
  root.write(kSecureBootPath, kEfiSecureBootOn).write("/proc/modules", "snd 1 0 - Live 0x0\n");
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].status, Severity::kFail);
  EXPECT_NE(f[1].fix.find("mokutil --import"), std::string::npos);
  EXPECT_NE(f[1].fix.find("disable Secure Boot"), std::string::npos);
}

TEST(DoctorSecureBoot, LegacyBootSkips) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNvidia);
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, Severity::kSkip);
  EXPECT_NE(f[0].detail.find("not a UEFI boot"), std::string::npos);
}

TEST(DoctorSecureBoot, TruncatedVariableIsNotRead) {
  FakeRoot root;
  root.write(kSecureBootPath, std::string("\x06\x00", 2));
  const auto f = check_secure_boot(root.view());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, Severity::kSkip);
  EXPECT_NE(f[0].detail.find("not readable"), std::string::npos);
}

TEST(DoctorContainer, BareMetalHost) {
  FakeRoot root;
  root.write("/proc/1/cgroup", "0::/init.scope\n").write("/usr/bin/nvidia-ctk", "");
  const auto f = check_container(root.view());
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].status, Severity::kPass);
  EXPECT_NE(f[0].detail.find("not in a container"), std::string::npos);
  EXPECT_NE(f[0].detail.find("NVIDIA container toolkit installed"), std::string::npos);
}

TEST(DoctorContainer, DockerWithNvidiaRuntimePasses) {
  FakeRoot root;
  root.write("/.dockerenv", "")
      .write("/dev/nvidiactl", "")
      .write("/dev/nvidia0", "")
      .write("/proc/self/mountinfo",
             "1201 1180 8:1 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14 "
             "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14 ro,nosuid,nodev - ext4 /dev/sda1 rw\n");
  const auto f = check_container(root.view({{"NVIDIA_VISIBLE_DEVICES", "all"}}));
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].detail.find("inside a container (docker"), std::string::npos);
  const Finding* g = find(f, "container GPU access");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->status, Severity::kPass);
  EXPECT_NE(g->detail.find("NVIDIA_VISIBLE_DEVICES=all"), std::string::npos);
  EXPECT_NE(g->detail.find("driver libraries bind-mounted"), std::string::npos);
}

TEST(DoctorContainer, ContainerWithoutGpuFailsWithRuntimeFix) {
  FakeRoot root;
  root.write("/run/.containerenv", "engine=\"podman\"\n");
  const auto f = check_container(root.view());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].detail.find("podman"), std::string::npos);
  EXPECT_EQ(f[1].status, Severity::kFail);
  EXPECT_NE(f[1].fix.find("--gpus all"), std::string::npos);
  EXPECT_NE(f[1].fix.find("nvidia-container-toolkit"), std::string::npos);
}

TEST(DoctorContainer, KubernetesCgroupIsDetected) {
  FakeRoot root;
  root.write("/proc/1/cgroup", "0::/kubepods/burstable/pod1234/abcd\n").write("/dev/nvidia0", "");
  const auto f = check_container(root.view());
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].detail.find("kubepods"), std::string::npos);
  EXPECT_EQ(f[1].status, Severity::kPass);
}

TEST(DoctorCudaDriver, OlderThanBuildFails) {
  const Finding f = judge_cuda_driver(12040, 12080, "");
  EXPECT_EQ(f.status, Severity::kFail);
  EXPECT_NE(f.detail.find("CUDA 12.4"), std::string::npos);
  EXPECT_NE(f.detail.find("CUDA 12.8"), std::string::npos);
  EXPECT_NE(f.fix.find("Upgrade the NVIDIA driver"), std::string::npos);
}

TEST(DoctorCudaDriver, NewerOrEqualPassesAndMissingFails) {
  EXPECT_EQ(judge_cuda_driver(13000, 12080, "").status, Severity::kPass);
  EXPECT_EQ(judge_cuda_driver(12080, 12080, "").status, Severity::kPass);
  EXPECT_EQ(judge_cuda_driver(12080, std::nullopt, "").status, Severity::kPass);
  const Finding missing = judge_cuda_driver(std::nullopt, 12080, "libcuda.so.1 not found");
  EXPECT_EQ(missing.status, Severity::kFail);
  EXPECT_EQ(missing.detail, "libcuda.so.1 not found");
  EXPECT_FALSE(missing.fix.empty());
}

TEST(DoctorLibraries, JudgedByPresenceAndCudaMajor) {
  const Finding missing =
      judge_library("cuDNN", {.found = false, .path_or_error = "libcudnn.so.9: not found"}, 12);
  EXPECT_EQ(missing.status, Severity::kFail);
  EXPECT_NE(missing.fix.find("cuDNN"), std::string::npos);
  const Finding mismatch = judge_library(
      "cuBLAS", {.found = true, .path_or_error = "/x/libcublas.so.12", .version = "12.4.5", .cuda_major = 12},
      13);
  EXPECT_EQ(mismatch.status, Severity::kFail);
  EXPECT_NE(mismatch.detail.find("built for CUDA 12 but gpulab uses CUDA 13"), std::string::npos);
  const Finding ok = judge_library(
      "cuDNN", {.found = true, .path_or_error = "/x/libcudnn.so.9", .version = "9.1.0", .cuda_major = 12},
      12);
  EXPECT_EQ(ok.status, Severity::kPass);
  EXPECT_EQ(ok.detail, "9.1.0 /x/libcudnn.so.9, CUDA 12");
}

TEST(DoctorReport, ExitCodeByWorstFinding) {
  const Finding pass{"a", Severity::kPass, "", ""}, skip{"b", Severity::kSkip, "", ""},
      warn{"c", Severity::kWarn, "", "do x"}, fail{"d", Severity::kFail, "", "do y"};
  EXPECT_EQ(exit_code({pass, skip}, false), 0);
  EXPECT_EQ(exit_code({pass, warn}, false), 0);
  EXPECT_EQ(exit_code({pass, warn}, true), 1);
  EXPECT_EQ(exit_code({pass, fail, skip}, false), 1);
  EXPECT_EQ(exit_code({}, true), 0);
}

TEST(DoctorReport, TableShowsFixesAndCountsAndJsonHasEveryField) {
  const std::vector<Finding> fs = {{"nouveau", Severity::kFail, "loaded", "blacklist it"},
                                   {"container", Severity::kPass, "not in a container", ""},
                                   {"secure boot", Severity::kSkip, "not UEFI", ""}};
  const std::string table = format_table(fs);
  EXPECT_NE(table.find("CHECK"), std::string::npos);
  EXPECT_NE(table.find("nouveau      FAIL   loaded"), std::string::npos) << table;
  EXPECT_NE(table.find("fix: blacklist it"), std::string::npos);
  EXPECT_NE(table.find("1 pass, 0 warn, 1 fail, 1 skip"), std::string::npos) << table;
  const auto j = to_json(fs);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0].at("status"), "fail");
  EXPECT_EQ(j[0].at("fix"), "blacklist it");
  EXPECT_EQ(j[2].at("status"), "skip");
}

TEST(DoctorRunDoctor, FakeTreeWithNouveauAndSecureBootFails) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNouveau).write(kSecureBootPath, kEfiSecureBootOn);
  DoctorOptions o;
  o.system = root.view();
  o.library_checks = false;
  o.gpu_checks = false;
  const auto fs = run_doctor(o);
  ASSERT_NE(find(fs, "nouveau"), nullptr);
  EXPECT_EQ(find(fs, "nouveau")->status, Severity::kFail);
  EXPECT_EQ(find(fs, "nvidia kernel module")->status, Severity::kFail);
  EXPECT_EQ(find(fs, "nvidia module signature")->status, Severity::kFail);
  EXPECT_EQ(find(fs, "container")->detail, "not in a container");
  EXPECT_EQ(exit_code(fs, false), 1);
  for (const auto& f : fs) {
    if (f.status == Severity::kFail || f.status == Severity::kWarn) {
      EXPECT_FALSE(f.fix.empty()) << f.check;
    }
  }
}

TEST(DoctorRunDoctor, HealthyFakeTreePasses) {
  FakeRoot root;
  root.write("/proc/modules", kModulesWithNvidia)
      .write("/proc/driver/nvidia/version", kProcVersionOpen)
      .write(kSecureBootPath, kEfiSecureBootOff);
  DoctorOptions o;
  o.system = root.view();
  o.library_checks = false;
  o.gpu_checks = false;
  const auto fs = run_doctor(o);
  EXPECT_EQ(exit_code(fs, true), 0) << format_table(fs);
  EXPECT_EQ(find(fs, "nvidia kernel module")->detail, "loaded, version 570.86.15");
}

}  // namespace
}  // namespace gpulab::doctor
