// One convolution step at run time: a cuDNN plan (fused, or convolution-only followed by
// gpulab's bias/residual/activation kernels) or one of gpulab's own convolutions (the direct
// convolution, general; the depthwise convolution, groups == c == k; CUTLASS's small-channel
// implicit GEMM, for stems; the wgmma 3x3 convolution, for 64-channel layers on sm_90). Never
// allocates or synchronizes (CUDA-graph safe).
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/kernels/quant_desc.h"
#include "gpulab/status.h"

namespace gpulab {

// Which implementation runs a convolution step.
enum class ConvKernel { kCudnn, kDirect, kDepthwise, kCutlass, kWgmma3x3, kQ8Direct, kQ8Mma, kQ8Cudnn };

// Tactic strings of gpulab's own convolutions (PlanStep::tactic, timing cache).
inline constexpr std::string_view kDirectTactic = "direct";
inline constexpr std::string_view kDepthwiseTactic = "depthwise";
// The INT8/FP8 convolutions and Gemms (through enqueue_q8_layer): "mma-q8" or "mma-q8:<tile>", the
// tensor-core kernel with one of its thread-block tiles (kernels/quant_kernels.h's
// launch_q8_mma_conv and q8_mma_tactics()), where kernels::validate_q8_mma accepts the layer, the
// build saw that tile agree with the direct kernel on the layer's weights and it was the fastest
// (tactics.cc, choose_q8_tactic); else "direct-q8", one thread per output (launch_q8_conv), which
// runs any 8-bit layer.
inline constexpr std::string_view kQ8DirectTactic = "direct-q8";
inline constexpr std::string_view kQ8MmaTactic = "mma-q8";
// "dp4a-q8:1x1": launch_q8_mma_conv's kernel for 1x1 layers over few channels, on __dp4a;
// "wgmma-q8:<tile>", the same implicit GEMM on Hopper's wgmma; and "cutlass-q8:<tile>", CUTLASS's
// Hopper implicit GEMM with the same epilogue (both sm_90 only). All among q8_mma_tactics(), chosen
// the same way.
inline constexpr std::string_view kQ8SmallKTactic = "dp4a-q8:1x1";
inline constexpr std::string_view kQ8WgmmaTactic = "wgmma-q8";
inline constexpr std::string_view kQ8CutlassTactic = "cutlass-q8";
inline bool is_q8_mma_tactic(std::string_view tactic) {
  const auto tile_of = [tactic](std::string_view kernel) {
    return tactic.starts_with(kernel) && tactic.substr(kernel.size()).starts_with(':');
  };
  return tactic == kQ8MmaTactic || tactic == kQ8SmallKTactic || tile_of(kQ8MmaTactic) ||
         tile_of(kQ8WgmmaTactic) || tile_of(kQ8CutlassTactic);
}
// "cudnn-q8:<engine configuration>": cuDNN's graph API with the same epilogue
// (cuda::CudnnQ8Conv, backends/cuda/cudnn_q8_conv.h), INT8/FP8 convolutions with an 8-bit output;
// chosen like the tiles, among the configurations whose output agreed with the direct kernel's.
// Where a context cannot build the configuration at its batch size, the step runs direct-q8.
inline constexpr std::string_view kQ8CudnnTactic = "cudnn-q8";
inline bool is_q8_cudnn_tactic(std::string_view tactic) {
  return tactic.starts_with(kQ8CudnnTactic) && tactic.substr(kQ8CudnnTactic.size()).starts_with(':');
}
// An 8-bit layer's tactic may carry a second tactic for small batches: "<tactic>|upto<n>:<small>"
// runs <small> (a tile of q8_mma_tactics(), or direct-q8) at batches up to n and <tactic> above.
// Tactic timing adds one where, timed at kQ8SmallBatch images, another tactic beats the one chosen
// at the timing batch by 10% or more: a tile chosen for 256 images can be several times slower at
// 32 than a smaller one (MobileNetV2's expanded_conv_13/project on wgmma-q8:128x256, 3.5x FP16's
// time at batch 32; bench/results/2026-12-07-b555e06). INT8 tactics compute the same bytes, so the
// switch changes no output; FP8 ones stay within one E4M3 step of the interpreter either way.
inline constexpr std::string_view kQ8SmallBatchMark = "|upto";
inline constexpr int64_t kQ8SmallBatch = 32;
struct Q8BatchTactics {
  std::string_view main;    // the whole tactic when there is no mark
  int64_t small_limit = 0;  // 0: no small-batch tactic; -1: a mark that does not parse
  std::string_view small;
};
Q8BatchTactics split_q8_tactic(std::string_view tactic);
std::string q8_tactic_with_small_batch(std::string_view main, int64_t small_limit, std::string_view small);
// The tactic that runs `batch` images.
std::string_view q8_tactic_for_batch(std::string_view tactic, int64_t batch);
inline bool is_q8_single_tactic(std::string_view tactic) {
  return tactic == kQ8DirectTactic || is_q8_mma_tactic(tactic) || is_q8_cudnn_tactic(tactic);
}
inline bool is_q8_tactic(std::string_view tactic) {
  const Q8BatchTactics t = split_q8_tactic(tactic);
  return t.small_limit >= 0 && is_q8_single_tactic(t.main) &&
         (t.small_limit == 0 || t.small == kQ8DirectTactic || is_q8_mma_tactic(t.small));
}
// What an 8-bit layer's tactic timings depend on, as a key (tactics.cc's shape memo): the geometry,
// the types, whether it is a Gemm, and the epilogue's form (residual, activation kind, bias), not
// the scales or the clip bounds, which change no kernel's work.
std::string q8_shape_key(const kernels::Q8ConvDesc& d, bool gemm, bool has_bias);
// The non-empty items of a comma-separated list (GPULAB_SKIP_Q8_TACTICS).
inline std::vector<std::string_view> list_items(std::string_view list) {
  std::vector<std::string_view> out;
  for (size_t from = 0; from <= list.size();) {
    const size_t comma = std::min(list.find(',', from), list.size());
    if (comma > from) out.push_back(list.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}
// Whether `tactic` starts with one of the names in `list` (GPULAB_SKIP_Q8_TACTICS: "cutlass-q8"
// names every CUTLASS tile, "wgmma-q8:64x128" one tile).
inline bool tactic_in_list(std::string_view list, std::string_view tactic) {
  return std::ranges::any_of(list_items(list),
                             [tactic](std::string_view item) { return tactic.starts_with(item); });
}
// The items of such a list that match none of `tactics` (a misspelt name, which would otherwise
// skip nothing without a word), in list order.
inline std::vector<std::string_view> unmatched_list_items(std::string_view list,
                                                          std::span<const std::string_view> tactics) {
  std::vector<std::string_view> out;
  for (const std::string_view item : list_items(list))
    if (std::ranges::none_of(tactics, [item](std::string_view t) { return t.starts_with(item); }))
      out.push_back(item);
  return out;
}
// CUTLASS tactics are "cutlass:<tile>" (cuda::cutlass_conv_tactics()).
inline constexpr std::string_view kCutlassTacticPrefix = "cutlass:";
// The wgmma 3x3 convolution's are "wgmma-conv3x3:<variant>" (cuda::wgmma_conv_tactics()).
// The tactic of a kStem step (kernels::launch_fused_stem, the only kernel that runs one).
inline constexpr std::string_view kFusedStemTactic = "fused-stem";

// A cuDNN tactic timed at a smaller batch and run over the batch in chunks of that size:
// "chunk<images>:<cuDNN tactic>", e.g. "chunk256:cudnn:70;...". For when cuDNN's engines do not
// scale with the batch: under a 1 GiB workspace limit, ResNet-18's layer1 at batch 1024 in FP32 got
// engines that took 3x longer per image than batch 256's winners. (With the limit raised, chunks
// won no layer there; tactic timing tries them where nothing ran over the whole batch,
// tactic_timing.h.) A chunked step launches the tactic once per full chunk and cuDNN's heuristic
// choice once for the remainder.
inline constexpr std::string_view kChunkTacticPrefix = "chunk";
struct ChunkedTactic {
  int64_t chunk = 0;       // images per launch, >= 1
  std::string_view inner;  // "cudnn:..." or "cudnn-unfused:..."
};
// The parts of a "chunk<images>:<cuDNN tactic>" string; nullopt for any other string, or for one
// whose count is not a positive integer or whose inner tactic is not cuDNN's.
std::optional<ChunkedTactic> parse_chunked_tactic(std::string_view tactic);
std::string chunked_tactic(int64_t chunk, std::string_view inner);

// How a batch splits into chunks: `full` launches of `chunk` images, then one of `tail` images
// when tail > 0. A batch no larger than the chunk is one launch at its own size (full = 0).
struct ChunkSplit {
  int64_t full = 0;
  int64_t tail = 0;
};
constexpr ChunkSplit split_batch(int64_t batch, int64_t chunk) {
  if (batch <= chunk) return {0, batch};
  return {batch / chunk, batch % chunk};
}

// The kernel a tactic string names: "direct", "depthwise", "cutlass:..." and "wgmma-conv3x3:..."
// are gpulab's own, the 8-bit tactics above their own kinds; anything else ("cudnn:...", "cudnn-unfused:...",
// "chunk<n>:cudnn...", "" for the default) is cuDNN.
ConvKernel conv_kernel_of_tactic(std::string_view tactic);

// OK unless `tactic` names one of gpulab's own kernels that this build does not have: a CUTLASS
// tile or wgmma variant outside cuda::cutlass_conv_tactics() / cuda::wgmma_conv_tactics(), as in
// a plan or timing cache from another gpulab version (fab23d3 removed five wgmma variants).
// Then unsupported, naming the tactic; also for a "chunk" string parse_chunked_tactic refuses.
// cuDNN tactics are checked when their plan is built.
Status check_conv_tactic(std::string_view tactic);

// The kernel that runs a step whose tactic is `tactic` and for which `conv` was prepared (null
// when no cuDNN plan was built): own kernels by name; a cuDNN tactic without a plan falls back
// to the direct convolution.
ConvKernel conv_kernel_for(std::string_view tactic, const cuda::CudnnConv* conv);

// The cuDNN plan that runs a cuDNN `tactic` on `problem`: exactly that engine configuration where
// it builds for problem.n images, whether or not that is the batch it was timed at; else cuDNN's
// heuristic choice for the same graph form, else for the convolution-only form. An error when none
// builds (the caller falls back to the direct convolution). Until 2026-12-06 a batch other than
// the timed one took the heuristic choice, and MobileNetV2's FP16 plan for max batch 1024 ran
// batch 256 in 104.7 ms on an H100 against 4.57 ms for a plan timed at 256
// (bench/results/2026-12-06-279d535).
Result<std::unique_ptr<cuda::CudnnConv>> prepare_cudnn_conv(cudnnHandle_t handle,
                                                            const cuda::ConvProblem& problem,
                                                            std::string_view tactic);

// `kernel` kCudnn needs `conv` (`handle` bound to `stream`, `workspace` of conv->workspace_bytes());
// the own kernels ignore conv, handle and workspace. kDepthwise returns invalid_argument for a
// problem that is not depthwise (cuda::depthwise_conv_supports); kCutlass runs the tile that
// `tactic` names and refuses problems outside cuda::cutlass_conv_supports; kWgmma3x3 runs the
// variant `tactic` names and refuses problems outside cuda::validate_wgmma_conv and GPUs other
// than sm_90.
Status launch_conv_step(const cuda::ConvProblem& problem, ConvKernel kernel, std::string_view tactic,
                        const cuda::CudnnConv* conv, cudnnHandle_t handle, const cuda::ConvPointers& ptrs,
                        void* workspace, cudaStream_t stream);

// A chunked step (ChunkedTactic) over problem.n images: `full` (cuDNN, prepared at `chunk` images)
// runs each full chunk, `tail` (prepared at problem.n % chunk images; null when that is 0) the
// rest. The pointers advance by one chunk of x, residual and y per launch. Both share `workspace`,
// which holds the larger of their workspaces.
Status launch_chunked_conv_step(const cuda::ConvProblem& problem, int64_t chunk, const cuda::CudnnConv& full,
                                const cuda::CudnnConv* tail, cudnnHandle_t handle,
                                const cuda::ConvPointers& ptrs, void* workspace, cudaStream_t stream);

}  // namespace gpulab
