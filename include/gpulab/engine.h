// gpulab/engine.h: build or load an optimized plan for an image classifier and run it on the GPU.
//
//   auto engine = gpulab::Engine::build_from_onnx("resnet18.onnx", {.precision = Precision::kFp16,
//                                                                   .max_batch = 64});
//   GPULAB_TRY(engine.value()->save("resnet18.plan"));
//   auto context = engine.value()->create_context();
//   GPULAB_TRY(context.value()->enqueue({.input_nchw = d_in, .batch = 8, .logits = d_out}, stream));
//
// Model: one float input [N, C, H, W] (NCHW, already normalized) and one output [N, classes].
// Engine: the immutable, shareable part (weights on the device, chosen tactics). Thread-safe.
// ExecutionContext: per stream; owns its activation arena, cuDNN/cuBLASLt handles and CUDA graphs.
// One context must not be used by two threads at once; several contexts may run concurrently.
//
// This header needs no CUDA headers: cudaStream_t is declared as the CUDA runtime declares it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace gpulab {

// Arithmetic of a plan or a layer. FP32 keeps TF32 off; FP16/BF16 accumulate in FP32. INT8
// (symmetric per-output-channel weights, per-tensor activations, INT32 accumulation) and FP8 E4M3
// (per-channel weight and per-tensor activation scales, FP32 accumulation; sm_89 and newer) need
// calibrated activation ranges; their rounding rules are in src/core/quant.h.
enum class Precision : uint8_t { kFp32 = 0, kTf32 = 1, kFp16 = 2, kBf16 = 3, kInt8 = 4, kFp8 = 5 };
std::string_view precision_name(Precision precision);  // "fp32", "tf32", "fp16", "bf16", "int8", "fp8"
Result<Precision> parse_precision(std::string_view name);
// Element type activations and weights are stored in: float32 for FP32/TF32, int8 for INT8,
// fp8e4m3 for FP8.
DataType storage_dtype(Precision precision);
// INT8 or FP8: stored in 8 bits with scales.
bool is_quantized(Precision precision);
// The float precision a layer of an INT8/FP8 plan falls back to (FP16); `precision` itself otherwise.
Precision fallback_precision(Precision precision);

// Batch chunks (a plan for more than 256 images): a layer can run as cuDNN's best batch-256
// configuration launched once per 256 images, when that beats every launch over the whole batch.
// On the H200, a search on every long layer found none that won once the workspace limit stopped
// leaving out the engines that scale (ResNet-18 FP32 at batch 1024), and it added about half to
// the build time, so by default chunks are timed only where nothing ran over the whole batch.
enum class BatchChunks : uint8_t {
  kOff,
  kFallback,  // for a layer where no candidate ran at the max batch (workspace, memory)
  kSearch,    // also for every layer whose best launch over the max batch takes over 1 ms
};
std::string_view batch_chunks_name(BatchChunks mode);  // "off", "fallback", "search"
Result<BatchChunks> parse_batch_chunks(std::string_view name);

struct BuildOptions {
  Precision precision = Precision::kFp16;
  int64_t max_batch = 32;         // contexts accept batches 1..max_batch
  std::string timing_cache_path;  // read before and written after tactic timing; "" = none
  bool time_tactics = true;       // false: take cuDNN's heuristic first choice (fast builds)
  // Time (or look up in the timing cache) convolution tactics at this batch when it is smaller
  // than max_batch, and use them at max_batch where they run there (checked at build): a plan for
  // a large batch costs the timing of a smaller one and shares its cache entries. 0: at max_batch.
  int64_t tactic_batch = 0;
  // Per-layer override by node name (e.g. {"conv1", kFp32}): FP32/TF32 overrides of
  // convolutions in a lower-precision plan; in an INT8/FP8 plan also FP16 (and FP32/TF32) overrides
  // of convolutions and Gemms (the accuracy gate's fallback layers).
  std::map<std::string, Precision> layer_precision;
  // INT8/FP8 plans: the calibrated range (amax, the largest magnitude kept) of each activation,
  // by value name (a node output of the graph after run_passes, or the model input), from
  // calibration (src/quant/calibration.h). Scales are amax / 127 (INT8) and amax / 448 (FP8). A
  // scale the model gives itself (a folded QuantizeLinear) takes precedence.
  std::map<std::string, float> activation_amax;
  // INT8/FP8 plans: per node name, values added to the bias of a Conv or Gemm that runs in the
  // 8-bit precision, one per output channel: bias correction (src/quant/bias_correction.h), which
  // cancels the mean shift quantization gives each channel. Ignored for layers in float.
  std::map<std::string, std::vector<float>> bias_correction;
  int device = 0;  // CUDA device ordinal
  // Run a strided stem convolution on few channels (ResNet's 7x7/2 over RGB) over a
  // space-to-depth rearrangement of the input that the input conversion writes: a 4x4/1
  // convolution over 12 channels keeps the tensor cores busy where 3 channels cannot.
  bool stem_space_to_depth = true;
  // Run that space-to-depth stem, its ReLU and the max pool after it as one kernel (FP16 plans,
  // sm_80 and newer; ResNet's stem): the convolution's output never reaches global memory.
  bool fuse_stem = true;
  // Let a float32 (FP32/TF32) depthwise layer in an FP16/BF16 plan read its 16-bit input directly
  // instead of through a float32 copy (fold_input_casts; the same values, less memory traffic):
  // the BF16 policy's MobileNetV2 depthwise layers.
  bool fold_input_casts = true;
  // cuDNN candidates asking for more workspace than this are skipped (trtexec's
  // --memPoolSize=workspace:N). Unset: a quarter of the device memory free when tactic timing
  // starts, at least 64 MiB (batch-1024 FP32 engines such as Winograd's ask for more than the
  // 1 GiB that was the fixed limit before). A context allocates one workspace, the largest its
  // steps chose.
  std::optional<int64_t> max_workspace_bytes;
  // At a max batch above 256, when to also time cuDNN's best batch-256 configuration run over the
  // batch in chunks of 256 images (BatchChunks).
  BatchChunks batch_chunks = BatchChunks::kFallback;
};

// One step of a plan, for reports (inspect, bench --profile).
struct LayerInfo {
  std::string name;    // node name
  std::string kind;    // "conv", "gemm", "maxpool", "input", ...
  std::string tactic;  // "cudnn:<engine>" / "direct" / "cublaslt" / "kernel"
  Precision precision;
  double flops_per_image = 0;
  int64_t bytes_per_image = 0;  // activations read and written at storage dtype, per image
  int64_t param_bytes = 0;      // weights read once per batch
};

struct EngineInfo {
  std::string gpu_name;
  int compute_capability = 0;  // 90 for sm_90
  Precision precision = Precision::kFp32;
  int64_t max_batch = 0;
  Shape input_shape;  // [N, C, H, W] with N = Shape::kBatch
  int64_t num_classes = 0;
  bool outputs_probabilities = false;  // the model ends in a Softmax: "logits" holds probabilities
  int64_t weights_bytes = 0;           // device memory shared by all contexts
  int64_t arena_bytes = 0;             // activation arena of one context (at max_batch)
  int64_t workspace_bytes = 0;         // cuDNN/cuBLASLt workspace of one context
  std::vector<LayerInfo> layers;
  std::map<std::string, std::string> metadata;  // the model's ONNX metadata_props (preprocess.*)
  // A plan built here (not loaded from a file): its tactic search's wall time building cuDNN
  // candidate plans and timing candidates; zeros when every tactic came from the timing cache.
  double tactic_build_s = 0, tactic_timing_s = 0;
};

// Input and output of one inference. Both pointers are device memory.
struct EnqueueArgs {
  const float* input_nchw = nullptr;  // [batch, C, H, W] float32
  int64_t batch = 1;                  // 1..max_batch
  float* logits = nullptr;            // [batch, num_classes] float32
  bool use_cuda_graph = true;         // capture per batch size on first use, replay afterwards
};

class ExecutionContext;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  virtual ~Engine() = default;

  // load_onnx + run_passes + plan build (with tactic timing on the current GPU). May take
  // seconds; allocates device memory.
  static Result<std::shared_ptr<Engine>> build_from_onnx(const std::string& onnx_path,
                                                         const BuildOptions& options);
  // Reads and validates a plan file: refused (kInvalidFile / kUnsupported) when truncated,
  // corrupt, or built for another GPU architecture or library version.
  static Result<std::shared_ptr<Engine>> load(const std::string& plan_path, int device = 0);

  // Writes the plan (crash-safe: temporary file, then rename).
  virtual Status save(const std::string& plan_path) const = 0;
  virtual const EngineInfo& info() const = 0;
  // A new context with its own arena and workspace (allocates device memory).
  virtual Result<std::unique_ptr<ExecutionContext>> create_context() = 0;
};

// Time of one step measured by ExecutionContext::profile (eager, events between steps).
struct LayerTime {
  std::string name;
  double gpu_ms = 0;  // median over the iterations
};

class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;

  // Queues one inference on `stream`. Never allocates device memory and never synchronizes
  // after the first call for a given batch size (which prepares cuDNN plans for that batch
  // and, with use_cuda_graph, captures a CUDA graph).
  virtual Status enqueue(const EnqueueArgs& args, cudaStream_t stream) = 0;

  // Convenience: host float NCHW [batch, C, H, W] in, host float logits [batch, classes] out.
  // Copies, runs on the context's own stream and synchronizes.
  virtual Result<Tensor> run(const Tensor& input_nchw, bool use_cuda_graph = true) = 0;

  // Per-step GPU time (eager mode, events between steps), median of `iterations` runs on
  // random inputs. Synchronizes.
  virtual Result<std::vector<LayerTime>> profile(int64_t batch, int iterations) = 0;
};

// Whether a CUDA device is usable; on false, `reason` says why (no driver, no device, ...).
bool cuda_device_available(std::string* reason = nullptr);

// For `classify --device cuda`: loads `plan_path` when it is not empty, else builds from
// `model_path` with `options`.
Result<std::shared_ptr<Engine>> build_or_load_engine(const std::string& plan_path,
                                                     const std::string& model_path,
                                                     const BuildOptions& options);

}  // namespace gpulab
