// The CUDA driver API entry points gpulab's measurement code uses (bandwidth test, doctor's
// PCIe-under-load check), loaded at run time with dlopen("libcuda.so.1").
//
// Why the driver API through dlopen rather than the CUDA runtime: libcuda.so.1 ships with the
// driver, so `gpulab bandwidth` and `gpulab doctor` work in every build (also the CPU-only one)
// and print a clear reason on a machine without a driver, without linking cudart. Signatures and
// constants follow the CUDA Driver API reference (cuda.h); the _v2 names are the ABI the
// unversioned macros in cuda.h map to. Thread-safe after load().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gpulab/status.h"

namespace gpulab::telemetry::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
using CUcontext = CUctx_st*;
struct CUstream_st;
using CUstream = CUstream_st*;
struct CUevent_st;
using CUevent = CUevent_st*;
struct CUuuid {
  char bytes[16];
};

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorOutOfMemory = 2;
inline constexpr CUresult kErrorNoDevice = 100;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr unsigned int kMemHostAllocPortable = 0x01;
inline constexpr unsigned int kMemHostAllocWriteCombined = 0x04;
inline constexpr unsigned int kStreamNonBlocking = 0x1;
inline constexpr unsigned int kEventDefault = 0x0;
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;

struct Api {
  CUresult (*init)(unsigned int);
  CUresult (*driver_get_version)(int*);
  CUresult (*get_error_name)(CUresult, const char**);
  CUresult (*device_get_count)(int*);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_name)(char*, int, CUdevice);
  CUresult (*device_get_attribute)(int*, int, CUdevice);
  CUresult (*device_get_uuid)(CUuuid*, CUdevice);  // cuDeviceGetUuid_v2 or cuDeviceGetUuid
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*primary_ctx_release)(CUdevice);  // cuDevicePrimaryCtxRelease_v2
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*mem_get_info)(size_t*, size_t*);   // _v2
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);  // _v2
  CUresult (*mem_free)(CUdeviceptr);            // _v2
  CUresult (*mem_host_alloc)(void**, size_t, unsigned int);
  CUresult (*mem_free_host)(void*);
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream);  // _v2
  CUresult (*memcpy_dtoh_async)(void*, CUdeviceptr, size_t, CUstream);        // _v2
  CUresult (*memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);  // _v2
  CUresult (*stream_create)(CUstream*, unsigned int);
  CUresult (*stream_destroy)(CUstream);  // _v2
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*stream_query)(CUstream);  // kErrorNotReady while work is pending
  CUresult (*event_create)(CUevent*, unsigned int);
  CUresult (*event_destroy)(CUevent);  // _v2
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_synchronize)(CUevent);
  CUresult (*event_elapsed_time)(float*, CUevent, CUevent);  // _v2 (CUDA 12.8+) or original
};

class Driver {
 public:
  // dlopen + dlsym + cuInit(0). kUnavailable with the reason: library missing, no device,
  // driver too old.
  static Result<std::shared_ptr<Driver>> load();
  // dlopen + cuDriverGetVersion only (works without a GPU): 12040 for CUDA 12.4.
  static Result<int> driver_version();
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  const Api& api() const { return api_; }
  int device_count() const { return device_count_; }
  // "CUDA_ERROR_OUT_OF_MEMORY (2)".
  std::string error_name(CUresult r) const;
  // kDeviceError "<what>: <error name>. <fix>" when r != kSuccess.
  Status check(CUresult r, const std::string& what) const;
  // NVML-style UUID string of a device: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
  Result<std::string> device_uuid(CUdevice device) const;
  // The ordinal of the CUDA device whose UUID is `nvml_uuid` (NVML and CUDA number GPUs
  // differently); kNotFound when none is visible (e.g. hidden by CUDA_VISIBLE_DEVICES).
  Result<int> device_by_uuid(const std::string& nvml_uuid) const;

 private:
  Driver(void* handle, const Api& api, int count) : handle_(handle), api_(api), device_count_(count) {}
  void* handle_;
  Api api_;
  int device_count_;
};

// Formats 16 UUID bytes the way NVML and nvidia-smi print them.
std::string format_gpu_uuid(const unsigned char bytes[16]);

// Makes a device's primary context current on the calling thread for the object's lifetime.
class ScopedContext {
 public:
  static Result<std::unique_ptr<ScopedContext>> create(std::shared_ptr<const Driver> driver, CUdevice device);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  ScopedContext(std::shared_ptr<const Driver> d, CUdevice dev) : driver_(std::move(d)), device_(dev) {}
  std::shared_ptr<const Driver> driver_;
  CUdevice device_;
};

}  // namespace gpulab::telemetry::cuda
