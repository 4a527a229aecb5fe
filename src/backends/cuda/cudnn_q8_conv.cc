#include "backends/cuda/cudnn_q8_conv.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <unordered_map>
#include <vector>

#include "backends/cuda/cudnn_graph.h"
#include "backends/cuda/device.h"

namespace gpulab::cuda {

namespace fe = cudnn_frontend;

namespace {

// Tensor uids of the graph; the constants buffer holds multiplier[k], then 1 / y_scale, then the
// residual's scale.
enum Uid : int64_t { kX = 1, kW, kMultiplier, kBias, kResidual, kResidualScale, kInvYScale, kY };

std::string describe(const kernels::Q8ConvDesc& d) {
  return fmt::format("{} conv n{} {}x{}x{} -> {} ({}x{}/{}x{}){}", dtype_name(d.x_dtype), d.n, d.h, d.w, d.c,
                     d.k, d.r, d.s, d.stride.h, d.stride.w, d.has_residual ? " + residual" : "");
}

std::vector<int64_t> nhwc_strides(int64_t c, int64_t h, int64_t w) {
  return {c * h * w, 1, c * w, c};
}

Result<std::shared_ptr<fe::graph::Graph>> make_graph(cudnnHandle_t handle, const kernels::Q8ConvDesc& d,
                                                     bool has_bias) {
  GPULAB_TRY(cudnn_q8_conv_supports(d));
  const bool fp8 = d.x_dtype == DataType::kFp8E4M3;
  const auto io = fp8 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::INT8;
  const auto sums = fp8 ? fe::DataType_t::FLOAT : fe::DataType_t::INT32;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(sums);
  const auto tensor = [&g](const char* name, int64_t uid, fe::DataType_t type, std::vector<int64_t> dim,
                           std::vector<int64_t> stride) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_data_type(type)
                         .set_dim(std::move(dim))
                         .set_stride(std::move(stride)));
  };
  const auto per_channel = [&](const char* name, int64_t uid) {
    return tensor(name, uid, fe::DataType_t::FLOAT, {1, d.k, 1, 1}, {d.k, 1, d.k, d.k});
  };
  const auto scalar = [&](const char* name, int64_t uid) {
    return tensor(name, uid, fe::DataType_t::FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1});
  };
  // Each step one float32 operation rounded to nearest, in quant.h's order.
  const auto op = [](fe::PointwiseMode_t mode) {
    return fe::graph::Pointwise_attributes().set_mode(mode).set_compute_data_type(fe::DataType_t::FLOAT);
  };
  auto X = tensor("x", kX, io, {d.n, d.c, d.h, d.w}, nhwc_strides(d.c, d.h, d.w));
  auto W = tensor("w", kW, io, {d.k, d.c, d.r, d.s}, nhwc_strides(d.c, d.r, d.s));
  auto y = g->conv_fprop(X, W,
                         fe::graph::Conv_fprop_attributes()
                             .set_pre_padding({d.pads.top, d.pads.left})
                             .set_post_padding({d.pads.bottom, d.pads.right})
                             .set_stride({d.stride.h, d.stride.w})
                             .set_dilation({d.dilation.h, d.dilation.w})
                             .set_compute_data_type(sums));
  y = g->pointwise(y, per_channel("multiplier", kMultiplier), op(fe::PointwiseMode_t::MUL));
  if (has_bias) y = g->pointwise(y, per_channel("bias", kBias), op(fe::PointwiseMode_t::ADD));
  if (d.has_residual) {
    auto R =
        tensor("residual", kResidual, io, {d.n, d.k, d.out_h, d.out_w}, nhwc_strides(d.k, d.out_h, d.out_w));
    auto scaled = g->pointwise(R, scalar("residual_scale", kResidualScale), op(fe::PointwiseMode_t::MUL));
    y = g->pointwise(y, scaled, op(fe::PointwiseMode_t::ADD));
  }
  if (d.activation == Activation::kRelu) {
    y = g->pointwise(y, op(fe::PointwiseMode_t::RELU_FWD));
  } else if (d.activation == Activation::kClip) {
    y = g->pointwise(
        y, op(fe::PointwiseMode_t::RELU_FWD).set_relu_lower_clip(d.clip_min).set_relu_upper_clip(d.clip_max));
  }
  y = g->pointwise(y, scalar("inv_y_scale", kInvYScale), op(fe::PointwiseMode_t::MUL));
  y->set_output(true).set_uid(kY).set_data_type(io);
  y->set_dim({d.n, d.k, d.out_h, d.out_w}).set_stride(nhwc_strides(d.k, d.out_h, d.out_w));
  if (auto e = g->validate(); e.is_bad()) return cudnn_error(e, "validate " + describe(d));
  if (auto e = g->build_operation_graph(handle); e.is_bad())
    return cudnn_error(e, "operation graph " + describe(d));
  return g;
}

}  // namespace

Status cudnn_q8_conv_supports(const kernels::Q8ConvDesc& d) {
  if (!is_quantized_dtype(d.x_dtype) || d.y_dtype != d.x_dtype)
    return Status::unsupported(fmt::format("cudnn-q8: {} in, {} out (one 8-bit type in and out only)",
                                           dtype_name(d.x_dtype), dtype_name(d.y_dtype)));
  if (d.groups != 1) return Status::unsupported("cudnn-q8: grouped convolution");
  return Status::ok();
}

struct CudnnQ8Conv::Impl {
  kernels::Q8ConvDesc desc;
  bool has_bias = false;
  CudnnPlans plans;
  DeviceBuffer constants;  // multiplier[k], 1 / y_scale, residual_scale (float32)
};

CudnnQ8Conv::CudnnQ8Conv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnQ8Conv::~CudnnQ8Conv() = default;

namespace {

// The graph's float32 constants, as the kernels' launchers compute them (quant.cuh, quant.cu).
Result<DeviceBuffer> upload_constants(const kernels::Q8ConvDesc& d, std::span<const float> w_scale) {
  if (static_cast<int64_t>(w_scale.size()) != d.k)
    return Status::invalid_argument(
        fmt::format("cudnn-q8: {} weight scales for {} output channels", w_scale.size(), d.k));
  std::vector<float> host;
  host.reserve(static_cast<size_t>(d.k) + 2);
  for (const float s : w_scale) host.push_back(d.x_scale * s);
  host.push_back(1.0f / d.y_scale);
  host.push_back(d.residual_scale);
  GPULAB_ASSIGN_OR_RETURN(auto buffer,
                          DeviceBuffer::allocate(host.size() * sizeof(float), "cudnn-q8 scales"));
  if (const cudaError_t e =
          cudaMemcpy(buffer.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
      e != cudaSuccess)
    return Status::device_error(fmt::format("cudnn-q8: uploading the scales: {}", cudaGetErrorString(e)));
  return buffer;
}

}  // namespace

Result<std::unique_ptr<CudnnQ8Conv>> CudnnQ8Conv::create(std::shared_ptr<fe::graph::Graph> graph,
                                                         const kernels::Q8ConvDesc& d, bool has_bias,
                                                         std::span<const float> w_scale) {
  auto impl = std::make_unique<CudnnQ8Conv::Impl>();
  impl->desc = d;
  impl->has_bias = has_bias;
  impl->plans = CudnnPlans(std::move(graph));
  GPULAB_ASSIGN_OR_RETURN(impl->constants, upload_constants(d, w_scale));
  return std::unique_ptr<CudnnQ8Conv>(new CudnnQ8Conv(std::move(impl)));
}

Result<std::unique_ptr<CudnnQ8Conv>> CudnnQ8Conv::with_candidates(cudnnHandle_t handle,
                                                                  const kernels::Q8ConvDesc& desc,
                                                                  bool has_bias,
                                                                  std::span<const float> w_scale) {
  GPULAB_ASSIGN_OR_RETURN(auto graph, make_graph(handle, desc, has_bias));
  if (auto e = graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return cudnn_error(e, "heuristics " + describe(desc));
  deselect_cudnn_notes(*graph, {});
  if (auto e = graph->check_support(); e.is_bad()) return cudnn_error(e, "no engine for " + describe(desc));
  return create(std::move(graph), desc, has_bias, w_scale);
}

Result<std::unique_ptr<CudnnQ8Conv>> CudnnQ8Conv::with_tactic(cudnnHandle_t handle,
                                                              const kernels::Q8ConvDesc& desc, bool has_bias,
                                                              std::span<const float> w_scale,
                                                              std::string_view tactic) {
  if (!tactic.starts_with(kCudnnQ8TacticPrefix))
    return Status::invalid_argument(fmt::format("cuDNN: '{}' is not a cudnn-q8 tactic.", tactic));
  GPULAB_ASSIGN_OR_RETURN(const CudnnEngineConfig config,
                          parse_cudnn_engine_config(tactic.substr(kCudnnQ8TacticPrefix.size()), tactic));
  GPULAB_ASSIGN_OR_RETURN(auto graph, make_graph(handle, desc, has_bias));
  const std::string where = fmt::format("engine {}", tactic);
  if (auto e = graph->create_execution_plan(config.engine, frontend_knobs(config)); e.is_bad())
    return cudnn_error(e, where);
  if (auto e = graph->check_support(); e.is_bad()) return cudnn_error(e, where);
  GPULAB_ASSIGN_OR_RETURN(auto conv, create(std::move(graph), desc, has_bias, w_scale));
  GPULAB_TRY(conv->select(0));
  return conv;
}

int64_t CudnnQ8Conv::candidate_count() const {
  return impl_->plans.count();
}

Status CudnnQ8Conv::select(int64_t index) {
  GPULAB_TRY(impl_->plans.build(index, "cudnn-q8"));
  selected_ = index;
  return Status::ok();
}

std::string CudnnQ8Conv::tactic(int64_t index) const {
  return cudnn_engine_tactic(impl_->plans.graph(), index, kCudnnQ8TacticPrefix);
}

int64_t CudnnQ8Conv::workspace_bytes() const {
  return selected_ < 0 ? 0 : impl_->plans.workspace_bytes(selected_);
}

Status CudnnQ8Conv::launch(cudnnHandle_t handle, const Q8ConvPointers& ptrs, void* workspace) const {
  if (selected_ < 0) return Status::internal("cudnn-q8: launch before select");
  const kernels::Q8ConvDesc& d = impl_->desc;
  if (impl_->has_bias != (ptrs.bias != nullptr) || d.has_residual != (ptrs.residual != nullptr))
    return Status::invalid_argument("cudnn-q8: the bias or residual pointer does not match the graph");
  auto* constants = impl_->constants.as<float>();
  std::unordered_map<int64_t, void*> pack = {{kX, const_cast<void*>(ptrs.x)},
                                             {kW, const_cast<void*>(ptrs.w)},
                                             {kMultiplier, constants},
                                             {kInvYScale, constants + d.k},
                                             {kY, ptrs.y}};
  if (impl_->has_bias) pack[kBias] = const_cast<float*>(ptrs.bias);
  if (d.has_residual) {
    pack[kResidual] = const_cast<void*>(ptrs.residual);
    pack[kResidualScale] = constants + d.k + 1;
  }
  if (auto e = impl_->plans.graph().execute_plan_at_index(handle, pack, workspace, selected_); e.is_bad())
    return Status::device_error(
        fmt::format("cudnn-q8: execute {} failed: {}.", describe(d), e.get_message()));
  return Status::ok();
}

}  // namespace gpulab::cuda
