#include <algorithm>
#include "passes/pass_util.h"
#include "passes/passes.h"

namespace gpulab {
namespace {

// Products of dims with the symbolic batch counted apart, for comparing [T * N] with [T, N].
struct Product {
  int64_t batches = 0, factor = 1;
  explicit Product(const std::vector<int64_t>& dims) {
    for (int64_t d : dims) {
      if (Shape::is_batch(d)) {
        ++batches;
        factor *= Shape::batch_factor(d);
      } else {
        factor *= d;
      }
    }
  }
  bool operator==(const Product&) const = default;
};

Tensor reshape_target(std::vector<int64_t> dims) {
  for (int64_t& d : dims)
    if (Shape::is_batch(d)) d = -1;
  return Tensor::from_int64s(Shape{static_cast<int64_t>(dims.size())}, dims);
}

}  // namespace

// Reshape(x -> [R, K]) -> Gemm(B, C constant) -> Reshape(-> [l..., M]) with l1 * ... * lk = R, as
// torch.onnx writes nn.MultiheadAttention's output projection over [T * N, E] rows, becomes
// Reshape(x -> [l..., K]) -> MatMul(W [K, M]) -> Add(C): the rows keep their dims, so that the
// transposes around the attention stay views of token-major data.
Status unflatten_gemm(Graph& graph) {
  GPULAB_TRY(graph.infer_shapes());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& gemm = graph.nodes[i];
    if (gemm.op != OpType::kGemm || gemm.attr<GemmAttrs>().trans_a) continue;
    const Node* flat = pass::producer_of(graph, gemm.input(0));
    const int r = pass::single_reader(graph, gemm.outputs[0]);
    if (!flat || flat->op != OpType::kReshape || graph.use_count(gemm.input(0)) != 1 || r < 0) continue;
    const Node& unflat = graph.nodes[static_cast<size_t>(r)];
    const ValueInfo* out = graph.value(unflat.outputs[0]);
    const ValueInfo* rows = graph.value(gemm.outputs[0]);
    const ValueInfo* x = graph.value(flat->input(0));
    const Tensor* b = graph.initializer(gemm.input(1));
    const Tensor* c = gemm.has_input(2) ? graph.initializer(gemm.input(2)) : nullptr;
    if (unflat.op != OpType::kReshape || !out || !rows || !x || out->shape.rank() < 3 || !b ||
        b->dtype() != DataType::kFloat32 || b->shape().rank() != 2 || (gemm.has_input(2) && !c))
      continue;
    const std::vector<int64_t> lead(out->shape.dims.begin(), out->shape.dims.end() - 1);
    if (!(Product(lead) == Product({rows->shape[0]}))) continue;
    const GemmAttrs& a = gemm.attr<GemmAttrs>();
    const int64_t k = a.trans_b ? b->shape()[1] : b->shape()[0],
                  m = a.trans_b ? b->shape()[0] : b->shape()[1];
    if (out->shape.dims.back() != m || (c && c->numel() != m && c->numel() != 1)) continue;
    Tensor w(DataType::kFloat32, Shape{k, m});
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < m; ++j)
        w.f32()[static_cast<size_t>(kk * m + j)] =
            a.alpha * b->f32()[static_cast<size_t>(a.trans_b ? j * k + kk : kk * m + j)];
    const std::string base = gemm.name;
    const std::string w_name = graph.unique_name(base + "/weight");
    graph.initializers[w_name] = std::move(w);
    std::vector<int64_t> in_dims = lead;
    in_dims.push_back(k);
    const std::string shape_name = graph.unique_name(base + "/rows_shape");
    graph.initializers[shape_name] = reshape_target(in_dims);
    const std::string x2 = graph.unique_name(base + "/rows");
    const std::string y = c ? graph.unique_name(base + "/product") : unflat.outputs[0];
    std::vector<Node> added{
        Node{base + "/unflatten", OpType::kReshape, {flat->input(0), shape_name}, {x2}, ReshapeAttrs{}},
        Node{base, OpType::kMatMul, {x2, w_name}, {y}, {}}};
    if (c) {
      Tensor bias(DataType::kFloat32, Shape{m});
      for (int64_t j = 0; j < m; ++j)
        bias.f32()[static_cast<size_t>(j)] = a.beta * c->f32()[static_cast<size_t>(c->numel() == 1 ? 0 : j)];
      const std::string bias_name = graph.unique_name(base + "/bias");
      graph.initializers[bias_name] = std::move(bias);
      added.push_back(Node{base + "/add_bias", OpType::kAdd, {y, bias_name}, {unflat.outputs[0]}, {}});
    }
    const std::string out_name = unflat.outputs[0];
    graph.nodes[static_cast<size_t>(r)].outputs[0] = graph.unique_name(out_name + "/unused");
    graph.nodes.insert(graph.nodes.begin() + r + 1, added.begin(), added.end());
    graph.remove_dead_code();
    GPULAB_TRY(graph.infer_shapes());
    i = static_cast<size_t>(-1);
  }
  return graph.infer_shapes();
}

}  // namespace gpulab
