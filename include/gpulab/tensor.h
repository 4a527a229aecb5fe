// gpulab/tensor.h: element types, shapes (with a symbolic batch dimension) and host tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

enum class DataType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFp8E4M3,
  kBool,
};

// Bytes per element.
size_t dtype_size(DataType dtype);
// "float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "fp8e4m3", "bool".
std::string_view dtype_name(DataType dtype);
Result<DataType> parse_dtype(std::string_view name);

// A tensor shape. Dimensions are non-negative, except kBatch, which stands for the symbolic
// batch dimension "N" (ONNX dim_param) that is bound when a model runs. kBatch is not -1 so that
// it can also mark "the batch size" inside propagated shape values (Shape -> Gather -> Concat ->
// Reshape), where -1 already means "infer this dimension".
//
// A dimension may also be a multiple of the batch, N * k (k >= 2), where a model folds the batch
// into another dimension (Swin's windows: [N * 64, 49, 96]; a multi-head attention's [N * 12, 50,
// 64]). It is written batch_times(k) = kBatchMultiples + k: far below any real dimension, and away
// from the extreme values exporters write as "from the end" (INT64_MIN + 1 as a Slice end).
struct Shape {
  static constexpr int64_t kBatch = std::numeric_limits<int64_t>::min();
  // Largest k of N * k that a dimension can carry.
  static constexpr int64_t kMaxBatchFactor = int64_t{1} << 40;
  static constexpr int64_t kBatchMultiples = kBatch + (int64_t{1} << 41);
  static constexpr int64_t batch_times(int64_t factor) {
    return factor == 1 ? kBatch : kBatchMultiples + factor;
  }
  static constexpr bool is_batch(int64_t d) {
    return d == kBatch || (d > kBatchMultiples + 1 && d < kBatchMultiples + kMaxBatchFactor);
  }
  // k of a dimension N * k (is_batch(d) must hold).
  static constexpr int64_t batch_factor(int64_t d) { return d == kBatch ? 1 : d - kBatchMultiples; }
  // "N", "N*64" or the number.
  static std::string dim_string(int64_t d);

  std::vector<int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}

  size_t rank() const { return dims.size(); }
  int64_t operator[](size_t i) const { return dims[i]; }
  int64_t& operator[](size_t i) { return dims[i]; }
  bool has_batch() const;  // any dimension is N * k (is_batch)
  // Product of the dimensions, with N taken as `batch`.
  int64_t numel(int64_t batch = 1) const;
  // The same shape with N * k replaced by batch * k.
  Shape bind_batch(int64_t batch) const;
  // "[N,3,224,224]", "[N*64,49,96]"
  std::string to_string() const;

  friend bool operator==(const Shape&, const Shape&) = default;
};

// A dense, row-major tensor in host memory that owns its bytes. Copyable (deep copy).
class Tensor {
 public:
  Tensor() = default;
  // Zero-filled. `shape` must not contain kBatch.
  Tensor(DataType dtype, Shape shape);

  static Tensor from_floats(Shape shape, std::span<const float> values);
  static Tensor from_int64s(Shape shape, std::span<const int64_t> values);
  // Copies `bytes`; fails if the byte count does not match dtype and shape.
  static Result<Tensor> from_bytes(DataType dtype, Shape shape, std::span<const std::byte> bytes);

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t size_bytes() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }

  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }

  // Typed views; the dtype must match (checked by assertion).
  std::span<float> f32();
  std::span<const float> f32() const;
  std::span<int64_t> i64();
  std::span<const int64_t> i64() const;
  std::span<uint8_t> u8();
  std::span<const uint8_t> u8() const;

  // Same bytes, new shape with the same element count.
  Result<Tensor> reshaped(Shape shape) const;

 private:
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

// Error norms used to compare a backend against the reference.
struct ErrorStats {
  double max_abs = 0;
  double max_rel = 0;      // max |a-b| / max(|b|, tiny)
  double rel_l2 = 0;       // ||a-b|| / ||b||
  int64_t non_finite = 0;  // NaN or Inf in `actual`
};
ErrorStats compare(std::span<const float> actual, std::span<const float> expected);

}  // namespace gpulab
