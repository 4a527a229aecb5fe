// The reference backend: a plain CPU executor for every OpType in graph.h. It is the oracle that
// every other backend is tested against, op by op and model by model, and the fallback when no
// GPU is present.
//
// Numerics: tensors are stored as float32 (int64 for shape values); every sum (convolution, GEMM,
// pooling, softmax, normalisation) is accumulated in double and rounded to float32 once, when the
// result is stored. The loops are written to be obviously right, not fast; the only concession to
// speed is that the large ops split their independent output planes or rows across std::threads.
//
// Semantics follow ONNX where ONNX is unambiguous and PyTorch (the source of the goldens) where it
// is not:
// - Pooling output size with ceil_mode follows PyTorch: a last window that would start in the
//   right/bottom padding is dropped.
// - AveragePool with count_include_pad divides by the window clipped to the padded input (as
//   PyTorch does), without count_include_pad by the number of real input elements in the window.
// - Softmax uses the opset-13 definition (one axis). For the [N, classes] logits of a classifier
//   with axis 1 or -1 it agrees with the older definitions.
// - Conv carries the fused epilogue of ConvAttrs: y = act(conv(x, w) + b + residual).
//
// Errors: a node whose inputs have the wrong count, dtype or shape, or whose attributes are out of
// range, yields a Status naming the node; nothing asserts or aborts on bad input.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "gpulab/status.h"
#include "gpulab/tensor.h"
#include "graph/graph.h"

namespace gpulab {

struct ReferenceOptions {
  // Worker threads for the large ops; 0 = std::thread::hardware_concurrency().
  int num_threads = 0;
  // The batch size that Shape::kBatch stands for inside int64 shape values (a Reshape target
  // that a pass folded to a constant). ReferenceExecutor::run sets it from its inputs; 0 = unknown,
  // and a kBatch entry is then an error.
  int64_t bound_batch = 0;
};

// Runs one node on concrete host tensors. `inputs[i]` is the tensor for node.inputs[i], nullptr
// for an absent optional input. On success `outputs` holds one tensor per node.outputs entry (an
// empty Tensor for an output named ""). Used op by op by the GPU kernel tests too.
// Thread-safe: it touches nothing but its arguments. Allocates the outputs.
Status run_reference_node(const Node& node, std::span<const Tensor* const> inputs,
                          std::vector<Tensor>& outputs, const ReferenceOptions& options = {});

// Everything one run computed: the graph outputs in order and, when asked for, every value by name
// (graph inputs and node outputs; not the initializers).
struct ReferenceRun {
  std::vector<Tensor> outputs;
  std::map<std::string, Tensor> values;
};

// Runs a whole Graph node by node. The executor keeps a reference to the graph: the graph must
// outlive it and stay unchanged. run() is const and may be called from several threads at once.
class ReferenceExecutor {
 public:
  // Checks that the graph is well formed (Graph::validate) and that every node's op is one the
  // reference backend runs (everything but the import-only Constant).
  static Result<ReferenceExecutor> create(const Graph& graph, ReferenceOptions options = {});

  // `inputs` in graph-input order, each with the dtype and shape the graph declares and a concrete
  // batch (the same for every input whose declared shape has Shape::kBatch). Returns the graph
  // outputs in order. Intermediate values are freed as soon as their last reader has run.
  Result<std::vector<Tensor>> run(std::span<const Tensor> inputs) const;

  // As run(), but also keeps every intermediate value, for per-layer error localisation.
  Result<ReferenceRun> run_with_values(std::span<const Tensor> inputs) const;

  const Graph& graph() const { return *graph_; }

 private:
  ReferenceExecutor(const Graph& graph, ReferenceOptions options) : graph_(&graph), options_(options) {}
  Result<ReferenceRun> execute(std::span<const Tensor> inputs, bool keep_values) const;
  Result<ReferenceRun> execute_unguarded(std::span<const Tensor> inputs, bool keep_values) const;

  const Graph* graph_;
  ReferenceOptions options_;
  std::map<std::string, int> last_reader_;  // value -> index of the last node that reads it
};

}  // namespace gpulab
