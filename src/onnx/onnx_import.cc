#include "onnx/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/checked.h"
#include "core/file_io.h"
#include "onnx/import_internal.h"

namespace gpulab {
namespace onnx_import {
namespace {

std::string where_node(const onnx::NodeProto& n, const std::string& name) {
  return "node '" + name + "' (" + n.op_type() + ")";
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
  // Refuses a node outside the default domain or without an output.
  Status check_node(const onnx::NodeProto& n, const std::string& where) const;
  // A folded Pad's output may only be read where its padding can go.
  Status check_folded_pad_readers(const onnx::NodeProto& n, OpType op, const std::string& where) const;
  Status resolve_same_pads();
  Status check_old_softmax() const;
  // A zero Pad of H and W read only by Conv and AveragePool has no node of its own (below); any
  // other Pad is a Pad node.
  Status convert_pad(const NodeContext& c, const std::string& name);
  // A ReduceMean over H and W of a 4-D tensor becomes a GlobalAveragePool (and a Flatten without
  // keepdims), once shape inference knows the rank.
  Status spatial_means_to_pools();
  // QuantizeLinear and DequantizeLinear pair up into kQuantizeDequantize nodes, or fold into
  // constants (import_qdq.cc); a QuantizeLinear's int8 output must be read by DequantizeLinears only.
  Status convert_quantize(const NodeContext& c);
  Status convert_dequantize(const NodeContext& c, const std::string& name);
  Status check_quantized_readers() const;

  ImportContext ctx_;
  Graph graph_;
  std::set<std::string> used_values_;  // every value some node reads, plus graph outputs
  struct PendingPad {
    size_t node;
    AutoPad mode;
  };
  std::vector<PendingPad> pending_pads_;
  std::map<std::string, FoldedPad> folded_pads_;  // a folded Pad's output name -> its input and pads
  std::map<std::string, std::vector<std::pair<std::string, int>>> readers_;  // value -> (op_type, input)
  struct PendingQuantize {
    std::string input;  // what the QuantizeLinear quantized
    QuantizeAttrs attrs;
    std::string where;
  };
  std::map<std::string, PendingQuantize> quantized_;  // a QuantizeLinear's output -> its input
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

Status Importer::check_node(const onnx::NodeProto& n, const std::string& where) const {
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    return Status::unsupported(where + ": op domain '" + n.domain() +
                               "' is not supported. Supported ops (default "
                               "domain): " +
                               supported_ops_list() + ".");
  }
  if (n.output_size() < 1 || n.output(0).empty()) return Status::invalid_model(where + ": has no output.");
  return Status::ok();
}

Status Importer::check_folded_pad_readers(const onnx::NodeProto& n, OpType op,
                                          const std::string& where) const {
  for (int i = 0; i < n.input_size(); ++i) {
    const auto it = folded_pads_.find(n.input(i));
    if (it != folded_pads_.end() && !(i == 0 && (op == OpType::kConv || op == OpType::kAveragePool)))
      return Status::unsupported(it->second.where + ": it feeds " + where +
                                 "; gpulab folds a zero Pad into a following Conv or AveragePool only.");
  }
  return Status::ok();
}

// The checks every node passes, then its op's converter (import_ops.cc).
Status Importer::convert_node(const onnx::NodeProto& n, size_t index) {
  const std::string name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  const std::string where = where_node(n, name);
  GPULAB_TRY(check_node(n, where));
  AttrReader attrs(n, where);
  NodeContext c{.n = n,
                .where = where,
                .attrs = attrs,
                .opset = ctx_.opset,
                .graph = graph_,
                .used_values = used_values_};
  if (n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear") {
    if (n.input_size() < 1 || n.input(0).empty())
      return Status::invalid_model(where + ": input 0 is missing.");
    return n.op_type() == "QuantizeLinear" ? convert_quantize(c) : convert_dequantize(c, name);
  }
  if (n.op_type() == "Pad" || n.op_type() == "Einsum") {
    if (n.input_size() < 1 || n.input(0).empty())
      return Status::invalid_model(where + ": input 0 is missing.");
    if (n.op_type() == "Pad") return convert_pad(c, name);
    GPULAB_ASSIGN_OR_RETURN(std::vector<Node> nodes, convert_einsum(c, name));
    for (Node& node : nodes) graph_.nodes.push_back(std::move(node));
    return Status::ok();
  }
  const std::optional<OpType> op = op_from_name(n.op_type());
  if (!op || *op == OpType::kAttention) {  // Attention: made by fuse_attention, not an op gpulab reads
    return Status::unsupported(where + ": op '" + n.op_type() +
                               "' is not supported. Supported ops: " + supported_ops_list() + ".");
  }
  if (*op == OpType::kConstant) {
    GPULAB_ASSIGN_OR_RETURN(Tensor value, convert_constant(c, ctx_));
    graph_.initializers[n.output(0)] = std::move(value);
    return Status::ok();
  }
  GPULAB_TRY(check_folded_pad_readers(n, *op, where));

  ConvertedNode out;
  out.node.name = name;
  out.node.op = *op;
  out.node.inputs.assign(n.input().begin(), n.input().end());
  out.node.outputs = {n.output(0)};
  if (n.input_size() < 1 || n.input(0).empty()) return Status::invalid_model(where + ": input 0 is missing.");
  if (const auto it = folded_pads_.find(n.input(0)); it != folded_pads_.end()) c.folded_input0 = &it->second;
  GPULAB_TRY(convert_op(*op, c, out));
  GPULAB_TRY(attrs.check_all_read());
  if (is_same_pad(out.auto_pad)) pending_pads_.push_back({graph_.nodes.size(), out.auto_pad});
  graph_.nodes.push_back(std::move(out.node));
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
    // Attributes from the file: out = ceil(in / s) is at most in, so (out - 1) * s < in + s.
    auto total = [](int64_t in, int64_t k, int64_t s, int64_t d) -> std::optional<int64_t> {
      if (in < 1 || k < 1 || s < 1 || d < 1) return std::nullopt;
      const int64_t out = (in - 1) / s + 1;
      const std::optional<int64_t> extent = checked_mul(k - 1, d);
      const std::optional<int64_t> end = extent ? checked_add((out - 1) * s + 1 - in, *extent) : std::nullopt;
      if (!end) return std::nullopt;
      return std::max<int64_t>(*end, 0);
    };
    const std::optional<int64_t> total_h = total(x->shape[2], kernel.h, stride.h, dilation.h);
    const std::optional<int64_t> total_w = total(x->shape[3], kernel.w, stride.w, dilation.w);
    if (!total_h || !total_w) {
      return Status::invalid_model(
          "node '" + node.name + "': auto_pad " +
          (p.mode == AutoPad::kSameUpper ? "SAME_UPPER" : "SAME_LOWER") + " over input " +
          x->shape.to_string() + " with kernel " + std::to_string(kernel.h) + "x" + std::to_string(kernel.w) +
          ", strides " + std::to_string(stride.h) + "x" + std::to_string(stride.w) + ", dilations " +
          std::to_string(dilation.h) + "x" + std::to_string(dilation.w) +
          ": the window is not positive or too large. The model file is corrupt.");
    }
    const int64_t th = *total_h, tw = *total_w;
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
// AveragePool that reads it takes the padding (convert_conv, convert_pool: import_ops.cc). Any other
// constant Pad (computed pads, other values or dimensions, other readers) is a Pad node.
Status Importer::convert_pad(const NodeContext& c, const std::string& name) {
  const onnx::NodeProto& n = c.n;
  const std::string& where = c.where;
  AttrReader& attrs = c.attrs;
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
  ConvertedNode out;
  out.node = Node{name, OpType::kPad, {n.input().begin(), n.input().end()}, {n.output(0)}, {}};
  GPULAB_TRY(convert_tensor_op(OpType::kPad, c, out));
  graph_.nodes.push_back(std::move(out.node));
  return Status::ok();
}

Status Importer::convert_quantize(const NodeContext& c) {
  GPULAB_ASSIGN_OR_RETURN(QuantizeAttrs attrs, read_quantize_params(c));
  GPULAB_TRY(c.attrs.check_all_read());
  quantized_[c.n.output(0)] = PendingQuantize{c.n.input(0), std::move(attrs), c.where};
  return Status::ok();
}

Status Importer::convert_dequantize(const NodeContext& c, const std::string& name) {
  GPULAB_ASSIGN_OR_RETURN(QuantizeAttrs attrs, read_quantize_params(c));
  GPULAB_TRY(c.attrs.check_all_read());
  const std::string& in = c.n.input(0);
  const std::string& out = c.n.output(0);
  if (const auto q = quantized_.find(in); q != quantized_.end()) {
    if (!same_quantize_params(q->second.attrs, attrs))
      return Status::unsupported(
          c.where + ": its scale, zero point or axis differ from those of " + q->second.where +
          ", whose output it reads; gpulab imports pairs that quantize and dequantize alike.");
    if (const Tensor* constant = graph_.initializer(q->second.input)) {  // a float weight with its own pair
      GPULAB_ASSIGN_OR_RETURN(graph_.initializers[out], fake_quantize_constant(*constant, attrs, c.where));
      if (auto scales = int8_weight_scales(attrs, constant->shape()))
        graph_.quantization.weight_scales[out] = *scales;
      return Status::ok();
    }
    graph_.nodes.push_back(
        Node{name, OpType::kQuantizeDequantize, {q->second.input}, {out}, std::move(attrs)});
    return Status::ok();
  }
  if (const Tensor* constant = graph_.initializer(in)) {  // an int8 weight
    GPULAB_ASSIGN_OR_RETURN(graph_.initializers[out], dequantize_constant(*constant, attrs, c.where));
    if (auto scales = int8_weight_scales(attrs, constant->shape()))
      graph_.quantization.weight_scales[out] = *scales;
    return Status::ok();
  }
  return Status::unsupported(
      c.where + ": dequantizes '" + in +
      "', which is neither a constant nor a QuantizeLinear's output; gpulab imports Q/DQ "
      "pairs and dequantized constants (the QDQ form of onnxruntime's quantizer and NVIDIA's "
      "Model Optimizer).");
}

Status Importer::check_quantized_readers() const {
  for (const Node& node : graph_.nodes)
    for (const std::string& in : node.inputs)
      if (const auto q = quantized_.find(in); q != quantized_.end())
        return Status::unsupported(q->second.where + ": its quantized output '" + in + "' is read by node '" +
                                   node.name + "' (" + std::string(op_name(node.op)) +
                                   "), not by a DequantizeLinear; gpulab imports QuantizeLinear -> "
                                   "DequantizeLinear pairs (QDQ form) only.");
  for (const std::string& out : graph_.outputs)
    if (const auto q = quantized_.find(out); q != quantized_.end())
      return Status::unsupported(q->second.where + ": its quantized output '" + out +
                                 "' is a model output; gpulab's outputs are float logits.");
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

namespace {

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool is_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t min = 0, cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, min = 0x10000, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // the sequence runs past the end
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// Names and metadata end up in JSON (inspect --json, plan headers), which must be UTF-8 (ONNX's
// strings are, by its spec): one that is not is refused here, naming where it is.
Status check_names_are_utf8(const onnx::ModelProto& model) {
  const onnx::GraphProto& g = model.graph();
  auto bad = [](const std::string& what, const std::string& s) {
    std::string shown;
    for (unsigned char c : s.substr(0, 64))
      shown += c < 0x80 && c >= 0x20 ? std::string(1, static_cast<char>(c)) : "?";
    return Status::invalid_model(what + " '" + shown + "' is not valid UTF-8. The file is corrupt.");
  };
  if (!is_utf8(g.name())) return bad("the graph name", g.name());
  for (const auto& kv : model.metadata_props())
    if (!is_utf8(kv.key()) || !is_utf8(kv.value())) return bad("metadata entry", kv.key());
  for (const auto& t : g.initializer())
    if (!is_utf8(t.name())) return bad("an initializer name", t.name());
  for (const auto& v : g.input())
    if (!is_utf8(v.name())) return bad("a graph input name", v.name());
  for (const auto& v : g.output())
    if (!is_utf8(v.name())) return bad("a graph output name", v.name());
  for (const auto& n : g.node()) {
    if (!is_utf8(n.name()) || !is_utf8(n.op_type()) || !is_utf8(n.domain()))
      return bad("a node name or op", n.name());
    for (const std::string& v : n.input())
      if (!is_utf8(v)) return bad("a node input name", v);
    for (const std::string& v : n.output())
      if (!is_utf8(v)) return bad("a node output name", v);
    for (const auto& a : n.attribute())
      if (!is_utf8(a.name())) return bad("an attribute name", a.name());
  }
  return Status::ok();
}

}  // namespace

Result<Graph> Importer::run(const onnx::ModelProto& model) {
  if (!model.has_graph() || model.graph().node_size() == 0) {
    return Status::invalid_model(
        "the model has no graph or its graph has no nodes. The file is not an ONNX "
        "model, or it is truncated.");
  }
  const onnx::GraphProto& g = model.graph();
  GPULAB_TRY(check_names_are_utf8(model));
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
  GPULAB_TRY(check_quantized_readers());

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
}  // namespace onnx_import

Result<Graph> load_onnx(const std::filesystem::path& path) {
  auto bytes = read_file_bytes(path);
  if (!bytes.is_ok()) return bytes.status().with_context("loading ONNX model");
  onnx_import::ImportContext ctx;
  ctx.source = path.string();
  ctx.base_dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  return onnx_import::import_bytes(bytes.value(), std::move(ctx));
}

Result<Graph> load_onnx_bytes(std::span<const std::byte> bytes, std::string_view source_name) {
  onnx_import::ImportContext ctx;
  ctx.source = std::string(source_name);
  return onnx_import::import_bytes(bytes, std::move(ctx));
}

}  // namespace gpulab
