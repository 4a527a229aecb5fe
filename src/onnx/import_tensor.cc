// TensorProto -> Tensor: the element types gpulab reads, inline or external data.
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/half.h"
#include "onnx/import_internal.h"

namespace gpulab::onnx_import {
namespace {

namespace fs = std::filesystem;

Result<std::vector<std::byte>> read_external(const onnx::TensorProto& t, const ImportContext& ctx,
                                             const std::string& where, size_t want_bytes) {
  if (!ctx.base_dir) {
    return Status::unsupported(where +
                               ": its data is stored in an external file, which cannot be read when the "
                               "model is loaded from memory. Load the model from its file instead.");
  }
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset") {
        offset = std::stoll(kv.value());
      } else if (kv.key() == "length") {
        length = std::stoll(kv.value());
      }
    } catch (const std::exception&) {
      return Status::invalid_model(where + ": external data field '" + kv.key() + "' is not a number ('" +
                                   kv.value() + "').");
    }
  }
  const fs::path rel(location);
  if (location.empty() || rel.is_absolute()) {
    return Status::invalid_model(where + ": external data location '" + location +
                                 "' must be a path relative to the model's folder.");
  }
  for (const auto& part : rel) {
    if (part == "..") {
      return Status::invalid_model(where + ": external data location '" + location +
                                   "' leaves the model's folder. Keep the data file beside the model.");
    }
  }
  const fs::path file = *ctx.base_dir / rel;
  std::error_code ec;
  const auto file_size = fs::file_size(file, ec);
  if (ec) {
    return Status::not_found(where + ": external data file '" + file.string() + "' cannot be read (" +
                             ec.message() + "). Copy it beside the model.");
  }
  if (length < 0) length = static_cast<int64_t>(want_bytes);
  if (offset < 0 || static_cast<size_t>(length) != want_bytes ||
      static_cast<uint64_t>(offset) + static_cast<uint64_t>(length) > file_size) {
    return Status::invalid_model(where + ": external data (offset " + std::to_string(offset) + ", length " +
                                 std::to_string(length) + ") does not fit file '" + file.string() + "' (" +
                                 std::to_string(file_size) + " bytes) or the tensor (" +
                                 std::to_string(want_bytes) +
                                 " bytes). The data file is truncated or belongs to another model.");
  }
  std::vector<std::byte> bytes(want_bytes);
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(want_bytes))) {
    return Status::io_error(where + ": reading " + std::to_string(want_bytes) + " bytes at offset " +
                            std::to_string(offset) + " of '" + file.string() + "' failed.");
  }
  return bytes;
}

}  // namespace

Result<Tensor> convert_tensor(const onnx::TensorProto& t, const ImportContext& ctx,
                              const std::string& where) {
  Shape shape;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && numel > kMaxTensorElements / d)) {
      return Status::invalid_model(where + ": dimension " + std::to_string(d) + " is invalid or too large.");
    }
    shape.dims.push_back(d);
    numel *= d;
  }
  const auto n = static_cast<size_t>(numel);
  size_t elem = 0;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32: elem = 4; break;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::DOUBLE: elem = 8; break;
    case onnx::TensorProto::FLOAT16: elem = 2; break;
    case onnx::TensorProto::BOOL: elem = 1; break;
    default:
      return Status::unsupported(
          where + ": element type " +
          onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(t.data_type())) +
          " is not supported (float32, float16, float64, int32, int64, bool are).");
  }
  // Raw little-endian bytes in the stored element type.
  std::vector<std::byte> raw;
  auto count_error = [&](size_t have) {
    return Status::invalid_model(where + ": holds " + std::to_string(have) + " elements, but its shape " +
                                 shape.to_string() + " needs " + std::to_string(n) +
                                 ". The file is corrupt.");
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    GPULAB_ASSIGN_OR_RETURN(raw, read_external(t, ctx, where, n * elem));
  } else if (t.has_raw_data()) {
    if (t.raw_data().size() != n * elem) return count_error(t.raw_data().size() / elem);
    raw.resize(n * elem);
    if (!raw.empty()) std::memcpy(raw.data(), t.raw_data().data(), raw.size());
  } else {
    raw.resize(n * elem);
    auto* dst = raw.data();
    switch (t.data_type()) {
      case onnx::TensorProto::FLOAT:
        if (static_cast<size_t>(t.float_data_size()) != n) return count_error(t.float_data_size());
        if (n) std::memcpy(dst, t.float_data().data(), n * 4);
        break;
      case onnx::TensorProto::INT64:
        if (static_cast<size_t>(t.int64_data_size()) != n) return count_error(t.int64_data_size());
        if (n) std::memcpy(dst, t.int64_data().data(), n * 8);
        break;
      case onnx::TensorProto::DOUBLE:
        if (static_cast<size_t>(t.double_data_size()) != n) return count_error(t.double_data_size());
        if (n) std::memcpy(dst, t.double_data().data(), n * 8);
        break;
      default:  // INT32, FLOAT16 and BOOL are stored in int32_data
        if (static_cast<size_t>(t.int32_data_size()) != n) return count_error(t.int32_data_size());
        for (size_t i = 0; i < n; ++i) {
          const int32_t v = t.int32_data(static_cast<int>(i));
          if (elem == 4) std::memcpy(dst + 4 * i, &v, 4);
          if (elem == 2) {
            const auto h = static_cast<uint16_t>(v);
            std::memcpy(dst + 2 * i, &h, 2);
          }
          if (elem == 1) dst[i] = static_cast<std::byte>(v != 0);
        }
        break;
    }
  }
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: return Tensor::from_bytes(DataType::kFloat32, shape, raw);
    case onnx::TensorProto::INT64: return Tensor::from_bytes(DataType::kInt64, shape, raw);
    case onnx::TensorProto::BOOL: return Tensor::from_bytes(DataType::kBool, shape, raw);
    case onnx::TensorProto::INT32: {
      std::vector<int64_t> v(n);
      for (size_t i = 0; i < n; ++i) {
        int32_t x;
        std::memcpy(&x, raw.data() + 4 * i, 4);
        v[i] = x;
      }
      return Tensor::from_int64s(shape, v);
    }
    case onnx::TensorProto::DOUBLE: {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) {
        double x;
        std::memcpy(&x, raw.data() + 8 * i, 8);
        v[i] = static_cast<float>(x);
      }
      return Tensor::from_floats(shape, v);
    }
    default: {  // FLOAT16
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        v[i] = half_bits_to_float(h);
      }
      return Tensor::from_floats(shape, v);
    }
  }
}

}  // namespace gpulab::onnx_import
