// The pipeline's GPU backend (built with the CUDA runtime only): decoded uint8 pixels staged in
// pinned host slots, uploaded on a copy stream, resized, cropped and normalized on the GPU on the
// compute stream, run through the engine, top-k on the GPU; only the top-k come back.
//
// No CUDA header here (gpulab/engine.h declares the stream type itself).
#pragma once

#include <memory>

#include "gpulab/engine.h"
#include "pipeline/pipeline.h"

namespace gpulab {

struct GpuBackendOptions {
  std::shared_ptr<Engine> engine;
  PreprocessSpec spec;  // output_size = the engine's input side
  // Pinned bytes per staging slot for decoded pixels, divided by the batch: images are packed, and
  // one that no longer fits is resized and cropped on the CPU (output_size^2 * 3 bytes, always
  // reserved). 0: 6 * min_decode_side(spec)^2 (393 KB per image for torchvision's 256).
  // That CPU crop is 8-bit: for torchvision it is the preset's own result (PIL's resize gives
  // 8-bit pixels), for TF-Slim it rounds the bilinear value the GPU path keeps in float (at most
  // half a level).
  int64_t pixel_bytes_per_image = 0;
  bool use_cuda_graph = true;
};

// kUnavailable without a usable GPU.
Result<std::unique_ptr<BatchBackend>> make_gpu_backend(const GpuBackendOptions& options);

}  // namespace gpulab
