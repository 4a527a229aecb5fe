// Reference QuantizeLinear -> DequantizeLinear pair (kQuantizeDequantize): ONNX's definition, in
// float32 as onnxruntime evaluates it (core/quant.h's fake_quantize), per tensor or per index of
// one axis.
#include "backends/reference/kernels.h"
#include "core/quant.h"

namespace gpulab::reference {

Status run_quantize_dequantize(const Node& node, Inputs inputs, Outputs& outputs, const ReferenceOptions&) {
  GPULAB_TRY(check_input_count(node, inputs, 1));
  const Tensor& x = *inputs[0];
  GPULAB_TRY(check_dtype(node, x, DataType::kFloat32, "X"));
  GPULAB_ASSIGN_OR_RETURN(const QuantizeAttrs a, attrs_or_default<QuantizeAttrs>(node));
  const int64_t rank = static_cast<int64_t>(x.shape().rank());
  GPULAB_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node, a.axis, std::max<int64_t>(rank, 1)));
  const int64_t channels = a.scale.size() == 1 || rank == 0 ? 1 : x.shape()[static_cast<size_t>(axis)];
  if (a.scale.empty() || a.zero_point.size() != a.scale.size() ||
      static_cast<int64_t>(a.scale.size()) != channels)
    return Status::invalid_model(where(node) + ": " + std::to_string(a.scale.size()) + " scales and " +
                                 std::to_string(a.zero_point.size()) + " zero points for " +
                                 x.shape().to_string() + " along axis " + std::to_string(axis) + ".");
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  Tensor y(DataType::kFloat32, x.shape());
  const auto in = x.f32();
  auto out = y.f32();
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t c = channels == 1 ? 0 : static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels);
    out[i] = fake_quantize(in[i], a.scale[c], static_cast<float>(a.zero_point[c]), static_cast<float>(a.qmin),
                           static_cast<float>(a.qmax));
  }
  outputs[0] = std::move(y);
  return Status::ok();
}

}  // namespace gpulab::reference
