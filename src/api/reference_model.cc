#include "gpulab/reference_model.h"

#include <optional>
#include <utility>

#include "backends/reference/reference_executor.h"
#include "graph/classifier.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"

namespace gpulab {

// The executor keeps a pointer to the graph, so both live together behind one unique_ptr: the
// graph's address stays the same when the model is moved.
struct ReferenceModel::State {
  Graph graph;
  std::optional<ReferenceExecutor> executor;
  Shape input_shape;
  int64_t num_classes = 0;
  bool outputs_probabilities = false;
};

namespace {

// One float [N, C, H, W] input and one [N, classes] output, as engine.h asks of a model.
Status check_classifier(const Graph& graph, const std::string& path) {
  const auto refuse = [&](const std::string& what) {
    return Status::unsupported("ReferenceModel: '" + path + "' " + what +
                               ". It runs image classifiers: one float32 input [N, C, H, W] and one "
                               "output [N, classes]. `gpulab inspect` shows the model's inputs and outputs.");
  };
  if (graph.inputs.size() != 1 || graph.outputs.size() != 1)
    return refuse("has " + std::to_string(graph.inputs.size()) + " inputs and " +
                  std::to_string(graph.outputs.size()) + " outputs");
  const ValueInfo* in = graph.value(graph.inputs[0]);
  if (!in || in->dtype != DataType::kFloat32 || in->shape.rank() != 4)
    return refuse("has the input '" + graph.inputs[0] + "' of shape " + (in ? in->shape.to_string() : "?"));
  const ValueInfo* out = graph.value(graph.outputs[0]);
  if (!out || out->shape.rank() != 2 || out->shape[1] <= 0)
    return refuse("has the output '" + graph.outputs[0] + "' of shape " +
                  (out ? out->shape.to_string() : "?"));
  return Status::ok();
}

}  // namespace

ReferenceModel::ReferenceModel(std::unique_ptr<State> state) : state_(std::move(state)) {}
ReferenceModel::ReferenceModel(ReferenceModel&&) noexcept = default;
ReferenceModel& ReferenceModel::operator=(ReferenceModel&&) noexcept = default;
ReferenceModel::~ReferenceModel() = default;

Result<ReferenceModel> ReferenceModel::load_onnx(const std::string& onnx_path,
                                                 const ReferenceModelOptions& options) {
  if (options.num_threads < 0)
    return Status::invalid_argument("ReferenceModel: num_threads must be >= 0 (got " +
                                    std::to_string(options.num_threads) + ").");
  auto state = std::make_unique<State>();
  GPULAB_ASSIGN_OR_RETURN(state->graph, ::gpulab::load_onnx(onnx_path));  // not this class's load_onnx
  GPULAB_TRY(run_passes(state->graph).with_context("optimizing '" + onnx_path + "'"));
  GPULAB_TRY(check_classifier(state->graph, onnx_path));
  state->input_shape = state->graph.value(state->graph.inputs[0])->shape;
  state->num_classes = state->graph.value(state->graph.outputs[0])->shape[1];
  state->outputs_probabilities = outputs_class_probabilities(state->graph);
  GPULAB_ASSIGN_OR_RETURN(
      state->executor,
      ReferenceExecutor::create(state->graph, ReferenceOptions{.num_threads = options.num_threads}));
  return ReferenceModel(std::move(state));
}

const Shape& ReferenceModel::input_shape() const {
  return state_->input_shape;
}
int64_t ReferenceModel::num_classes() const {
  return state_->num_classes;
}
bool ReferenceModel::outputs_probabilities() const {
  return state_->outputs_probabilities;
}
const std::map<std::string, std::string>& ReferenceModel::metadata() const {
  return state_->graph.metadata;
}

Result<Tensor> ReferenceModel::run(const Tensor& input_nchw) const {
  const Shape& want = state_->input_shape;
  const Shape& got = input_nchw.shape();
  bool fits = input_nchw.dtype() == DataType::kFloat32 && got.rank() == 4 && got[0] >= 1;
  for (size_t i = 0; fits && i < 4; ++i) fits = want[i] == Shape::kBatch || want[i] == got[i];
  if (!fits)
    return Status::invalid_argument("ReferenceModel::run: the input is " +
                                    std::string(dtype_name(input_nchw.dtype())) + " " + got.to_string() +
                                    ", the model takes float32 " + want.to_string() +
                                    " (N >= 1). Preprocess the images to the model's input size.");
  GPULAB_ASSIGN_OR_RETURN(std::vector<Tensor> outputs,
                          state_->executor->run(std::span<const Tensor>(&input_nchw, 1)));
  if (outputs.size() != 1) return Status::internal("ReferenceModel::run: the executor returned no output");
  return std::move(outputs.front());
}

}  // namespace gpulab
