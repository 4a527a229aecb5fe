// Plan::validate's checks of the steps that read and write through TensorViews (plan.h).
#include <fmt/format.h>

#include "plan/plan.h"

namespace gpulab {
namespace {

Status bad(size_t index, const PlanStep& s, const std::string& what) {
  return Status::invalid_file(
      fmt::format("plan: step {} '{}' ({}): {}. The file is corrupt or was not written by "
                  "gpulab; rebuild it.",
                  index, s.name, step_kind_name(s.kind), what));
}

// Every element of `v` lies in [0, size) (size in elements); dims and strides are sane.
bool inside(const TensorView& v, int64_t size) {
  if (v.dims.size() != v.strides.size() || v.dims.empty() || v.dims.size() > kMaxViewRank || v.offset < 0)
    return false;
  int64_t last = v.offset;
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (v.dims[i] < 0 || v.strides[i] < 0 || v.dims[i] > (int64_t{1} << 31) ||
        v.strides[i] > (int64_t{1} << 40))
      return false;
    if (v.dims[i] == 0) return true;  // empty: nothing is read
    last += (v.dims[i] - 1) * v.strides[i];
  }
  return last < size;
}

int64_t value_elements(const PlanValue& v) {
  return v.h * v.w * v.c;
}

}  // namespace

bool is_view_step(StepKind kind) {
  switch (kind) {
    case StepKind::kCopy:
    case StepKind::kLinear:
    case StepKind::kMatMul:
    case StepKind::kAttention:
    case StepKind::kLayerNorm:
    case StepKind::kEltwise: return true;
    default: return false;
  }
}

Status validate_view_step(const Plan& plan, size_t index) {
  const PlanStep& s = plan.steps[index];
  const size_t n_in = s.inputs.size();
  const PlanWeight* w = s.weight >= 0 ? &plan.weights[static_cast<size_t>(s.weight)] : nullptr;
  const PlanWeight* b = s.bias >= 0 ? &plan.weights[static_cast<size_t>(s.bias)] : nullptr;
  size_t want_views = n_in + 1;
  bool inputs_ok = true;
  switch (s.kind) {
    case StepKind::kCopy:
      inputs_ok = n_in == 1 || (n_in == 0 && w);
      want_views = 2;
      break;
    case StepKind::kLinear: inputs_ok = (n_in == 1 || n_in == 2) && w; break;
    case StepKind::kMatMul: inputs_ok = n_in == 2; break;
    case StepKind::kAttention:
      inputs_ok = n_in == 3;
      want_views = w ? 5 : 4;
      break;
    case StepKind::kLayerNorm: inputs_ok = n_in == 1 && w; break;
    case StepKind::kEltwise:
      inputs_ok = n_in == 2 || (n_in == 1 && w);
      want_views = 3;
      break;
    default: return bad(index, s, "not a view step");
  }
  if (!inputs_ok)
    return bad(index, s, fmt::format("{} inputs{}", n_in, w ? " and a weight" : " and no weight"));
  if (s.views.size() != want_views)
    return bad(index, s, fmt::format("{} views, expected {}", s.views.size(), want_views));
  // Which value or weight each view reads or writes.
  const auto weight_view = [&](size_t v) {
    return (s.kind == StepKind::kCopy && n_in == 0 && v == 0) ||
           (s.kind == StepKind::kEltwise && n_in == 1 && v == 1) ||
           (s.kind == StepKind::kAttention && v == 4);
  };
  for (size_t v = 0; v < s.views.size(); ++v) {
    const bool output = v == (s.kind == StepKind::kAttention ? 3 : s.views.size() - 1);
    int64_t size = 0;
    if (weight_view(v)) {
      size = w->shape.numel();
    } else if (output) {
      size = value_elements(plan.values[static_cast<size_t>(s.output)]);
    } else {
      const size_t in = s.kind == StepKind::kCopy ? 0 : v;
      if (in >= n_in) return bad(index, s, fmt::format("view {} has no input", v));
      size = value_elements(plan.values[static_cast<size_t>(s.inputs[in])]);
    }
    if (!inside(s.views[v], size))
      return bad(index, s,
                 fmt::format("view {} (offset {}, dims [{}], strides [{}]) reaches beyond its {} elements", v,
                             s.views[v].offset, fmt::join(s.views[v].dims, ","),
                             fmt::join(s.views[v].strides, ","), size));
  }
  const auto dims = [&](size_t v) { return s.views[v].dims; };
  const auto rank_is = [&](size_t v, size_t r) { return s.views[v].dims.size() == r; };
  switch (s.kind) {
    case StepKind::kCopy:
    case StepKind::kEltwise:
      for (size_t v = 1; v < s.views.size(); ++v)
        if (dims(v) != dims(0)) return bad(index, s, "views of different dims");
      break;
    case StepKind::kLinear: {
      const size_t y = s.views.size() - 1;
      if (!rank_is(0, 2) || !rank_is(y, 2) || dims(0)[0] != dims(y)[0] ||
          w->shape != Shape{dims(y)[1], dims(0)[1]} || (b && b->shape.numel() != dims(y)[1]) ||
          (n_in == 2 && dims(1) != dims(y)))
        return bad(index, s, "views or weights of a [rows, K] x [N, K] product do not fit");
      break;
    }
    case StepKind::kMatMul:
      if (!rank_is(0, 3) || !rank_is(1, 3) || !rank_is(2, 3) || dims(0)[0] != dims(1)[0] ||
          dims(0)[0] != dims(2)[0] || dims(0)[2] != dims(1)[1] || dims(2)[1] != dims(0)[1] ||
          dims(2)[2] != dims(1)[2])
        return bad(index, s, "views of a [B, M, K] x [B, K, N] product do not fit");
      break;
    case StepKind::kAttention: {
      for (size_t v = 0; v < s.views.size(); ++v)
        if (!rank_is(v, 4)) return bad(index, s, "views are not [B, H, T, D]");
      const auto q = dims(0), k = dims(1), vv = dims(2), y = dims(3);
      if (q[0] != k[0] || q[0] != vv[0] || q[1] != k[1] || q[1] != vv[1] || q[3] != k[3] || k[2] != vv[2] ||
          y != std::vector<int64_t>{q[0], q[1], q[2], vv[3]} ||
          (w && dims(4) != std::vector<int64_t>{q[0], q[1], q[2], k[2]}))
        return bad(index, s, "views of Q, K, V, the output or the bias do not fit");
      break;
    }
    case StepKind::kLayerNorm:
      if (!rank_is(0, 2) || dims(0) != dims(1) || w->shape.numel() != dims(0)[1] ||
          (b && b->shape.numel() != dims(0)[1]))
        return bad(index, s, "views or weights of a [rows, C] normalization do not fit");
      break;
    default: break;
  }
  return Status::ok();
}

}  // namespace gpulab
