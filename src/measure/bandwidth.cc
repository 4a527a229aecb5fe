#include "measure/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "core/json_reader.h"
#include "telemetry/cuda_driver.h"
#include "telemetry/device_facts.h"
#include "telemetry/telemetry.h"

namespace gpulab::measure {
namespace {

using telemetry::cuda::CUdevice;
using telemetry::cuda::CUdeviceptr;
using telemetry::cuda::CUevent;
using telemetry::cuda::CUstream;
using telemetry::cuda::Driver;

constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = 1024 * kKiB;
constexpr std::uint64_t kGiB = 1024 * kMiB;

// Host memory of one kind, freed on destruction.
class HostBuffer {
 public:
  static Result<HostBuffer> allocate(const Driver& d, HostMemory kind, std::uint64_t bytes) {
    HostBuffer b;
    b.driver_ = &d;
    b.kind_ = kind;
    if (kind == HostMemory::kPageable) {
      b.pageable_.reset(new (std::nothrow) std::byte[bytes]);
      if (!b.pageable_)
        return Status::out_of_memory(fmt::format(
            "bandwidth: cannot allocate {} MiB of pageable host memory. Use smaller --sizes", bytes / kMiB));
      b.ptr_ = b.pageable_.get();
    } else {
      const unsigned int flags =
          telemetry::cuda::kMemHostAllocPortable |
          (kind == HostMemory::kWriteCombined ? telemetry::cuda::kMemHostAllocWriteCombined : 0u);
      GPULAB_TRY(d.check(
          d.api().mem_host_alloc(&b.ptr_, bytes, flags),
          fmt::format("bandwidth: cuMemHostAlloc({} MiB, {})", bytes / kMiB, host_memory_name(kind))));
    }
    // Touch every page so that first-touch faults are not timed.
    std::memset(b.ptr_, 0x5a, bytes);
    return b;
  }
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    std::swap(driver_, o.driver_);
    std::swap(kind_, o.kind_);
    std::swap(ptr_, o.ptr_);
    std::swap(pageable_, o.pageable_);
    return *this;
  }
  ~HostBuffer() {
    if (ptr_ != nullptr && kind_ != HostMemory::kPageable) driver_->api().mem_free_host(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  const Driver* driver_ = nullptr;
  HostMemory kind_ = HostMemory::kPageable;
  void* ptr_ = nullptr;
  std::unique_ptr<std::byte[]> pageable_;
};

class DeviceBuffer {
 public:
  static Result<DeviceBuffer> allocate(const Driver& d, std::uint64_t bytes) {
    DeviceBuffer b;
    b.driver_ = &d;
    GPULAB_TRY(d.check(d.api().mem_alloc(&b.ptr_, bytes),
                       fmt::format("bandwidth: cuMemAlloc({} MiB)", bytes / kMiB)));
    return b;
  }
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(driver_, o.driver_);
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != 0) driver_->api().mem_free(ptr_);
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  const Driver* driver_ = nullptr;
  CUdeviceptr ptr_ = 0;
};

// Two streams and four events on the current context.
class Timing {
 public:
  static Result<std::unique_ptr<Timing>> create(const Driver& d) {
    std::unique_ptr<Timing> t(new Timing(d));
    for (CUstream& s : t->streams_)
      GPULAB_TRY(d.check(d.api().stream_create(&s, telemetry::cuda::kStreamNonBlocking),
                         "bandwidth: cuStreamCreate"));
    for (CUevent& e : t->events_)
      GPULAB_TRY(
          d.check(d.api().event_create(&e, telemetry::cuda::kEventDefault), "bandwidth: cuEventCreate"));
    return t;
  }
  ~Timing() {
    for (CUevent e : events_)
      if (e) d_.api().event_destroy(e);
    for (CUstream s : streams_)
      if (s) d_.api().stream_destroy(s);
  }
  CUstream stream(int i) const { return streams_[i]; }
  CUevent event(int i) const { return events_[i]; }

 private:
  explicit Timing(const Driver& d) : d_(d) {}
  const Driver& d_;
  CUstream streams_[2] = {nullptr, nullptr};
  CUevent events_[4] = {nullptr, nullptr, nullptr, nullptr};
};

struct Buffers {
  HostBuffer host_a, host_b;
  DeviceBuffer dev_a, dev_b;
};

// One timed copy of `size` bytes; milliseconds between the first start and the last end event.
Result<double> time_copy(const Driver& d, const Timing& t, const Buffers& b, CopyKind kind,
                         std::uint64_t size) {
  const auto& api = d.api();
  CUstream s0 = t.stream(0), s1 = t.stream(1);
  GPULAB_TRY(d.check(api.event_record(t.event(0), s0), "bandwidth: cuEventRecord"));
  switch (kind) {
    case CopyKind::kHostToDevice:
      GPULAB_TRY(d.check(api.memcpy_htod_async(b.dev_a.get(), b.host_a.get(), size, s0),
                         "bandwidth: cuMemcpyHtoDAsync"));
      break;
    case CopyKind::kDeviceToHost:
      GPULAB_TRY(d.check(api.memcpy_dtoh_async(b.host_a.get(), b.dev_a.get(), size, s0),
                         "bandwidth: cuMemcpyDtoHAsync"));
      break;
    case CopyKind::kDeviceToDevice:
      GPULAB_TRY(d.check(api.memcpy_dtod_async(b.dev_b.get(), b.dev_a.get(), size, s0),
                         "bandwidth: cuMemcpyDtoDAsync"));
      break;
    case CopyKind::kBidirectional:
      GPULAB_TRY(d.check(api.event_record(t.event(2), s1), "bandwidth: cuEventRecord"));
      GPULAB_TRY(d.check(api.memcpy_htod_async(b.dev_a.get(), b.host_a.get(), size, s0),
                         "bandwidth: cuMemcpyHtoDAsync"));
      GPULAB_TRY(d.check(api.memcpy_dtoh_async(b.host_b.get(), b.dev_b.get(), size, s1),
                         "bandwidth: cuMemcpyDtoHAsync"));
      GPULAB_TRY(d.check(api.event_record(t.event(3), s1), "bandwidth: cuEventRecord"));
      break;
  }
  GPULAB_TRY(d.check(api.event_record(t.event(1), s0), "bandwidth: cuEventRecord"));
  GPULAB_TRY(d.check(api.event_synchronize(t.event(1)), "bandwidth: cuEventSynchronize"));
  float ms = 0;
  GPULAB_TRY(d.check(api.event_elapsed_time(&ms, t.event(0), t.event(1)), "bandwidth: cuEventElapsedTime"));
  if (kind == CopyKind::kBidirectional) {
    GPULAB_TRY(d.check(api.event_synchronize(t.event(3)), "bandwidth: cuEventSynchronize"));
    float ms_b = 0;
    GPULAB_TRY(
        d.check(api.event_elapsed_time(&ms_b, t.event(0), t.event(3)), "bandwidth: cuEventElapsedTime"));
    ms = std::max(ms, ms_b);
  }
  return static_cast<double>(ms);
}

double bytes_counted(CopyKind kind, std::uint64_t size) {
  return kind == CopyKind::kBidirectional || kind == CopyKind::kDeviceToDevice ? 2.0 * size
                                                                               : static_cast<double>(size);
}

std::string size_text(std::uint64_t bytes) {
  if (bytes >= kGiB && bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
  if (bytes >= kMiB && bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes >= kKiB && bytes % kKiB == 0) return fmt::format("{} KiB", bytes / kKiB);
  return fmt::format("{} B", bytes);
}

template <typename T>
Result<std::vector<T>> parse_names(std::string_view list, std::string_view flag,
                                   const std::vector<std::pair<std::string_view, T>>& names) {
  std::vector<T> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    bool found = false;
    for (const auto& [name, value] : names) {
      if (item == name) {
        out.push_back(value);
        found = true;
      }
    }
    if (!found && !item.empty()) {
      std::string valid;
      for (const auto& [name, value] : names) valid += (valid.empty() ? "" : ", ") + std::string(name);
      return Status::invalid_argument(fmt::format("{}: unknown value '{}'. Valid: {}", flag, item, valid));
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (out.empty()) return Status::invalid_argument(fmt::format("{}: empty list", flag));
  return out;
}

}  // namespace

std::string_view copy_kind_name(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice: return "h2d";
    case CopyKind::kDeviceToHost: return "d2h";
    case CopyKind::kBidirectional: return "bidir";
    case CopyKind::kDeviceToDevice: return "d2d";
  }
  return "?";
}

std::string_view host_memory_name(HostMemory mem) {
  switch (mem) {
    case HostMemory::kPinned: return "pinned";
    case HostMemory::kPageable: return "pageable";
    case HostMemory::kWriteCombined: return "write-combined";
    case HostMemory::kDevice: return "device";
  }
  return "?";
}

std::vector<std::uint64_t> default_sizes() {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = 4 * kKiB; s <= kGiB; s *= 4) out.push_back(s);
  return out;
}

Result<std::vector<std::uint64_t>> parse_sizes(std::string_view list) {
  std::vector<std::uint64_t> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string item(list.substr(0, comma));
    if (!item.empty()) {
      std::uint64_t mult = 1;
      const char last = item.back();
      if (last == 'K' || last == 'k') mult = kKiB;
      if (last == 'M' || last == 'm') mult = kMiB;
      if (last == 'G' || last == 'g') mult = kGiB;
      if (mult != 1) item.pop_back();
      std::uint64_t v = 0;
      bool ok = !item.empty() && item.size() < 12;
      for (char c : item) {
        if (c < '0' || c > '9')
          ok = false;
        else
          v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (!ok || v == 0 || v * mult > 16 * kGiB)
        return Status::invalid_argument(
            fmt::format("--sizes: '{}' is not a size between 1 byte and 16G. Example: --sizes 4K,1M,256M,1G",
                        list.substr(0, comma)));
      out.push_back(v * mult);
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (out.empty()) return Status::invalid_argument("--sizes: empty list. Example: --sizes 4K,1M,256M,1G");
  return out;
}

Result<std::vector<CopyKind>> parse_copy_kinds(std::string_view list) {
  return parse_names<CopyKind>(list, "--copies",
                               {{"h2d", CopyKind::kHostToDevice},
                                {"d2h", CopyKind::kDeviceToHost},
                                {"bidir", CopyKind::kBidirectional},
                                {"d2d", CopyKind::kDeviceToDevice}});
}

Result<std::vector<HostMemory>> parse_host_memory(std::string_view list) {
  return parse_names<HostMemory>(list, "--memory",
                                 {{"pinned", HostMemory::kPinned},
                                  {"pageable", HostMemory::kPageable},
                                  {"write-combined", HostMemory::kWriteCombined},
                                  {"wc", HostMemory::kWriteCombined}});
}

Result<BandwidthReport> run_bandwidth_test(const BandwidthOptions& options,
                                           const std::function<void(const BandwidthPoint&)>& on_point) {
  if (options.repeats < 1 || options.warmup < 0)
    return Status::invalid_argument(
        fmt::format("bandwidth: repeats {} / warmup {} out of range. Use repeats >= 1, warmup >= 0",
                    options.repeats, options.warmup));
  const std::vector<std::uint64_t> sizes =
      options.sizes_bytes.empty() ? default_sizes() : options.sizes_bytes;
  GPULAB_ASSIGN_OR_RETURN(std::shared_ptr<Driver> driver, Driver::load());
  if (options.cuda_device < 0 || options.cuda_device >= driver->device_count())
    return Status::invalid_argument(fmt::format("bandwidth: CUDA device {} out of range ({} visible)",
                                                options.cuda_device, driver->device_count()));
  const auto& api = driver->api();
  CUdevice dev = 0;
  GPULAB_TRY(driver->check(api.device_get(&dev, options.cuda_device), "bandwidth: cuDeviceGet"));
  BandwidthReport report;
  report.cuda_device = options.cuda_device;
  char name[128] = {};
  if (api.device_get_name(name, sizeof(name), dev) == telemetry::cuda::kSuccess) report.device_name = name;
  if (auto u = driver->device_uuid(dev); u.is_ok()) report.uuid = u.value();
  int major = 0, minor = 0;
  api.device_get_attribute(&major, telemetry::cuda::kAttrComputeCapabilityMajor, dev);
  api.device_get_attribute(&minor, telemetry::cuda::kAttrComputeCapabilityMinor, dev);
  report.memory_gb_s = telemetry::make_device_facts(
                           {.name = report.device_name, .cc = telemetry::ComputeCapability{major, minor}})
                           .memory_bandwidth_gb_s;

  // NVML (optional) tells the negotiated link while the large copies run.
  std::shared_ptr<telemetry::Telemetry> nvml;
  std::optional<std::uint32_t> nvml_index;
  if (auto t = telemetry::Telemetry::open(); t.is_ok()) {
    nvml = t.value();
    for (std::uint32_t i = 0; i < nvml->device_count(); ++i) {
      auto info = nvml->device_info(i);
      if (info.is_ok() && info->uuid == report.uuid) nvml_index = i;
    }
  }
  auto observe_link = [&] {
    if (!nvml || !nvml_index) return;
    auto s = nvml->sample(*nvml_index, {.processes = false});
    if (!s.is_ok()) return;
    if (s->pcie_gen) report.pcie_gen = std::max(report.pcie_gen.value_or(0), static_cast<int>(*s->pcie_gen));
    if (s->pcie_width)
      report.pcie_width = std::max(report.pcie_width.value_or(0), static_cast<int>(*s->pcie_width));
  };

  GPULAB_ASSIGN_OR_RETURN(auto ctx, telemetry::cuda::ScopedContext::create(driver, dev));
  GPULAB_ASSIGN_OR_RETURN(auto timing, Timing::create(*driver));
  const std::uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  Buffers buffers;
  GPULAB_ASSIGN_OR_RETURN(buffers.dev_a, DeviceBuffer::allocate(*driver, max_size));
  GPULAB_ASSIGN_OR_RETURN(buffers.dev_b, DeviceBuffer::allocate(*driver, max_size));

  std::vector<std::pair<CopyKind, HostMemory>> plan;
  for (HostMemory mem : options.host_memory)
    for (CopyKind kind : options.kinds)
      if (kind != CopyKind::kDeviceToDevice) plan.emplace_back(kind, mem);
  if (std::find(options.kinds.begin(), options.kinds.end(), CopyKind::kDeviceToDevice) != options.kinds.end())
    plan.emplace_back(CopyKind::kDeviceToDevice, HostMemory::kDevice);

  std::optional<HostMemory> allocated;
  for (const auto& [kind, mem] : plan) {
    if (mem != HostMemory::kDevice && allocated != mem) {
      buffers.host_a = HostBuffer();
      buffers.host_b = HostBuffer();
      GPULAB_ASSIGN_OR_RETURN(buffers.host_a, HostBuffer::allocate(*driver, mem, max_size));
      GPULAB_ASSIGN_OR_RETURN(buffers.host_b, HostBuffer::allocate(*driver, mem, max_size));
      allocated = mem;
    }
    for (std::uint64_t size : sizes) {
      std::vector<double> ms;
      for (int i = 0; i < options.warmup + options.repeats; ++i) {
        GPULAB_ASSIGN_OR_RETURN(double t, time_copy(*driver, *timing, buffers, kind, size));
        if (i >= options.warmup) ms.push_back(t);
      }
      if (kind == CopyKind::kHostToDevice && mem == HostMemory::kPinned && size >= 16 * kMiB) observe_link();
      std::sort(ms.begin(), ms.end());
      BandwidthPoint p;
      p.kind = kind;
      p.memory = mem;
      p.size_bytes = size;
      p.repeats = options.repeats;
      p.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
      p.min_ms = ms.front();
      p.max_ms = ms.back();
      p.gb_s = p.median_ms > 0 ? bytes_counted(kind, size) / (p.median_ms * 1e-3) / 1e9 : 0;
      report.points.push_back(p);
      if (on_point) on_point(p);
    }
  }
  if (report.pcie_gen && report.pcie_width)
    report.pcie_gb_s = telemetry::pcie_bandwidth_gb_s(*report.pcie_gen, *report.pcie_width);
  for (BandwidthPoint& p : report.points) {
    if (p.kind == CopyKind::kDeviceToDevice) {
      if (report.memory_gb_s) p.peak_share = p.gb_s / *report.memory_gb_s;
    } else if (report.pcie_gb_s) {
      // Bidirectional moves data both ways at once: its peak is twice the per-direction rate.
      const double peak = *report.pcie_gb_s * (p.kind == CopyKind::kBidirectional ? 2.0 : 1.0);
      p.peak_share = p.gb_s / peak;
    }
  }
  return report;
}

Status run_transfer_load(int cuda_device, int duration_ms, const std::function<void()>& poll) {
  GPULAB_ASSIGN_OR_RETURN(std::shared_ptr<Driver> driver, Driver::load());
  if (cuda_device < 0 || cuda_device >= driver->device_count())
    return Status::invalid_argument(fmt::format("transfer load: CUDA device {} out of range ({} visible)",
                                                cuda_device, driver->device_count()));
  const auto& api = driver->api();
  CUdevice dev = 0;
  GPULAB_TRY(driver->check(api.device_get(&dev, cuda_device), "transfer load: cuDeviceGet"));
  GPULAB_ASSIGN_OR_RETURN(auto ctx, telemetry::cuda::ScopedContext::create(driver, dev));
  GPULAB_ASSIGN_OR_RETURN(auto timing, Timing::create(*driver));
  constexpr std::uint64_t kChunk = 64 * kMiB;
  GPULAB_ASSIGN_OR_RETURN(HostBuffer host, HostBuffer::allocate(*driver, HostMemory::kPinned, kChunk));
  GPULAB_ASSIGN_OR_RETURN(DeviceBuffer device, DeviceBuffer::allocate(*driver, kChunk));
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  while (std::chrono::steady_clock::now() < end) {
    // A batch of 8 x 64 MiB keeps even a gen5 x16 link busy for ~8 ms between polls.
    for (int i = 0; i < 8; ++i)
      GPULAB_TRY(driver->check(api.memcpy_htod_async(device.get(), host.get(), kChunk, timing->stream(0)),
                               "transfer load: cuMemcpyHtoDAsync"));
    while (api.stream_query(timing->stream(0)) == telemetry::cuda::kErrorNotReady) {
      if (poll) poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  return driver->check(api.stream_synchronize(timing->stream(0)), "transfer load: cuStreamSynchronize");
}

std::string format_table(const BandwidthReport& r) {
  std::string out = fmt::format("GPU {} (CUDA device {}, {})\n", r.device_name, r.cuda_device, r.uuid);
  if (r.pcie_gen && r.pcie_width)
    out += fmt::format("PCIe link under load: gen{} x{}, theoretical {:.1f} GB/s per direction\n",
                       *r.pcie_gen, *r.pcie_width, r.pcie_gb_s.value_or(0));
  else
    out += "PCIe link: unknown (NVML unavailable); peak share not computed\n";
  if (r.memory_gb_s) out += fmt::format("Device memory (datasheet): {:.0f} GB/s\n", *r.memory_gb_s);
  out += fmt::format("{:<6} {:<15} {:>9} {:>10} {:>10} {:>8}\n", "copy", "host memory", "size", "median ms",
                     "GB/s", "of peak");
  for (const BandwidthPoint& p : r.points) {
    out += fmt::format("{:<6} {:<15} {:>9} {:>10.4f} {:>10.2f} {:>8}\n", copy_kind_name(p.kind),
                       host_memory_name(p.memory), size_text(p.size_bytes), p.median_ms, p.gb_s,
                       p.peak_share ? fmt::format("{:.0f}%", *p.peak_share * 100) : "N/A");
  }
  return out;
}

std::string to_csv(const BandwidthReport& r) {
  std::string out = "copy,host_memory,size_bytes,repeats,median_ms,min_ms,max_ms,gb_s,peak_share\n";
  for (const BandwidthPoint& p : r.points) {
    out += fmt::format("{},{},{},{},{:.6f},{:.6f},{:.6f},{:.3f},{}\n", copy_kind_name(p.kind),
                       host_memory_name(p.memory), p.size_bytes, p.repeats, p.median_ms, p.min_ms, p.max_ms,
                       p.gb_s, p.peak_share ? fmt::format("{:.4f}", *p.peak_share) : "N/A");
  }
  return out;
}

nlohmann::json to_json(const BandwidthReport& r) {
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j{{"device_name", r.device_name},     {"uuid", r.uuid},
                   {"cuda_device", r.cuda_device},     {"pcie_gen", opt(r.pcie_gen)},
                   {"pcie_width", opt(r.pcie_width)},  {"pcie_gb_s", opt(r.pcie_gb_s)},
                   {"memory_gb_s", opt(r.memory_gb_s)}};
  nlohmann::json points = nlohmann::json::array();
  for (const BandwidthPoint& p : r.points) {
    points.push_back({{"copy", copy_kind_name(p.kind)},
                      {"host_memory", host_memory_name(p.memory)},
                      {"size_bytes", p.size_bytes},
                      {"repeats", p.repeats},
                      {"median_ms", p.median_ms},
                      {"min_ms", p.min_ms},
                      {"max_ms", p.max_ms},
                      {"gb_s", p.gb_s},
                      {"peak_share", opt(p.peak_share)}});
  }
  j["points"] = points;
  return j;
}

Result<BandwidthReport> bandwidth_from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) return Status::invalid_file("not a JSON object");
  const JsonReader r{doc, "bandwidth"};
  BandwidthReport out;
  GPULAB_ASSIGN_OR_RETURN(out.device_name, r.text("device_name"));
  GPULAB_ASSIGN_OR_RETURN(const auto uuid, r.optional<std::string>("uuid"));
  out.uuid = uuid.value_or("");
  GPULAB_ASSIGN_OR_RETURN(const auto device, r.optional<int>("cuda_device"));
  out.cuda_device = device.value_or(0);
  GPULAB_ASSIGN_OR_RETURN(out.pcie_gen, r.optional<int>("pcie_gen"));
  GPULAB_ASSIGN_OR_RETURN(out.pcie_width, r.optional<int>("pcie_width"));
  GPULAB_ASSIGN_OR_RETURN(out.pcie_gb_s, r.optional<double>("pcie_gb_s"));
  GPULAB_ASSIGN_OR_RETURN(out.memory_gb_s, r.optional<double>("memory_gb_s"));
  GPULAB_ASSIGN_OR_RETURN(const nlohmann::json* points, r.array("points"));
  for (size_t i = 0; i < points->size(); ++i) {
    const JsonReader p = r.element((*points)[i], i);
    if (!p.doc.is_object()) return p.bad("", "not an object");
    BandwidthPoint point;
    GPULAB_ASSIGN_OR_RETURN(const std::string copy, p.text("copy"));
    GPULAB_ASSIGN_OR_RETURN(const std::string memory, p.text("host_memory"));
    bool known_copy = false, known_memory = false;
    for (CopyKind k : {CopyKind::kHostToDevice, CopyKind::kDeviceToHost, CopyKind::kBidirectional,
                       CopyKind::kDeviceToDevice}) {
      if (copy_kind_name(k) != copy) continue;
      point.kind = k;
      known_copy = true;
    }
    for (HostMemory m :
         {HostMemory::kPinned, HostMemory::kPageable, HostMemory::kWriteCombined, HostMemory::kDevice}) {
      if (host_memory_name(m) != memory) continue;
      point.memory = m;
      known_memory = true;
    }
    if (!known_copy) return p.bad("copy", fmt::format("'{}' is not h2d, d2h, bidir or d2d", copy));
    if (!known_memory) {
      return p.bad("host_memory",
                   fmt::format("'{}' is not pinned, pageable, write-combined or device", memory));
    }
    GPULAB_ASSIGN_OR_RETURN(const int64_t size, p.integer("size_bytes"));
    if (size < 1) return p.bad("size_bytes", "below 1");
    point.size_bytes = static_cast<std::uint64_t>(size);
    GPULAB_ASSIGN_OR_RETURN(const int64_t repeats, p.integer("repeats"));
    point.repeats = static_cast<int>(std::clamp<int64_t>(repeats, 0, std::numeric_limits<int>::max()));
    GPULAB_ASSIGN_OR_RETURN(point.median_ms, p.number("median_ms"));
    GPULAB_ASSIGN_OR_RETURN(point.min_ms, p.number("min_ms"));
    GPULAB_ASSIGN_OR_RETURN(point.max_ms, p.number("max_ms"));
    GPULAB_ASSIGN_OR_RETURN(point.gb_s, p.number("gb_s"));
    GPULAB_ASSIGN_OR_RETURN(point.peak_share, p.optional<double>("peak_share"));
    out.points.push_back(point);
  }
  return out;
}

}  // namespace gpulab::measure
