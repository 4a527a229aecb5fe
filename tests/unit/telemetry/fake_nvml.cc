// A stand-in libnvidia-ml.so.1 for the CLI tests: one "NVIDIA H200" with fixed readings. It
// implements only part of the API (no energy, PCIe throughput, retired pages, remapped rows; power
// draw answers NOT_SUPPORTED; clock reasons only under the pre-535 "Throttle" name) so that the
// tests see gpulab report those fields as unsupported, never as zero.
#include <cstring>

extern "C" {

using Ret = int;
struct FakeDevice {
  int unused;
};
static FakeDevice g_device;

static Ret copy(char* dst, unsigned len, const char* src) {
  if (std::strlen(src) + 1 > len) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::strcpy(dst, src);
  return 0;
}

Ret nvmlInit_v2() {
  return 0;
}
Ret nvmlShutdown() {
  return 0;
}
const char* nvmlErrorString(Ret r) {
  return r == 3 ? "Not Supported" : "Fake Error";
}
Ret nvmlSystemGetDriverVersion(char* v, unsigned len) {
  return copy(v, len, "550.54.14");
}
Ret nvmlSystemGetNVMLVersion(char* v, unsigned len) {
  return copy(v, len, "12.550.54.14");
}
Ret nvmlSystemGetCudaDriverVersion_v2(int* v) {
  *v = 12040;
  return 0;
}
Ret nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 1;
  return 0;
}
Ret nvmlDeviceGetHandleByIndex_v2(unsigned i, FakeDevice** d) {
  if (i != 0) return 2;
  *d = &g_device;
  return 0;
}
Ret nvmlDeviceGetName(FakeDevice*, char* n, unsigned len) {
  return copy(n, len, "NVIDIA H200");
}
Ret nvmlDeviceGetUUID(FakeDevice*, char* u, unsigned len) {
  return copy(u, len, "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
}
Ret nvmlDeviceGetCudaComputeCapability(FakeDevice*, int* major, int* minor) {
  *major = 9;
  *minor = 0;
  return 0;
}
struct Util {
  unsigned gpu, memory;
};
Ret nvmlDeviceGetUtilizationRates(FakeDevice*, Util* u) {
  u->gpu = 42;
  u->memory = 17;
  return 0;
}
struct Mem {
  unsigned long long total, free, used;
};
Ret nvmlDeviceGetMemoryInfo(FakeDevice*, Mem* m) {
  m->total = 143771ULL << 20;
  m->used = 1024ULL << 20;
  m->free = m->total - m->used;
  return 0;
}
struct Proc {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
Ret nvmlDeviceGetComputeRunningProcesses_v3(FakeDevice*, unsigned* count, Proc* p) {
  if (*count < 1) {
    *count = 1;
    return 7;
  }
  *count = 1;
  p[0] = Proc{4242, 512ULL << 20, 0, 0};
  return 0;
}
Ret nvmlDeviceGetPowerUsage(FakeDevice*, unsigned*) {
  return 3;
}  // NOT_SUPPORTED
Ret nvmlDeviceGetEnforcedPowerLimit(FakeDevice*, unsigned* mw) {
  *mw = 700000;
  return 0;
}
Ret nvmlDeviceGetPowerManagementDefaultLimit(FakeDevice*, unsigned* mw) {
  *mw = 700000;
  return 0;
}
Ret nvmlDeviceGetClockInfo(FakeDevice*, int type, unsigned* mhz) {
  *mhz = type == 2 ? 2619 : 1980;
  return 0;
}
Ret nvmlDeviceGetMaxClockInfo(FakeDevice*, int type, unsigned* mhz) {
  *mhz = type == 2 ? 3201 : 1980;
  return 0;
}
Ret nvmlDeviceGetCurrentClocksThrottleReasons(FakeDevice*, unsigned long long* r) {
  *r = 0x1;
  return 0;
}
Ret nvmlDeviceGetTemperature(FakeDevice*, int, unsigned* c) {
  *c = 35;
  return 0;
}
Ret nvmlDeviceGetCurrPcieLinkGeneration(FakeDevice*, unsigned* g) {
  *g = 5;
  return 0;
}
Ret nvmlDeviceGetMaxPcieLinkGeneration(FakeDevice*, unsigned* g) {
  *g = 5;
  return 0;
}
Ret nvmlDeviceGetCurrPcieLinkWidth(FakeDevice*, unsigned* w) {
  *w = 16;
  return 0;
}
Ret nvmlDeviceGetMaxPcieLinkWidth(FakeDevice*, unsigned* w) {
  *w = 16;
  return 0;
}
Ret nvmlDeviceGetEccMode(FakeDevice*, int* cur, int* pending) {
  *cur = 1;
  *pending = 1;
  return 0;
}
Ret nvmlDeviceGetTotalEccErrors(FakeDevice*, int, int, unsigned long long* n) {
  *n = 0;
  return 0;
}
Ret nvmlDeviceGetPerformanceState(FakeDevice*, int* p) {
  *p = 0;
  return 0;
}
Ret nvmlDeviceGetPersistenceMode(FakeDevice*, int* m) {
  *m = 1;
  return 0;
}

}  // extern "C"
