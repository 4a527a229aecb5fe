// convert_bench: device time and effective bandwidth of the input-conversion kernels
// (launch_nchw_to_nhwc, launch_normalize_u8) on the ResNet-18 input, 3x224x224, at batch 256
// and batch 1, for the dtype / channel padding combinations the engine uses.
//
// Method: inputs and outputs already on the device; kWarmup launches first; then kIters
// iterations, each bracketed by two CUDA events on the stream around one launch; the median is
// reported. Before every iteration a memset larger than twice the L2 cache evicts the tensors
// (outside the events), so batch 1 is timed from DRAM as at batch 256; --warm-l2 skips it.
// GB/s = (bytes read + bytes written) / median, with 1 GB = 1e9 bytes; compare it with the
// device's measured bandwidth (H200: ~4.2 TB/s). The median of a launch this short includes
// a few microseconds of launch latency, which dominates at batch 1.
//
// Usage: convert_bench [--warm-l2]
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels/kernels.h"
#include "gpulab/status.h"
#include "gpulab/tensor.h"

namespace gpulab::bench {
namespace {

constexpr int kIters = 100;
constexpr int kWarmup = 10;
constexpr int64_t kChannels = 3, kHeight = 224, kWidth = 224;

// One device allocation, freed when it goes out of scope.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr_); }

  Status allocate(size_t bytes) {
    GPULAB_CUDA_TRY(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
    return Status::ok();
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Two CUDA events, destroyed when they go out of scope.
class EventPair {
 public:
  EventPair() = default;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
  }
  Status create() {
    GPULAB_CUDA_TRY(cudaEventCreate(&start_));
    GPULAB_CUDA_TRY(cudaEventCreate(&stop_));
    return Status::ok();
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

struct BenchCase {
  std::string kernel;
  DataType dtype = DataType::kFloat16;
  int64_t batch = 1;
  int64_t c_out = 8;
};

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
};

// Median and minimum of kIters event-timed launches; `flush` (may be empty) is overwritten
// before each one.
Result<Timing> time_launches(const std::function<Status(cudaStream_t)>& launch, const DeviceMemory& flush,
                             cudaStream_t stream) {
  for (int i = 0; i < kWarmup; ++i) GPULAB_TRY(launch(stream));
  GPULAB_CUDA_TRY(cudaStreamSynchronize(stream));
  EventPair events;
  GPULAB_TRY(events.create());
  std::vector<double> times_ms;
  times_ms.reserve(kIters);
  for (int i = 0; i < kIters; ++i) {
    if (flush.get() != nullptr)
      GPULAB_CUDA_TRY(cudaMemsetAsync(flush.get(), i & 0xFF, flush.bytes(), stream));
    GPULAB_CUDA_TRY(cudaEventRecord(events.start(), stream));
    GPULAB_TRY(launch(stream));
    GPULAB_CUDA_TRY(cudaEventRecord(events.stop(), stream));
    GPULAB_CUDA_TRY(cudaEventSynchronize(events.stop()));
    float ms = 0.0f;
    GPULAB_CUDA_TRY(cudaEventElapsedTime(&ms, events.start(), events.stop()));
    times_ms.push_back(ms);
  }
  std::sort(times_ms.begin(), times_ms.end());
  return Timing{.median_ms = (times_ms[kIters / 2 - 1] + times_ms[kIters / 2]) / 2.0,
                .min_ms = times_ms.front()};
}

Status run_case(const BenchCase& bc, const DeviceMemory& flush, cudaStream_t stream) {
  const int64_t pixels = bc.batch * kHeight * kWidth;
  const bool from_u8 = bc.kernel == "normalize_u8";
  const int64_t bytes_read = pixels * kChannels * (from_u8 ? 1 : 4);
  const int64_t bytes_written = pixels * bc.c_out * static_cast<int64_t>(dtype_size(bc.dtype));
  DeviceMemory x, y;
  GPULAB_TRY(x.allocate(static_cast<size_t>(bytes_read)));
  GPULAB_TRY(y.allocate(static_cast<size_t>(bytes_written)));
  // 0x3c bytes: 0.0115 as float32, 60 as uint8; the values do not change the time.
  GPULAB_CUDA_TRY(cudaMemset(x.get(), 0x3c, x.bytes()));

  std::function<Status(cudaStream_t)> launch;
  if (from_u8) {
    const kernels::NormalizeU8Desc desc{.n = bc.batch,
                                        .h = kHeight,
                                        .w = kWidth,
                                        .c = kChannels,
                                        .c_out = bc.c_out,
                                        .mean = {0.485f, 0.456f, 0.406f, 0.0f},
                                        .std = {0.229f, 0.224f, 0.225f, 1.0f},
                                        .dtype = bc.dtype};
    launch = [&, desc](cudaStream_t s) { return kernels::launch_normalize_u8(desc, x.get(), y.get(), s); };
  } else {
    const kernels::NchwToNhwcDesc desc{
        .n = bc.batch, .c = kChannels, .h = kHeight, .w = kWidth, .c_out = bc.c_out, .dtype = bc.dtype};
    launch = [&, desc](cudaStream_t s) { return kernels::launch_nchw_to_nhwc(desc, x.get(), y.get(), s); };
  }
  GPULAB_ASSIGN_OR_RETURN(const Timing t, time_launches(launch, flush, stream));
  const double mb = static_cast<double>(bytes_read + bytes_written) / 1e6;
  fmt::print("{:<14} {:<9} {:>5} {:>6} {:>10.2f} {:>11.2f} {:>9.2f} {:>8.0f}\n", bc.kernel,
             dtype_name(bc.dtype), bc.c_out, bc.batch, mb, t.median_ms * 1e3, t.min_ms * 1e3,
             mb / 1e3 / (t.median_ms / 1e3));
  return Status::ok();
}

Status run(bool warm_l2) {
  int device = 0;
  GPULAB_CUDA_TRY(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  GPULAB_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  DeviceMemory flush;
  if (!warm_l2) GPULAB_TRY(flush.allocate(2 * static_cast<size_t>(prop.l2CacheSize) + (1 << 20)));
  cudaStream_t stream = nullptr;
  GPULAB_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  fmt::print("convert_bench: {} (sm_{}{}), input {}x{}x{}, median of {} launches after {} warm-up, L2 {}\n",
             prop.name, prop.major, prop.minor, kChannels, kHeight, kWidth, kIters, kWarmup,
             warm_l2 ? "warm" : "flushed before each launch");
  fmt::print("{:<14} {:<9} {:>5} {:>6} {:>10} {:>11} {:>9} {:>8}\n", "kernel", "dtype", "c_out", "batch",
             "MB moved", "median_us", "min_us", "GB/s");
  const std::vector<BenchCase> cases = {
      {"nchw_to_nhwc", DataType::kFloat16, 256, 8},  {"nchw_to_nhwc", DataType::kFloat16, 1, 8},
      {"nchw_to_nhwc", DataType::kBFloat16, 256, 8}, {"nchw_to_nhwc", DataType::kBFloat16, 1, 8},
      {"nchw_to_nhwc", DataType::kFloat32, 256, 4},  {"nchw_to_nhwc", DataType::kFloat32, 1, 4},
      {"nchw_to_nhwc", DataType::kFloat32, 256, 3},  {"nchw_to_nhwc", DataType::kFloat32, 1, 3},
      {"normalize_u8", DataType::kFloat16, 256, 8},  {"normalize_u8", DataType::kFloat16, 1, 8},
  };
  Status status = Status::ok();
  for (const BenchCase& bc : cases) {
    status = run_case(bc, flush, stream);
    if (!status.is_ok()) break;
  }
  cudaStreamDestroy(stream);
  return status;
}

}  // namespace
}  // namespace gpulab::bench

int main(int argc, char** argv) {
  bool warm_l2 = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--warm-l2") == 0) {
      warm_l2 = true;
    } else {
      fmt::print(stderr, "convert_bench: unknown argument '{}'. Usage: convert_bench [--warm-l2]\n", argv[i]);
      return 2;
    }
  }
  const gpulab::Status status = gpulab::bench::run(warm_l2);
  if (!status.is_ok()) {
    fmt::print(stderr, "convert_bench: {}\n", status.to_string());
    return gpulab::exit_code_for(status.code());
  }
  return 0;
}
