// FLOPs and bytes per node. Conventions (see cost.h):
// - Conv: 2*N*K*OH*OW*(C/group)*KH*KW, plus one op per output element for the bias, the residual
//   add and the activation when present.
// - Gemm: 2*M*N*K plus M*N for C; MatMul: 2*batch*M*N*K.
// - Elementwise ops and pools: about one op per element touched (pools: per window element;
//   BatchNormalization: 2 per element, a scale and a shift; Softmax and the sigmoids: a few).
// - View ops (Reshape, Flatten, Identity, Dropout, Unsqueeze, Shape) move no data: 0 bytes.
#include "graph/cost.h"

namespace gpulab {
namespace {

int64_t value_numel(const Graph& graph, const std::string& name, int64_t batch) {
  if (const Tensor* t = graph.initializer(name)) return t->numel();
  if (const ValueInfo* v = graph.value(name)) return v->shape.numel(batch);
  return 0;
}

// Bytes of a value: float data at the activation element size, integer data at its own size.
int64_t value_bytes(const Graph& graph, const std::string& name, int64_t batch, DataType activation_dtype) {
  DataType dtype = DataType::kFloat32;
  if (const Tensor* t = graph.initializer(name)) {
    dtype = t->dtype();
  } else if (const ValueInfo* v = graph.value(name)) {
    dtype = v->dtype;
  }
  const bool is_float =
      dtype == DataType::kFloat32 || dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  const size_t elem = is_float ? dtype_size(activation_dtype) : dtype_size(dtype);
  return value_numel(graph, name, batch) * static_cast<int64_t>(elem);
}

bool is_view(OpType op) {
  switch (op) {
    case OpType::kReshape:
    case OpType::kFlatten:
    case OpType::kIdentity:
    case OpType::kDropout:
    case OpType::kUnsqueeze:
    case OpType::kShape:
    case OpType::kConstant: return true;
    default: return false;
  }
}

}  // namespace

NodeCost node_cost(const Graph& graph, const Node& node, int64_t batch, DataType activation_dtype) {
  NodeCost c;
  if (node.outputs.empty()) return c;
  const ValueInfo* out = graph.value(node.outputs[0]);
  const double out_n = out ? static_cast<double>(out->shape.numel(batch)) : 0.0;
  auto in_shape = [&](size_t i) -> Shape {
    if (const Tensor* t = graph.initializer(node.input(i))) return t->shape();
    if (const ValueInfo* v = graph.value(node.input(i))) return v->shape.bind_batch(batch);
    return {};
  };

  switch (node.op) {
    case OpType::kConv: {
      const ConvAttrs& a = node.attr<ConvAttrs>();
      const Shape w = in_shape(1);
      if (w.rank() == 4) {
        c.flops = 2.0 * out_n * static_cast<double>(w[1]) * static_cast<double>(w[2] * w[3]);
      }
      if (node.has_input(2)) c.flops += out_n;
      if (a.has_residual) c.flops += out_n;
      if (a.activation != Activation::kNone) c.flops += out_n;
      break;
    }
    case OpType::kGemm: {
      const GemmAttrs& a = node.attr<GemmAttrs>();
      const Shape sa = in_shape(0);
      if (sa.rank() == 2) {
        const double k = static_cast<double>(a.trans_a ? sa[0] : sa[1]);
        c.flops = 2.0 * out_n * k;
      }
      if (node.has_input(2)) c.flops += out_n;
      break;
    }
    case OpType::kMatMul: {
      const Shape sa = in_shape(0);
      if (sa.rank() >= 2) c.flops = 2.0 * out_n * static_cast<double>(sa[sa.rank() - 1]);
      break;
    }
    case OpType::kMaxPool:
    case OpType::kAveragePool: {
      const PoolAttrs& a = node.attr<PoolAttrs>();
      c.flops = out_n * static_cast<double>(a.kernel.h) * static_cast<double>(a.kernel.w);
      break;
    }
    case OpType::kGlobalAveragePool: c.flops = static_cast<double>(in_shape(0).numel()); break;
    case OpType::kBatchNormalization: c.flops = 2.0 * out_n; break;
    case OpType::kSoftmax: c.flops = 3.0 * out_n; break;  // exp, sum, divide
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
    case OpType::kSigmoid: c.flops = 3.0 * out_n; break;
    case OpType::kAdd:
    case OpType::kMul:
    case OpType::kRelu:
    case OpType::kClip: c.flops = out_n; break;
    default: break;
  }

  if (is_view(node.op)) return c;
  for (const std::string& in : node.inputs) {
    if (in.empty()) continue;
    if (graph.is_initializer(in)) {
      c.param_bytes += value_bytes(graph, in, batch, activation_dtype);
    } else {
      c.input_bytes += value_bytes(graph, in, batch, activation_dtype);
    }
  }
  for (const std::string& o : node.outputs)
    if (!o.empty()) c.output_bytes += value_bytes(graph, o, batch, activation_dtype);
  return c;
}

NodeCost graph_cost(const Graph& graph, int64_t batch, DataType activation_dtype) {
  NodeCost total;
  for (const Node& node : graph.nodes) {
    const NodeCost c = node_cost(graph, node, batch, activation_dtype);
    total.flops += c.flops;
    total.param_bytes += c.param_bytes;
    total.input_bytes += c.input_bytes;
    total.output_bytes += c.output_bytes;
  }
  return total;
}

}  // namespace gpulab
