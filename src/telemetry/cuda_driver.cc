#include "telemetry/cuda_driver.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace gpulab::telemetry::cuda {
namespace {

template <typename Fn>
bool bind(void* handle, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
  return out != nullptr;
}

Result<void*> open_library() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::unavailable(
        fmt::format("no NVIDIA driver: libcuda.so.1 not found ({}). Install the NVIDIA driver; in a "
                    "container, start it with the NVIDIA container runtime (docker run --gpus all)",
                    err ? err : "dlopen failed"));
  }
  return handle;
}

}  // namespace

Result<int> Driver::driver_version() {
  GPULAB_ASSIGN_OR_RETURN(void* handle, open_library());
  CUresult (*fn)(int*) = nullptr;
  int v = 0;
  const bool ok = bind(handle, "cuDriverGetVersion", fn) && fn(&v) == kSuccess;
  dlclose(handle);
  if (!ok) return Status::unavailable("CUDA driver: cuDriverGetVersion failed. Reinstall the NVIDIA driver");
  return v;
}

Result<std::shared_ptr<Driver>> Driver::load() {
  GPULAB_ASSIGN_OR_RETURN(void* handle, open_library());
  Api api{};
  const char* missing = nullptr;
  auto need = [&](const char* name, auto*& fn) {
    if (!bind(handle, name, fn) && missing == nullptr) missing = name;
  };
  need("cuInit", api.init);
  need("cuDriverGetVersion", api.driver_get_version);
  need("cuGetErrorName", api.get_error_name);
  need("cuDeviceGetCount", api.device_get_count);
  need("cuDeviceGet", api.device_get);
  need("cuDeviceGetName", api.device_get_name);
  need("cuDeviceGetAttribute", api.device_get_attribute);
  if (!bind(handle, "cuDeviceGetUuid_v2", api.device_get_uuid)) need("cuDeviceGetUuid", api.device_get_uuid);
  need("cuDevicePrimaryCtxRetain", api.primary_ctx_retain);
  need("cuDevicePrimaryCtxRelease_v2", api.primary_ctx_release);
  need("cuCtxSetCurrent", api.ctx_set_current);
  need("cuMemGetInfo_v2", api.mem_get_info);
  need("cuMemAlloc_v2", api.mem_alloc);
  need("cuMemFree_v2", api.mem_free);
  need("cuMemHostAlloc", api.mem_host_alloc);
  need("cuMemFreeHost", api.mem_free_host);
  need("cuMemcpyHtoDAsync_v2", api.memcpy_htod_async);
  need("cuMemcpyDtoHAsync_v2", api.memcpy_dtoh_async);
  need("cuMemcpyDtoDAsync_v2", api.memcpy_dtod_async);
  need("cuStreamCreate", api.stream_create);
  need("cuStreamDestroy_v2", api.stream_destroy);
  need("cuStreamSynchronize", api.stream_synchronize);
  need("cuStreamQuery", api.stream_query);
  need("cuEventCreate", api.event_create);
  need("cuEventDestroy_v2", api.event_destroy);
  need("cuEventRecord", api.event_record);
  need("cuEventSynchronize", api.event_synchronize);
  if (!bind(handle, "cuEventElapsedTime_v2", api.event_elapsed_time))
    need("cuEventElapsedTime", api.event_elapsed_time);
  if (missing != nullptr) {
    dlclose(handle);
    return Status::unavailable(fmt::format(
        "CUDA driver: libcuda.so.1 lacks {} (driver too old). Install a newer NVIDIA driver", missing));
  }
  if (const CUresult r = api.init(0); r != kSuccess) {
    const char* name = nullptr;
    api.get_error_name(r, &name);
    dlclose(handle);
    if (r == kErrorNoDevice)
      return Status::unavailable(
          "CUDA driver: no CUDA-capable GPU is visible (CUDA_ERROR_NO_DEVICE). Check "
          "CUDA_VISIBLE_DEVICES, `nvidia-smi`, and in a container --gpus");
    return Status::unavailable(
        fmt::format("CUDA driver: cuInit failed ({} ({})). Run `gpulab doctor`", name ? name : "unknown", r));
  }
  int count = 0;
  api.device_get_count(&count);
  return std::shared_ptr<Driver>(new Driver(handle, api, count));
}

Driver::~Driver() {
  dlclose(handle_);
}

std::string Driver::error_name(CUresult r) const {
  const char* name = nullptr;
  if (api_.get_error_name(r, &name) != kSuccess || name == nullptr) return fmt::format("CUDA error {}", r);
  return fmt::format("{} ({})", name, r);
}

Status Driver::check(CUresult r, const std::string& what) const {
  if (r == kSuccess) return Status::ok();
  if (r == kErrorOutOfMemory)
    return Status::out_of_memory(
        fmt::format("{}: {}. Free device or pinned host memory, or use smaller sizes", what, error_name(r)));
  return Status::device_error(fmt::format("{}: {}. Run `gpulab doctor`", what, error_name(r)));
}

std::string format_gpu_uuid(const unsigned char b[16]) {
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:"
      "02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

Result<std::string> Driver::device_uuid(CUdevice device) const {
  CUuuid uuid{};
  GPULAB_TRY(check(api_.device_get_uuid(&uuid, device), fmt::format("cuDeviceGetUuid({})", device)));
  return format_gpu_uuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
}

Result<int> Driver::device_by_uuid(const std::string& nvml_uuid) const {
  for (int i = 0; i < device_count_; ++i) {
    CUdevice dev = 0;
    if (api_.device_get(&dev, i) != kSuccess) continue;
    auto u = device_uuid(dev);
    if (u.is_ok() && u.value() == nvml_uuid) return i;
  }
  return Status::not_found(
      fmt::format("CUDA driver: no CUDA device has UUID {} ({} visible). Check CUDA_VISIBLE_DEVICES",
                  nvml_uuid, device_count_));
}

Result<std::unique_ptr<ScopedContext>> ScopedContext::create(std::shared_ptr<const Driver> driver,
                                                             CUdevice device) {
  CUcontext ctx = nullptr;
  GPULAB_TRY(driver->check(driver->api().primary_ctx_retain(&ctx, device),
                           fmt::format("cuDevicePrimaryCtxRetain(device {})", device)));
  if (const Status s = driver->check(driver->api().ctx_set_current(ctx), "cuCtxSetCurrent"); !s.is_ok()) {
    driver->api().primary_ctx_release(device);
    return s;
  }
  return std::unique_ptr<ScopedContext>(new ScopedContext(std::move(driver), device));
}

ScopedContext::~ScopedContext() {
  driver_->api().ctx_set_current(nullptr);
  driver_->api().primary_ctx_release(device_);
}

}  // namespace gpulab::telemetry::cuda
