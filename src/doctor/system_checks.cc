// Checks that read the system's files: kernel modules, Secure Boot, containers.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "doctor/doctor.h"

extern char** environ;

namespace gpulab::doctor {
namespace {

std::optional<std::string> read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool path_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

// Names of the loaded modules, from /proc/modules ("name size refcount deps state address").
std::vector<std::string> loaded_modules(const SystemView& sys) {
  std::vector<std::string> out;
  const auto text = read_text(sys.path("/proc/modules"));
  if (!text) return out;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t sp = line.find(' ');
    out.push_back(line.substr(0, sp));
  }
  return out;
}

bool module_loaded(const SystemView& sys, std::string_view name) {
  for (const auto& m : loaded_modules(sys))
    if (m == name) return true;
  return path_exists(sys.path("/sys/module/" + std::string(name) + "/initstate"));
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// Output of a command (stdout), or nullopt when it could not run. Only for fixed command lines.
std::optional<std::string> run_command(const char* command) {
  FILE* f = popen(command, "r");
  if (f == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  const int rc = pclose(f);
  if (rc != 0) return std::nullopt;
  return out;
}

const char* kSecureBootVar = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e98032b8a8c4";

}  // namespace

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::kPass: return "pass";
    case Severity::kSkip: return "skip";
    case Severity::kWarn: return "warn";
    case Severity::kFail: return "fail";
  }
  return "?";
}

std::filesystem::path SystemView::path(std::string_view absolute) const {
  std::string rel(absolute);
  while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
  return root / rel;
}

SystemView SystemView::host() {
  SystemView v;
  v.root = "/";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = kv.substr(0, eq);
    if (key.rfind("NVIDIA_", 0) == 0 || key == "container" || key == "CUDA_VISIBLE_DEVICES" ||
        key == "KUBERNETES_SERVICE_HOST")
      v.env[key] = kv.substr(eq + 1);
  }
  v.run_commands = true;
  return v;
}

std::optional<std::string> parse_nvidia_module_version(std::string_view text) {
  // The first token shaped like 550.54.14 or 535.104 on the NVRM line.
  const size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    const std::string_view tok = line.substr(i, j - i);
    int dots = 0;
    bool digits_only = !tok.empty() && tok.front() != '.' && tok.back() != '.';
    for (char c : tok) {
      if (c == '.')
        ++dots;
      else if (c < '0' || c > '9')
        digits_only = false;
    }
    if (digits_only && dots >= 1 && dots <= 2) return std::string(tok);
    i = j;
  }
  return std::nullopt;
}

Finding check_nvidia_module(const SystemView& sys) {
  Finding f{.check = "nvidia kernel module"};
  std::optional<std::string> version;
  if (auto t = read_text(sys.path("/proc/driver/nvidia/version"))) version = parse_nvidia_module_version(*t);
  if (!version) {
    if (auto t = read_text(sys.path("/sys/module/nvidia/version"))) version = trim(*t);
  }
  const bool loaded = module_loaded(sys, "nvidia") || path_exists(sys.path("/proc/driver/nvidia/version"));
  if (loaded) {
    f.status = Severity::kPass;
    f.detail = version ? fmt::format("loaded, version {}", *version) : "loaded, version unknown";
    return f;
  }
  f.status = Severity::kFail;
  f.detail = path_exists(sys.path("/proc/modules"))
                 ? "not loaded (no 'nvidia' in /proc/modules, no /proc/driver/nvidia/version)"
                 : "not loaded (no /proc/driver/nvidia/version, no /sys/module/nvidia)";
  f.fix =
      "Install the NVIDIA driver (e.g. `sudo apt install nvidia-driver` or NVIDIA's .run/CUDA repo "
      "packages) and reboot, or load it with `sudo modprobe nvidia`; `sudo dmesg | grep -i nvidia` "
      "says why it failed to load";
  return f;
}

Finding check_nouveau(const SystemView& sys) {
  Finding f{.check = "nouveau"};
  if (!path_exists(sys.path("/proc/modules"))) {
    f.status = Severity::kSkip;
    f.detail = "/proc/modules not readable";
    return f;
  }
  if (module_loaded(sys, "nouveau")) {
    f.status = Severity::kFail;
    f.detail = "the open-source nouveau driver is loaded; it holds the GPU and blocks the NVIDIA driver";
    f.fix =
        "Blacklist it: printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
        "/etc/modprobe.d/blacklist-nouveau.conf && sudo update-initramfs -u && sudo reboot";
    return f;
  }
  f.status = Severity::kPass;
  f.detail = "not loaded";
  return f;
}

std::vector<Finding> check_secure_boot(const SystemView& sys) {
  std::vector<Finding> out;
  Finding sb{.check = "secure boot"};
  std::optional<bool> enabled;
  std::string source;
  if (auto t = read_text(sys.path(kSecureBootVar))) {
    // efivarfs files start with 4 bytes of attributes, then the variable's data (1 byte here).
    if (t->size() >= 5) {
      enabled = static_cast<unsigned char>((*t)[4]) == 1;
      source = "efivars";
    }
  }
  if (!enabled && sys.run_commands && sys.root == "/") {
    if (auto out_text = run_command("mokutil --sb-state 2>/dev/null")) {
      if (out_text->find("SecureBoot enabled") != std::string::npos) enabled = true;
      if (out_text->find("SecureBoot disabled") != std::string::npos) enabled = false;
      if (enabled) source = "mokutil";
    }
  }
  if (!enabled) {
    sb.status = Severity::kSkip;
    sb.detail = path_exists(sys.path("/sys/firmware/efi"))
                    ? "UEFI system, but the SecureBoot variable is not readable"
                    : "not a UEFI boot (no /sys/firmware/efi): Secure Boot does not apply";
    out.push_back(sb);
    return out;
  }
  sb.status = Severity::kPass;
  sb.detail = fmt::format("{} (from {})", *enabled ? "enabled" : "disabled", source);
  out.push_back(sb);
  if (!*enabled) return out;

  Finding sig{.check = "nvidia module signature"};
  const bool loaded = module_loaded(sys, "nvidia");
  std::optional<bool> signed_module;
  if (auto taint = read_text(sys.path("/sys/module/nvidia/taint"))) {
    // Taint flag 'E': an unsigned module was loaded (kernel Documentation/admin-guide/tainted-kernels).
    signed_module = taint->find('E') == std::string::npos;
  }
  if (sys.run_commands && sys.root == "/") {
    if (auto id = run_command("modinfo -F sig_id nvidia 2>/dev/null")) signed_module = !trim(*id).empty();
  }
  if (loaded && signed_module.value_or(true)) {
    sig.status = Severity::kPass;
    sig.detail = "Secure Boot is on and the nvidia module is loaded (signed)";
  } else if (loaded) {
    sig.status = Severity::kWarn;
    sig.detail = "Secure Boot is on but the loaded nvidia module is unsigned (kernel lockdown not enforcing)";
    sig.fix =
        "Sign the module with an enrolled Machine Owner Key (DKMS does this when its MOK is "
        "enrolled: `sudo mokutil --import /var/lib/dkms/mok.pub`, reboot, enroll)";
  } else {
    sig.status = Severity::kFail;
    sig.detail = signed_module == std::optional<bool>(false)
                     ? "Secure Boot is on and the nvidia module is unsigned: the kernel refuses to load it"
                     : "Secure Boot is on and the nvidia module is not loaded: an unsigned module is refused";
    sig.fix =
        "Enroll a Machine Owner Key and sign the module: `sudo mokutil --import /var/lib/dkms/mok.pub`, "
        "reboot and enroll the key in the MOK manager, then `sudo dkms autoinstall`; or disable "
        "Secure Boot in the firmware settings";
  }
  out.push_back(sig);
  return out;
}

std::vector<Finding> check_container(const SystemView& sys) {
  std::vector<Finding> out;
  std::vector<std::string> markers;
  std::string engine;
  if (path_exists(sys.path("/.dockerenv"))) {
    markers.push_back("/.dockerenv");
    engine = "docker";
  }
  if (path_exists(sys.path("/run/.containerenv"))) {
    markers.push_back("/run/.containerenv");
    engine = "podman";
  }
  if (auto cg = read_text(sys.path("/proc/1/cgroup"))) {
    for (const char* word : {"docker", "kubepods", "containerd", "libpod", "lxc"}) {
      if (cg->find(word) != std::string::npos) {
        markers.push_back(fmt::format("/proc/1/cgroup mentions {}", word));
        if (engine.empty()) engine = word;
        break;
      }
    }
  }
  if (auto it = sys.env.find("container"); it != sys.env.end()) {
    markers.push_back("$container=" + it->second);
    if (engine.empty()) engine = it->second;
  }
  if (sys.env.count("KUBERNETES_SERVICE_HOST")) {
    markers.push_back("$KUBERNETES_SERVICE_HOST");
    if (engine.empty()) engine = "kubernetes";
  }
  const bool in_container = !markers.empty();

  // What the NVIDIA container runtime (libnvidia-container) leaves behind: device nodes, the
  // NVIDIA_VISIBLE_DEVICES variable, and bind mounts of the driver's user-space libraries.
  std::vector<std::string> traces;
  const bool dev_nodes = path_exists(sys.path("/dev/nvidiactl")) || path_exists(sys.path("/dev/nvidia0"));
  if (dev_nodes) traces.push_back("/dev/nvidia*");
  if (auto it = sys.env.find("NVIDIA_VISIBLE_DEVICES"); it != sys.env.end())
    traces.push_back("NVIDIA_VISIBLE_DEVICES=" + it->second);
  if (auto mi = read_text(sys.path("/proc/self/mountinfo"))) {
    if (mi->find("libnvidia-ml.so") != std::string::npos || mi->find("libcuda.so") != std::string::npos)
      traces.push_back("driver libraries bind-mounted");
  }
  const std::string trace_text = traces.empty() ? "none" : fmt::format("{}", fmt::join(traces, ", "));

  Finding c{.check = "container"};
  c.status = Severity::kPass;
  if (!in_container) {
    c.detail = "not in a container";
    std::vector<std::string> toolkit;
    for (const char* p : {"/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-ctk",
                          "/etc/nvidia-container-runtime/config.toml"})
      if (path_exists(sys.path(p))) toolkit.push_back(p);
    if (!toolkit.empty())
      c.detail += fmt::format("; NVIDIA container toolkit installed ({})", fmt::join(toolkit, ", "));
    out.push_back(c);
    return out;
  }
  c.detail = fmt::format("inside a container ({}; {})", engine, fmt::join(markers, ", "));
  out.push_back(c);

  Finding g{.check = "container GPU access"};
  if (dev_nodes) {
    g.status = Severity::kPass;
    g.detail = fmt::format("NVIDIA container runtime traces: {}", trace_text);
  } else {
    g.status = Severity::kFail;
    g.detail = fmt::format("no /dev/nvidia* device nodes in the container (traces: {})", trace_text);
    g.fix =
        "Install nvidia-container-toolkit on the host and start the container with GPUs: "
        "`docker run --gpus all ...` (Docker), `podman run --device nvidia.com/gpu=all ...` (CDI), "
        "or request nvidia.com/gpu in the Kubernetes pod spec";
  }
  out.push_back(g);
  return out;
}

}  // namespace gpulab::doctor
