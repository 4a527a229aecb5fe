// Internal to the graph library: helpers that the shape inference of every op shares
// (shape_inference.cc, infer_tensor_ops.cc, known_values.cc).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace gpulab::infer {

// int64 (and bool) values up to this many elements get known_values: shape and index tensors,
// not the masks an export builds at run time.
inline constexpr int64_t kMaxKnownValues = 256;

// "node 'name' (Op)", the <where> of shape inference messages.
std::string node_where(const Node& node);
// kInvalidModel "<node_where>: <what>".
Status fail(const Node& node, const std::string& what);
// "N", "N*64" or the number.
std::string dim_string(int64_t d);
// "[N,-1]"
std::string values_string(const std::vector<int64_t>& v);
// Normalizes a possibly negative axis for a tensor of `rank` dims; false when out of range.
bool normalize_axis(int64_t& axis, int64_t rank);
// The dtype and shape of `in`, without known values.
ValueInfo same_as(const ValueInfo& in);
// Numpy-style broadcast of two shapes. N * k broadcasts against 1 and itself only.
Result<Shape> broadcast(const Node& node, const Shape& a, const Shape& b);

// The int64 values of a value: known_values from inference, else nullptr.
inline const std::vector<int64_t>* known(const ValueInfo* info) {
  return info && info->known_values ? &*info->known_values : nullptr;
}

// Shape inference of the ops added for the transformer classifiers (infer_tensor_ops.cc):
// Transpose, Slice, Split, Squeeze, the elementwise ops beyond Add/Mul, the reductions,
// LayerNormalization, Gelu, Cast, Expand, ConstantOfShape, Range, ScatterND, Pad, Attention.
// nullopt when `node` is not one of them.
std::optional<Result<std::vector<ValueInfo>>> infer_tensor_op(const Node& node,
                                                              const std::vector<const ValueInfo*>& in);

// The known values of the node's first output from its inputs' known values (known_values.cc), for
// the ops of an export's shape code: elementwise arithmetic and comparisons, Where, Cast, Range,
// ConstantOfShape, Expand and the data movement ops, with N * k kept symbolic where the result does
// not depend on the batch size (N * k / k = N, N * k == -1 is false). nullopt when any input is
// unknown, the result depends on the batch size in a way that cannot be written as N * k, or it
// would have more than kMaxKnownValues elements. `out` is the output's inferred info.
std::optional<std::vector<int64_t>> evaluate_known(const Node& node, const std::vector<const ValueInfo*>& in,
                                                   const ValueInfo& out);

}  // namespace gpulab::infer
