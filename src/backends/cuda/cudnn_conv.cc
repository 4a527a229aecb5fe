#include "backends/cuda/cudnn_conv.h"

#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "backends/cuda/cudnn_graph.h"

namespace gpulab::cuda {

namespace fe = cudnn_frontend;

namespace {

fe::DataType_t fe_type(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return fe::DataType_t::HALF;
    case DataType::kBFloat16: return fe::DataType_t::BFLOAT16;
    default: return fe::DataType_t::FLOAT;
  }
}

}  // namespace

std::string conv_signature(const ConvProblem& p) {
  const auto& a = p.attrs;
  // "...|<dtype>[|x<x dtype>]|<precision>[|unfused]"
  return fmt::format(
      "conv|n{}|c{}|h{}|w{}|k{}|r{}s{}|st{}x{}|pad{},{},{},{}|dil{}x{}|g{}|act{}|clip{},{}|res{}|bias{}{}|"
      "{}{}|{}{}",
      p.n, p.c, p.h, p.w, p.k, a.kernel.h, a.kernel.w, a.stride.h, a.stride.w, a.pads.top, a.pads.left,
      a.pads.bottom, a.pads.right, a.dilation.h, a.dilation.w, a.groups, static_cast<int>(a.activation),
      a.clip_min, a.clip_max, a.has_residual ? 1 : 0, p.has_bias ? 1 : 0, p.bias_float32 ? "f32" : "",
      dtype_name(p.dtype),
      p.x_dtype && *p.x_dtype != p.dtype ? fmt::format("|x{}", dtype_name(*p.x_dtype)) : "",
      precision_name(p.precision), p.fused ? "" : "|unfused");
}

struct CudnnConv::Impl {
  ConvProblem problem;
  CudnnPlans plans;
  int64_t x_uid = 1, w_uid = 2, b_uid = 3, r_uid = 4, y_uid = 5;
};

CudnnConv::CudnnConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnConv::~CudnnConv() = default;

namespace {

// Builds the operation graph of `p` (validated, lowered to a backend operation graph).
Result<std::shared_ptr<fe::graph::Graph>> make_graph(cudnnHandle_t handle, const ConvProblem& p) {
  if (p.x_dtype && *p.x_dtype != p.dtype)
    return Status::unsupported(fmt::format("cudnn_conv: x in {} and y in {}: one storage type only.",
                                           dtype_name(*p.x_dtype), dtype_name(p.dtype)));
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(p.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto& a = p.attrs;
  const int64_t cg = p.c / a.groups;
  auto X = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("x")
                         .set_uid(1)
                         .set_dim({p.n, p.c, p.h, p.w})
                         .set_stride({p.c * p.h * p.w, 1, p.c * p.w, p.c}));
  auto W = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("w")
                         .set_uid(2)
                         .set_dim({p.k, cg, a.kernel.h, a.kernel.w})
                         .set_stride({cg * a.kernel.h * a.kernel.w, 1, cg * a.kernel.w, cg}));
  auto conv = g->conv_fprop(X, W,
                            fe::graph::Conv_fprop_attributes()
                                .set_pre_padding({a.pads.top, a.pads.left})
                                .set_post_padding({a.pads.bottom, a.pads.right})
                                .set_stride({a.stride.h, a.stride.w})
                                .set_dilation({a.dilation.h, a.dilation.w}));
  auto y = conv;
  if (p.fused && p.has_bias) {
    auto B = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("bias")
                           .set_uid(3)
                           .set_data_type(p.bias_float32 ? fe::DataType_t::FLOAT : fe_type(p.dtype))
                           .set_dim({1, p.k, 1, 1})
                           .set_stride({p.k, 1, p.k, p.k}));
    y = g->pointwise(y, B, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  }
  if (p.fused && a.has_residual) {
    auto R = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("residual")
                           .set_uid(4)
                           .set_dim({p.n, p.k, p.out_h, p.out_w})
                           .set_stride({p.k * p.out_h * p.out_w, 1, p.k * p.out_w, p.k}));
    y = g->pointwise(y, R, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  }
  if (p.fused && a.activation == Activation::kRelu) {
    y = g->pointwise(y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
  } else if (p.fused && a.activation == Activation::kClip) {
    y = g->pointwise(y, fe::graph::Pointwise_attributes()
                            .set_mode(fe::PointwiseMode_t::RELU_FWD)
                            .set_relu_lower_clip(a.clip_min)
                            .set_relu_upper_clip(a.clip_max));
  }
  y->set_output(true).set_uid(5).set_data_type(fe_type(p.dtype));
  y->set_dim({p.n, p.k, p.out_h, p.out_w}).set_stride({p.k * p.out_h * p.out_w, 1, p.k * p.out_w, p.k});
  if (auto e = g->validate(); e.is_bad()) return cudnn_error(e, "validate " + conv_signature(p));
  if (auto e = g->build_operation_graph(handle); e.is_bad())
    return cudnn_error(e, "operation graph " + conv_signature(p));
  return g;
}

void apply_numeric_filters(fe::graph::Graph& g, Precision precision) {
  using N = fe::NumericalNote_t;
  // Deterministic engines only (deselect_cudnn_notes): eager and graph replay must agree bitwise.
  std::vector<N> barred = {N::REDUCED_PRECISION_REDUCTION};
  if (precision == Precision::kFp32) {
    // FP32 means FP32 arithmetic: no TF32 tensor cores and no down-converted inputs. Winograd
    // and FFT engines compute in FP32 too (PyTorch's FP32 convolutions use them); their transform
    // error stays within the FP32 bound (engine_gpu_test: rel. L2 <= 1e-5 on whole networks),
    // and the tactic timer takes them only where they are faster.
    for (N n : {N::TENSOR_CORE, N::DOWN_CONVERT_INPUTS}) barred.push_back(n);
  }
  deselect_cudnn_notes(g, std::move(barred));
}

}  // namespace

Result<std::unique_ptr<CudnnConv>> CudnnConv::with_candidates(cudnnHandle_t handle, const ConvProblem& p) {
  GPULAB_ASSIGN_OR_RETURN(auto g, make_graph(handle, p));
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return cudnn_error(e, "heuristics " + conv_signature(p));
  apply_numeric_filters(*g, p.precision);
  // check_support fails only when no candidate at all is supported.
  if (auto e = g->check_support(); e.is_bad()) return cudnn_error(e, "no engine for " + conv_signature(p));
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->plans = CudnnPlans(std::move(g));
  return std::unique_ptr<CudnnConv>(new CudnnConv(std::move(impl)));
}

Result<std::unique_ptr<CudnnConv>> CudnnConv::with_tactic(cudnnHandle_t handle, const ConvProblem& problem,
                                                          const std::string& tactic) {
  // "cudnn:<engine>;<k>=<v>,...;<name>" or "cudnn-unfused:..."
  std::string body;
  ConvProblem p = problem;
  if (tactic.rfind("cudnn:", 0) == 0) {
    body = tactic.substr(6);
    p.fused = true;
  } else if (tactic.rfind("cudnn-unfused:", 0) == 0) {
    body = tactic.substr(14);
    p.fused = false;
  } else {
    return Status::invalid_argument("cuDNN: '" + tactic + "' is not a cuDNN tactic.");
  }
  GPULAB_ASSIGN_OR_RETURN(const CudnnEngineConfig config, parse_cudnn_engine_config(body, tactic));
  GPULAB_ASSIGN_OR_RETURN(auto g, make_graph(handle, p));
  if (auto e = g->create_execution_plan(config.engine, frontend_knobs(config)); e.is_bad())
    return cudnn_error(e, "engine " + tactic);
  if (auto e = g->check_support(); e.is_bad()) return cudnn_error(e, "engine " + tactic);
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->plans = CudnnPlans(std::move(g));
  std::unique_ptr<CudnnConv> conv(new CudnnConv(std::move(impl)));
  GPULAB_TRY(conv->select(0));
  return conv;
}

Result<std::unique_ptr<CudnnConv>> CudnnConv::with_heuristic_choice(cudnnHandle_t handle,
                                                                    const ConvProblem& p,
                                                                    int64_t max_workspace_bytes) {
  GPULAB_ASSIGN_OR_RETURN(auto conv, with_candidates(handle, p));
  Status last = Status::unsupported("cuDNN: no candidate for " + conv_signature(p));
  for (int64_t i = 0; i < conv->candidate_count(); ++i) {
    last = conv->select(i);
    if (last.is_ok() && conv->workspace_bytes() <= max_workspace_bytes) return conv;
    if (last.is_ok())
      last = Status::unsupported(
          fmt::format("cuDNN: candidate {} needs {} bytes of workspace", i, conv->workspace_bytes()));
  }
  return last;
}

int64_t CudnnConv::candidate_count() const {
  return impl_->plans.count();
}

Status CudnnConv::select(int64_t index) {
  GPULAB_TRY(impl_->plans.build(index, "cuDNN"));
  selected_ = index;
  return Status::ok();
}

std::string CudnnConv::tactic(int64_t index) const {
  return cudnn_engine_tactic(impl_->plans.graph(), index, impl_->problem.fused ? "cudnn:" : "cudnn-unfused:");
}

bool CudnnConv::fused() const {
  return impl_->problem.fused;
}

int64_t CudnnConv::workspace_bytes() const {
  return selected_ < 0 ? 0 : impl_->plans.workspace_bytes(selected_);
}

Status CudnnConv::launch(cudnnHandle_t handle, const ConvPointers& ptrs, void* workspace) const {
  if (selected_ < 0) return Status::internal("cuDNN: launch before select");
  std::unordered_map<int64_t, void*> pack = {{impl_->x_uid, const_cast<void*>(ptrs.x)},
                                             {impl_->w_uid, const_cast<void*>(ptrs.w)},
                                             {impl_->y_uid, ptrs.y}};
  if (impl_->problem.fused && impl_->problem.has_bias) pack[impl_->b_uid] = const_cast<void*>(ptrs.bias);
  if (impl_->problem.fused && impl_->problem.attrs.has_residual)
    pack[impl_->r_uid] = const_cast<void*>(ptrs.residual);
  if (auto e = impl_->plans.graph().execute_plan_at_index(handle, pack, workspace, selected_); e.is_bad())
    return Status::device_error(fmt::format("cuDNN: execute {} failed: {}.", conv_signature(impl_->problem),
                                            fe::error_t(e).get_message()));
  return Status::ok();
}

}  // namespace gpulab::cuda
