#include "pipeline/pipeline.h"

#include <malloc.h>
#if defined(__SANITIZE_ADDRESS__)
#define GPULAB_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPULAB_ADDRESS_SANITIZER 1
#endif
#endif
#ifdef GPULAB_ADDRESS_SANITIZER
// The sanitizer runtime's public interface (sanitizer/allocator_interface.h in LLVM; GCC 12 ships
// the function in libasan without the header).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/file_io.h"

namespace gpulab {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Names the calling thread as top, ps -L, perf and /proc show it (15 characters at most).
void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A file's bytes on their way to a decode thread. `seq` = pass * files + file index.
struct FileJob {
  int64_t seq = 0;
  std::shared_ptr<const std::vector<std::byte>> bytes;
  Status read_status;
};

// A FIFO of at most `capacity` items. close() wakes everyone: push then fails and pop drains
// what is left, then returns nullopt.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  bool push(T item, double* wait_s) {
    std::unique_lock lock(mu_);
    const auto t0 = Clock::now();
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    *wait_s += seconds_between(t0, Clock::now());
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  std::optional<T> pop(double* wait_s) {
    std::unique_lock lock(mu_);
    const auto t0 = Clock::now();
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    *wait_s += seconds_between(t0, Clock::now());
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  size_t capacity_;
  bool closed_ = false;
};

// The K staging slots. Slot b % K holds batch b; the inference thread hands it to batch b + K
// when batch b is finished. Decode threads wait for their batch's slot, the inference thread for
// its batch to be complete.
class Ring {
 public:
  explicit Ring(int slots) : batch_(static_cast<size_t>(slots)), filled_(static_cast<size_t>(slots), 0) {
    for (int i = 0; i < slots; ++i) batch_[static_cast<size_t>(i)] = i;
  }

  int slot_of(int64_t batch) const { return static_cast<int>(batch % static_cast<int64_t>(batch_.size())); }

  // False when the run was aborted.
  bool wait_for_slot(int64_t batch, double* wait_s) {
    std::unique_lock lock(mu_);
    const auto t0 = Clock::now();
    cv_.wait(lock, [&] { return aborted_ || batch_[static_cast<size_t>(slot_of(batch))] == batch; });
    *wait_s += seconds_between(t0, Clock::now());
    return !aborted_;
  }

  void mark_filled(int64_t batch) {
    std::lock_guard lock(mu_);
    ++filled_[static_cast<size_t>(slot_of(batch))];
    cv_.notify_all();
  }

  bool wait_complete(int64_t batch, int64_t count, double* wait_s) {
    std::unique_lock lock(mu_);
    const auto t0 = Clock::now();
    cv_.wait(lock, [&] { return aborted_ || filled_[static_cast<size_t>(slot_of(batch))] == count; });
    *wait_s += seconds_between(t0, Clock::now());
    return !aborted_;
  }

  void release(int64_t batch) {
    std::lock_guard lock(mu_);
    const size_t s = static_cast<size_t>(slot_of(batch));
    batch_[s] = batch + static_cast<int64_t>(batch_.size());
    filled_[s] = 0;
    cv_.notify_all();
  }

  void abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> batch_;
  std::vector<int64_t> filled_;
  bool aborted_ = false;
};

// Per-thread account of a decode thread, merged into the stage's StageStats at the end.
struct DecodeAccount {
  int64_t images = 0;
  int64_t dct_scaled = 0;
  double decode_s = 0, stage_s = 0, cpu_s = 0, wait_input_s = 0, wait_output_s = 0;
};

int64_t read_status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::string_view(key).size()) * 1024;
  }
  return 0;
}

Status validate(const PipelineOptions& o) {
  if (o.files.empty())
    return Status::invalid_argument("pipeline: no input files. Pass image files or folders.");
  if (o.batch < 1 || o.batch > 65536)
    return Status::invalid_argument(fmt::format("pipeline: batch {} is out of range (1..65536).", o.batch));
  if (o.decode_threads < 0 || o.decode_threads > 1024)
    return Status::invalid_argument(fmt::format(
        "pipeline: {} decode threads is out of range (0 = automatic, up to 1024).", o.decode_threads));
  if (o.queue_depth < 2 || o.queue_depth > 64)
    return Status::invalid_argument(fmt::format(
        "pipeline: queue depth {} is out of range (2..64: one slot is staged while another runs).",
        o.queue_depth));
  if (o.loop < 1)
    return Status::invalid_argument(fmt::format("pipeline: --loop {} must be at least 1.", o.loop));
  if (o.top_k < 1)
    return Status::invalid_argument(fmt::format("pipeline: top-k {} must be at least 1.", o.top_k));
  if (o.file_cache_bytes < 0)
    return Status::invalid_argument("pipeline: the file cache size must not be negative.");
  return o.spec.validate();
}

}  // namespace

int64_t current_rss_bytes() {
  return read_status_kib("VmRSS:");
}
int64_t peak_rss_bytes() {
  return read_status_kib("VmHWM:");
}
int64_t heap_in_use_bytes() {
#ifdef GPULAB_ADDRESS_SANITIZER
  // ASan's allocator replaces glibc's (whose mallinfo2 then reads zero); it counts live bytes too.
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();  // sums every arena, the decode threads' too
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
#else
  return 0;
#endif
}

int min_decode_side(const PreprocessSpec& spec) {
  if (spec.preset == PreprocessSpec::Preset::kTorchvision) return spec.resize_shorter;
  // TF-Slim keeps central_fraction of each side and resizes that to output_size.
  return static_cast<int>(std::ceil(spec.output_size / static_cast<double>(spec.central_fraction)));
}

Result<PipelineResult> run_pipeline(const PipelineOptions& options, BatchBackend& backend) {
  GPULAB_TRY(validate(options));
  if (backend.input_size() != options.spec.output_size)
    return Status::invalid_argument(fmt::format(
        "pipeline: the preprocessing makes {}x{} images, the model takes {}x{}.", options.spec.output_size,
        options.spec.output_size, backend.input_size(), backend.input_size()));
  const int64_t files = static_cast<int64_t>(options.files.size());
  const int64_t total = files * options.loop;
  const int64_t batch = std::min(options.batch, total);
  const int64_t batches = (total + batch - 1) / batch;
  const int slots = options.queue_depth;
  const int threads = options.decode_threads > 0
                          ? options.decode_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
  const int in_flight_limit = std::max(1, std::min(backend.max_in_flight(), slots - 1));
  auto batch_count = [&](int64_t b) { return std::min(batch, total - b * batch); };

  // Staging buffers and, on the GPU, the engine's set-up for this batch size, before the clock:
  // pass 1 times the files and the decoders, not cuDNN's plans.
  const auto setup_start = Clock::now();
  GPULAB_TRY(backend.allocate_slots(slots, batch, options.top_k));
  const double setup_s = seconds_between(setup_start, Clock::now());

  PipelineResult result;
  result.predictions.resize(static_cast<size_t>(files));
  PipelineStats& stats = result.stats;
  stats.passes = options.loop;
  stats.files = files;
  stats.batch = batch;
  stats.decode_threads = threads;
  stats.queue_depth = slots;
  stats.setup_s = setup_s;

  BoundedQueue<FileJob> queue(static_cast<size_t>(std::max(2 * threads, 16)));
  Ring ring(slots);
  std::vector<std::vector<Status>> slot_errors(static_cast<size_t>(slots),
                                               std::vector<Status>(static_cast<size_t>(batch)));
  std::atomic<bool> stop{false};
  const auto start = Clock::now();

  // ---- read ----
  StageStats read{.name = "read", .threads = 1};
  std::vector<std::shared_ptr<const std::vector<std::byte>>> cache(static_cast<size_t>(files));
  int64_t cached_files = 0, readable_files = 0;
  std::thread reader([&] {
    name_this_thread("gpulab-read");
    const double cpu0 = thread_cpu_s();
    for (int pass = 0; pass < options.loop && !stop; ++pass) {
      for (int64_t i = 0; i < files && !stop; ++i) {
        const auto t0 = Clock::now();
        FileJob job{.seq = pass * files + i};
        if (cache[static_cast<size_t>(i)]) {
          job.bytes = cache[static_cast<size_t>(i)];
        } else {
          auto bytes = read_file_bytes(options.files[static_cast<size_t>(i)]);
          if (bytes.is_ok()) {
            job.bytes = std::make_shared<const std::vector<std::byte>>(std::move(bytes).value());
            if (pass == 0) {
              ++readable_files;
              const int64_t size = static_cast<int64_t>(job.bytes->size());
              if (stats.cached_bytes + size <= options.file_cache_bytes) {
                cache[static_cast<size_t>(i)] = job.bytes;
                stats.cached_bytes += size;
                ++cached_files;
              }
            }
          } else {
            job.read_status = bytes.status();
          }
        }
        read.busy_s += seconds_between(t0, Clock::now());
        ++read.items;
        ++read.images;
        if (!queue.push(std::move(job), &read.wait_output_s)) break;
      }
    }
    read.cpu_s = thread_cpu_s() - cpu0;
    queue.close();
  });

  // ---- decode + stage ----
  std::vector<DecodeAccount> accounts(static_cast<size_t>(threads));
  std::vector<std::thread> decoders;
  const DecodeOptions decode_options{.min_shorter_side =
                                         options.dct_scaling ? min_decode_side(options.spec) : 0};
  for (int t = 0; t < threads; ++t) {
    decoders.emplace_back([&, t] {
      name_this_thread(fmt::format("gpulab-dec{}", t));
      DecodeAccount& acc = accounts[static_cast<size_t>(t)];
      const double cpu0 = thread_cpu_s();
      StageScratch scratch;
      Image image;
      while (auto job = queue.pop(&acc.wait_input_s)) {
        const int64_t b = job->seq / batch, position = job->seq % batch;
        const auto& path = options.files[static_cast<size_t>(job->seq % files)];
        Status status = job->read_status;
        DecodeInfo info;
        const auto t0 = Clock::now();
        if (status.is_ok()) {
          auto decoded = decode_image_into(*job->bytes, path.string(), decode_options, &image);
          if (decoded.is_ok()) {
            info = *decoded;
          } else {
            status = decoded.status();
          }
        }
        job->bytes.reset();  // an uncached file's bytes are not needed any more
        const auto t1 = Clock::now();
        acc.decode_s += seconds_between(t0, t1);
        if (!ring.wait_for_slot(b, &acc.wait_output_s)) break;
        const int slot = ring.slot_of(b);
        const auto t2 = Clock::now();
        if (status.is_ok()) {
          status = backend.stage(slot, position, image, info, &scratch);
          if (!status.is_ok()) status = status.with_context(fmt::format("image '{}'", path.string()));
        }
        if (status.is_ok()) {
          if (info.scale_num != info.scale_denom) ++acc.dct_scaled;
        } else {
          backend.stage_blank(slot, position);
        }
        slot_errors[static_cast<size_t>(slot)][static_cast<size_t>(position)] = std::move(status);
        acc.stage_s += seconds_between(t2, Clock::now());
        ++acc.images;
        ring.mark_filled(b);
      }
      acc.cpu_s = thread_cpu_s() - cpu0;
    });
  }

  // ---- infer (this thread) ----
  StageStats infer{.name = "infer", .threads = 1};
  const int top_k = options.top_k;
  std::vector<Prediction> top(static_cast<size_t>(batch * top_k));
  std::deque<int64_t> in_flight;
  Status failure;
  int64_t done = 0;
  const double infer_cpu0 = thread_cpu_s();
  auto finish_front = [&]() -> Status {
    const int64_t b = in_flight.front();
    in_flight.pop_front();
    const int slot = ring.slot_of(b);
    const int64_t count = batch_count(b);
    const auto t0 = Clock::now();
    GPULAB_TRY(backend.finish(slot, count, top_k,
                              std::span<Prediction>(top).first(static_cast<size_t>(count * top_k))));
    infer.busy_s += seconds_between(t0, Clock::now());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t seq = b * batch + i;
      Status& error = slot_errors[static_cast<size_t>(slot)][static_cast<size_t>(i)];
      if (!error.is_ok()) {
        ++stats.failed_images;
        if (seq < files) result.errors.push_back({options.files[static_cast<size_t>(seq)], error});
        error = Status::ok();
      } else if (seq < files) {
        const auto first = top.begin() + i * top_k;
        result.predictions[static_cast<size_t>(seq)].assign(first, first + top_k);
      }
    }
    const int64_t before = done;
    done += count;
    if (before < files && done >= files) {
      stats.first_pass_s = seconds_between(start, Clock::now());
      stats.rss_after_first_pass_bytes = current_rss_bytes();
      stats.heap_after_first_pass_bytes = heap_in_use_bytes();
    }
    const int64_t last_pass_start = files * (options.loop - 1);
    if (options.loop > 1 && before < last_pass_start && done >= last_pass_start) {
      // Like after pass 1, the decode threads still hold their buffers: the two readings compare.
      stats.heap_before_last_pass_bytes = heap_in_use_bytes();
      stats.device_used_after_first_pass_bytes = backend.device_account().device_used_bytes;
    }
    ring.release(b);
    if (options.progress)
      options.progress(
          {.images_done = done, .images_total = total, .elapsed_s = seconds_between(start, Clock::now())});
    return Status::ok();
  };
  for (int64_t b = 0; b < batches && failure.is_ok(); ++b) {
    if (!ring.wait_complete(b, batch_count(b), &infer.wait_input_s)) break;
    const auto t0 = Clock::now();
    failure = backend.submit(ring.slot_of(b), batch_count(b));
    infer.busy_s += seconds_between(t0, Clock::now());
    if (!failure.is_ok()) break;
    in_flight.push_back(b);
    ++infer.items;
    infer.images += batch_count(b);
    while (failure.is_ok() && static_cast<int>(in_flight.size()) >= in_flight_limit) failure = finish_front();
  }
  while (failure.is_ok() && !in_flight.empty()) failure = finish_front();
  infer.cpu_s = thread_cpu_s() - infer_cpu0;
  if (!failure.is_ok()) {
    stop = true;
    ring.abort();
    queue.close();
  }
  reader.join();
  for (auto& d : decoders) d.join();
  GPULAB_TRY(failure);

  stats.wall_s = seconds_between(start, Clock::now());
  stats.images = total;
  stats.throughput_ips = stats.wall_s > 0 ? static_cast<double>(total) / stats.wall_s : 0;
  if (options.loop > 1 && stats.wall_s > stats.first_pass_s)
    stats.warm_throughput_ips = static_cast<double>(total - files) / (stats.wall_s - stats.first_pass_s);
  stats.files_cached = readable_files > 0 && cached_files == readable_files;
  StageStats decode{.name = "decode", .threads = threads};
  for (const DecodeAccount& a : accounts) {
    decode.items += a.images;
    decode.images += a.images;
    decode.busy_s += a.decode_s + a.stage_s;
    decode.cpu_s += a.cpu_s;
    decode.wait_input_s += a.wait_input_s;
    decode.wait_output_s += a.wait_output_s;
    stats.decode_s += a.decode_s;
    stats.stage_s += a.stage_s;
    stats.dct_scaled_images += a.dct_scaled;
  }
  stats.stages = {read, decode, infer};
  stats.device = backend.device_account();
  stats.rss_final_bytes = current_rss_bytes();
  // The kernel updates VmHWM lazily: it can read below a VmRSS sampled earlier.
  stats.rss_peak_bytes =
      std::max({peak_rss_bytes(), stats.rss_after_first_pass_bytes, stats.rss_final_bytes});
  return result;
}

}  // namespace gpulab
