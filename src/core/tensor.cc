#include "gpulab/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace gpulab {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kInt32: return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kFp8E4M3:
    case DataType::kBool: return 1;
    case DataType::kInt64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFp8E4M3: return "fp8e4m3";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

Result<DataType> parse_dtype(std::string_view name) {
  for (DataType d :
       {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8, DataType::kUInt8,
        DataType::kInt32, DataType::kInt64, DataType::kFp8E4M3, DataType::kBool}) {
    if (dtype_name(d) == name) return d;
  }
  return Status::invalid_argument("unknown data type '" + std::string(name) +
                                  "'. Use float32, float16, bfloat16, int8, uint8, int32 or int64.");
}

std::string Shape::dim_string(int64_t d) {
  if (!is_batch(d)) return std::to_string(d);
  return batch_factor(d) == 1 ? std::string("N") : "N*" + std::to_string(batch_factor(d));
}

bool Shape::has_batch() const {
  for (int64_t d : dims)
    if (is_batch(d)) return true;
  return false;
}

int64_t Shape::numel(int64_t batch) const {
  int64_t n = 1;
  for (int64_t d : dims) n *= (is_batch(d) ? batch * batch_factor(d) : d);
  return n;
}

Shape Shape::bind_batch(int64_t batch) const {
  Shape s = *this;
  for (int64_t& d : s.dims)
    if (is_batch(d)) d = batch * batch_factor(d);
  return s;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dim_string(dims[i]);
  }
  return s + "]";
}

Tensor::Tensor(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  assert(!shape_.has_batch());
  bytes_.resize(static_cast<size_t>(shape_.numel()) * dtype_size(dtype_));
}

Tensor Tensor::from_floats(Shape shape, std::span<const float> values) {
  Tensor t(DataType::kFloat32, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == t.numel());
  // An empty tensor (a zero dimension) has no storage: memcpy would get null pointers.
  if (t.size_bytes() != 0) std::memcpy(t.data(), values.data(), t.size_bytes());
  return t;
}

Tensor Tensor::from_int64s(Shape shape, std::span<const int64_t> values) {
  Tensor t(DataType::kInt64, std::move(shape));
  assert(static_cast<int64_t>(values.size()) == t.numel());
  if (t.size_bytes() != 0) std::memcpy(t.data(), values.data(), t.size_bytes());
  return t;
}

Result<Tensor> Tensor::from_bytes(DataType dtype, Shape shape, std::span<const std::byte> bytes) {
  if (shape.has_batch())
    return Status::invalid_argument("tensor shape " + shape.to_string() + " has a symbolic dimension");
  const size_t want = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes.size() != want) {
    return Status::invalid_file("tensor data has " + std::to_string(bytes.size()) + " bytes, but " +
                                std::string(dtype_name(dtype)) + " " + shape.to_string() + " needs " +
                                std::to_string(want));
  }
  Tensor t(dtype, std::move(shape));
  if (want) std::memcpy(t.data(), bytes.data(), want);
  return t;
}

std::span<float> Tensor::f32() {
  assert(dtype_ == DataType::kFloat32);
  return {reinterpret_cast<float*>(bytes_.data()), bytes_.size() / 4};
}
std::span<const float> Tensor::f32() const {
  assert(dtype_ == DataType::kFloat32);
  return {reinterpret_cast<const float*>(bytes_.data()), bytes_.size() / 4};
}
std::span<int64_t> Tensor::i64() {
  assert(dtype_ == DataType::kInt64);
  return {reinterpret_cast<int64_t*>(bytes_.data()), bytes_.size() / 8};
}
std::span<const int64_t> Tensor::i64() const {
  assert(dtype_ == DataType::kInt64);
  return {reinterpret_cast<const int64_t*>(bytes_.data()), bytes_.size() / 8};
}
std::span<uint8_t> Tensor::u8() {
  assert(dtype_ == DataType::kUInt8);
  return {reinterpret_cast<uint8_t*>(bytes_.data()), bytes_.size()};
}
std::span<const uint8_t> Tensor::u8() const {
  assert(dtype_ == DataType::kUInt8);
  return {reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size()};
}

Result<Tensor> Tensor::reshaped(Shape shape) const {
  if (shape.has_batch() || shape.numel() != numel()) {
    return Status::invalid_argument("cannot reshape " + shape_.to_string() + " to " + shape.to_string());
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

ErrorStats compare(std::span<const float> actual, std::span<const float> expected) {
  ErrorStats s;
  double diff2 = 0, ref2 = 0;
  const size_t n = std::min(actual.size(), expected.size());
  for (size_t i = 0; i < n; ++i) {
    const double a = actual[i], b = expected[i];
    if (!std::isfinite(a)) {
      ++s.non_finite;
      continue;
    }
    const double d = std::abs(a - b);
    s.max_abs = std::max(s.max_abs, d);
    s.max_rel = std::max(s.max_rel, d / std::max(std::abs(b), 1e-30));
    diff2 += d * d;
    ref2 += b * b;
  }
  if (actual.size() != expected.size()) s.non_finite += 1;  // a size mismatch never passes
  s.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (s.non_finite) s.rel_l2 = std::numeric_limits<double>::infinity();
  return s;
}

}  // namespace gpulab
