// The GPU engine against the reference backend: small hand-built graphs for every step kind in
// every precision, whole classifiers (the seeded ResNet-18, MobileNetV2, MobileNetV3-Small and
// SqueezeNet 1.1 fixtures), eager vs CUDA-graph execution, plan save/load, and two contexts on two streams.
// Skipped with a reason when no GPU is usable or the model fixtures are absent.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "backends/cuda/device.h"
#include "backends/cuda/direct_conv.h"
#include "backends/reference/reference_executor.h"
#include "gpulab/engine.h"
#include "normal_tensor.h"
#include "onnx/onnx_import.h"
#include "passes/passes.h"
#include "plan/lower.h"
#include "plan/plan.h"
#include "runtime/runtime.h"
#include "test_support.h"

namespace gpulab {
namespace {

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    std::string reason;                                                        \
    if (!cuda_device_available(&reason)) GTEST_SKIP() << "no GPU: " << reason; \
  } while (0)

double tolerance(Precision p) {
  switch (p) {
    case Precision::kFp32: return 1e-5;
    case Precision::kTf32: return 5e-3;
    case Precision::kFp16: return 1e-2;
    case Precision::kBf16: return 3e-2;
    case Precision::kInt8:
    case Precision::kFp8: return 5e-2;  // not used here: quantized_engine_test.cc checks 8-bit plans
  }
  return 0;
}

Tensor random_tensor(Shape shape, uint32_t seed, float scale = 1.0f) {
  return testing::normal_tensor(std::move(shape), seed, scale);
}

// A tiny classifier builder: input [N, c, h, w] -> nodes -> output [N, classes].
struct GraphBuilder {
  Graph g;
  int counter = 0;
  uint32_t seed = 1;
  std::string last;

  explicit GraphBuilder(int64_t c, int64_t h, int64_t w) {
    g.name = "test";
    g.opset = 13;
    g.inputs = {"input"};
    g.values["input"] = ValueInfo{DataType::kFloat32, Shape{Shape::kBatch, c, h, w}, std::nullopt};
    last = "input";
  }
  std::string name(const char* base) { return std::string(base) + std::to_string(counter++); }
  std::string weight(Shape s, float scale) {
    const std::string n = name("w");
    g.initializers[n] = random_tensor(std::move(s), seed++, scale);
    return n;
  }
  // Conv with bias; `residual` = "" for none.
  std::string conv(int64_t cin, int64_t k, int64_t kernel, int64_t stride, int64_t pad, int64_t groups,
                   Activation act, const std::string& residual = "") {
    Node n;
    n.name = name("conv");
    n.op = OpType::kConv;
    ConvAttrs a;
    a.kernel = {kernel, kernel};
    a.stride = {stride, stride};
    a.pads = {pad, pad, pad, pad};
    a.groups = groups;
    a.activation = act;
    a.clip_min = 0.0f;
    a.clip_max = 6.0f;
    a.has_residual = !residual.empty();
    n.attrs = a;
    const float scale = 1.0f / std::sqrt(static_cast<float>(cin / groups * kernel * kernel));
    n.inputs = {last, weight(Shape{k, cin / groups, kernel, kernel}, scale), weight(Shape{k}, 0.1f)};
    if (!residual.empty()) n.inputs.push_back(residual);
    n.outputs = {name("y")};
    g.nodes.push_back(n);
    return last = n.outputs[0];
  }
  std::string pool(OpType op, int64_t kernel, int64_t stride, int64_t pad) {
    Node n;
    n.name = name("pool");
    n.op = op;
    PoolAttrs a;
    a.kernel = {kernel, kernel};
    a.stride = {stride, stride};
    a.pads = {pad, pad, pad, pad};
    n.attrs = a;
    n.inputs = {last};
    n.outputs = {name("y")};
    g.nodes.push_back(n);
    return last = n.outputs[0];
  }
  std::string simple(OpType op, NodeAttrs attrs, std::vector<std::string> inputs) {
    Node n;
    n.name = name("node");
    n.op = op;
    n.attrs = std::move(attrs);
    n.inputs = std::move(inputs);
    n.outputs = {name("y")};
    g.nodes.push_back(n);
    return last = n.outputs[0];
  }
  // GlobalAveragePool -> Flatten -> Gemm(transB) -> output.
  Graph finish(int64_t channels, int64_t classes) {
    simple(OpType::kGlobalAveragePool, std::monostate{}, {last});
    simple(OpType::kFlatten, FlattenAttrs{1}, {last});
    GemmAttrs ga;
    ga.trans_b = true;
    const std::string w = weight(Shape{classes, channels}, 1.0f / std::sqrt(static_cast<float>(channels)));
    const std::string b = weight(Shape{classes}, 0.1f);
    simple(OpType::kGemm, ga, {last, w, b});
    g.outputs = {last};
    EXPECT_TRUE(g.infer_shapes().is_ok());
    EXPECT_TRUE(g.validate().is_ok());
    return g;
  }
};

Tensor reference_output(const Graph& graph, const Tensor& input) {
  auto exec = ReferenceExecutor::create(graph);
  EXPECT_TRUE(exec.is_ok()) << exec.status().to_string();
  auto out = exec->run(std::vector<Tensor>{input});
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? (*out)[0] : Tensor();
}

void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const ErrorStats e = compare(actual.f32(), expected.f32());
  EXPECT_EQ(e.non_finite, 0) << what;
  EXPECT_LE(e.rel_l2, tol) << what << ": rel L2 " << e.rel_l2 << ", max abs " << e.max_abs;
  std::printf("[ error ] %-48s rel L2 %.3e  max abs %.3e\n", what.c_str(), e.rel_l2, e.max_abs);
}

const Precision kAllPrecisions[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16};

Result<Tensor> run_on_gpu(const Graph& graph, Precision precision, const Tensor& input, int64_t max_batch,
                          bool use_graph = true) {
  BuildOptions options;
  options.precision = precision;
  options.max_batch = max_batch;
  options.time_tactics = false;
  GPULAB_ASSIGN_OR_RETURN(auto engine, build_engine_from_graph(graph, options, false));
  GPULAB_ASSIGN_OR_RETURN(auto ctx, engine->create_context());
  return ctx->run(input, use_graph);
}

void check_graph_all_precisions(const Graph& graph, const Shape& input_shape, const std::string& what) {
  const Tensor input = random_tensor(input_shape, 99);
  const Tensor ref = reference_output(graph, input);
  for (Precision p : kAllPrecisions) {
    auto out = run_on_gpu(graph, p, input, input_shape[0] + 1);
    ASSERT_TRUE(out.is_ok()) << what << " " << precision_name(p) << ": " << out.status().to_string();
    expect_close(*out, ref, tolerance(p), what + " " + std::string(precision_name(p)));
  }
}

TEST(EngineGpu, ConvBiasReluStemWithPaddedInputChannels) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(3, 32, 32);
  b.conv(3, 16, 7, 2, 3, 1, Activation::kRelu);
  b.pool(OpType::kMaxPool, 3, 2, 1);
  check_graph_all_precisions(b.finish(16, 10), Shape{3, 3, 32, 32}, "stem 7x7/2 + maxpool");
}

TEST(EngineGpu, ResidualBlock) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(16, 16, 16);
  const std::string x = b.last;
  b.conv(16, 16, 3, 1, 1, 1, Activation::kRelu);
  b.conv(16, 16, 3, 1, 1, 1, Activation::kRelu, x);
  const std::string y = b.last;
  b.conv(16, 32, 1, 2, 0, 1, Activation::kNone);  // 1x1 downsample
  const std::string down = b.last;
  b.last = y;
  b.conv(16, 32, 3, 2, 1, 1, Activation::kRelu);
  b.conv(32, 32, 3, 1, 1, 1, Activation::kRelu, down);
  check_graph_all_precisions(b.finish(32, 10), Shape{2, 16, 16, 16}, "residual block");
}

TEST(EngineGpu, InvertedResidualDepthwiseClip) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(16, 14, 14);
  const std::string x = b.last;
  b.conv(16, 96, 1, 1, 0, 1, Activation::kClip);
  b.conv(96, 96, 3, 1, 1, 96, Activation::kClip);    // depthwise
  b.conv(96, 16, 1, 1, 0, 1, Activation::kNone, x);  // projection + residual
  b.conv(16, 96, 1, 1, 0, 1, Activation::kClip);
  b.conv(96, 96, 3, 2, 1, 96, Activation::kClip);  // depthwise stride 2
  check_graph_all_precisions(b.finish(96, 10), Shape{3, 16, 14, 14}, "inverted residual");
}

TEST(EngineGpu, StandaloneAddReluAndAvgPool) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 12, 12);
  const std::string x = b.last;
  b.conv(8, 8, 3, 1, 1, 1, Activation::kNone);
  const std::string c = b.last;
  b.simple(OpType::kAdd, std::monostate{}, {c, x});
  b.simple(OpType::kRelu, std::monostate{}, {b.last});
  b.pool(OpType::kAveragePool, 2, 2, 0);
  ClipAttrs clip;
  clip.min = 0.0f;
  clip.max = 0.5f;
  b.simple(OpType::kClip, clip, {b.last});
  check_graph_all_precisions(b.finish(8, 5), Shape{2, 8, 12, 12}, "add relu avgpool clip");
}

// Squeeze-and-excitation (MobileNetV3, EfficientNet): HardSwish, the scale GAP -> 1x1 -> 1x1 ->
// HardSigmoid multiplied into the activation (broadcast per image and channel, the scale first
// as torchvision writes it), SiLU as Sigmoid and Mul, a broadcast Add, and a final Softmax that
// the output step applies to the float32 logits.
TEST(EngineGpu, SqueezeExcitationPointwiseOpsAndSoftmax) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 14, 14);
  b.conv(8, 32, 3, 1, 1, 1, Activation::kNone);
  const std::string x = b.simple(OpType::kHardSwish, std::monostate{}, {b.last});
  b.simple(OpType::kGlobalAveragePool, std::monostate{}, {x});
  b.conv(32, 8, 1, 1, 0, 1, Activation::kRelu);
  const std::string e = b.conv(8, 32, 1, 1, 0, 1, Activation::kNone);
  const std::string scale = b.simple(OpType::kHardSigmoid, HardSigmoidAttrs{1.0f / 6, 0.5f}, {e});
  const std::string m = b.simple(OpType::kMul, std::monostate{}, {scale, x});
  const std::string g = b.simple(OpType::kSigmoid, std::monostate{}, {m});
  const std::string silu = b.simple(OpType::kMul, std::monostate{}, {m, g});
  b.simple(OpType::kAdd, std::monostate{}, {silu, e});
  Graph graph = b.finish(32, 10);
  graph.nodes.push_back(Node{"softmax", OpType::kSoftmax, {graph.outputs[0]}, {"prob"}, AxisAttrs{1}});
  graph.outputs = {"prob"};
  ASSERT_TRUE(graph.infer_shapes().is_ok());
  check_graph_all_precisions(graph, Shape{3, 8, 14, 14}, "squeeze-excitation + softmax");
}

// DenseNet's pre-activation: a BatchNormalization after an Add (no Conv to fold it into) becomes a
// 1x1 depthwise convolution with the Relu fused (batchnorm_to_conv).
TEST(EngineGpu, StandaloneBatchNormBeforeRelu) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(16, 10, 10);
  const std::string c = b.conv(16, 16, 3, 1, 1, 1, Activation::kNone);
  const std::string sum = b.simple(OpType::kAdd, std::monostate{}, {c, "input"});
  const auto positive = [&](float base) {
    const std::string n = b.name("bn");
    Tensor t = random_tensor(Shape{16}, b.seed++, 0.2f);
    for (float& v : t.f32()) v = base + std::abs(v);
    b.g.initializers[n] = std::move(t);
    return n;
  };
  const std::string scale = positive(0.5f), shift = b.weight(Shape{16}, 0.1f),
                    mean = b.weight(Shape{16}, 0.1f), var = positive(0.5f);
  b.simple(OpType::kBatchNormalization, BatchNormAttrs{}, {sum, scale, shift, mean, var});
  b.simple(OpType::kRelu, std::monostate{}, {b.last});
  b.conv(16, 16, 1, 1, 0, 1, Activation::kRelu);
  Graph graph = b.finish(16, 10);
  ASSERT_TRUE(run_passes(graph).is_ok());
  check_graph_all_precisions(graph, Shape{2, 16, 10, 10}, "standalone batchnorm");
}

// SqueezeNet's fire module: a squeeze 1x1 and two expand convolutions (1x1 and 3x3) whose outputs
// a Concat joins along the channels (one strided copy per input).
TEST(EngineGpu, ConcatOfTwoConvolutionsChannels) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(16, 12, 12);
  const std::string s = b.conv(16, 8, 1, 1, 0, 1, Activation::kRelu);
  const std::string e1 = b.conv(8, 16, 1, 1, 0, 1, Activation::kRelu);
  b.last = s;
  const std::string e3 = b.conv(8, 24, 3, 1, 1, 1, Activation::kRelu);
  b.simple(OpType::kConcat, AxisAttrs{1}, {e1, e3});
  b.conv(40, 16, 1, 1, 0, 1, Activation::kRelu);
  check_graph_all_precisions(b.finish(16, 10), Shape{3, 16, 12, 12}, "fire module concat");
}

// A Concat whose first input is the pooled image, whose 3 channels the plan pads (to 4 or 8): only
// the valid channels are copied.
TEST(EngineGpu, ConcatOfAPaddedInput) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(3, 16, 16);
  const std::string pooled = b.pool(OpType::kMaxPool, 2, 2, 0);
  b.last = "input";
  const std::string conv = b.conv(3, 13, 2, 2, 0, 1, Activation::kRelu);
  b.simple(OpType::kConcat, AxisAttrs{1}, {pooled, conv});
  b.conv(16, 16, 3, 1, 1, 1, Activation::kRelu);
  check_graph_all_precisions(b.finish(16, 10), Shape{2, 3, 16, 16}, "concat of a padded input");
}

// VGG/AlexNet's head: a Flatten of a multi-pixel tensor (4x4x16 here) read by a Gemm in the
// plan's NHWC order, with the weight's columns permuted at build; then Relu and a second Gemm.
TEST(EngineGpu, GemmOverAFlattenedMultiPixelTensor) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 8, 8);
  b.conv(8, 16, 3, 1, 1, 1, Activation::kRelu);
  b.pool(OpType::kMaxPool, 2, 2, 0);
  b.simple(OpType::kFlatten, FlattenAttrs{1}, {b.last});
  GemmAttrs ga;
  ga.trans_b = true;
  b.simple(OpType::kGemm, ga, {b.last, b.weight(Shape{32, 256}, 1.0f / 16), b.weight(Shape{32}, 0.1f)});
  b.simple(OpType::kRelu, std::monostate{}, {b.last});
  b.simple(OpType::kGemm, ga,
           {b.last, b.weight(Shape{10, 32}, 1.0f / std::sqrt(32.0f)), b.weight(Shape{10}, 0.1f)});
  b.g.outputs = {b.last};
  ASSERT_TRUE(b.g.infer_shapes().is_ok());
  check_graph_all_precisions(b.g, Shape{3, 8, 8, 8}, "flatten 4x4x16 -> gemm");
}

TEST(EngineGpu, PerLayerFp32OverrideInAnFp16Plan) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 16, 16);
  const std::string x = b.last;
  b.conv(8, 16, 3, 1, 1, 1, Activation::kRelu);
  const std::string first = b.g.nodes.back().name;
  b.conv(16, 8, 3, 1, 1, 1, Activation::kRelu, x);
  const std::string second = b.g.nodes.back().name;
  const Graph graph = b.finish(8, 10);
  const Tensor input = random_tensor(Shape{2, 8, 16, 16}, 21);
  const Tensor ref = reference_output(graph, input);
  BuildOptions options;
  options.precision = Precision::kFp16;
  options.max_batch = 2;
  options.layer_precision = {{first, Precision::kFp32}, {second, Precision::kFp32}};
  auto engine = build_engine_from_graph(graph, options, false);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  int casts = 0, fp32_convs = 0;
  for (const auto& l : (*engine)->info().layers) {
    casts += l.kind == "cast";
    fp32_convs += l.kind == "conv" && l.precision == Precision::kFp32;
  }
  EXPECT_EQ(fp32_convs, 2);
  // The first FP32 layer is the input's only reader, so the input is converted to float32
  // directly; one cast takes the second layer's float32 output back to FP16.
  EXPECT_EQ(casts, 1);
  auto out = (*engine)->create_context().value()->run(input, true);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  expect_close(*out, ref, tolerance(Precision::kFp16), "fp16 plan, fp32 layers");
  options.layer_precision = {{"no_such_layer", Precision::kFp32}};
  auto bad = build_engine_from_graph(graph, options, false);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no_such_layer"), std::string::npos);
}

TEST(EngineGpu, DirectConvolutionMatchesReference) {
  SKIP_WITHOUT_GPU();
  // 5x5 grouped convolution with dilation, residual and clip, through the fallback kernel alone.
  const int64_t n = 2, c = 8, h = 11, w = 9, k = 12, groups = 2;
  ConvAttrs a;
  a.kernel = {5, 3};
  a.stride = {2, 1};
  a.pads = {2, 1, 1, 0};
  a.dilation = {1, 2};
  a.groups = groups;
  a.activation = Activation::kClip;
  a.clip_min = -0.5f;
  a.clip_max = 0.75f;
  a.has_residual = true;
  const int64_t oh = (h + 2 + 1 - 5) / 2 + 1, ow = (w + 1 + 0 - 2 * 2 - 1) / 1 + 1;
  const Tensor x = random_tensor(Shape{n, c, h, w}, 1);
  const Tensor wt = random_tensor(Shape{k, c / groups, 5, 3}, 2, 0.3f);
  const Tensor bias = random_tensor(Shape{k}, 3, 0.1f);
  const Tensor res = random_tensor(Shape{n, k, oh, ow}, 4);
  Node node;
  node.name = "conv";
  node.op = OpType::kConv;
  node.attrs = a;
  node.inputs = {"x", "w", "b", "r"};
  node.outputs = {"y"};
  std::vector<Tensor> ref_out;
  const Tensor* ins[] = {&x, &wt, &bias, &res};
  ASSERT_TRUE(run_reference_node(node, ins, ref_out).is_ok());
  // NCHW -> NHWC and OIHW -> KRSC on the host.
  auto nhwc = [](const Tensor& t) {
    const auto& s = t.shape();
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < s[0]; ++i)
      for (int64_t ci = 0; ci < s[1]; ++ci)
        for (int64_t y = 0; y < s[2]; ++y)
          for (int64_t xx = 0; xx < s[3]; ++xx)
            out[((i * s[2] + y) * s[3] + xx) * s[1] + ci] = t.f32()[((i * s[1] + ci) * s[2] + y) * s[3] + xx];
    return out;
  };
  const auto xh = nhwc(x), wh = nhwc(wt), rh = nhwc(res);
  const auto yref = nhwc(ref_out[0]);
  auto up = [](const std::vector<float>& v) {
    auto b = cuda::DeviceBuffer::allocate(v.size() * 4, "test");
    EXPECT_TRUE(b.is_ok());
    cudaMemcpy(b->get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    return std::move(b).value();
  };
  auto dx = up(xh), dw = up(wh), dr = up(rh);
  auto db = up(std::vector<float>(bias.f32().begin(), bias.f32().end()));
  auto dy = up(std::vector<float>(yref.size(), -1e30f));
  cuda::DirectConvDesc d{n, c, h, w, k, oh, ow, a, DataType::kFloat32};
  ASSERT_TRUE(cuda::launch_direct_conv(d, dx.get(), dw.get(), db.get(), dr.get(), dy.get(), nullptr).is_ok());
  std::vector<float> y(yref.size());
  ASSERT_EQ(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  const ErrorStats e = compare(y, yref);
  EXPECT_LE(e.rel_l2, 1e-6);
  EXPECT_EQ(e.non_finite, 0);
}

TEST(EngineGpu, EagerAndGraphAreBitwiseIdenticalAndBatchesAgree) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 16, 16);
  b.conv(8, 16, 3, 1, 1, 1, Activation::kRelu);
  b.conv(16, 16, 3, 1, 1, 1, Activation::kRelu);
  const Graph graph = b.finish(16, 10);
  BuildOptions options;
  options.precision = Precision::kFp16;
  options.max_batch = 4;
  auto engine = build_engine_from_graph(graph, options, false);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.is_ok());
  const Tensor input = random_tensor(Shape{4, 8, 16, 16}, 5);
  auto eager = (*ctx)->run(input, false);
  auto graphed = (*ctx)->run(input, true);
  auto replay = (*ctx)->run(input, true);
  ASSERT_TRUE(eager.is_ok() && graphed.is_ok() && replay.is_ok());
  EXPECT_EQ(std::memcmp(eager->data(), graphed->data(), eager->size_bytes()), 0);
  EXPECT_EQ(std::memcmp(eager->data(), replay->data(), eager->size_bytes()), 0);
  // Every batch size 1..max gives the same rows as the full batch (within FP16 rounding: a
  // different batch may pick a different engine).
  for (int64_t n = 1; n <= 4; ++n) {
    Tensor part(DataType::kFloat32, Shape{n, 8, 16, 16});
    std::memcpy(part.data(), input.data(), part.size_bytes());
    auto out = (*ctx)->run(part, true);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    const ErrorStats e = compare(out->f32(), eager->f32().first(static_cast<size_t>(n * 10)));
    EXPECT_LE(e.rel_l2, 1e-2) << "batch " << n;
  }
  Tensor too_big(DataType::kFloat32, Shape{5, 8, 16, 16});
  auto refused = (*ctx)->run(too_big, true);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineGpu, PlanSaveLoadGivesTheSameOutputAndBadPlansAreRefused) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(3, 16, 16);
  b.conv(3, 16, 3, 2, 1, 1, Activation::kRelu);
  const Graph graph = b.finish(16, 7);
  BuildOptions options;
  options.precision = Precision::kFp32;
  options.max_batch = 2;
  auto engine = build_engine_from_graph(graph, options, false);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const auto path = std::filesystem::temp_directory_path() / "gpulab_engine_test.plan";
  ASSERT_TRUE((*engine)->save(path.string()).is_ok());
  auto loaded = Engine::load(path.string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  const Tensor input = random_tensor(Shape{2, 3, 16, 16}, 8);
  auto a = (*engine)->create_context().value()->run(input, true);
  auto c = (*loaded)->create_context().value()->run(input, true);
  ASSERT_TRUE(a.is_ok() && c.is_ok());
  EXPECT_EQ(std::memcmp(a->data(), c->data(), a->size_bytes()), 0);

  // A plan for another architecture is refused with a clear message.
  auto plan = load_plan(path);
  ASSERT_TRUE(plan.is_ok());
  plan->target.compute_capability = 80;
  ASSERT_TRUE(save_plan(*plan, path).is_ok());
  auto foreign = Engine::load(path.string());
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(foreign.status().message().find("sm_80"), std::string::npos) << foreign.status().message();
  // A truncated one too.
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "GPULABPL"; }
  auto truncated = Engine::load(path.string());
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidFile);
  std::filesystem::remove(path);
}

// Chunked tactics ("chunk<n>:<cuDNN tactic>", runtime/conv_step.h), put into a plan by hand with a
// chunk of 2 images: batch 5 runs as 2 + 2 + a remainder of 1, batch 4 as 2 + 2, batch 2 as one
// launch of the tactic itself, batch 1 on the heuristic's choice. The residual block checks that
// the residual advances with the output. Every batch matches the reference; eager and CUDA graph
// agree bit for bit.
TEST(EngineGpu, ChunkedConvolutionsMatchTheReferenceAtEveryBatch) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 12, 12);
  const std::string first = b.conv(8, 16, 3, 1, 1, 1, Activation::kRelu);
  b.conv(16, 16, 3, 1, 1, 1, Activation::kRelu, first);
  b.conv(16, 24, 1, 2, 0, 1, Activation::kNone);
  const Graph graph = b.finish(24, 10);
  BuildOptions options;
  options.precision = Precision::kFp32;
  options.max_batch = 5;
  options.time_tactics = false;  // cuDNN's first candidate: a "cudnn:" tactic on every layer
  auto engine = build_engine_from_graph(graph, options, false);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const auto path = std::filesystem::temp_directory_path() / "gpulab_chunked_test.plan";
  ASSERT_TRUE((*engine)->save(path.string()).is_ok());
  auto plan = load_plan(path);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  int chunked = 0;
  for (auto& step : plan->steps) {
    if (step.kind != StepKind::kConv || !step.tactic.starts_with("cudnn")) continue;
    step.tactic = "chunk2:" + step.tactic;
    ++chunked;
  }
  ASSERT_EQ(chunked, 3) << "every convolution should have had a cuDNN tactic";
  ASSERT_TRUE(save_plan(*plan, path).is_ok());
  auto loaded = Engine::load(path.string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  for (const auto& l : (*loaded)->info().layers) {
    if (l.kind == "conv") {
      EXPECT_TRUE(l.tactic.starts_with("chunk2:cudnn")) << l.name << " " << l.tactic;
    }
  }
  auto ctx = (*loaded)->create_context();
  ASSERT_TRUE(ctx.is_ok());
  const Tensor input = random_tensor(Shape{5, 8, 12, 12}, 21);
  const Tensor ref = reference_output(graph, input);
  for (int64_t n : {5, 4, 2, 1}) {
    Tensor part(DataType::kFloat32, Shape{n, 8, 12, 12});
    std::memcpy(part.data(), input.data(), part.size_bytes());
    auto eager = (*ctx)->run(part, false);
    auto graphed = (*ctx)->run(part, true);
    ASSERT_TRUE(eager.is_ok()) << n << ": " << eager.status().to_string();
    ASSERT_TRUE(graphed.is_ok()) << n << ": " << graphed.status().to_string();
    EXPECT_EQ(std::memcmp(eager->data(), graphed->data(), eager->size_bytes()), 0) << "batch " << n;
    Tensor want(DataType::kFloat32, Shape{n, 10});
    std::memcpy(want.data(), ref.data(), want.size_bytes());
    expect_close(*graphed, want, tolerance(Precision::kFp32), "chunks of 2, batch " + std::to_string(n));
  }

  // A chunk count that is not a positive number is refused when the plan is loaded.
  for (auto& step : plan->steps)
    if (step.kind == StepKind::kConv) step.tactic = "chunk0" + step.tactic.substr(step.tactic.find(':'));
  ASSERT_TRUE(save_plan(*plan, path).is_ok());
  auto bad = Engine::load(path.string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("chunk0:cudnn"), std::string::npos) << bad.status().message();
  std::filesystem::remove(path);
}

// Tactic timing with a batch-chunk search at a max batch above 256 (tactic_timing.h): one 128-channel
// FP32 3x3 layer (a few ms at batch 260, so chunks of 256 plus a remainder of 4 are timed). Which
// tactic wins is the GPU's business; the plan must compute what the plan built without chunks
// computes.
TEST(EngineGpu, TacticTimingWithBatchChunksComputesTheSame) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(128, 36, 36);
  b.conv(128, 128, 3, 1, 1, 1, Activation::kRelu);
  const Graph graph = b.finish(128, 10);
  const Tensor input = random_tensor(Shape{260, 128, 36, 36}, 22);
  std::vector<Tensor> outs;
  for (BatchChunks chunks : {BatchChunks::kSearch, BatchChunks::kOff}) {
    BuildOptions options;
    options.precision = Precision::kFp32;
    options.max_batch = 260;
    options.batch_chunks = chunks;
    auto engine = build_engine_from_graph(graph, options, false);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    for (const auto& l : (*engine)->info().layers) {
      if (l.kind == "conv")
        std::printf("[ note  ] batch chunks %s: %s\n", batch_chunks_name(chunks).data(), l.tactic.c_str());
    }
    auto out = (*engine)->create_context().value()->run(input, true);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    outs.push_back(std::move(out).value());
  }
  expect_close(outs[0], outs[1], tolerance(Precision::kFp32), "batch 260, chunk search against none");
}

TEST(EngineGpu, TwoContextsOnTwoStreamsMatchOne) {
  SKIP_WITHOUT_GPU();
  GraphBuilder b(8, 32, 32);
  b.conv(8, 32, 3, 1, 1, 1, Activation::kRelu);
  b.conv(32, 32, 3, 2, 1, 1, Activation::kRelu);
  const Graph graph = b.finish(32, 10);
  BuildOptions options;
  options.precision = Precision::kFp16;
  options.max_batch = 8;
  auto engine = build_engine_from_graph(graph, options, false);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const Tensor in1 = random_tensor(Shape{8, 8, 32, 32}, 11), in2 = random_tensor(Shape{8, 8, 32, 32}, 12);
  auto single = (*engine)->create_context();
  ASSERT_TRUE(single.is_ok());
  auto want1 = (*single)->run(in1, true), want2 = (*single)->run(in2, true);
  ASSERT_TRUE(want1.is_ok() && want2.is_ok());
  auto c1 = (*engine)->create_context(), c2 = (*engine)->create_context();
  ASSERT_TRUE(c1.is_ok() && c2.is_ok());
  // First use prepares cuDNN plans and captures the graphs; then run both concurrently.
  ASSERT_TRUE((*c1)->run(in1, true).is_ok());
  ASSERT_TRUE((*c2)->run(in2, true).is_ok());
  for (int round = 0; round < 3; ++round) {
    Result<Tensor> got1 = Status::internal("not run"), got2 = Status::internal("not run");
    std::thread t1([&] { got1 = (*c1)->run(in1, true); });
    std::thread t2([&] { got2 = (*c2)->run(in2, true); });
    t1.join();
    t2.join();
    ASSERT_TRUE(got1.is_ok() && got2.is_ok());
    EXPECT_EQ(std::memcmp(got1->data(), want1->data(), want1->size_bytes()), 0) << round;
    EXPECT_EQ(std::memcmp(got2->data(), want2->data(), want2->size_bytes()), 0) << round;
  }
}

// ---- whole models -----------------------------------------------------------------------------

std::optional<std::filesystem::path> model_fixture(const std::string& file) {
  std::vector<std::filesystem::path> dirs = {testing::fixture_dir(), testing::source_dir() / "models"};
  if (const char* env = std::getenv("GPULAB_MODEL_FIXTURES")) dirs.insert(dirs.begin(), env);
  for (const auto& d : dirs)
    if (std::filesystem::exists(d / file)) return d / file;
  return std::nullopt;
}

void check_model(const std::string& file, const std::vector<Precision>& precisions) {
  SKIP_WITHOUT_GPU();
  const auto path = model_fixture(file);
  if (!path)
    GTEST_SKIP() << file << " not found: run tests/fixtures/make_model_fixtures.py --out "
                 << testing::fixture_dir().string() << " (or set GPULAB_MODEL_FIXTURES)";
  auto graph = load_onnx(*path);
  ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
  const Tensor input = random_tensor(Shape{2, 3, 224, 224}, 2024);
  const Tensor ref = reference_output(*graph, input);  // the original graph: passes are checked too
  ASSERT_TRUE(run_passes(*graph).is_ok());
  for (Precision p : precisions) {
    BuildOptions options;
    options.precision = p;
    options.max_batch = 2;
    options.time_tactics = p == Precision::kFp16;  // timing for one precision keeps the test short
    auto engine = build_engine_from_graph(*graph, options, false);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    for (const auto& l : (*engine)->info().layers)
      if (l.tactic == "direct")
        std::printf("[ note  ] %s %s: direct convolution fallback\n", file.c_str(), l.name.c_str());
    auto ctx = (*engine)->create_context();
    ASSERT_TRUE(ctx.is_ok());
    auto eager = (*ctx)->run(input, false);
    auto graphed = (*ctx)->run(input, true);
    ASSERT_TRUE(eager.is_ok()) << eager.status().to_string();
    ASSERT_TRUE(graphed.is_ok()) << graphed.status().to_string();
    EXPECT_EQ(std::memcmp(eager->data(), graphed->data(), eager->size_bytes()), 0) << precision_name(p);
    expect_close(*graphed, ref, tolerance(p), file + " " + std::string(precision_name(p)));
  }
}

TEST(EngineGpuModels, ResNet18AllPrecisions) {
  check_model("resnet18.onnx", {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16});
}

TEST(EngineGpuModels, MobileNetV2AllPrecisions) {
  check_model("mobilenet_v2.onnx", {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16});
}

// Fire modules (kConcat), MaxPool with ceil_mode, a convolutional classifier.
TEST(EngineGpuModels, SqueezeNetAllPrecisions) {
  check_model("squeezenet1_1.onnx", {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16});
}

// HardSwish and squeeze-and-excitation blocks (kPointwise, broadcast kMul).
TEST(EngineGpuModels, MobileNetV3SmallAllPrecisions) {
  check_model("mobilenet_v3_small.onnx",
              {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16});
}

// The bundled MobileNetV2 (models/, TF-Slim weights converted to ONNX; its classifier is a 1x1 Conv).
TEST(EngineGpuModels, BundledMobileNetV2AllPrecisions) {
  check_model("mobilenet_v2_1.0_224.onnx",
              {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16});
}

}  // namespace
}  // namespace gpulab
