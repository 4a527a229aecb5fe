#include "onnx/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "core/half.h"
#include "onnx/attr_reader.h"
#include "onnx/convert_tensor_ops.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

// Refuse tensors above this many elements: far beyond any image classifier, and it keeps a
// corrupt dims field from asking for an absurd allocation.
constexpr int64_t kMaxTensorElements = int64_t{1} << 32;

struct ImportContext {
  std::string source;                // for messages
  std::optional<fs::path> base_dir;  // folder of the model file, for external data
  int64_t opset = 0;
};

std::string where_node(const onnx::NodeProto& n, const std::string& name) {
  return "node '" + name + "' (" + n.op_type() + ")";
}

// --- tensors -----------------------------------------------------------------------------------

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

// Converts a TensorProto; float16 becomes float32 and int32 becomes int64.
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

// --- attributes --------------------------------------------------------------------------------

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

struct Window {
  Hw kernel;
  Hw stride{1, 1};
  Pads pads;
  Hw dilation{1, 1};
  AutoPad auto_pad = AutoPad::kNotSet;
};

Result<Hw> get_hw(AttrReader& attrs, const std::string& where, const std::string& name, Hw fallback) {
  GPULAB_ASSIGN_OR_RETURN(auto v, attrs.get_ints(name));
  if (!v) return fallback;
  if (v->size() != 2) {
    return Status::unsupported(where + ": attribute '" + name + "' has " + std::to_string(v->size()) +
                               " values; only 2-D (NCHW) windows are supported.");
  }
  return Hw{(*v)[0], (*v)[1]};
}

// kernel_shape, strides, pads, dilations (when `with_dilation`) and auto_pad of Conv and pools.
Result<Window> read_window(AttrReader& attrs, const std::string& where, std::optional<Hw> kernel_fallback,
                           bool with_dilation) {
  Window w;
  GPULAB_ASSIGN_OR_RETURN(auto kernel, attrs.get_ints("kernel_shape"));
  if (kernel) {
    if (kernel->size() != 2) {
      return Status::unsupported(where + ": kernel_shape has " + std::to_string(kernel->size()) +
                                 " dimensions; only 2-D (NCHW) convolutions and pools are supported.");
    }
    w.kernel = Hw{(*kernel)[0], (*kernel)[1]};
  } else if (kernel_fallback) {
    w.kernel = *kernel_fallback;
  } else {
    return Status::invalid_model(where +
                                 ": kernel_shape is missing and cannot be taken from a constant weight.");
  }
  GPULAB_ASSIGN_OR_RETURN(w.stride, get_hw(attrs, where, "strides", Hw{1, 1}));
  if (with_dilation) {
    GPULAB_ASSIGN_OR_RETURN(w.dilation, get_hw(attrs, where, "dilations", Hw{1, 1}));
  }
  GPULAB_ASSIGN_OR_RETURN(auto pads, attrs.get_ints("pads"));
  if (pads) {
    if (pads->size() != 4) {
      return Status::unsupported(where + ": pads has " + std::to_string(pads->size()) +
                                 " values; 2-D windows need 4 (top, left, bottom, right).");
    }
    w.pads = Pads{(*pads)[0], (*pads)[1], (*pads)[2], (*pads)[3]};
  }
  GPULAB_ASSIGN_OR_RETURN(std::string auto_pad, attrs.get_string("auto_pad", "NOTSET"));
  if (auto_pad == "NOTSET" || auto_pad.empty()) {
    w.auto_pad = AutoPad::kNotSet;
  } else if (auto_pad == "VALID") {
    w.auto_pad = AutoPad::kValid;
    w.pads = Pads{};
  } else if (auto_pad == "SAME_UPPER") {
    w.auto_pad = AutoPad::kSameUpper;
  } else if (auto_pad == "SAME_LOWER") {
    w.auto_pad = AutoPad::kSameLower;
  } else {
    return Status::invalid_model(where + ": auto_pad '" + auto_pad +
                                 "' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER.");
  }
  return w;
}

Pads add_pads(const Pads& a, const Pads& b) {
  return Pads{a.top + b.top, a.left + b.left, a.bottom + b.bottom, a.right + b.right};
}

// --- the model ---------------------------------------------------------------------------------

class Importer {
 public:
  explicit Importer(ImportContext ctx) : ctx_(std::move(ctx)) {}

  Result<Graph> run(const onnx::ModelProto& model);

 private:
  Status read_opset(const onnx::ModelProto& model);
  Status read_inputs(const onnx::GraphProto& g);
  Status convert_node(const onnx::NodeProto& n, size_t index);
  Status convert_constant(const onnx::NodeProto& n, const std::string& where, AttrReader& attrs);
  // A constant input (initializer, including former Constant nodes) or an error naming it.
  Result<const Tensor*> constant_input(const onnx::NodeProto& n, int i, const std::string& where,
                                       const char* what);
  Status refuse_used_output(const onnx::NodeProto& n, int i, const std::string& where, const char* what);
  Status resolve_same_pads();
  Status check_old_softmax() const;
  // A zero Pad of H and W read only by Conv and AveragePool has no node of its own (below); any
  // other Pad is a Pad node.
  Status convert_pad(const onnx::NodeProto& n, const std::string& name, const std::string& where,
                     AttrReader& attrs);
  // A ReduceMean over H and W of a 4-D tensor becomes a GlobalAveragePool (and a Flatten without
  // keepdims), once shape inference knows the rank.
  Status spatial_means_to_pools();

  ImportContext ctx_;
  Graph graph_;
  std::set<std::string> used_values_;  // every value some node reads, plus graph outputs
  struct PendingPad {
    size_t node;
    AutoPad mode;
  };
  std::vector<PendingPad> pending_pads_;
  // A zero Pad of the spatial dimensions (PyTorch exports AvgPool2d that way) is folded into the
  // padding of the Conv or AveragePool it feeds: its output name -> its input and pads.
  struct FoldedPad {
    std::string input;
    Pads pads;
    std::string where;
  };
  std::map<std::string, FoldedPad> folded_pads_;
  std::map<std::string, std::vector<std::pair<std::string, int>>> readers_;  // value -> (op_type, input)
};

Status Importer::read_opset(const onnx::ModelProto& model) {
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") graph_.opset = op.version();
  }
  if (graph_.opset == 0) {
    return Status::invalid_model(
        "the model imports no opset of the default ONNX domain. Re-export it with a "
        "standard exporter (opset " +
        std::to_string(kMinOnnxOpset) + ".." + std::to_string(kMaxOnnxOpset) + ").");
  }
  if (graph_.opset < kMinOnnxOpset || graph_.opset > kMaxOnnxOpset) {
    return Status::unsupported("opset " + std::to_string(graph_.opset) +
                               " is not supported (gpulab reads opsets " + std::to_string(kMinOnnxOpset) +
                               ".." + std::to_string(kMaxOnnxOpset) +
                               "). Re-export the model, e.g. torch.onnx.export(..., opset_version=17).");
  }
  ctx_.opset = graph_.opset;
  return Status::ok();
}

Status Importer::read_inputs(const onnx::GraphProto& g) {
  for (const auto& in : g.input()) {
    if (graph_.is_initializer(in.name())) continue;  // old exporters list weights as inputs too
    const std::string where = "graph input '" + in.name() + "'";
    if (!in.type().has_tensor_type())
      return Status::unsupported(where + ": only tensor inputs are supported.");
    const auto& tt = in.type().tensor_type();
    ValueInfo info;
    switch (tt.elem_type()) {
      case onnx::TensorProto::FLOAT: info.dtype = DataType::kFloat32; break;
      case onnx::TensorProto::INT64: info.dtype = DataType::kInt64; break;
      default:
        return Status::unsupported(
            where + ": element type " +
            onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(tt.elem_type())) +
            " is not supported. Use a float32 input.");
    }
    if (!tt.has_shape()) {
      return Status::invalid_model(where + ": has no shape. Export the model with input shapes.");
    }
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      const bool fixed = d.has_dim_value() && d.dim_value() > 0;
      if (i == 0 && !fixed) {
        info.shape.dims.push_back(Shape::kBatch);
      } else if (!fixed) {
        return Status::unsupported(where + ": dimension " + std::to_string(i) + " ('" + d.dim_param() +
                                   "') is symbolic; only the batch (dimension 0) may be. Export with a fixed "
                                   "image size.");
      } else {
        info.shape.dims.push_back(d.dim_value());
      }
    }
    graph_.inputs.push_back(in.name());
    graph_.values[in.name()] = std::move(info);
  }
  if (graph_.inputs.empty()) {
    return Status::invalid_model("the graph has no input besides its initializers. It cannot be run.");
  }
  return Status::ok();
}

Result<const Tensor*> Importer::constant_input(const onnx::NodeProto& n, int i, const std::string& where,
                                               const char* what) {
  const std::string& name = n.input(i);
  const Tensor* t = graph_.initializer(name);
  if (!t) {
    return Status::unsupported(where + ": its " + what + " input '" + name +
                               "' is computed at run time; gpulab needs it to be a constant (initializer or "
                               "Constant node).");
  }
  return t;
}

Status Importer::refuse_used_output(const onnx::NodeProto& n, int i, const std::string& where,
                                    const char* what) {
  if (i < n.output_size() && !n.output(i).empty() && used_values_.count(n.output(i))) {
    return Status::unsupported(where + ": its " + what + " output '" + n.output(i) +
                               "' is used, which gpulab does not support (inference only).");
  }
  return Status::ok();
}

Status Importer::convert_constant(const onnx::NodeProto& n, const std::string& where, AttrReader& attrs) {
  if (n.output_size() != 1) return Status::invalid_model(where + ": a Constant has exactly one output.");
  Tensor t;
  if (const auto* a = attrs.find("value")) {
    GPULAB_ASSIGN_OR_RETURN(t, convert_tensor(a->t(), ctx_, where));
  } else if (const auto* a = attrs.find("value_float")) {
    const float v = a->f();
    t = Tensor::from_floats(Shape{}, std::span<const float>(&v, 1));
  } else if (const auto* a = attrs.find("value_int")) {
    const int64_t v = a->i();
    t = Tensor::from_int64s(Shape{}, std::span<const int64_t>(&v, 1));
  } else if (const auto* a = attrs.find("value_floats")) {
    std::vector<float> v(a->floats().begin(), a->floats().end());
    t = Tensor::from_floats(Shape{static_cast<int64_t>(v.size())}, v);
  } else if (const auto* a = attrs.find("value_ints")) {
    std::vector<int64_t> v(a->ints().begin(), a->ints().end());
    t = Tensor::from_int64s(Shape{static_cast<int64_t>(v.size())}, v);
  } else {
    GPULAB_TRY(attrs.check_all_read());
    return Status::invalid_model(where + ": a Constant needs a value.");
  }
  GPULAB_TRY(attrs.check_all_read());
  graph_.initializers[n.output(0)] = std::move(t);
  return Status::ok();
}

Status Importer::convert_node(const onnx::NodeProto& n, size_t index) {
  const std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  const std::string where = where_node(n, name);
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    return Status::unsupported(where + ": op domain '" + n.domain() +
                               "' is not supported. Supported ops (default "
                               "domain): " +
                               supported_ops_list() + ".");
  }
  if (n.output_size() < 1 || n.output(0).empty()) return Status::invalid_model(where + ": has no output.");
  if (n.op_type() == "Pad" || n.op_type() == "Einsum") {
    if (n.input_size() < 1 || n.input(0).empty())
      return Status::invalid_model(where + ": input 0 is missing.");
    AttrReader attrs(n, where);
    if (n.op_type() == "Pad") return convert_pad(n, name, where, attrs);
    GPULAB_ASSIGN_OR_RETURN(std::vector<Node> nodes, convert_einsum(n, name, where, attrs));
    for (Node& node : nodes) graph_.nodes.push_back(std::move(node));
    return Status::ok();
  }
  const std::optional<OpType> op = op_from_name(n.op_type());
  if (!op || *op == OpType::kAttention) {
    return Status::unsupported(where + ": op '" + n.op_type() +
                               "' is not supported. Supported ops: " + supported_ops_list() + ".");
  }
  AttrReader attrs(n, where);
  if (*op == OpType::kConstant) return convert_constant(n, where, attrs);
  // A folded Pad's output may only be read where its padding can go.
  for (int i = 0; i < n.input_size(); ++i) {
    const auto it = folded_pads_.find(n.input(i));
    if (it != folded_pads_.end() && !(i == 0 && (*op == OpType::kConv || *op == OpType::kAveragePool)))
      return Status::unsupported(it->second.where + ": it feeds " + where +
                                 "; gpulab folds a zero Pad into a following Conv or AveragePool only.");
  }

  Node node;
  node.name = name;
  node.op = *op;
  node.inputs.assign(n.input().begin(), n.input().end());
  node.outputs = {n.output(0)};
  if (n.input_size() < 1 || n.input(0).empty()) return Status::invalid_model(where + ": input 0 is missing.");
  std::optional<AutoPad> auto_pad;
  if (is_tensor_op(*op)) {
    if (*op == OpType::kLayerNormalization) {
      GPULAB_TRY(refuse_used_output(n, 1, where, "Mean"));
      GPULAB_TRY(refuse_used_output(n, 2, where, "InvStdDev"));
    }
    GPULAB_TRY(read_tensor_op(
        n, where, ctx_.opset, attrs,
        [&](int i, const char* what) { return constant_input(n, i, where, what); }, node));
  }

  switch (*op) {
    case OpType::kConv: {
      if (n.input_size() < 2) return Status::invalid_model(where + ": needs inputs X and W.");
      std::optional<Hw> kernel;
      if (const Tensor* w = graph_.initializer(n.input(1)); w && w->shape().rank() == 4) {
        kernel = Hw{w->shape()[2], w->shape()[3]};
      }
      GPULAB_ASSIGN_OR_RETURN(Window win, read_window(attrs, where, kernel, true));
      ConvAttrs a;
      a.kernel = win.kernel;
      a.stride = win.stride;
      a.pads = win.pads;
      a.dilation = win.dilation;
      GPULAB_ASSIGN_OR_RETURN(a.groups, attrs.get_int("group", 1));
      if (const auto it = folded_pads_.find(n.input(0)); it != folded_pads_.end()) {
        if (win.auto_pad == AutoPad::kSameUpper || win.auto_pad == AutoPad::kSameLower)
          return Status::unsupported(it->second.where + ": it feeds " + where +
                                     ", whose auto_pad SAME padding gpulab cannot combine with it.");
        a.pads = add_pads(a.pads, it->second.pads);
        node.inputs[0] = it->second.input;
      }
      node.attrs = a;
      node.inputs.resize(std::min<size_t>(node.inputs.size(), 3));
      auto_pad = win.auto_pad;
      break;
    }
    case OpType::kMaxPool:
    case OpType::kAveragePool: {
      const bool is_max = *op == OpType::kMaxPool;
      GPULAB_ASSIGN_OR_RETURN(Window win, read_window(attrs, where, std::nullopt, is_max));
      PoolAttrs a;
      a.kernel = win.kernel;
      a.stride = win.stride;
      a.pads = win.pads;
      a.dilation = win.dilation;
      GPULAB_ASSIGN_OR_RETURN(int64_t ceil_mode, attrs.get_int("ceil_mode", 0));
      a.ceil_mode = ceil_mode != 0;
      if (is_max) {
        GPULAB_ASSIGN_OR_RETURN(int64_t storage_order, attrs.get_int("storage_order", 0));
        if (storage_order != 0) {
          return Status::unsupported(where + ": storage_order=1 (column-major indices) is not supported.");
        }
        GPULAB_TRY(refuse_used_output(n, 1, where, "Indices"));
      } else {
        GPULAB_ASSIGN_OR_RETURN(int64_t cip, attrs.get_int("count_include_pad", 0));
        a.count_include_pad = cip != 0;
        // Zeros a Pad added count in the average: the pool's own padding must count too, and
        // ceil_mode windows would also cover pixels beyond both.
        if (const auto it = folded_pads_.find(n.input(0)); it != folded_pads_.end()) {
          const bool own_pads = a.pads.top || a.pads.left || a.pads.bottom || a.pads.right;
          if ((own_pads && !a.count_include_pad) || a.ceil_mode || win.auto_pad == AutoPad::kSameUpper ||
              win.auto_pad == AutoPad::kSameLower)
            return Status::unsupported(
                it->second.where + ": it feeds " + where +
                ", whose own padding, ceil_mode or auto_pad it cannot be folded into.");
          a.pads = add_pads(a.pads, it->second.pads);
          a.count_include_pad = true;
          node.inputs[0] = it->second.input;
        }
      }
      node.attrs = a;
      auto_pad = win.auto_pad;
      break;
    }
    case OpType::kBatchNormalization: {
      BatchNormAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.epsilon, attrs.get_float("epsilon", 1e-5f));
      GPULAB_ASSIGN_OR_RETURN(float momentum, attrs.get_float("momentum", 0.9f));
      (void)momentum;  // training only
      GPULAB_ASSIGN_OR_RETURN(int64_t training, attrs.get_int("training_mode", 0));
      if (training != 0) {
        return Status::unsupported(where +
                                   ": training_mode=1 is not supported. Export the model in eval mode.");
      }
      for (int i = 1; i < n.output_size(); ++i)
        GPULAB_TRY(refuse_used_output(n, i, where, "running statistics"));
      if (n.input_size() != 5) return Status::invalid_model(where + ": needs inputs X, scale, B, mean, var.");
      node.attrs = a;
      break;
    }
    case OpType::kClip: {
      ClipAttrs a;
      // Opset >= 11: min and max are optional inputs, which gpulab folds into attributes.
      if (n.input_size() > 1 && !n.input(1).empty()) {
        GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(n, 1, where, "min"));
        if (t->dtype() != DataType::kFloat32 || t->numel() != 1) {
          return Status::unsupported(where + ": min must be a float32 scalar.");
        }
        a.min = t->f32()[0];
      }
      if (n.input_size() > 2 && !n.input(2).empty()) {
        GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(n, 2, where, "max"));
        if (t->dtype() != DataType::kFloat32 || t->numel() != 1) {
          return Status::unsupported(where + ": max must be a float32 scalar.");
        }
        a.max = t->f32()[0];
      }
      node.inputs.resize(1);
      node.attrs = a;
      break;
    }
    case OpType::kDropout: {
      GPULAB_ASSIGN_OR_RETURN(float ratio, attrs.get_float("ratio", 0.5f));
      GPULAB_ASSIGN_OR_RETURN(int64_t seed, attrs.get_int("seed", 0));
      (void)ratio;
      (void)seed;
      if (n.input_size() > 2 && !n.input(2).empty()) {
        GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(n, 2, where, "training_mode"));
        // Training mode drops nothing with a ratio of 0 (Swin calls F.dropout(x, p=0.0), whose
        // training argument defaults to true).
        bool no_drop = false;
        if (n.input_size() > 1 && !n.input(1).empty()) {
          const Tensor* r = graph_.initializer(n.input(1));
          no_drop = r && r->dtype() == DataType::kFloat32 && r->numel() == 1 && r->f32()[0] == 0.0f;
        }
        if (t->numel() != 1 || (t->data()[0] != std::byte{0} && !no_drop)) {
          return Status::unsupported(where + ": training_mode is true. Export the model in eval mode.");
        }
      }
      GPULAB_TRY(refuse_used_output(n, 1, where, "mask"));
      node.inputs.resize(1);
      break;
    }
    case OpType::kFlatten: {
      FlattenAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", 1));
      node.attrs = a;
      break;
    }
    case OpType::kReshape: {
      ReshapeAttrs a;
      GPULAB_ASSIGN_OR_RETURN(int64_t allowzero, attrs.get_int("allowzero", 0));
      a.allowzero = allowzero != 0;
      if (n.input_size() != 2) return Status::invalid_model(where + ": needs inputs data and shape.");
      node.attrs = a;
      break;
    }
    case OpType::kGemm: {
      GemmAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.alpha, attrs.get_float("alpha", 1.0f));
      GPULAB_ASSIGN_OR_RETURN(a.beta, attrs.get_float("beta", 1.0f));
      GPULAB_ASSIGN_OR_RETURN(int64_t ta, attrs.get_int("transA", 0));
      GPULAB_ASSIGN_OR_RETURN(int64_t tb, attrs.get_int("transB", 0));
      a.trans_a = ta != 0;
      a.trans_b = tb != 0;
      node.attrs = a;
      break;
    }
    case OpType::kConcat: {
      if (!attrs.has("axis")) return Status::invalid_model(where + ": attribute 'axis' is required.");
      AxisAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", 0));
      node.attrs = a;
      break;
    }
    case OpType::kGather: {
      AxisAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", 0));
      node.attrs = a;
      break;
    }
    case OpType::kSoftmax: {
      // Opset 13 changed the default axis from 1 to -1 (and the semantics from "flatten to 2-D at
      // axis" to "along axis"; both agree on the [N, classes] tensors of classifiers).
      AxisAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.axis, attrs.get_int("axis", ctx_.opset >= 13 ? -1 : 1));
      node.attrs = a;
      break;
    }
    case OpType::kUnsqueeze: {
      UnsqueezeAttrs a;
      if (ctx_.opset >= 13) {
        if (n.input_size() < 2 || n.input(1).empty())
          return Status::invalid_model(where + ": needs input axes.");
        GPULAB_ASSIGN_OR_RETURN(const Tensor* t, constant_input(n, 1, where, "axes"));
        if (t->dtype() != DataType::kInt64) return Status::invalid_model(where + ": axes must be int64.");
        a.axes.assign(t->i64().begin(), t->i64().end());
        node.inputs.resize(1);
      } else {
        GPULAB_ASSIGN_OR_RETURN(auto axes, attrs.get_ints("axes"));
        if (!axes) return Status::invalid_model(where + ": attribute 'axes' is required before opset 13.");
        a.axes = *axes;
      }
      node.attrs = a;
      break;
    }
    case OpType::kHardSigmoid: {
      HardSigmoidAttrs a;
      GPULAB_ASSIGN_OR_RETURN(a.alpha, attrs.get_float("alpha", 0.2f));
      GPULAB_ASSIGN_OR_RETURN(a.beta, attrs.get_float("beta", 0.5f));
      node.attrs = a;
      break;
    }
    case OpType::kShape: {
      GPULAB_ASSIGN_OR_RETURN(int64_t start, attrs.get_int("start", 0));
      if (start != 0 || attrs.has("end")) {
        return Status::unsupported(where + ": the start/end attributes (opset 15) are not supported.");
      }
      break;
    }
    default: break;  // Relu, Add, Mul, GlobalAveragePool, MatMul, Identity, Sigmoid, HardSwish
  }
  GPULAB_TRY(attrs.check_all_read());
  if (auto_pad && (*auto_pad == AutoPad::kSameUpper || *auto_pad == AutoPad::kSameLower)) {
    pending_pads_.push_back({graph_.nodes.size(), *auto_pad});
  }
  graph_.nodes.push_back(std::move(node));
  return Status::ok();
}

// SAME_UPPER/SAME_LOWER pads depend on the input size, known only after inferring the nodes
// before: total = max((ceil(in/stride)-1)*stride + (kernel-1)*dilation + 1 - in, 0), the odd
// pixel at the end (UPPER) or at the beginning (LOWER).
Status Importer::resolve_same_pads() {
  if (pending_pads_.empty()) return Status::ok();
  std::vector<Node> all = std::move(graph_.nodes);
  for (const PendingPad& p : pending_pads_) {
    graph_.nodes.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(p.node));
    GPULAB_TRY(graph_.infer_shapes());
    Node& node = all[p.node];
    const ValueInfo* x = graph_.value(node.inputs[0]);
    if (!x || x->shape.rank() != 4) {
      return Status::invalid_model("node '" + node.name + "': auto_pad needs a rank-4 input shape.");
    }
    Hw kernel, stride, dilation;
    if (node.op == OpType::kConv) {
      const ConvAttrs& a = node.attr<ConvAttrs>();
      kernel = a.kernel, stride = a.stride, dilation = a.dilation;
    } else {
      const PoolAttrs& a = node.attr<PoolAttrs>();
      kernel = a.kernel, stride = a.stride, dilation = a.dilation;
    }
    auto total = [](int64_t in, int64_t k, int64_t s, int64_t d) {
      const int64_t out = (in + s - 1) / s;
      return std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
    };
    const int64_t th = total(x->shape[2], kernel.h, stride.h, dilation.h);
    const int64_t tw = total(x->shape[3], kernel.w, stride.w, dilation.w);
    const bool upper = p.mode == AutoPad::kSameUpper;
    const Pads pads{upper ? th / 2 : th - th / 2, upper ? tw / 2 : tw - tw / 2, upper ? th - th / 2 : th / 2,
                    upper ? tw - tw / 2 : tw / 2};
    if (node.op == OpType::kConv) {
      node.attr<ConvAttrs>().pads = pads;
    } else {
      node.attr<PoolAttrs>().pads = pads;
    }
  }
  graph_.nodes = std::move(all);
  return Status::ok();
}

// Before opset 13, Softmax flattened its input to 2-D at `axis` and normalized over everything
// after it; that equals the per-axis Softmax gpulab implements only when nothing but 1s follow
// the axis (the [N, classes] case of classifiers).
Status Importer::check_old_softmax() const {
  if (graph_.opset >= 13) return Status::ok();
  for (const Node& node : graph_.nodes) {
    if (node.op != OpType::kSoftmax) continue;
    const Shape& s = graph_.value(node.inputs[0])->shape;
    int64_t axis = node.attr<AxisAttrs>().axis;
    if (axis < 0) axis += static_cast<int64_t>(s.rank());
    for (size_t i = static_cast<size_t>(axis) + 1; i < s.rank(); ++i) {
      if (s[i] != 1) {
        return Status::unsupported("node '" + node.name + "' (Softmax): opset " +
                                   std::to_string(graph_.opset) +
                                   " Softmax over the flattened dimensions from axis " +
                                   std::to_string(axis) + " of " + s.to_string() +
                                   " is not supported. Re-export with opset 13 or "
                                   "later, or Softmax over the last axis.");
      }
    }
  }
  return Status::ok();
}

// Pad (mode "constant", value 0) of the two spatial dimensions of a 4-D tensor, read only by
// Conv and AveragePool (PyTorch 1.13 exports AvgPool2d's padding that way): no node; the Conv or
// AveragePool that reads it takes the padding (convert_node). Any other constant Pad (computed pads,
// other values or dimensions, other readers) is a Pad node.
Status Importer::convert_pad(const onnx::NodeProto& n, const std::string& name, const std::string& where,
                             AttrReader& attrs) {
  GPULAB_ASSIGN_OR_RETURN(std::string mode, attrs.get_string("mode", "constant"));
  if (mode != "constant")
    return Status::unsupported(where + ": mode '" + mode + "' is not supported (only constant padding).");
  // Opset 11 and later (what gpulab reads): pads, constant_value and axes are inputs.
  if (n.input_size() < 2 || n.input(1).empty()) return Status::invalid_model(where + ": needs input pads.");
  if (n.input_size() > 3 && !n.input(3).empty())
    return Status::unsupported(where + ": the axes input (opset 18) is not supported.");
  GPULAB_TRY(attrs.check_all_read());
  const auto foldable = [&]() -> std::optional<FoldedPad> {
    const Tensor* t = graph_.initializer(n.input(1));
    if (!t || t->dtype() != DataType::kInt64) return std::nullopt;
    const std::vector<int64_t> pads(t->i64().begin(), t->i64().end());
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const Tensor* v = graph_.initializer(n.input(2));
      if (!v || v->dtype() != DataType::kFloat32 || v->numel() != 1 || v->f32()[0] != 0.0f)
        return std::nullopt;
    }
    // [n_begin, c_begin, h_begin, w_begin, n_end, c_end, h_end, w_end]
    if (pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5] ||
        std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0 || p > (1 << 20); }))
      return std::nullopt;
    if (std::find(graph_.outputs.begin(), graph_.outputs.end(), n.output(0)) != graph_.outputs.end())
      return std::nullopt;
    const auto readers = readers_.find(n.output(0));
    if (readers == readers_.end()) return std::nullopt;
    for (const auto& [op_type, input] : readers->second)
      if (input != 0 || (op_type != "Conv" && op_type != "AveragePool" && op_type != "Pad"))
        return std::nullopt;
    return FoldedPad{n.input(0), Pads{pads[2], pads[3], pads[6], pads[7]}, where};
  };
  if (auto pad = foldable()) {
    // Pad of a Pad: one padding of both.
    if (const auto inner = folded_pads_.find(n.input(0)); inner != folded_pads_.end()) {
      pad->input = inner->second.input;
      pad->pads = add_pads(pad->pads, inner->second.pads);
    }
    folded_pads_[n.output(0)] = *pad;
    return Status::ok();
  }
  Node node{name, OpType::kPad, {n.input().begin(), n.input().end()}, {n.output(0)}, {}};
  GPULAB_TRY(read_tensor_op(
      n, where, ctx_.opset, attrs, [&](int i, const char* what) { return constant_input(n, i, where, what); },
      node));
  graph_.nodes.push_back(std::move(node));
  return Status::ok();
}

Status Importer::spatial_means_to_pools() {
  std::vector<Node> nodes;
  bool changed = false;
  for (Node& node : graph_.nodes) {
    const ValueInfo* in = node.op == OpType::kReduceMean ? graph_.value(node.inputs[0]) : nullptr;
    if (!in || in->shape.rank() != 4) {
      nodes.push_back(std::move(node));
      continue;
    }
    const ReduceAttrs a = node.attr<ReduceAttrs>();
    std::vector<int64_t> axes = a.axes;
    for (int64_t& axis : axes) axis = axis < 0 ? axis + 4 : axis;
    std::sort(axes.begin(), axes.end());
    if (axes != std::vector<int64_t>{2, 3}) {
      nodes.push_back(std::move(node));
      continue;
    }
    changed = true;
    const std::string out = node.outputs[0];
    const std::string pooled = a.keepdims ? out : out + "/global_average";
    nodes.push_back(Node{node.name, OpType::kGlobalAveragePool, {node.inputs[0]}, {pooled}, {}});
    if (!a.keepdims)
      nodes.push_back(Node{node.name + "/flatten", OpType::kFlatten, {pooled}, {out}, FlattenAttrs{1}});
  }
  graph_.nodes = std::move(nodes);
  return changed ? graph_.infer_shapes() : Status::ok();
}

Result<Graph> Importer::run(const onnx::ModelProto& model) {
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return Status::invalid_model(
        "the model has no graph or its graph has no nodes. The file is not an ONNX "
        "model, or it is truncated.");
  }
  const onnx::GraphProto& g = model.graph();
  GPULAB_TRY(read_opset(model));
  graph_.name = g.name();
  for (const auto& kv : model.metadata_props()) graph_.metadata[kv.key()] = kv.value();

  for (const auto& init : g.initializer()) {
    GPULAB_ASSIGN_OR_RETURN(Tensor t, convert_tensor(init, ctx_, "initializer '" + init.name() + "'"));
    graph_.initializers[init.name()] = std::move(t);
  }
  GPULAB_TRY(read_inputs(g));
  if (g.output_size() == 0) return Status::invalid_model("the graph has no outputs.");
  for (const auto& out : g.output()) {
    graph_.outputs.push_back(out.name());
    used_values_.insert(out.name());
  }
  for (const auto& n : g.node())
    for (int i = 0; i < n.input_size(); ++i) {
      used_values_.insert(n.input(i));
      readers_[n.input(i)].emplace_back(n.op_type(), i);
    }
  for (int i = 0; i < g.node_size(); ++i) GPULAB_TRY(convert_node(g.node(i), static_cast<size_t>(i)));

  GPULAB_TRY(graph_.validate());
  GPULAB_TRY(resolve_same_pads());
  GPULAB_TRY(graph_.infer_shapes());
  GPULAB_TRY(check_old_softmax());
  GPULAB_TRY(spatial_means_to_pools());
  return std::move(graph_);
}

Result<Graph> import_bytes(std::span<const std::byte> bytes, ImportContext ctx) {
  const std::string source = ctx.source;
  if (bytes.empty()) {
    return Status::invalid_model("loading '" + source +
                                 "': the file is empty. Re-export or re-download the model.");
  }
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return Status::unsupported("loading '" + source +
                               "': models of 2 GiB or more are not supported. Store the "
                               "weights as external data.");
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::invalid_model("loading '" + source + "': not a valid ONNX protobuf (" +
                                 std::to_string(bytes.size()) +
                                 " bytes could not be parsed). The file is truncated, corrupt or not ONNX.");
  }
  Importer importer(std::move(ctx));
  auto graph = importer.run(model);
  if (!graph.is_ok()) return graph.status().with_context("loading '" + source + "'");
  return graph;
}

}  // namespace

Result<Graph> load_onnx(const std::filesystem::path& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.is_ok()) return bytes.status().with_context("loading ONNX model");
  ImportContext ctx;
  ctx.source = path.string();
  ctx.base_dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  return import_bytes(bytes.value(), std::move(ctx));
}

Result<Graph> load_onnx_bytes(std::span<const std::byte> bytes, std::string_view source_name) {
  ImportContext ctx;
  ctx.source = std::string(source_name);
  return import_bytes(bytes, std::move(ctx));
}

}  // namespace gpulab
