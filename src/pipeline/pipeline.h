// The input pipeline: image files on disk in, top-k predictions out, with every stage on its own
// threads and bounded memory between them.
//
//   read (1 thread) ─▶ queue ─▶ decode + stage (N threads) ─▶ ring of K staging slots ─▶ infer
//   file bytes,                JPEG with DCT scaling,          one batch each,              (the calling
//   cached in RAM              PNG/BMP/PPM; then the           reused: nothing is           thread): the
//   after pass 1               backend's staging step          allocated per batch          backend's batches
//
// A BatchBackend decides what "staging" means: the CPU backend resizes, crops and normalizes on
// the decode threads into float NCHW batches and runs a HostBatchRunner (the reference executor,
// or any host-side runner); a GPU backend (pipeline_cuda.h) stages the decoded uint8 pixels in
// pinned memory and does the rest on the device.
//
// Batches are formed in file order (image i of pass p is position i % batch of batch
// (p * files + i) / batch), so the predictions do not depend on the thread count. A file that
// cannot be read or decoded is reported with its path and skipped (its position in the batch runs
// on zeros and its result is dropped); the run goes on. Errors of the pipeline itself (a backend
// failing) stop the run and are returned.
//
// Thread safety: run_pipeline() may be called from one thread at a time per backend; it starts and
// joins its own threads before it returns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "image/decode.h"
#include "image/preprocess.h"

namespace gpulab {

// One of an image's k best classes.
struct Prediction {
  int64_t index = 0;
  float score = 0;        // the model's output: a logit, or a probability when the model ends in Softmax
  float probability = 0;  // softmax over all classes (the score itself for a probability output)
};

// A GPU backend's account of the device.
struct DeviceAccount {
  bool present = false;
  int64_t h2d_bytes = 0;  // uploaded pixels and descriptors
  double h2d_s = 0;       // device time of the uploads (events on the copy stream)
  double gpu_busy_s = 0;  // device time from each batch's preprocessing to its top-k copy
  // gpu_busy_s split (events on the compute stream): resize, crop and normalize; the model; top-k,
  // softmax and the copy of the results to the host.
  double preprocess_s = 0, model_s = 0, output_s = 0;
  // Host time inside the engine's enqueue (graph launch, or capture when a batch size is new), and
  // blocked waiting for batches to finish: where the infer thread's time goes.
  double host_enqueue_s = 0, host_wait_s = 0;
  double host_submit_s = 0;       // all of submit(): the enqueue and every other queued copy, kernel, event
  int64_t device_used_bytes = 0;  // cudaMemGetInfo: total - free, now
  int64_t device_used_peak_bytes = 0;  // the largest value seen at a batch's end
};

// What decode threads may keep between images: reused buffers, so that the steady state allocates
// nothing per image.
struct StageScratch {
  ResizeScratch resize;
  std::vector<uint8_t> crop_hwc;
};

// The stage after decoding: where batches are staged and how they run. The pipeline calls
// allocate_slots() once, then stage()/stage_blank() from the decode threads (concurrently, each
// position of a slot from one thread) and submit()/finish() from the inference thread, in batch
// order, never more than max_in_flight() submitted and not yet finished.
class BatchBackend {
 public:
  virtual ~BatchBackend() = default;
  virtual std::string name() const = 0;
  // Prepares `count` staging slots of up to `batch` images each, whose results keep `top_k`
  // classes (the only allocation of batch memory; the pipeline reuses them).
  virtual Status allocate_slots(int count, int64_t batch, int top_k) = 0;
  // Writes decoded image `position` of slot `slot` (`info` tells its size in the file).
  virtual Status stage(int slot, int64_t position, const Image& image, const DecodeInfo& info,
                       StageScratch* scratch) = 0;
  // A failed image's position: a neutral input whose result is dropped.
  virtual void stage_blank(int slot, int64_t position) = 0;
  // Starts the inference of the `count` images of a fully staged slot.
  virtual Status submit(int slot, int64_t count) = 0;
  // Waits for the slot's inference and writes the k best classes of image i to
  // out[i * top_k, (i + 1) * top_k). Once it returns, the slot may be staged again.
  virtual Status finish(int slot, int64_t count, int top_k, std::span<Prediction> out) = 0;
  // Submitted slots the backend overlaps (1: each batch finishes before the next starts).
  virtual int max_in_flight() const { return 1; }
  // The input size the backend's model takes (square side, pixels).
  virtual int input_size() const = 0;
  // GPU backends: what the device did so far (zeros on the CPU). Called on the inference thread.
  virtual DeviceAccount device_account() { return {}; }
  // The model alone on a batch already in place (GPU: device-resident input, CUDA events), images
  // per second; 0 when the backend cannot tell (the CPU backend: the infer stage's rate is it).
  virtual Result<double> compute_only_ips(int64_t /*batch*/) { return 0.0; }
};

// Runs float32 NCHW batches on the host: the CPU backend's inference.
class HostBatchRunner {
 public:
  virtual ~HostBatchRunner() = default;
  // input: float32 [n, 3, S, S]; returns float32 [n, classes].
  virtual Result<Tensor> run(const Tensor& input) = 0;
  // True when run() returns probabilities (the model ends in Softmax).
  virtual bool outputs_probabilities() const { return false; }
  // True when the first run at a batch size sets something up (the GPU engine behind
  // `--preprocess cpu` prepares cuDNN plans and captures a graph: seconds). The CPU backend then
  // runs one batch before the clock starts and every batch at the slots' full size, the last,
  // partial one included, so that no set-up falls inside the run.
  virtual bool sets_up_per_batch_size() const { return false; }
};

// The CPU backend: decode threads resize, crop and normalize (PreprocessSpec) into float NCHW
// slots; `runner` runs each batch; top-k and softmax on the host. The model input side is spec.output_size.
std::unique_ptr<BatchBackend> make_cpu_backend(std::unique_ptr<HostBatchRunner> runner, PreprocessSpec spec);

struct PipelineProgress {
  int64_t images_done = 0;   // over all passes, failed ones included
  int64_t images_total = 0;  // files x passes
  double elapsed_s = 0;
};

struct PipelineOptions {
  std::vector<std::filesystem::path> files;  // list_images() of the user's files and folders
  PreprocessSpec spec;
  int64_t batch = 256;
  int decode_threads = 0;  // 0: one per core but one (the inference thread's), at least 1
  int queue_depth = 4;     // K staging slots (>= 2: one staged while another runs)
  int loop = 1;            // passes over the files
  int top_k = 5;
  // JPEG DCT-domain scaling to the smallest size the preprocessing needs (DecodeOptions). Off:
  // full-size decodes, so the pixels are exactly classify's on full-size photos too.
  bool dct_scaling = true;
  // Files are kept in RAM after their first read while their total stays within this; the rest
  // are read again each pass.
  int64_t file_cache_bytes = int64_t{2} << 30;
  // Called on the inference thread after each batch (keep it short).
  std::function<void(const PipelineProgress&)> progress;
};

// The shorter side a JPEG needs to be decoded at for `spec` (DecodeOptions::min_shorter_side).
int min_decode_side(const PreprocessSpec& spec);

// One stage's account over the whole run. Times are summed over the stage's threads.
struct StageStats {
  std::string name;  // "read", "decode", "infer"
  int threads = 1;
  int64_t items = 0;         // files read, images decoded (failed included), batches run
  int64_t images = 0;        // images that passed through the stage
  double busy_s = 0;         // wall time doing the stage's work
  double cpu_s = 0;          // thread CPU time (CLOCK_THREAD_CPUTIME_ID) over the whole stage
  double wait_input_s = 0;   // waiting for work from the stage before
  double wait_output_s = 0;  // waiting for room in the stage after (a full queue or ring)
  // Images per second the stage could sustain alone: images / (busy_s / threads).
  double capacity_ips() const { return busy_s > 0 ? static_cast<double>(images) * threads / busy_s : 0; }
};

// A file that was skipped, and why.
struct InputError {
  std::filesystem::path path;
  Status status;
};

struct PipelineStats {
  int passes = 0;
  int64_t files = 0;
  int64_t images = 0;         // images through the pipeline over all passes, failed included
  int64_t failed_images = 0;  // over all passes
  int64_t batch = 0;
  int decode_threads = 0;
  int queue_depth = 0;
  // Before the clock: staging buffers and, on the GPU, the engine's plans and CUDA graph for the
  // batch size (seconds for cuDNN's plans; inside pass 1 it would pass for slow decoding).
  double setup_s = 0;
  double wall_s = 0;          // first file read to last result
  double first_pass_s = 0;    // pass 1: files come from disk (or the OS page cache)
  double throughput_ips = 0;  // images / wall_s
  // Passes 2..N alone, files from RAM when `files_cached`; 0 for one pass.
  double warm_throughput_ips = 0;
  bool files_cached = false;  // every file was in RAM after pass 1
  int64_t cached_bytes = 0;
  int64_t dct_scaled_images = 0;   // JPEGs decoded below their full size (over all passes)
  double decode_s = 0;             // decode threads: in the decoders (part of decode busy_s)
  double stage_s = 0;              // decode threads: in the backend's stage() (resize, crop, ...)
  std::vector<StageStats> stages;  // read, decode, infer
  // Resident set size (host memory), bytes: after pass 1 (the warm-up: caches and buffers
  // filled), at the end, and the process's peak (VmHWM).
  int64_t rss_after_first_pass_bytes = 0;
  int64_t rss_final_bytes = 0;
  int64_t rss_peak_bytes = 0;
  // Bytes the allocator has handed out and not had back (glibc's mallinfo2: every arena plus
  // mmapped blocks; AddressSanitizer's own count in a sanitized build) after pass 1 and after pass N-1 (N >
  // 1), while the decode threads hold their buffers both times; 0 where the C library cannot say. A leak
  // grows this; the resident set can also grow without one, when freed memory stays with the allocator
  // (ASan's quarantine, per-thread arenas fragmented by the decode threads' timing).
  int64_t heap_after_first_pass_bytes = 0;
  int64_t heap_before_last_pass_bytes = 0;
  // GPU backends: the device's account at the end, and its memory in use after pass 1.
  DeviceAccount device;
  int64_t device_used_after_first_pass_bytes = 0;
};

struct PipelineResult {
  // Pass 1's predictions, top_k per image in file order; empty for a failed image.
  std::vector<std::vector<Prediction>> predictions;
  std::vector<InputError> errors;  // pass 1's failed files, in file order
  PipelineStats stats;
};

// Runs the pipeline over options.files, options.loop times. Bad options: kInvalidArgument. A
// backend error stops the run and is returned; bad files are not errors (PipelineResult::errors).
Result<PipelineResult> run_pipeline(const PipelineOptions& options, BatchBackend& backend);

// This process's resident set size and its peak (VmRSS, VmHWM of /proc/self/status), bytes; 0
// where unknown.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();
// Bytes allocated through malloc and not yet freed, over every thread's arena; 0 where unknown.
int64_t heap_in_use_bytes();

}  // namespace gpulab
