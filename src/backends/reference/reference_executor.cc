#include "backends/reference/reference_executor.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "backends/reference/kernels.h"

namespace gpulab {
namespace reference {

std::string where(const Node& node) {
  return std::string(op_name(node.op)) + " '" + node.name + "'";
}

Status check_input_count(const Node& node, Inputs inputs, size_t required, size_t optional) {
  for (size_t i = 0; i < required; ++i) {
    if (i >= inputs.size() || inputs[i] == nullptr) {
      return Status::invalid_model(where(node) + ": input " + std::to_string(i) + " is missing (" +
                                   std::to_string(required) + " required, " + std::to_string(inputs.size()) +
                                   " given). Check the model.");
    }
  }
  for (size_t i = required + optional; i < inputs.size(); ++i) {
    if (inputs[i] != nullptr) {
      return Status::invalid_model(where(node) + ": has " + std::to_string(inputs.size()) +
                                   " inputs, at most " + std::to_string(required + optional) +
                                   " are allowed. Check the model.");
    }
  }
  return Status::ok();
}

Status check_dtype(const Node& node, const Tensor& t, DataType want, std::string_view role) {
  if (t.dtype() == want) return Status::ok();
  return Status::unsupported(where(node) + ": " + std::string(role) + " is " +
                             std::string(dtype_name(t.dtype())) + ", the reference backend needs " +
                             std::string(dtype_name(want)) + " here.");
}

Status check_rank(const Node& node, const Tensor& t, size_t rank, std::string_view role) {
  if (t.shape().rank() == rank) return Status::ok();
  return Status::invalid_argument(where(node) + ": " + std::string(role) + " has shape " +
                                  t.shape().to_string() + ", expected rank " + std::to_string(rank) + ".");
}

Result<int64_t> normalize_axis(const Node& node, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return Status::invalid_model(where(node) + ": axis " + std::to_string(axis) +
                                 " is out of range for rank " + std::to_string(rank) + " (allowed [" +
                                 std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]).");
  }
  return axis < 0 ? axis + rank : axis;
}

void parallel_for(int64_t count, int64_t cost_per_item, const ReferenceOptions& options,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  // Below ~64k multiply-adds a thread costs more than it saves.
  constexpr int64_t kMinCostPerThread = 1 << 16;
  int64_t threads =
      options.num_threads > 0 ? options.num_threads : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min({threads, count, std::max<int64_t>(1, count * cost_per_item / kMinCostPerThread)});
  if (threads <= 1) {
    fn(0, count);
    return;
  }
  // An exception in a worker (std::bad_alloc) is carried to the calling thread and rethrown
  // there after every worker has joined; run_reference_node turns it into a Status.
  std::mutex error_mutex;
  std::exception_ptr error;
  auto guarded = [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads - 1));
  const int64_t chunk = (count + threads - 1) / threads;
  for (int64_t begin = chunk; begin < count; begin += chunk) {  // the caller does [0, chunk)
    const int64_t end = std::min(count, begin + chunk);
    try {
      workers.emplace_back(guarded, begin, end);
    } catch (const std::system_error&) {  // no thread available: do the rest here
      guarded(begin, count);
      break;
    }
  }
  guarded(0, std::min(chunk, count));
  for (std::thread& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

namespace {

// One switch over every OpType: adding an op to graph.h makes -Wswitch point here.
Status run_op(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions& options) {
  switch (node.op) {
    case OpType::kConv: return run_conv(node, inputs, outputs, options);
    case OpType::kBatchNormalization: return run_batch_norm(node, inputs, outputs, options);
    case OpType::kRelu:
    case OpType::kClip:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish: return run_unary(node, inputs, outputs, options);
    case OpType::kQuantizeDequantize: return run_quantize_dequantize(node, inputs, outputs, options);
    case OpType::kAdd:
    case OpType::kMul:
    case OpType::kSub:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kMax:
    case OpType::kMin:
    case OpType::kEqual: return run_binary(node, inputs, outputs, options);
    case OpType::kSqrt:
    case OpType::kErf:
    case OpType::kTanh:
    case OpType::kExp:
    case OpType::kNeg:
    case OpType::kGelu:
    case OpType::kNot:
    case OpType::kCast: return run_math_unary(node, inputs, outputs, options);
    case OpType::kTranspose:
    case OpType::kSlice:
    case OpType::kSplit:
    case OpType::kSqueeze:
    case OpType::kExpand:
    case OpType::kWhere:
    case OpType::kPad:
    case OpType::kScatterND:
    case OpType::kConstantOfShape:
    case OpType::kRange: return run_tensor_op(node, inputs, outputs, options);
    case OpType::kReduceMean:
    case OpType::kReduceL2:
    case OpType::kLayerNormalization:
    case OpType::kLpNormalization: return run_normalization(node, inputs, outputs, options);
    case OpType::kAttention: return run_attention(node, inputs, outputs, options);
    case OpType::kMaxPool: return run_max_pool(node, inputs, outputs, options);
    case OpType::kAveragePool: return run_average_pool(node, inputs, outputs, options);
    case OpType::kGlobalAveragePool: return run_global_average_pool(node, inputs, outputs, options);
    case OpType::kGemm: return run_gemm(node, inputs, outputs, options);
    case OpType::kMatMul: return run_matmul(node, inputs, outputs, options);
    case OpType::kSoftmax: return run_softmax(node, inputs, outputs, options);
    case OpType::kIdentity:
    case OpType::kDropout:
    case OpType::kFlatten:
    case OpType::kReshape:
    case OpType::kShape:
    case OpType::kGather:
    case OpType::kUnsqueeze:
    case OpType::kConcat: return run_shape_op(node, inputs, outputs, options);
    case OpType::kConstant:
      return Status::unsupported(where(node) +
                                 ": Constant nodes are not executed; the importer turns them into "
                                 "initializers. Load the model through load_onnx.");
  }
  return Status::unsupported(
      where(node) + ": op not known to the reference backend. Supported: " + supported_ops_list() + ".");
}

}  // namespace
}  // namespace reference

Status run_reference_node(const Node& node, std::span<const Tensor* const> inputs,
                          std::vector<Tensor>& outputs, const ReferenceOptions& options) {
  using namespace reference;
  outputs.assign(node.outputs.size(), Tensor());
  if (node.outputs.empty() || node.outputs[0].empty()) {
    return Status::invalid_model(where(node) + ": has no first output. Check the model.");
  }
  if (inputs.size() > node.inputs.size()) {
    return Status::invalid_argument(where(node) + ": " + std::to_string(inputs.size()) +
                                    " input tensors given for " + std::to_string(node.inputs.size()) +
                                    " inputs.");
  }
  try {
    return run_op(node, inputs, outputs, options);
  } catch (const std::bad_alloc&) {
    return Status::out_of_memory(where(node) +
                                 ": host memory ran out while computing the outputs. "
                                 "Use a smaller batch.");
  } catch (const std::length_error&) {
    return Status::out_of_memory(where(node) +
                                 ": an output is too large to allocate. Check the "
                                 "input shapes.");
  }
}

Result<ReferenceExecutor> ReferenceExecutor::create(const Graph& graph, ReferenceOptions options) {
  GPULAB_TRY(graph.validate());
  if (options.num_threads < 0) {
    return Status::invalid_argument("reference executor: num_threads is " +
                                    std::to_string(options.num_threads) +
                                    ". Use 0 (all cores) or a positive count.");
  }
  for (const Node& node : graph.nodes) {
    if (node.op == OpType::kConstant) {
      return Status::unsupported(reference::where(node) +
                                 ": Constant nodes are not executed; the importer turns them into "
                                 "initializers. Load the model through load_onnx.");
    }
  }
  for (const std::string& in : graph.inputs) {
    if (graph.is_initializer(in)) {
      return Status::invalid_model("reference executor: graph input '" + in +
                                   "' is also an initializer. Graph inputs must be runtime values.");
    }
  }
  ReferenceExecutor executor(graph, options);
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const std::string& in : graph.nodes[i].inputs)
      if (!in.empty()) executor.last_reader_[in] = static_cast<int>(i);
  return executor;
}

Result<std::vector<Tensor>> ReferenceExecutor::run(std::span<const Tensor> inputs) const {
  GPULAB_ASSIGN_OR_RETURN(ReferenceRun result, execute(inputs, /*keep_values=*/false));
  return std::move(result.outputs);
}

Result<ReferenceRun> ReferenceExecutor::run_with_values(std::span<const Tensor> inputs) const {
  return execute(inputs, /*keep_values=*/true);
}

Result<ReferenceRun> ReferenceExecutor::execute(std::span<const Tensor> inputs, bool keep_values) const {
  // Node kernels report their own allocation failures; this catches the executor's (copies of
  // inputs and outputs, kept intermediates).
  try {
    return execute_unguarded(inputs, keep_values);
  } catch (const std::bad_alloc&) {
    return Status::out_of_memory("reference executor: host memory ran out running graph '" + graph_->name +
                                 "'. Use a smaller batch" +
                                 (keep_values ? " or do not keep every intermediate value." : "."));
  }
}

Result<ReferenceRun> ReferenceExecutor::execute_unguarded(std::span<const Tensor> inputs,
                                                          bool keep_values) const {
  const Graph& graph = *graph_;
  if (inputs.size() != graph.inputs.size()) {
    return Status::invalid_argument("reference executor: " + std::to_string(inputs.size()) +
                                    " input tensors given, graph '" + graph.name + "' has " +
                                    std::to_string(graph.inputs.size()) +
                                    ". Pass one tensor per graph input, in order.");
  }
  // Check each input against its declared info and bind the batch size.
  int64_t batch = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = graph.inputs[i];
    const ValueInfo* info = graph.value(name);
    const Tensor& t = inputs[i];
    const DataType want_dtype = info ? info->dtype : DataType::kFloat32;
    if (t.dtype() != want_dtype) {
      return Status::invalid_argument("reference executor: input '" + name + "' is " +
                                      std::string(dtype_name(t.dtype())) + ", the graph expects " +
                                      std::string(dtype_name(want_dtype)) + ".");
    }
    if (!info) continue;
    const Shape& want = info->shape;
    bool ok = want.rank() == t.shape().rank();
    for (size_t d = 0; ok && d < want.rank(); ++d) {
      if (Shape::is_batch(want[d])) {
        const int64_t k = Shape::batch_factor(want[d]);
        if (batch == 0 && t.shape()[d] % k == 0) batch = t.shape()[d] / k;
        ok = t.shape()[d] == batch * k && batch > 0;
      } else {
        ok = want[d] == t.shape()[d];
      }
    }
    if (!ok) {
      return Status::invalid_argument("reference executor: input '" + name + "' has shape " +
                                      t.shape().to_string() + ", the graph expects " + want.to_string() +
                                      (batch ? " with batch " + std::to_string(batch) : std::string()) +
                                      ". Pass a tensor of the declared shape.");
    }
  }
  ReferenceOptions options = options_;
  if (batch > 0) options.bound_batch = batch;

  std::map<std::string, Tensor> env;
  for (size_t i = 0; i < inputs.size(); ++i) env[graph.inputs[i]] = inputs[i];

  auto lookup = [&](const std::string& name) -> const Tensor* {
    if (const Tensor* t = graph.initializer(name)) return t;
    auto it = env.find(name);
    return it == env.end() ? nullptr : &it->second;
  };

  std::vector<const Tensor*> node_inputs;
  std::vector<Tensor> node_outputs;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    node_inputs.clear();
    for (const std::string& in : node.inputs) {
      if (in.empty()) {
        node_inputs.push_back(nullptr);
        continue;
      }
      const Tensor* t = lookup(in);
      if (!t) {
        return Status::invalid_model(reference::where(node) + ": input '" + in +
                                     "' has no value. The graph is incomplete.");
      }
      node_inputs.push_back(t);
    }
    GPULAB_TRY(
        run_reference_node(node, node_inputs, node_outputs, options).with_context("reference executor"));
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (!node.outputs[o].empty()) env[node.outputs[o]] = std::move(node_outputs[o]);
    if (!keep_values) {
      // Free what no later node reads (graph outputs stay).
      for (const std::string& in : node.inputs) {
        auto last = last_reader_.find(in);
        if (last != last_reader_.end() && last->second == static_cast<int>(n) && !graph.is_graph_output(in))
          env.erase(in);
      }
    }
  }

  ReferenceRun result;
  for (const std::string& out : graph.outputs) {
    const Tensor* t = lookup(out);
    if (!t) {
      return Status::invalid_model("reference executor: graph output '" + out +
                                   "' was never computed. The graph is incomplete.");
    }
    result.outputs.push_back(*t);
  }
  if (keep_values) result.values = std::move(env);
  return result;
}

}  // namespace gpulab
