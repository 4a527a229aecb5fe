// ONNX import: ModelProto -> Graph. The only code in gpulab that sees protobuf.
//
// Accepts ONNX opsets 11..18 (default domain) and the ops listed in OpType (but Attention, which
// only the passes make), and Einsum as MatMul (convert_tensor_ops.h). Attributes are read into typed
// attrs with ONNX defaults; auto_pad becomes explicit pads; Clip min/max inputs and the axes/split
// inputs of Unsqueeze, Squeeze, Split and ReduceMean (which must be constant) are folded into
// attributes; Constant nodes become initializers; Dropout keeps only its first output (a Dropout in
// training mode is accepted with a ratio of 0); a zero Pad of H and W read only by Conv and
// AveragePool is folded into their padding, any other constant Pad is a node; a ReduceMean over H
// and W of a 4-D tensor is a GlobalAveragePool. Initializers may be float32, float16
// (converted to float32), int64 or int32 (converted to int64), stored inline or as external data
// next to the model file. A graph input whose first dimension is symbolic (dim_param) or <= 0
// gets Shape::kBatch there. The result has passed Graph::validate() and Graph::infer_shapes().
//
// Errors: kNotFound (missing file), kInvalidModel (empty, truncated or corrupt file, or an
// inconsistent graph), kUnsupported (an op, attribute, opset or dtype gpulab cannot run; the
// message names the node, the op and the supported set). Never throws.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "graph/graph.h"

namespace gpulab {

// Opsets of the default ONNX domain that the importer accepts.
inline constexpr int64_t kMinOnnxOpset = 11;
inline constexpr int64_t kMaxOnnxOpset = 18;

// Reads and converts an ONNX file. External tensor data is looked up relative to the file's folder.
Result<Graph> load_onnx(const std::filesystem::path& path);

// Converts a serialized ModelProto held in memory. `source_name` names it in messages. Models with
// external tensor data are refused (there is no folder to read them from).
Result<Graph> load_onnx_bytes(std::span<const std::byte> bytes, std::string_view source_name);

}  // namespace gpulab
