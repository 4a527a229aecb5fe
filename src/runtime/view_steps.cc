#include "runtime/view_steps.h"

#include <fmt/format.h>

#include "backends/cuda/kernels/kernels.h"
#include "backends/cuda/kernels/view_kernels.h"
#include "core/log.h"

namespace gpulab {
namespace {

int64_t elements(const PlanValue& v) {
  return v.h * v.w * v.c;
}

kernels::StridedView strided(const TensorView& v, int64_t image_stride) {
  kernels::StridedView s;
  s.rank = static_cast<int>(v.dims.size());
  for (size_t i = 0; i < v.dims.size() && i < static_cast<size_t>(kernels::kMaxStridedRank); ++i) {
    s.dims[i] = v.dims[i];
    s.strides[i] = v.strides[i];
  }
  s.offset = v.offset;
  s.image_stride = image_stride;
  return s;
}

const char* elem_ptr(const void* base, int64_t elements_in, DataType t) {
  return static_cast<const char*>(base) + elements_in * static_cast<int64_t>(dtype_size(t));
}

Status layout_error(const PlanStep& step, const std::string& what) {
  return Status::internal(fmt::format("step '{}' ({}): {}; the lowering makes no such view", step.name,
                                      step_kind_name(step.kind), what));
}

// The elementwise GELU of a kLinear step after cuBLASLt's bias epilogue: the exact one of an
// FP32/TF32 step, or the tanh form where cuBLASLt has no GELU epilogue (MatmulLaunch::separate_gelu).
Status gelu_after(const StepLaunch& l, kernels::UnaryOp op) {
  const PlanValue& y = l.plan.values[static_cast<size_t>(l.step.output)];
  kernels::UnaryDesc d;
  d.op = op;
  d.count = l.batch * elements(y);
  d.dtype = y.dtype;
  return kernels::launch_unary(d, l.value(l.step.output), l.value(l.step.output), l.stream);
}

}  // namespace

Result<MatmulLaunch> matmul_launch(const Plan& plan, const PlanStep& step, int64_t batch) {
  MatmulLaunch m;
  cuda::MatmulProblem& p = m.problem;
  const PlanValue& y = plan.values[static_cast<size_t>(step.output)];
  const int64_t ey = elements(y);
  p.dtype = y.dtype;
  p.precision = step.precision;
  if (step.kind == StepKind::kLinear) {
    const TensorView &xv = step.views[0], &yv = step.views.back();
    if (xv.strides[1] != 1 || yv.strides[1] != 1) return layout_error(step, "rows with a strided last dim");
    const int64_t rows = xv.dims[0], ex = elements(plan.values[static_cast<size_t>(step.inputs[0])]);
    p.n = yv.dims[1];
    p.k = xv.dims[1];
    p.lda = xv.strides[0];
    p.ldd = yv.strides[0];
    p.ldb = p.k;
    p.b_rows_are_columns = true;
    p.has_bias = step.bias >= 0;
    p.bias_float32 = p.has_bias && plan.weights[static_cast<size_t>(step.bias)].dtype == DataType::kFloat32 &&
                     y.dtype != DataType::kFloat32;
    p.gelu_tanh = step.pointwise == PointwiseFn::kGeluTanh;
    int64_t er = 0;
    if (step.inputs.size() > 1) {
      const TensorView& rv = step.views[1];
      p.has_c = true;
      p.ldc = rv.strides[0];
      er = elements(plan.values[static_cast<size_t>(step.inputs[1])]);
    }
    // One product over all images' rows when every operand's images follow each other row-wise.
    const bool fold =
        (rows == 1 || (ex == rows * p.lda && ey == rows * p.ldd && (!p.has_c || er == rows * p.ldc)));
    if (fold && rows > 1) {
      p.m = batch * rows;
    } else if (fold) {  // one row per image: the image stride is the row stride
      p.m = batch;
      p.lda = ex;
      p.ldd = ey;
      if (p.has_c) p.ldc = er;
    } else {
      p.m = rows;
      p.batch = batch;
      p.stride_a = ex;
      p.stride_d = ey;
      p.stride_c = er;
    }
    return m;
  }
  // kMatMul: a [B, M, K], b [B, K, N], y [B, M, N].
  const TensorView &av = step.views[0], &bv = step.views[1], &yv = step.views[2];
  if (av.strides[2] != 1 || yv.strides[2] != 1)
    return layout_error(step, "a product with a strided last dim");
  p.m = av.dims[1];
  p.k = av.dims[2];
  p.n = bv.dims[2];
  p.lda = av.strides[1];
  p.ldd = yv.strides[1];
  if (bv.strides[2] == 1) {
    p.ldb = bv.strides[1];
  } else if (bv.strides[1] == 1) {  // B stored transposed: [N, K] rows
    p.ldb = bv.strides[2];
    p.b_rows_are_columns = true;
  } else {
    return layout_error(step, "a B operand without a contiguous dim");
  }
  p.alpha = step.scale;
  const int64_t b = av.dims[0];
  const int64_t ea = elements(plan.values[static_cast<size_t>(step.inputs[0])]);
  const int64_t eb = elements(plan.values[static_cast<size_t>(step.inputs[1])]);
  const auto stride0 = [b](const TensorView& v, int64_t image) { return b == 1 ? image : v.strides[0]; };
  const bool fold =
      (b == 1 || (ea == b * av.strides[0] && eb == b * bv.strides[0] && ey == b * yv.strides[0]));
  p.stride_a = stride0(av, ea);
  p.stride_b = stride0(bv, eb);
  p.stride_d = stride0(yv, ey);
  if (fold) {
    p.batch = batch * b;
  } else {
    p.batch = b;
    m.launches = batch;
    m.a_step = ea;
    m.b_step = eb;
    m.d_step = ey;
  }
  return m;
}

Result<std::unique_ptr<cuda::CublasLtMatmul>> prepare_matmul_plan(cublasLtHandle_t handle,
                                                                  const PlanStep& step, MatmulLaunch& launch,
                                                                  int64_t workspace_bytes) {
  cuda::MatmulProblem& p = launch.problem;
  auto plan = cuda::CublasLtMatmul::create(handle, p, workspace_bytes);
  const auto unsupported = [&plan] {
    return !plan.is_ok() && plan.status().code() == StatusCode::kUnsupported;
  };
  const std::string first = plan.is_ok() ? std::string() : plan.status().message();
  if (unsupported() && p.gelu_tanh) {
    p.gelu_tanh = false;
    launch.separate_gelu = true;
    plan = cuda::CublasLtMatmul::create(handle, p, workspace_bytes);
  }
  const bool dense_rows = p.ldd == p.n && (p.batch == 1 || p.stride_d == p.m * p.ldd) && launch.launches == 1;
  if (unsupported() && p.has_bias && dense_rows) {
    p.has_bias = false;
    p.bias_float32 = false;
    launch.separate_bias = true;
    plan = cuda::CublasLtMatmul::create(handle, p, workspace_bytes);
  }
  if (plan.is_ok() && (launch.separate_gelu || launch.separate_bias))
    log_info("context: {}: {} The {} runs as a kernel of its own after the product.", step.name, first,
             launch.separate_bias ? (launch.separate_gelu ? "bias and the GELU" : "bias") : "GELU");
  return plan;
}

Result<SdpaLaunch> sdpa_launch(const Plan& plan, const PlanStep& step, int64_t batch) {
  SdpaLaunch s;
  cuda::SdpaProblem& p = s.problem;
  const PlanValue& y = plan.values[static_cast<size_t>(step.output)];
  if (y.dtype != DataType::kFloat16 && y.dtype != DataType::kBFloat16)
    return Status::unsupported("cuDNN SDPA: a " + std::string(dtype_name(y.dtype)) + " plan");
  p.dtype = y.dtype;
  p.scale = step.scale;
  const bool bias_per_b = step.weight >= 0 && step.views[4].strides[0] != 0 && step.views[4].dims[0] > 1;
  const int64_t b = step.views[0].dims[0];
  const auto fill = [&](const TensorView& v, int64_t image, std::array<int64_t, 4>& dims,
                        std::array<int64_t, 4>& strides, int64_t& image_step) -> Status {
    if (v.strides[3] != 1) return Status::unsupported("cuDNN SDPA: a head dim that is not contiguous");
    for (size_t i = 0; i < 4; ++i) {
      dims[i] = v.dims[i];
      strides[i] = v.strides[i];
    }
    if (bias_per_b) {  // one launch per image
      image_step = image;
      return Status::ok();
    }
    if (b > 1 && image != b * v.strides[0])
      return Status::unsupported("cuDNN SDPA: images that do not follow the B dim in memory");
    dims[0] = batch * b;
    strides[0] = b == 1 ? image : v.strides[0];
    return Status::ok();
  };
  GPULAB_TRY(fill(step.views[0], elements(plan.values[static_cast<size_t>(step.inputs[0])]), p.q_dims,
                  p.q_strides, s.q_step));
  GPULAB_TRY(fill(step.views[1], elements(plan.values[static_cast<size_t>(step.inputs[1])]), p.k_dims,
                  p.k_strides, s.k_step));
  GPULAB_TRY(fill(step.views[2], elements(plan.values[static_cast<size_t>(step.inputs[2])]), p.v_dims,
                  p.v_strides, s.v_step));
  GPULAB_TRY(fill(step.views[3], elements(y), p.o_dims, p.o_strides, s.o_step));
  if (bias_per_b) s.launches = batch;
  if (step.weight >= 0) {
    const TensorView& bv = step.views[4];
    p.has_bias = true;
    for (size_t i = 0; i < 4; ++i) {
      // cuDNN broadcasts a bias dim of 1; a 0 stride is such a dim.
      p.bias_dims[i] = bv.strides[i] == 0 ? 1 : bv.dims[i];
      p.bias_strides[i] = bv.strides[i] == 0 ? 1 : bv.strides[i];
    }
    if (bv.strides[3] != 1 && bv.dims[3] > 1)
      return Status::unsupported("cuDNN SDPA: a bias with strided keys");
  }
  return s;
}

Status enqueue_copy(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[static_cast<size_t>(step.output)];
  kernels::CopyDesc d;
  d.n = l.batch;
  d.y = strided(step.views[1], elements(y));
  d.y_dtype = y.dtype;
  const void* x = nullptr;
  if (step.inputs.empty()) {
    x = l.weight(step.weight);
    d.x = strided(step.views[0], 0);
    d.x_dtype = l.plan.weights[static_cast<size_t>(step.weight)].dtype;
  } else {
    const PlanValue& xv = l.plan.values[static_cast<size_t>(step.inputs[0])];
    x = l.value(step.inputs[0]);
    d.x = strided(step.views[0], elements(xv));
    d.x_dtype = xv.dtype;
  }
  return kernels::launch_copy(d, x, l.value(step.output), l.stream);
}

Status enqueue_eltwise(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[static_cast<size_t>(step.output)];
  kernels::EltwiseDesc d;
  d.n = l.batch;
  d.op = static_cast<kernels::EltwiseKernelOp>(static_cast<int>(step.eltwise));
  d.dtype = y.dtype;
  d.a = strided(step.views[0], elements(l.plan.values[static_cast<size_t>(step.inputs[0])]));
  d.y = strided(step.views[2], elements(y));
  const void* b = nullptr;
  if (step.inputs.size() > 1) {
    b = l.value(step.inputs[1]);
    d.b = strided(step.views[1], elements(l.plan.values[static_cast<size_t>(step.inputs[1])]));
  } else {
    b = l.weight(step.weight);
    d.b = strided(step.views[1], 0);
  }
  return kernels::launch_eltwise(d, l.value(step.inputs[0]), b, l.value(step.output), l.stream);
}

Status enqueue_layer_norm(const StepLaunch& l) {
  const PlanStep& step = l.step;
  const TensorView &xv = step.views[0], &yv = step.views[1];
  if (xv.strides[1] != 1 || yv.strides[1] != 1) return layout_error(step, "rows with a strided last dim");
  const PlanValue& x = l.plan.values[static_cast<size_t>(step.inputs[0])];
  const PlanValue& y = l.plan.values[static_cast<size_t>(step.output)];
  kernels::LayerNormDesc d;
  d.l2 = step.l2_norm;
  d.n = l.batch;
  d.rows = xv.dims[0];
  d.c = xv.dims[1];
  d.x_offset = xv.offset;
  d.x_row_stride = xv.strides[0];
  d.x_image_stride = elements(x);
  d.y_offset = yv.offset;
  d.y_row_stride = yv.strides[0];
  d.y_image_stride = elements(y);
  d.epsilon = step.epsilon;
  d.dtype = y.dtype;
  return kernels::launch_layer_norm(
      d, l.value(step.inputs[0]), static_cast<const float*>(l.weight(step.weight)),
      static_cast<const float*>(l.weight(step.bias)), l.value(step.output), l.stream);
}

Status enqueue_matmul(const StepLaunch& l, const PreparedMatmul& prepared) {
  const PlanStep& step = l.step;
  const MatmulLaunch& m = prepared.launch;
  const DataType t = m.problem.dtype;
  const bool linear = step.kind == StepKind::kLinear;
  const void* a = elem_ptr(l.value(step.inputs[0]), step.views[0].offset, t);
  const void* b = linear ? l.weight(step.weight) : elem_ptr(l.value(step.inputs[1]), step.views[1].offset, t);
  const void* c =
      linear && step.inputs.size() > 1 ? elem_ptr(l.value(step.inputs[1]), step.views[1].offset, t) : nullptr;
  char* d = const_cast<char*>(elem_ptr(l.value(step.output), step.views.back().offset, t));
  for (int64_t i = 0; i < m.launches; ++i) {
    GPULAB_TRY(prepared.matmul->launch(
        prepared.handle, elem_ptr(a, i * m.a_step, t), linear ? b : elem_ptr(b, i * m.b_step, t),
        l.weight(step.bias), c ? elem_ptr(c, i * m.c_step, t) : nullptr,
        const_cast<char*>(elem_ptr(d, i * m.d_step, t)), l.workspace, prepared.workspace_bytes, l.stream));
  }
  if (m.separate_bias) {
    const cuda::MatmulProblem& p = m.problem;
    kernels::BiasActDesc bias;
    bias.count = p.batch * p.m * p.n;  // rows of D are dense (prepare_matmul_plan)
    bias.c = p.n;
    bias.dtype = t;
    bias.bias_dtype = l.plan.weights[static_cast<size_t>(step.bias)].dtype;
    GPULAB_TRY(kernels::launch_bias_act(bias, d, l.weight(step.bias), d, l.stream));
  }
  if (linear && step.pointwise == PointwiseFn::kGelu) return gelu_after(l, kernels::UnaryOp::kGelu);
  if (m.separate_gelu) return gelu_after(l, kernels::UnaryOp::kGeluTanh);
  if (linear && step.pointwise != PointwiseFn::kIdentity && step.pointwise != PointwiseFn::kGeluTanh)
    return layout_error(step, "an epilogue other than GELU");
  return Status::ok();
}

Status enqueue_attention(const StepLaunch& l, const PreparedSdpa& prepared) {
  const PlanStep& step = l.step;
  const PlanValue& y = l.plan.values[static_cast<size_t>(step.output)];
  const DataType t = y.dtype;
  const auto ptr = [&](int input, const TensorView& v) { return elem_ptr(l.value(input), v.offset, t); };
  if (prepared.sdpa) {
    const SdpaLaunch& s = prepared.launch;
    const void* bias = step.weight >= 0 ? elem_ptr(l.weight(step.weight), step.views[4].offset, t) : nullptr;
    for (int64_t i = 0; i < s.launches; ++i) {
      GPULAB_TRY(prepared.sdpa->launch(
          prepared.handle, elem_ptr(ptr(step.inputs[0], step.views[0]), i * s.q_step, t),
          elem_ptr(ptr(step.inputs[1], step.views[1]), i * s.k_step, t),
          elem_ptr(ptr(step.inputs[2], step.views[2]), i * s.v_step, t), bias,
          const_cast<char*>(elem_ptr(ptr(step.output, step.views[3]), i * s.o_step, t)), l.workspace));
    }
    return Status::ok();
  }
  kernels::AttentionDesc d;
  d.n = l.batch;
  d.q = strided(step.views[0], elements(l.plan.values[static_cast<size_t>(step.inputs[0])]));
  d.k = strided(step.views[1], elements(l.plan.values[static_cast<size_t>(step.inputs[1])]));
  d.v = strided(step.views[2], elements(l.plan.values[static_cast<size_t>(step.inputs[2])]));
  d.y = strided(step.views[3], elements(y));
  d.has_bias = step.weight >= 0;
  if (d.has_bias) d.bias = strided(step.views[4], 0);
  d.scale = step.scale;
  d.dtype = t;
  return kernels::launch_attention(d, l.value(step.inputs[0]), l.value(step.inputs[1]),
                                   l.value(step.inputs[2]), l.weight(step.weight), l.value(step.output),
                                   l.stream);
}

}  // namespace gpulab
