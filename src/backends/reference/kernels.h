// Internal to the reference backend: one function per op family, the checks they share and the
// thread splitter. Each run_* function validates its own inputs and attributes and fills
// `outputs` (already sized to node.outputs.size() by the caller).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "backends/reference/reference_executor.h"

namespace gpulab::reference {

using Inputs = std::span<const Tensor* const>;
using Outputs = std::vector<Tensor>;

// "Conv 'conv1'", the <where> of every message about this node.
std::string where(const Node& node);

// Checks that the required inputs [0, required) are present and that no input beyond
// [0, required + optional) is given.
Status check_input_count(const Node& node, Inputs inputs, size_t required, size_t optional = 0);
// Checks inputs[index]'s dtype; `role` names it in the message ("X", "weight").
Status check_dtype(const Node& node, const Tensor& t, DataType want, std::string_view role);
Status check_rank(const Node& node, const Tensor& t, size_t rank, std::string_view role);

// The node's attributes of type T; T{} when the node carries none (std::monostate).
template <typename T>
Result<T> attrs_or_default(const Node& node) {
  if (std::holds_alternative<std::monostate>(node.attrs)) return T{};
  if (const T* a = std::get_if<T>(&node.attrs)) return *a;
  return Status::invalid_model(where(node) +
                               ": carries attributes of another op type. The importer or a pass "
                               "built this node wrongly.");
}

// Largest stride, dilation, pad or pooling window the reference backend accepts: far beyond any
// real model, small enough that index arithmetic in int64 cannot overflow.
inline constexpr int64_t kMaxWindowParam = int64_t{1} << 20;

// Normalises an axis in [-rank, rank) to [0, rank).
Result<int64_t> normalize_axis(const Node& node, int64_t axis, int64_t rank);

// Row-major strides (in elements) of a tensor of `dims`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);
// Strides of a tensor of shape `s` broadcast (numpy: right-aligned, size-1 dims repeat) to a
// tensor of `rank` dims: 0 where it broadcasts.
std::vector<int64_t> broadcast_strides(const Shape& s, size_t rank);
// Numpy broadcast of two shapes, or kInvalidArgument naming the node.
Result<Shape> broadcast_shape(const Node& node, const Shape& a, const Shape& b);
// Calls fn(flat, coords) for every element of a tensor of `dims`, in row-major order.
void for_each_index(const std::vector<int64_t>& dims,
                    const std::function<void(int64_t flat, const std::vector<int64_t>& coords)>& fn);

// Splits [0, count) into contiguous chunks, one per worker, and runs fn(begin, end) on each.
// Runs inline when count * cost_per_item is small or one thread is asked for. fn must not throw.
void parallel_for(int64_t count, int64_t cost_per_item, const ReferenceOptions& options,
                  const std::function<void(int64_t begin, int64_t end)>& fn);

Status run_conv(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_max_pool(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_average_pool(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_global_average_pool(const Node& node, Inputs inputs, Outputs& outputs,
                               const ReferenceOptions& options);
Status run_gemm(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_matmul(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_batch_norm(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// Relu, Clip, Sigmoid, HardSigmoid, HardSwish.
Status run_unary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// Add, Sub, Mul, Div, Pow, Mod, Max, Min, Equal with numpy broadcasting, on float32 or int64.
Status run_binary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// Sqrt, Erf, Tanh, Exp, Neg, Gelu (float32; Neg also int64), Not (bool) and Cast.
Status run_math_unary(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// Transpose, Slice, Split, Squeeze, Expand, Pad, Where, ScatterND, ConstantOfShape, Range: any dtype.
Status run_tensor_op(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// ReduceMean, ReduceL2 and LayerNormalization (float32, sums in double).
Status run_normalization(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// Attention (float32, scores and softmax in double).
Status run_attention(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
Status run_softmax(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);
// A QuantizeLinear -> DequantizeLinear pair (kQuantizeDequantize), in float.
Status run_quantize_dequantize(const Node& node, Inputs inputs, Outputs& outputs,
                               const ReferenceOptions& options);
// Identity, Dropout, Flatten, Reshape, Shape, Gather, Unsqueeze, Concat.
Status run_shape_op(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options);

}  // namespace gpulab::reference
