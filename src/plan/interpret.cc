#include "plan/interpret.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "core/math.h"
#include "core/quant.h"
#include "plan/interpret_kernels.h"
#include "plan/interpret_views.h"
#include "plan/lower.h"

namespace gpulab {

namespace {

float activate(float v, Activation a, float lo, float hi) {
  if (a == Activation::kRelu) return std::max(v, 0.0f);
  if (a == Activation::kClip) return std::min(std::max(v, lo), hi);
  return v;
}

class Interpreter {
 public:
  Interpreter(const Plan& plan, int64_t batch, const InterpretOptions& options)
      : plan_(plan), batch_(batch), options_(options), v_(plan.values.size()) {}

  Result<std::vector<float>> run(std::span<const float> input) {
    std::vector<float> logits;
    for (const PlanStep& s : plan_.steps) {
      switch (s.kind) {
        case StepKind::kInput: input_step(s, input); break;
        case StepKind::kConv: GPULAB_TRY(conv_step(s)); break;
        case StepKind::kGemm: GPULAB_TRY(gemm_step(s)); break;
        case StepKind::kMaxPool:
        case StepKind::kAveragePool: pool_step(s); break;
        case StepKind::kGlobalAveragePool: global_pool_step(s); break;
        case StepKind::kAdd:
        case StepKind::kMul:
        case StepKind::kActivation:
        case StepKind::kPointwise:
        case StepKind::kCast: elementwise_step(s); break;
        case StepKind::kStem: GPULAB_TRY(stem_step(s, input)); break;
        case StepKind::kConcat: concat_step(s); break;
        case StepKind::kCopy:
        case StepKind::kLinear:
        case StepKind::kMatMul:
        case StepKind::kAttention:
        case StepKind::kLayerNorm:
        case StepKind::kEltwise: {
          ViewStepContext ctx{plan_, batch_, v_,
                              [this](const PlanStep& step, int w) { return weight(step, w, 0); }};
          GPULAB_TRY(interpret_view_step(s, ctx));
          break;
        }
        case StepKind::kOutput: {
          const PlanValue& x = plan_.values[s.inputs[0]];
          logits.resize(static_cast<size_t>(batch_ * plan_.num_classes));
          for (int64_t n = 0; n < batch_; ++n)
            for (int64_t c = 0; c < plan_.num_classes; ++c)
              logits[n * plan_.num_classes + c] = v_[s.inputs[0]][n * x.c + c];
          if (s.softmax) softmax_rows(logits);
          break;
        }
      }
      if (s.output >= 0) store(s);
    }
    if (options_.values) {
      // Real values: an 8-bit value holds quantized numbers.
      for (size_t i = 0; i < v_.size(); ++i)
        if (is_quantized_dtype(plan_.values[i].dtype))
          for (float& v : v_[i]) v *= plan_.values[i].scale;
      *options_.values = std::move(v_);
    }
    return logits;
  }

 private:
  std::vector<float>& alloc(int i) {
    const PlanValue& p = plan_.values[i];
    v_[i].assign(static_cast<size_t>(p.h * p.w * p.c * batch_), 0.0f);
    return v_[i];
  }

  // Rounds the value step `s` just wrote to the type it is stored in.
  void store(const PlanStep& s) {
    DataType type = plan_.values[s.output].dtype;
    if (type == DataType::kFloat32 && options_.storage_dtype && !options_.float32_outputs.contains(s.name))
      type = *options_.storage_dtype;
    if (type == DataType::kFloat32) return;
    for (float& x : v_[s.output]) x = round_to_dtype(x, type);
  }

  Result<std::vector<float>> weight(const PlanStep& s, int index, size_t count) const {
    if (index < 0) return std::vector<float>(count, 0.0f);
    const PlanWeight& w = plan_.weights[index];
    std::vector<float> out = floats_from_bytes(w.bytes, w.dtype);
    if (out.size() != static_cast<size_t>(w.shape.numel()))
      return Status::unsupported(
          fmt::format("interpret: weight '{}' of step '{}' is {}; only float32, float16 "
                      "and bfloat16 weights are interpreted.",
                      w.name, s.name, dtype_name(w.dtype)));
    // As lower_graph stores them: BF16 layers keep their biases in float32, layer norms their scale
    // and bias in every precision.
    const bool bf16_conv_bias =
        s.kind == StepKind::kConv && index == s.bias && options_.storage_dtype == DataType::kBFloat16;
    const bool float32_kept = bf16_conv_bias || s.kind == StepKind::kLayerNorm;
    if (w.dtype == DataType::kFloat32 && options_.storage_dtype && !float32_kept &&
        !options_.float32_weights.contains(s.name))
      for (float& x : out) x = round_to_dtype(x, *options_.storage_dtype);
    return out;
  }

  void input_step(const PlanStep& s, std::span<const float> input) {
    auto& out = alloc(s.output);
    const PlanValue& y = plan_.values[s.output];
    const int64_t b = s.space_to_depth.block, c_in = plan_.input_channels;
    const int64_t h_in = plan_.input_h, w_in = plan_.input_w;
    // Output channel (dy * b + dx) * C + c of pixel (Y, X): input pixel (Y b + dy - pad_top,
    // X b + dx - pad_left); b = 1 without padding is a plain NCHW -> NHWC copy.
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t h = 0; h < y.h; ++h)
        for (int64_t w = 0; w < y.w; ++w)
          for (int64_t dy = 0; dy < b; ++dy)
            for (int64_t dx = 0; dx < b; ++dx) {
              const int64_t ih = h * b + dy - s.space_to_depth.pad_top;
              const int64_t iw = w * b + dx - s.space_to_depth.pad_left;
              if (ih < 0 || ih >= h_in || iw < 0 || iw >= w_in) continue;
              for (int64_t c = 0; c < c_in; ++c)
                out[((n * y.h + h) * y.w + w) * y.c + (dy * b + dx) * c_in + c] =
                    input[((n * c_in + c) * h_in + ih) * w_in + iw];
            }
    if (is_quantized_dtype(y.dtype)) {  // the input conversion quantizes
      const PlanValue image{.dtype = DataType::kFloat32};
      for (float& v : out) v = cast(v, image, y);
    }
  }

  Status conv_step(const PlanStep& s) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    const auto& a = s.conv;
    const int64_t cg = x.c / a.groups, taps = a.kernel.h * a.kernel.w;
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> wt,
                            weight(s, s.weight, static_cast<size_t>(y.c * taps * cg)));
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> bias, weight(s, s.bias, static_cast<size_t>(y.c)));
    const ConvGeometry geom{
        .batch = batch_, .x_h = x.h, .x_w = x.w, .x_c = x.c, .y_h = y.h, .y_w = y.w, .y_c = y.c, .attrs = a};
    if (is_quantized(s.precision)) return quantized_conv(s, geom, wt, bias);
    // The weights as [tap][c][k] (k innermost), so that one input value updates a run of contiguous
    // output accumulators: the loop vectorizes, and every output is still one float64 sum.
    std::vector<double> wk(static_cast<size_t>(taps * cg * y.c));
    for (int64_t k = 0; k < y.c; ++k)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ci = 0; ci < cg; ++ci)
          wk[static_cast<size_t>((t * cg + ci) * y.c + k)] =
              wt[static_cast<size_t>((k * taps + t) * cg + ci)];
    const std::vector<float>& in = v_[s.inputs[0]];
    const std::vector<float>* res = a.has_residual ? &v_[s.inputs[1]] : nullptr;
    auto& out = alloc(s.output);
    parallel_rows(batch_ * y.h, [&](int64_t begin, int64_t end) {
      conv_rows_f64(geom, in.data(), wk.data(), bias.data(), res ? res->data() : nullptr, out.data(), begin,
                    end);
    });
    if (options_.pre_activation) options_.pre_activation(s, out, y.c);
    if (a.activation != Activation::kNone)
      for (float& v : out) v = activate(v, a.activation, a.clip_min, a.clip_max);
    return Status::ok();
  }

  // The three steps a kStem step replaced, each storing its value as it did (the GPU kernel
  // rounds the convolution's output to the storage type before pooling, too).
  Status stem_step(const PlanStep& s, std::span<const float> input) {
    PlanStep in;
    in.kind = StepKind::kInput;
    in.name = s.name;
    in.output = s.fused_values[0];
    in.space_to_depth = s.space_to_depth;
    input_step(in, input);
    store(in);
    PlanStep conv = s;
    conv.kind = StepKind::kConv;
    conv.inputs = {s.fused_values[0]};
    conv.output = s.fused_values[1];
    GPULAB_TRY(conv_step(conv));
    store(conv);
    PlanStep pool = s;
    pool.kind = StepKind::kMaxPool;
    pool.inputs = {s.fused_values[1]};
    pool_step(pool);
    // An 8-bit output (fuse_stem_pool took the cast that quantized the pool's float16 value): the
    // maxima of float16 values are float16 values, quantized as that cast did.
    const PlanValue& y = plan_.values[s.output];
    if (is_quantized_dtype(y.dtype)) {
      const PlanValue pooled{.dtype = DataType::kFloat16};
      for (float& v : v_[s.output]) v = cast(v, pooled, y);
    }
    return Status::ok();
  }

  Status gemm_step(const PlanStep& s) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    const int64_t features = x.h * x.w * x.c;  // a flattened NHWC value when h * w > 1
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> wt,
                            weight(s, s.weight, static_cast<size_t>(y.c * features)));
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> bias, weight(s, s.bias, static_cast<size_t>(y.c)));
    if (is_quantized(s.precision)) return quantized_gemm(s, features, wt, bias);
    const std::vector<float>& in = v_[s.inputs[0]];
    auto& out = alloc(s.output);
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t o = 0; o < y.c; ++o) {
        double acc = bias[o];
        for (int64_t i = 0; i < features; ++i)
          acc += static_cast<double>(in[n * features + i]) * wt[o * features + i];
        out[n * y.c + o] = static_cast<float>(acc);
      }
    if (options_.pre_activation) options_.pre_activation(s, out, y.c);
    return Status::ok();
  }

  void pool_step(const PlanStep& s) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    const auto& p = s.pool;
    const std::vector<float>& in = v_[s.inputs[0]];
    auto& out = alloc(s.output);
    const bool max = s.kind == StepKind::kMaxPool;
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t oh = 0; oh < y.h; ++oh)
        for (int64_t ow = 0; ow < y.w; ++ow)
          for (int64_t c = 0; c < y.c; ++c) {
            double acc = max ? -1e300 : 0.0;
            int64_t count = 0, padded = 0;
            for (int64_t r = 0; r < p.kernel.h; ++r)
              for (int64_t q = 0; q < p.kernel.w; ++q) {
                const int64_t ih = oh * p.stride.h - p.pads.top + r * p.dilation.h;
                const int64_t iw = ow * p.stride.w - p.pads.left + q * p.dilation.w;
                if (ih < x.h + p.pads.bottom && iw < x.w + p.pads.right) ++padded;
                if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                const float val = in[((n * x.h + ih) * x.w + iw) * x.c + c];
                acc = max ? std::max<double>(acc, val) : acc + val;
                ++count;
              }
            if (!max) acc /= static_cast<double>(p.count_include_pad ? padded : count);
            out[((n * y.h + oh) * y.w + ow) * y.c + c] = static_cast<float>(acc);
          }
  }

  void global_pool_step(const PlanStep& s) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    if (is_quantized_dtype(x.dtype)) return quantized_global_pool(s);
    const std::vector<float>& in = v_[s.inputs[0]];
    auto& out = alloc(s.output);
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t c = 0; c < x.c; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < x.h * x.w; ++i) acc += in[(n * x.h * x.w + i) * x.c + c];
        out[n * x.c + c] = static_cast<float>(acc / static_cast<double>(x.h * x.w));
      }
  }

  void elementwise_step(const PlanStep& s) {
    const std::vector<float>& a = v_[s.inputs[0]];
    const bool binary = s.kind == StepKind::kAdd || s.kind == StepKind::kMul;
    const std::vector<float>* b = binary ? &v_[s.inputs[1]] : nullptr;
    // A broadcast b holds one value per image and channel: element i of image n, channel c reads
    // b[n * C + c].
    const PlanValue& y = plan_.values[s.output];
    const bool broadcast = broadcasts_channels(plan_, s);
    const size_t per_image = static_cast<size_t>(y.h * y.w * y.c), channels = static_cast<size_t>(y.c);
    auto& out = alloc(s.output);
    for (size_t i = 0; i < out.size(); ++i) {
      float val = a[i];
      if (b) {
        const float bv = (*b)[broadcast ? i / per_image * channels + i % channels : i];
        val = s.kind == StepKind::kAdd ? val + bv : val * bv;
      }
      if (s.kind == StepKind::kPointwise)
        out[i] = pointwise(val, s);
      else
        out[i] = s.kind == StepKind::kCast ? cast(val, plan_.values[s.inputs[0]], y)
                                           : activate(val, s.activation, s.clip_min, s.clip_max);
    }
  }

  // Each pixel of y holds the inputs' valid channels one after another.
  void concat_step(const PlanStep& s) {
    const PlanValue& y = plan_.values[s.output];
    auto& out = alloc(s.output);
    const int64_t pixels = batch_ * y.h * y.w;
    int64_t first = 0;
    for (int in : s.inputs) {
      const int64_t c = plan_.values[in].c, valid = plan_.values[in].c_valid;
      const std::vector<float>& x = v_[in];
      for (int64_t p = 0; p < pixels; ++p)
        std::copy_n(x.begin() + p * c, valid, out.begin() + p * y.c + first);
      first += valid;
    }
  }

  // kCast between types: 8-bit values quantize (src/core/quant.h) and dequantize (q * scale in
  // float32; store() then rounds to the float type); float to float is exact here, store() rounds.
  static float cast(float v, const PlanValue& from, const PlanValue& to) {
    if (is_quantized_dtype(from.dtype)) v = v * from.scale;
    if (to.dtype == DataType::kInt8) return static_cast<float>(quantize_int8(v, 1.0f / to.scale));
    if (to.dtype == DataType::kFp8E4M3) return quantize_fp8(v, 1.0f / to.scale);
    return v;
  }

  // The epilogue of src/core/quant.h for one output element, in two parts around
  // InterpretOptions::pre_activation. The value before the activation: acc is the integer (INT8)
  // or float32 (FP8) sum; multiplier = x.scale * weight scale of the channel.
  static float epilogue_sum(float acc, float multiplier, float bias, const float* residual, float res_scale) {
    const float v = q8_scale_bias(acc, multiplier, bias);
    return residual ? q8_add_residual(v, *residual, res_scale) : v;
  }
  // Then the activation and the output's quantization.
  static float epilogue_store(float v, Activation act, float lo, float hi, const PlanValue& y) {
    v = activate(v, act, lo, hi);
    if (y.dtype == DataType::kInt8) return static_cast<float>(quantize_int8(v, 1.0f / y.scale));
    if (y.dtype == DataType::kFp8E4M3) return quantize_fp8(v, 1.0f / y.scale);
    return v;  // a dequantizing epilogue: store() rounds to the float type
  }

  // The sums of a quantized layer: exact int32 sums of int8 numbers converted to float32 (to
  // nearest even), or float32 sums of E4M3 values.
  static std::vector<float> accumulate_8bit(const ConvGeometry& g, DataType x_dtype,
                                            const std::vector<float>& in, const std::vector<float>& wt) {
    std::vector<float> acc(static_cast<size_t>(g.batch * g.y_h * g.y_w * g.y_c));
    if (x_dtype != DataType::kInt8) {
      parallel_rows(g.batch * g.y_h, [&](int64_t begin, int64_t end) {
        conv_accumulate(g, in.data(), wt.data(), acc.data(), begin, end);
      });
      return acc;
    }
    const std::vector<int16_t> x16(in.begin(), in.end()), w16(wt.begin(), wt.end());
    std::vector<int32_t> sums(acc.size());
    parallel_rows(g.batch * g.y_h, [&](int64_t begin, int64_t end) {
      conv_accumulate(g, x16.data(), w16.data(), sums.data(), begin, end);
    });
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = static_cast<float>(sums[i]);
    return acc;
  }

  Status quantized_conv(const PlanStep& s, const ConvGeometry& g, const std::vector<float>& wt,
                        const std::vector<float>& bias) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> w_scale,
                            weight(s, s.weight_scale, static_cast<size_t>(y.c)));
    const std::vector<float>& in = v_[s.inputs[0]];
    const bool has_res = s.conv.has_residual;
    const std::vector<float>* res = has_res ? &v_[s.inputs[1]] : nullptr;
    const float res_scale = has_res ? plan_.values[s.inputs[1]].scale : 0.0f;
    const std::vector<float> acc = accumulate_8bit(g, x.dtype, in, wt);
    std::vector<float> multiplier(static_cast<size_t>(y.c));
    for (int64_t k = 0; k < y.c; ++k) multiplier[k] = x.scale * w_scale[k];
    auto& out = alloc(s.output);
    const size_t channels = static_cast<size_t>(y.c);
    for (size_t i = 0; i < out.size(); ++i) {
      const size_t k = i % channels;
      out[i] = epilogue_sum(acc[i], multiplier[k], bias[k], res ? &(*res)[i] : nullptr, res_scale);
    }
    if (options_.pre_activation) options_.pre_activation(s, out, y.c);
    for (float& v : out) v = epilogue_store(v, s.conv.activation, s.conv.clip_min, s.conv.clip_max, y);
    return Status::ok();
  }

  Status quantized_gemm(const PlanStep& s, int64_t features, const std::vector<float>& wt,
                        const std::vector<float>& bias) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    GPULAB_ASSIGN_OR_RETURN(const std::vector<float> w_scale,
                            weight(s, s.weight_scale, static_cast<size_t>(y.c)));
    ConvGeometry g{.batch = batch_, .x_c = features, .y_c = y.c};
    g.attrs.kernel = {1, 1};
    const std::vector<float>& in = v_[s.inputs[0]];
    const std::vector<float> acc = accumulate_8bit(g, x.dtype, in, wt);
    auto& out = alloc(s.output);
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t o = 0; o < y.c; ++o)
        out[n * y.c + o] = epilogue_sum(acc[n * y.c + o], x.scale * w_scale[o], bias[o], nullptr, 0.0f);
    if (options_.pre_activation) options_.pre_activation(s, out, y.c);
    for (float& v : out) v = epilogue_store(v, Activation::kNone, 0, 0, y);
    return Status::ok();
  }

  // The sum of the quantized numbers (exact: integers, or E4M3 values summed in float32 in pixel
  // order) times x.scale / pixels (float32, on the host), then quantized to y's scale or left in
  // float for store().
  void quantized_global_pool(const PlanStep& s) {
    const PlanValue& x = plan_.values[s.inputs[0]];
    const PlanValue& y = plan_.values[s.output];
    const std::vector<float>& in = v_[s.inputs[0]];
    auto& out = alloc(s.output);
    const float multiplier = x.scale / static_cast<float>(x.h * x.w);
    const PlanValue mean{.dtype = DataType::kFloat32};
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t c = 0; c < x.c; ++c) {
        float sum = 0;
        for (int64_t i = 0; i < x.h * x.w; ++i) sum += in[(n * x.h * x.w + i) * x.c + c];
        out[n * x.c + c] = cast(sum * multiplier, mean, y);
      }
  }

  static float pointwise(float v, const PlanStep& s) {
    return static_cast<float>(apply_pointwise(s.pointwise, v, s.alpha, s.beta, s.clip_min, s.clip_max));
  }

  // Softmax over each row of [batch, classes].
  void softmax_rows(std::vector<float>& logits) const {
    const size_t classes = static_cast<size_t>(plan_.num_classes);
    for (size_t row = 0; row < logits.size(); row += classes) {
      const std::span<float> r(logits.data() + row, classes);
      const std::vector<float> p = softmax(r);
      std::copy(p.begin(), p.end(), r.begin());
    }
  }

  const Plan& plan_;
  int64_t batch_;
  const InterpretOptions& options_;
  std::vector<std::vector<float>> v_;
};

}  // namespace

Result<std::vector<float>> interpret_plan(const Plan& plan, std::span<const float> input_nchw, int64_t batch,
                                          const InterpretOptions& options) {
  GPULAB_TRY(plan.validate());
  if (options.storage_dtype && *options.storage_dtype != DataType::kFloat32 &&
      *options.storage_dtype != DataType::kFloat16 && *options.storage_dtype != DataType::kBFloat16)
    return Status::invalid_argument(
        fmt::format("interpret: storage dtype {} is not emulated. Use float16 or "
                    "bfloat16.",
                    dtype_name(*options.storage_dtype)));
  const int64_t per_image = plan.input_channels * plan.input_h * plan.input_w;
  if (batch < 1 || static_cast<int64_t>(input_nchw.size()) != batch * per_image)
    return Status::invalid_argument(fmt::format(
        "interpret: the input holds {} floats, batch {} of [{}, {}, {}] needs {}. Pass float NCHW "
        "images of the plan's input size.",
        input_nchw.size(), batch, plan.input_channels, plan.input_h, plan.input_w, batch * per_image));
  const int64_t threads =
      options.pre_activation ? 1 : std::min<int64_t>(std::max(options.num_threads, 1), batch);
  if (threads == 1) return Interpreter(plan, batch, options).run(input_nchw);
  // Images are independent: each thread interprets a contiguous part of the batch.
  std::vector<Result<std::vector<float>>> parts(static_cast<size_t>(threads), std::vector<float>{});
  std::vector<std::vector<std::vector<float>>> part_values(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  const auto first_image = [&](int64_t t) { return batch * t / threads; };
  for (int64_t t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      InterpretOptions part = options;
      part.values = options.values ? &part_values[static_cast<size_t>(t)] : nullptr;
      const int64_t first = first_image(t), count = first_image(t + 1) - first;
      parts[static_cast<size_t>(t)] = Interpreter(plan, count, part)
                                          .run(input_nchw.subspan(static_cast<size_t>(first * per_image),
                                                                  static_cast<size_t>(count * per_image)));
    });
  for (auto& w : workers) w.join();
  std::vector<float> logits;
  for (auto& p : parts) {
    if (!p.is_ok()) return p.status();
    logits.insert(logits.end(), p->begin(), p->end());
  }
  if (options.values) {
    options.values->assign(plan.values.size(), {});
    for (auto& pv : part_values)
      for (size_t i = 0; i < pv.size(); ++i)
        (*options.values)[i].insert((*options.values)[i].end(), pv[i].begin(), pv[i].end());
  }
  return logits;
}

}  // namespace gpulab
