// Lowering: a Graph after run_passes -> a Plan without tactics (the runtime's builder times and
// fills them in). CUDA-free: decides the steps, the NHWC values (the network input's channels
// padded for the tensor cores) and converts the weights once into the kernels' layout and
// precision:
//   Conv  OIHW float32 -> KRSC (K, R, S, C/groups) of the storage dtype, input channels padded
//                         with zeros to match a padded input value
//   Gemm  B -> [out, in] of the storage dtype (transposed when transB = 0), alpha folded into
//         the weight and beta into the bias
// Supported: Conv (fused epilogue), MaxPool, AveragePool, GlobalAveragePool, Relu, Clip, Add of
// same-shaped values, Flatten/Reshape/Identity/Dropout of 1x1 spatial values (views), Gemm.
// Anything else is kUnsupported naming the node.
#pragma once

#include <span>
#include <vector>

#include "gpulab/engine.h"
#include "graph/graph.h"
#include "plan/plan.h"

namespace gpulab {

// Host float32 -> float32/float16/bfloat16 bytes, round to nearest even.
std::vector<std::byte> convert_floats(std::span<const float> values, DataType dtype);

// Channels the input conversion writes for a model input of `channels`: small channel counts
// are padded (to 8 for FP16/BF16 tensor-core convolutions, to 4 for FP32/TF32).
int64_t padded_input_channels(int64_t channels, Precision precision);

Result<Plan> lower_graph(const Graph& graph, const BuildOptions& options);

}  // namespace gpulab
