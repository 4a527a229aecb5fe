// Known values of an export's shape code: what torch.onnx's TorchScript exporter writes around a
// view(B, ...) or an expand(n, -1, -1) when the batch is a dynamic axis (Shape -> Gather -> Mul ->
// Unsqueeze -> Concat -> Reshape, Where(Equal(shape, -1), 1, shape) ...), and the index arithmetic
// of Swin's window masks (Range, Mod, Slice ...). Values are int64 (bool as 0/1); a value
// Shape::batch_times(k) stands for k times the batch size N (N >= 1), and the arithmetic keeps it
// symbolic where the result is still of that form or does not depend on N at all.
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "core/checked.h"
#include "graph/infer_util.h"

namespace gpulab::infer {
namespace {

using Values = std::vector<int64_t>;
using Known = std::optional<int64_t>;  // nullopt: depends on N in a way N * k cannot write

bool sym(int64_t v) {
  return Shape::is_batch(v);
}
int64_t factor(int64_t v) {
  return Shape::batch_factor(v);
}
Known times(int64_t k) {
  if (k < 1 || k >= Shape::kMaxBatchFactor) return std::nullopt;
  return Shape::batch_times(k);
}

Known add(int64_t a, int64_t b) {
  if (!sym(a) && !sym(b)) return checked_add(a, b);
  if (b == 0) return a;
  if (a == 0) return b;
  return std::nullopt;
}
Known sub(int64_t a, int64_t b) {
  if (!sym(a) && !sym(b)) return checked_sub(a, b);
  if (b == 0) return a;
  return std::nullopt;
}
Known mul(int64_t a, int64_t b) {
  if (!sym(a) && !sym(b)) return checked_mul(a, b);
  if (sym(a) && sym(b)) return std::nullopt;
  const int64_t s = sym(a) ? a : b, c = sym(a) ? b : a;
  if (c == 0) return 0;
  if (c < 0 || factor(s) > Shape::kMaxBatchFactor / c) return std::nullopt;
  return times(factor(s) * c);
}
// ONNX Div of integers truncates; the exporter writes Python's // as Div of non-negative sizes.
Known div(int64_t a, int64_t b) {
  if (!sym(a) && !sym(b))
    return b == 0 || (b == -1 && a == std::numeric_limits<int64_t>::min()) ? Known() : Known(a / b);
  if (sym(a) && !sym(b) && b > 0 && factor(a) % b == 0) return times(factor(a) / b);
  if (sym(a) && sym(b) && factor(a) % factor(b) == 0) return factor(a) / factor(b);
  return std::nullopt;
}
Known mod(int64_t a, int64_t b, bool fmod) {
  if (!sym(a) && !sym(b)) {
    if (b == 0) return std::nullopt;
    if (b == -1) return 0;  // also where a % b itself would overflow (the minimum int64 % -1)
    int64_t r = a % b;
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;  // Python's %: the sign of the divisor
    return r;
  }
  if (sym(a) && !sym(b) && b > 0 && factor(a) % b == 0) return 0;
  return std::nullopt;
}
Known max_of(int64_t a, int64_t b, bool take_max) {
  if (!sym(a) && !sym(b)) return take_max ? std::max(a, b) : std::min(a, b);
  if (sym(a) && sym(b)) return (factor(a) >= factor(b)) == take_max ? a : b;  // N >= 1
  const int64_t s = sym(a) ? a : b, c = sym(a) ? b : a;
  if (c <= factor(s)) return take_max ? s : c;  // N * k >= k >= c
  return std::nullopt;
}
// N * k == c holds for N = c / k only; false when that is not a positive integer.
Known equal(int64_t a, int64_t b) {
  if (!sym(a) && !sym(b)) return a == b ? 1 : 0;
  if (sym(a) && sym(b)) return factor(a) == factor(b) ? 1 : 0;
  const int64_t s = sym(a) ? a : b, c = sym(a) ? b : a;
  if (c < factor(s) || c % factor(s) != 0) return 0;
  return std::nullopt;
}

// Row-major strides of `dims`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Index (into a tensor of `dims`, broadcast against `out`) of output element `flat`.
int64_t broadcast_index(int64_t flat, const std::vector<int64_t>& out, const std::vector<int64_t>& dims) {
  const std::vector<int64_t> st = strides_of(dims);
  int64_t index = 0;
  for (size_t i = out.size(); i-- > 0;) {
    const int64_t coord = flat % out[i];
    flat /= out[i];
    const size_t lead = out.size() - dims.size();
    if (i >= lead && dims[i - lead] != 1) index += coord * st[i - lead];
  }
  return index;
}

// A fully known input: values and a shape without the batch.
struct KnownInput {
  const Values* values = nullptr;
  std::vector<int64_t> dims;
};
std::optional<KnownInput> known_input(const ValueInfo* v) {
  if (!v || !v->known_values || v->shape.has_batch()) return std::nullopt;
  KnownInput k{&*v->known_values, v->shape.dims};
  if (static_cast<int64_t>(k.values->size()) != v->shape.numel()) return std::nullopt;
  return k;
}

using Binary = Known (*)(int64_t, int64_t);

std::optional<Values> elementwise(const std::vector<KnownInput>& ins, const std::vector<int64_t>& out,
                                  const std::function<Known(const std::vector<int64_t>&)>& op) {
  const int64_t n = std::accumulate(out.begin(), out.end(), int64_t{1}, std::multiplies<>());
  Values result(static_cast<size_t>(n));
  std::vector<int64_t> args(ins.size());
  for (int64_t e = 0; e < n; ++e) {
    for (size_t i = 0; i < ins.size(); ++i) args[i] = (*ins[i].values)[broadcast_index(e, out, ins[i].dims)];
    const Known v = op(args);
    if (!v) return std::nullopt;
    result[static_cast<size_t>(e)] = *v;
  }
  return result;
}

// Output element -> input element of a data movement op, or -1 when the output element is not read
// from the input (Pad).
std::optional<Values> gather_elements(
    const KnownInput& x, const std::vector<int64_t>& out,
    const std::function<int64_t(const std::vector<int64_t>& coord)>& source) {
  const int64_t n = std::accumulate(out.begin(), out.end(), int64_t{1}, std::multiplies<>());
  Values result(static_cast<size_t>(n));
  std::vector<int64_t> coord(out.size());
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e;
    for (size_t i = out.size(); i-- > 0;) {
      coord[i] = rest % out[i];
      rest /= out[i];
    }
    const int64_t at = source(coord);
    if (at < 0 || at >= static_cast<int64_t>(x.values->size())) return std::nullopt;
    result[static_cast<size_t>(e)] = (*x.values)[static_cast<size_t>(at)];
  }
  return result;
}

int64_t normalized(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

}  // namespace

std::optional<Values> evaluate_known(const Node& node, const std::vector<const ValueInfo*>& in,
                                     const ValueInfo& out) {
  // Runs before shape inference checks the output's size: the product of its dimensions may not fit.
  if (out.shape.has_batch()) return std::nullopt;
  const std::optional<int64_t> count = checked_product(out.shape.dims);
  if (!count || *count < 0 || *count > kMaxKnownValues) return std::nullopt;
  const std::vector<int64_t>& od = out.shape.dims;
  std::vector<KnownInput> ins;
  for (const ValueInfo* v : in) {
    auto k = known_input(v);
    // Ops that do not read every input's values check theirs below.
    if (!k) {
      ins.push_back(KnownInput{});
      continue;
    }
    ins.push_back(*k);
  }
  auto all_known = [&](size_t count) {
    if (ins.size() < count) return false;
    for (size_t i = 0; i < count; ++i)
      if (!ins[i].values) return false;
    return true;
  };
  auto binary = [&](Binary op) -> std::optional<Values> {
    if (!all_known(2)) return std::nullopt;
    return elementwise({ins[0], ins[1]}, od, [op](const std::vector<int64_t>& a) { return op(a[0], a[1]); });
  };
  switch (node.op) {
    case OpType::kAdd: return binary(add);
    case OpType::kSub: return binary(sub);
    case OpType::kMul: return binary(mul);
    case OpType::kDiv: return binary(div);
    case OpType::kEqual: return binary(equal);
    case OpType::kMax: return binary([](int64_t a, int64_t b) { return max_of(a, b, true); });
    case OpType::kMin: return binary([](int64_t a, int64_t b) { return max_of(a, b, false); });
    case OpType::kMod: {
      if (!all_known(2)) return std::nullopt;
      const bool fmod = node.attr<ModAttrs>().fmod;
      return elementwise({ins[0], ins[1]}, od,
                         [fmod](const std::vector<int64_t>& a) { return mod(a[0], a[1], fmod); });
    }
    case OpType::kWhere: {
      if (!all_known(3)) return std::nullopt;
      return elementwise({ins[0], ins[1], ins[2]}, od,
                         [](const std::vector<int64_t>& a) { return Known(a[0] != 0 ? a[1] : a[2]); });
    }
    case OpType::kNeg:
    case OpType::kNot:
    case OpType::kCast: {
      if (!all_known(1)) return std::nullopt;
      const OpType op = node.op;
      const bool to_bool = op == OpType::kCast && node.attr<CastAttrs>().to == DataType::kBool;
      if (op == OpType::kCast && in[0]->dtype != DataType::kInt64 && in[0]->dtype != DataType::kBool)
        return std::nullopt;
      return elementwise({ins[0]}, od, [op, to_bool](const std::vector<int64_t>& a) -> Known {
        if (op == OpType::kNot) return a[0] == 0 ? 1 : 0;
        if (op == OpType::kNeg) return sym(a[0]) ? Known() : Known(-a[0]);
        if (to_bool) return sym(a[0]) ? 1 : (a[0] != 0 ? 1 : 0);  // N * k >= 1
        return a[0];
      });
    }
    case OpType::kIdentity:
    case OpType::kDropout:
    case OpType::kReshape:
    case OpType::kFlatten:
    case OpType::kSqueeze:
    case OpType::kUnsqueeze:
      if (!all_known(1)) return std::nullopt;
      return *ins[0].values;
    case OpType::kExpand:
      if (!all_known(1)) return std::nullopt;
      return elementwise({ins[0]}, od, [](const std::vector<int64_t>& a) { return Known(a[0]); });
    case OpType::kConstantOfShape: {
      const auto& a = node.attr<ConstantOfShapeAttrs>();
      return Values(static_cast<size_t>(out.shape.numel()), static_cast<int64_t>(a.value));
    }
    case OpType::kRange: {
      if (!all_known(3)) return std::nullopt;
      Values v(static_cast<size_t>(out.shape.numel()));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = (*ins[0].values)[0] + static_cast<int64_t>(i) * (*ins[2].values)[0];
      return v;
    }
    case OpType::kTranspose: {
      if (!all_known(1)) return std::nullopt;
      std::vector<int64_t> perm = node.attr<TransposeAttrs>().perm;
      const int64_t rank = static_cast<int64_t>(ins[0].dims.size());
      if (perm.empty()) {
        perm.resize(static_cast<size_t>(rank));
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      const std::vector<int64_t> st = strides_of(ins[0].dims);
      return gather_elements(ins[0], od, [&](const std::vector<int64_t>& c) {
        int64_t at = 0;
        for (size_t i = 0; i < c.size(); ++i) at += c[i] * st[static_cast<size_t>(normalized(perm[i], rank))];
        return at;
      });
    }
    case OpType::kSlice: {
      if (!all_known(3)) return std::nullopt;
      const int64_t rank = static_cast<int64_t>(ins[0].dims.size());
      std::vector<int64_t> first(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
      const Values& starts = *ins[1].values;
      const Values& ends = *ins[2].values;
      for (size_t i = 0; i < starts.size(); ++i) {
        const int64_t axis =
            ins.size() > 3 && ins[3].values ? normalized((*ins[3].values)[i], rank) : static_cast<int64_t>(i);
        const int64_t st = ins.size() > 4 && ins[4].values ? (*ins[4].values)[i] : 1;
        if (axis < 0 || axis >= rank) return std::nullopt;
        auto r = resolve_slice(ins[0].dims[static_cast<size_t>(axis)], starts[i], ends[i], st);
        if (!r.is_ok()) return std::nullopt;
        first[static_cast<size_t>(axis)] = r->first;
        step[static_cast<size_t>(axis)] = r->step;
      }
      const std::vector<int64_t> st = strides_of(ins[0].dims);
      return gather_elements(ins[0], od, [&](const std::vector<int64_t>& c) {
        int64_t at = 0;
        for (size_t i = 0; i < c.size(); ++i) at += (first[i] + c[i] * step[i]) * st[i];
        return at;
      });
    }
    case OpType::kGather: {
      if (!all_known(2)) return std::nullopt;
      const int64_t rank = static_cast<int64_t>(ins[0].dims.size());
      const int64_t axis = normalized(node.attr<AxisAttrs>().axis, rank);
      const size_t index_rank = ins[1].dims.size();
      const std::vector<int64_t> st = strides_of(ins[0].dims);
      const std::vector<int64_t> ist = strides_of(ins[1].dims);
      const int64_t axis_len = ins[0].dims[static_cast<size_t>(axis)];
      return gather_elements(ins[0], od, [&](const std::vector<int64_t>& c) -> int64_t {
        int64_t idx_at = 0;
        for (size_t j = 0; j < index_rank; ++j) idx_at += c[static_cast<size_t>(axis) + j] * ist[j];
        int64_t idx = (*ins[1].values)[static_cast<size_t>(idx_at)];
        if (idx < 0) idx += axis_len;
        if (idx < 0 || idx >= axis_len) return -1;
        int64_t at = idx * st[static_cast<size_t>(axis)];
        for (int64_t d = 0; d < axis; ++d) at += c[static_cast<size_t>(d)] * st[static_cast<size_t>(d)];
        for (int64_t d = axis + 1; d < rank; ++d)
          at += c[static_cast<size_t>(d) + index_rank - 1] * st[static_cast<size_t>(d)];
        return at;
      });
    }
    case OpType::kConcat: {
      if (!all_known(ins.size()) || ins.empty()) return std::nullopt;
      const int64_t rank = static_cast<int64_t>(od.size());
      const int64_t axis = normalized(node.attr<AxisAttrs>().axis, rank);
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= od[static_cast<size_t>(d)];
      Values v;
      for (int64_t o = 0; o < outer; ++o)
        for (const KnownInput& k : ins) {
          const size_t block = k.values->size() / static_cast<size_t>(std::max<int64_t>(outer, 1));
          v.insert(v.end(), k.values->begin() + static_cast<std::ptrdiff_t>(o * block),
                   k.values->begin() + static_cast<std::ptrdiff_t>((o + 1) * block));
        }
      return v;
    }
    case OpType::kScatterND: {
      if (!all_known(3)) return std::nullopt;
      Values v = *ins[0].values;
      const std::vector<int64_t>& idims = ins[1].dims;
      if (idims.empty()) return std::nullopt;
      const size_t depth = static_cast<size_t>(idims.back());
      const std::vector<int64_t> st = strides_of(ins[0].dims);
      int64_t slice = 1;
      for (size_t d = depth; d < ins[0].dims.size(); ++d) slice *= ins[0].dims[d];
      const size_t updates = ins[1].values->size() / std::max<size_t>(depth, 1);
      for (size_t u = 0; u < updates; ++u) {
        int64_t at = 0;
        for (size_t d = 0; d < depth; ++d) {
          int64_t i = (*ins[1].values)[u * depth + d];
          if (i < 0) i += ins[0].dims[d];
          if (i < 0 || i >= ins[0].dims[d]) return std::nullopt;
          at += i * st[d];
        }
        for (int64_t e = 0; e < slice; ++e)
          v[static_cast<size_t>(at + e)] =
              (*ins[2].values)[u * static_cast<size_t>(slice) + static_cast<size_t>(e)];
      }
      return v;
    }
    default: return std::nullopt;
  }
}

}  // namespace gpulab::infer
