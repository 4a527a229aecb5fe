#include "backends/cuda/cudnn_sdpa.h"

#include <cudnn_frontend.h>
#include <fmt/format.h>

#include <unordered_map>

namespace gpulab::cuda {

namespace fe = cudnn_frontend;

namespace {

constexpr int64_t kQ = 1, kK = 2, kV = 3, kBias = 4, kO = 5;

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) {
  return {a.begin(), a.end()};
}

}  // namespace

std::string sdpa_signature(const SdpaProblem& p) {
  return fmt::format("sdpa|q{}|k{}|v{}|o{}|bias{}|scale{}|{}", fmt::join(p.q_dims, "x"),
                     fmt::join(p.k_dims, "x"), fmt::join(p.v_dims, "x"), fmt::join(p.o_dims, "x"),
                     p.has_bias ? fmt::format("{}", fmt::join(p.bias_dims, "x")) : "none", p.scale,
                     dtype_name(p.dtype));
}

struct CudnnSdpa::Impl {
  SdpaProblem problem;
  std::shared_ptr<fe::graph::Graph> graph;
};

CudnnSdpa::CudnnSdpa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnSdpa::~CudnnSdpa() = default;

Result<std::unique_ptr<CudnnSdpa>> CudnnSdpa::create(cudnnHandle_t handle, const SdpaProblem& p) {
  if (p.dtype != DataType::kFloat16 && p.dtype != DataType::kBFloat16)
    return Status::unsupported("cuDNN SDPA: float16 or bfloat16 only, not " +
                               std::string(dtype_name(p.dtype)) + ".");
  const auto fail = [&](fe::error_t e, const char* stage) {
    return Status::unsupported(
        fmt::format("cuDNN SDPA: {} of {}: {}", stage, sdpa_signature(p), e.get_message()));
  };
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(p.dtype == DataType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::array<int64_t, 4>& dims,
                    const std::array<int64_t, 4>& strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(vec(dims)).set_stride(
        vec(strides)));
  };
  auto Q = tensor("q", kQ, p.q_dims, p.q_strides);
  auto K = tensor("k", kK, p.k_dims, p.k_strides);
  auto V = tensor("v", kV, p.v_dims, p.v_strides);
  auto options =
      fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(false).set_attn_scale(p.scale);
  if (p.has_bias) options.set_bias(tensor("bias", kBias, p.bias_dims, p.bias_strides));
  auto [O, stats] = g->sdpa(Q, K, V, options);
  (void)stats;
  O->set_output(true).set_uid(kO).set_dim(vec(p.o_dims)).set_stride(vec(p.o_strides));
  if (auto e = g->validate(); e.is_bad()) return fail(e, "validate");
  if (auto e = g->build_operation_graph(handle); e.is_bad()) return fail(e, "build_operation_graph");
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return fail(e, "create_execution_plans");
  if (auto e = g->check_support(); e.is_bad()) return fail(e, "check_support");
  if (auto e = g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad())
    return fail(e, "build_plans");
  int64_t ws = 0;
  if (auto e = g->get_workspace_size(ws); e.is_bad()) return fail(e, "get_workspace_size");
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->graph = std::move(g);
  std::unique_ptr<CudnnSdpa> sdpa(new CudnnSdpa(std::move(impl)));
  sdpa->workspace_bytes_ = ws;
  return sdpa;
}

Status CudnnSdpa::launch(cudnnHandle_t handle, const void* q, const void* k, const void* v, const void* bias,
                         void* o, void* workspace) const {
  std::unordered_map<int64_t, void*> pack{
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, o}};
  if (impl_->problem.has_bias) pack[kBias] = const_cast<void*>(bias);
  if (auto e = impl_->graph->execute(handle, pack, workspace); e.is_bad())
    return Status::device_error(
        fmt::format("cuDNN SDPA: execute {} failed: {}.", sdpa_signature(impl_->problem), e.get_message()));
  return Status::ok();
}

}  // namespace gpulab::cuda
