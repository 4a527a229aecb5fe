#include "onnx/onnx_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "onnx_model_builder.h"
#include "passes/passes.h"
#include "test_support.h"

namespace gpulab {
namespace {

using gpulab::testing::ModelBuilder;

namespace fs = std::filesystem;
using ::testing::HasSubstr;
constexpr int64_t N = Shape::kBatch;

void set_ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

Result<Graph> load(const std::string& bytes, std::string_view name = "test.onnx") {
  return load_onnx_bytes(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), name);
}

// A small CNN like torchvision's exports: Conv-BN-Relu-MaxPool, Conv+residual Add, Clip via
// Constant nodes, GAP, Flatten, Dropout, Identity, Gemm, Softmax.
ModelBuilder small_cnn(int64_t opset = 13) {
  ModelBuilder m(opset);
  m.input("x", {-1, 3, 8, 8});
  m.floats("c1.w", {4, 3, 3, 3});
  m.floats("c1.b", {4});
  for (const char* p : {"bn.scale", "bn.bias", "bn.mean"}) m.floats(p, {4});
  m.floats("bn.var", {4}, {1.0f, 0.5f, 2.0f, 1.5f});
  m.floats("c2.w", {4, 4, 1, 1});
  m.floats("fc.w", {5, 4});
  m.floats("fc.b", {5});
  auto* c1 = m.node("Conv", "conv1", {"x", "c1.w", "c1.b"}, {"c1"});
  set_ints(c1, "kernel_shape", {3, 3});
  set_ints(c1, "pads", {1, 1, 1, 1});
  set_ints(c1, "strides", {1, 1});
  auto* bn = m.node("BatchNormalization", "bn1", {"c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, {"n1"});
  set_float(bn, "epsilon", 1e-5f);
  m.node("Relu", "relu1", {"n1"}, {"r1"});
  auto* mp = m.node("MaxPool", "pool", {"r1"}, {"p1"});
  set_ints(mp, "kernel_shape", {2, 2});
  set_ints(mp, "strides", {2, 2});
  auto* c2 = m.node("Conv", "conv2", {"p1", "c2.w"}, {"c2"});
  set_ints(c2, "kernel_shape", {1, 1});
  m.node("Add", "add", {"c2", "p1"}, {"s"});
  auto* lo = m.node("Constant", "lo", {}, {"lo"});
  set_float(lo, "value_float", 0.0f);
  auto* hi = m.g()->add_node();
  hi->set_op_type("Constant");
  hi->add_output("hi");
  auto* ha = hi->add_attribute();
  ha->set_name("value");
  ha->set_type(onnx::AttributeProto::TENSOR);
  ha->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  ha->mutable_t()->add_float_data(6.0f);
  m.node("Clip", "relu6", {"s", "lo", "hi"}, {"a"});
  m.node("GlobalAveragePool", "gap", {"a"}, {"g"});
  auto* fl = m.node("Flatten", "flatten", {"g"}, {"f"});
  set_int(fl, "axis", 1);
  m.node("Dropout", "drop", {"f"}, {"d"});
  m.node("Identity", "id", {"d"}, {"i"});
  auto* fc = m.node("Gemm", "fc", {"i", "fc.w", "fc.b"}, {"logits"});
  set_int(fc, "transB", 1);
  m.node("Softmax", "softmax", {"logits"}, {"prob"});
  m.output("prob");
  auto* meta = m.model().add_metadata_props();
  meta->set_key("preprocess.mean");
  meta->set_value("0.485,0.456,0.406");
  return m;
}

fs::path temp_dir() {
  fs::path dir =
      fs::temp_directory_path() / ("gpulab_onnx_test_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// --- good models ---------------------------------------------------------------------------------

TEST(OnnxImport, SmallCnnShapesAttributesAndMetadata) {
  auto r = load(small_cnn().bytes());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Graph& g = r.value();
  EXPECT_EQ(g.opset, 13);
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(g.value("x")->shape, (Shape{N, 3, 8, 8}));
  EXPECT_EQ(g.value("c1")->shape, (Shape{N, 4, 8, 8}));
  EXPECT_EQ(g.value("p1")->shape, (Shape{N, 4, 4, 4}));
  EXPECT_EQ(g.value("f")->shape, (Shape{N, 4}));
  EXPECT_EQ(g.value("prob")->shape, (Shape{N, 5}));
  ASSERT_EQ(g.nodes.size(), 13u);  // the two Constants became initializers
  EXPECT_TRUE(g.is_initializer("lo"));
  EXPECT_EQ(g.metadata.at("preprocess.mean"), "0.485,0.456,0.406");

  const Node& clip = g.nodes[6];
  ASSERT_EQ(clip.op, OpType::kClip);
  EXPECT_EQ(clip.inputs.size(), 1u);
  EXPECT_FLOAT_EQ(clip.attr<ClipAttrs>().min, 0.0f);
  EXPECT_FLOAT_EQ(clip.attr<ClipAttrs>().max, 6.0f);
  ASSERT_EQ(g.nodes[12].op, OpType::kSoftmax);
  EXPECT_EQ(g.nodes[12].attr<AxisAttrs>().axis, -1);  // opset 13 default
  ASSERT_EQ(g.nodes[11].op, OpType::kGemm);
  const GemmAttrs& gemm = g.nodes[11].attr<GemmAttrs>();
  EXPECT_TRUE(gemm.trans_b);
  EXPECT_FLOAT_EQ(gemm.alpha, 1.0f);
  const ConvAttrs& conv = g.nodes[0].attr<ConvAttrs>();
  EXPECT_EQ(conv.pads, (Pads{1, 1, 1, 1}));
  EXPECT_EQ(conv.groups, 1);
  EXPECT_EQ(g.nodes[4].attr<ConvAttrs>().kernel, (Hw{1, 1}));
}

TEST(OnnxImport, SmallCnnAfterPasses) {
  auto r = load(small_cnn().bytes());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Graph g = std::move(r).value();
  ASSERT_TRUE(run_passes(g).is_ok());
  // conv1(+bn, relu), pool, conv2(+residual, clip), gap, flatten, gemm, softmax
  ASSERT_EQ(g.nodes.size(), 7u);
  EXPECT_EQ(g.nodes[0].attr<ConvAttrs>().activation, Activation::kRelu);
  EXPECT_TRUE(g.nodes[2].attr<ConvAttrs>().has_residual);
  EXPECT_EQ(g.nodes[2].attr<ConvAttrs>().activation, Activation::kClip);
  EXPECT_EQ(g.value("prob")->shape, (Shape{N, 5}));
}

TEST(OnnxImport, LoadsFromFileWithExternalData) {
  const fs::path dir = temp_dir();
  ModelBuilder m;
  m.input("x", {-1, 2, 4, 4});
  auto* w = m.g()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {3, 2, 1, 1}) w->add_dims(d);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  const std::vector<float> wv{1, 2, 3, 4, 5, 6};
  std::string blob(16, 'x');  // 16 bytes of padding before the data
  blob.append(reinterpret_cast<const char*>(wv.data()), wv.size() * 4);
  write(dir / "weights.bin", blob);
  auto add_kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", "weights.bin");
  add_kv("offset", "16");
  add_kv("length", "24");
  auto* c = m.node("Conv", "conv", {"x", "w"}, {"y"});
  set_ints(c, "kernel_shape", {1, 1});
  m.output("y");
  write(dir / "model.onnx", m.bytes());

  auto r = load_onnx(dir / "model.onnx");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tensor* t = r.value().initializer("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::vector<float>(t->f32().begin(), t->f32().end()), wv);
  EXPECT_EQ(r.value().value("y")->shape, (Shape{N, 3, 4, 4}));

  // From memory there is no folder to read it from.
  auto mem = load(m.bytes());
  ASSERT_FALSE(mem.is_ok());
  EXPECT_EQ(mem.status().code(), StatusCode::kUnsupported);

  // Data beyond the end of the file, and a location outside the model's folder.
  w->mutable_external_data(1)->set_value("100");
  write(dir / "model.onnx", m.bytes());
  auto beyond = load_onnx(dir / "model.onnx");
  ASSERT_FALSE(beyond.is_ok());
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidModel);
  EXPECT_THAT(beyond.status().message(), HasSubstr("'w'"));
  w->mutable_external_data(1)->set_value("16");
  w->mutable_external_data(0)->set_value("../weights.bin");
  write(dir / "model.onnx", m.bytes());
  auto escape = load_onnx(dir / "model.onnx");
  ASSERT_FALSE(escape.is_ok());
  EXPECT_THAT(escape.status().message(), HasSubstr("leaves the model's folder"));
  fs::remove_all(dir);
}

TEST(OnnxImport, AutoPadSameUpperLowerAndValid) {
  for (const char* mode : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    ModelBuilder m;
    m.input("x", {-1, 1, 8, 8});
    m.floats("w", {1, 1, 3, 3});
    auto* c = m.node("Conv", "conv", {"x", "w"}, {"y"});
    set_ints(c, "strides", {2, 2});
    set_string(c, "auto_pad", mode);
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_TRUE(r.is_ok()) << mode << ": " << r.status().to_string();
    const ConvAttrs& a = r.value().nodes[0].attr<ConvAttrs>();
    const std::string s(mode);
    if (s == "SAME_UPPER") {
      EXPECT_EQ(a.pads, (Pads{0, 0, 1, 1}));  // total 1: the extra pixel at the end
      EXPECT_EQ(r.value().value("y")->shape, (Shape{N, 1, 4, 4}));
    } else if (s == "SAME_LOWER") {
      EXPECT_EQ(a.pads, (Pads{1, 1, 0, 0}));
      EXPECT_EQ(r.value().value("y")->shape, (Shape{N, 1, 4, 4}));
    } else {
      EXPECT_EQ(a.pads, (Pads{0, 0, 0, 0}));
      EXPECT_EQ(r.value().value("y")->shape, (Shape{N, 1, 3, 3}));
    }
  }
}

TEST(OnnxImport, Opset11UnsqueezeAttrAndOpset13UnsqueezeInputAndShapeChain) {
  for (int64_t opset : {11, 13}) {
    ModelBuilder m(opset);
    m.input("x", {-1, 8, 1, 1});
    m.ints("zero", {}, {0});
    m.ints("minus_one", {1}, {-1});
    m.node("Shape", "shape", {"x"}, {"s"});
    m.node("Gather", "gather", {"s", "zero"}, {"n"});
    if (opset >= 13) {
      m.ints("axes", {1}, {0});
      m.node("Unsqueeze", "unsq", {"n", "axes"}, {"n1"});
    } else {
      set_ints(m.node("Unsqueeze", "unsq", {"n"}, {"n1"}), "axes", {0});
    }
    set_int(m.node("Concat", "cat", {"n1", "minus_one"}, {"t"}), "axis", 0);
    m.node("Reshape", "reshape", {"x", "t"}, {"y"});
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r.value().nodes[2].attr<UnsqueezeAttrs>().axes, (std::vector<int64_t>{0}));
    EXPECT_EQ(r.value().value("y")->shape, (Shape{N, 8}));
    Graph g = std::move(r).value();
    ASSERT_TRUE(run_passes(g).is_ok());
    EXPECT_EQ(g.nodes.size(), 1u);  // only the Reshape, with a constant [0,-1]
  }
}

TEST(OnnxImport, Float16AndInt32Initializers) {
  ModelBuilder m;
  m.input("x", {-1, 2});
  auto* h = m.g()->add_initializer();
  h->set_name("h");
  h->set_data_type(onnx::TensorProto::FLOAT16);
  h->add_dims(2);
  h->add_int32_data(0x3C00);  // 1.0
  h->add_int32_data(0xC000);  // -2.0
  m.node("Add", "add", {"x", "h"}, {"y"});
  auto* idx = m.g()->add_initializer();
  idx->set_name("idx");
  idx->set_data_type(onnx::TensorProto::INT32);
  const int32_t raw[1] = {1};
  idx->set_raw_data(std::string(reinterpret_cast<const char*>(raw), 4));
  idx->add_dims(1);
  m.node("Gather", "g", {"y", "idx"}, {"z"})->add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(1);
    return a;
  }());
  m.output("z");
  auto r = load(m.bytes());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tensor* t = r.value().initializer("h");
  ASSERT_EQ(t->dtype(), DataType::kFloat32);
  EXPECT_FLOAT_EQ(t->f32()[0], 1.0f);
  EXPECT_FLOAT_EQ(t->f32()[1], -2.0f);
  EXPECT_EQ(r.value().initializer("idx")->dtype(), DataType::kInt64);
  EXPECT_EQ(r.value().value("z")->shape, (Shape{N, 1}));
}

TEST(OnnxImport, Opset11SoftmaxDefaultAxisAndFlattenedSemantics) {
  for (const bool spatial : {false, true}) {
    ModelBuilder m(11);
    m.input("x", spatial ? std::vector<int64_t>{-1, 3, 4, 4} : std::vector<int64_t>{-1, 5});
    m.node("Softmax", "softmax", {"x"}, {"y"});
    m.output("y");
    auto r = load(m.bytes());
    if (!spatial) {
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(r.value().nodes[0].attr<AxisAttrs>().axis, 1);  // the pre-13 default
    } else {
      ASSERT_FALSE(r.is_ok());
      EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
      EXPECT_THAT(r.status().message(), HasSubstr("'softmax' (Softmax)"));
    }
  }
}

// --- bad input -----------------------------------------------------------------------------------

TEST(OnnxImportErrors, MissingFile) {
  auto r = load_onnx("/nonexistent/dir/model.onnx");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/dir/model.onnx"));
}

TEST(OnnxImportErrors, EmptyTruncatedAndRandomFiles) {
  const fs::path dir = temp_dir();
  write(dir / "empty.onnx", "");
  const std::string good = small_cnn().bytes();
  write(dir / "half.onnx", good.substr(0, good.size() / 2));
  std::mt19937 rng(1234);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  write(dir / "random.onnx", noise);

  for (const char* name : {"empty.onnx", "half.onnx", "random.onnx"}) {
    auto r = load_onnx(dir / name);
    ASSERT_FALSE(r.is_ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel) << name << ": " << r.status().to_string();
    EXPECT_THAT(r.status().message(), HasSubstr(name));
  }
  EXPECT_THAT(load_onnx(dir / "empty.onnx").status().message(), HasSubstr("empty"));
  fs::remove_all(dir);
}

TEST(OnnxImportErrors, ModelWithoutNodesOrInputs) {
  ModelBuilder empty;
  auto r = load(empty.bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  EXPECT_THAT(r.status().message(), HasSubstr("no nodes"));

  ModelBuilder no_input;
  no_input.floats("a", {2});
  no_input.node("Relu", "relu", {"a"}, {"y"});
  no_input.output("y");
  auto r2 = load(no_input.bytes());
  ASSERT_FALSE(r2.is_ok());
  EXPECT_THAT(r2.status().message(), HasSubstr("no input"));
}

TEST(OnnxImportErrors, UnsupportedOpNamesNodeOpAndSupportedList) {
  ModelBuilder m;
  m.input("x", {-1, 4, 8, 8});
  m.node("LRN", "my_lrn", {"x"}, {"y"});
  m.output("y");
  auto r = load(m.bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(r.status().message(), HasSubstr("my_lrn"));
  EXPECT_THAT(r.status().message(), HasSubstr("LRN"));
  EXPECT_THAT(r.status().message(), HasSubstr(supported_ops_list()));
}

TEST(OnnxImportErrors, UnsupportedOpsets) {
  for (int64_t opset : {9, 19}) {
    ModelBuilder m(opset);
    m.input("x", {-1, 4});
    m.node("Relu", "relu", {"x"}, {"y"});
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr("opset " + std::to_string(opset)));
    EXPECT_THAT(r.status().message(), HasSubstr("11..18"));
  }
}

TEST(OnnxImportErrors, UnsupportedAttributeAndUsedDropoutMask) {
  {
    ModelBuilder m;
    m.input("x", {-1, 4, 8, 8});
    auto* p = m.node("MaxPool", "pool", {"x"}, {"y"});
    set_ints(p, "kernel_shape", {2, 2});
    set_int(p, "fancy_mode", 1);
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr("'pool' (MaxPool)"));
    EXPECT_THAT(r.status().message(), HasSubstr("fancy_mode"));
  }
  {
    ModelBuilder m;
    m.input("x", {-1, 4});
    m.node("Dropout", "drop", {"x"}, {"y", "mask"});
    m.output("y");
    m.output("mask");
    auto r = load(m.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr("mask"));
  }
}

TEST(OnnxImportErrors, NonConstantClipBoundAndSymbolicSpatialDim) {
  {
    ModelBuilder m;
    m.input("x", {-1, 4});
    m.input("lo", {1});
    m.node("Clip", "clip", {"x", "lo"}, {"y"});
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr("'clip' (Clip)"));
  }
  {
    ModelBuilder m;
    m.input("x", {-1, 3, -1, 224});
    m.node("Relu", "relu", {"x"}, {"y"});
    m.output("y");
    auto r = load(m.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(r.status().message(), HasSubstr("dimension 2"));
  }
}

TEST(OnnxImportErrors, ShapeErrorNamesNodeAndShapes) {
  ModelBuilder m;
  m.input("x", {-1, 3, 8, 8});
  m.floats("w", {4, 5, 3, 3});
  set_ints(m.node("Conv", "bad_conv", {"x", "w"}, {"y"}), "kernel_shape", {3, 3});
  m.output("y");
  auto r = load(m.bytes(), "shapes.onnx");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  EXPECT_THAT(r.status().message(), HasSubstr("shapes.onnx"));
  EXPECT_THAT(r.status().message(), HasSubstr("bad_conv"));
  EXPECT_THAT(r.status().message(), HasSubstr("[N,3,8,8]"));
}

// --- the shared MobileNetV2 ----------------------------------------------------------------------

TEST(OnnxImportShared, MobileNetV2LoadsAndFuses) {
  const auto shared = gpulab::testing::shared_dir();
  if (!shared) GTEST_SKIP() << "shared data folder not found (set GPULAB_SHARED_DIR)";
  const fs::path path = *shared / "models" / "mobilenet_v2_1.0_224.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
  auto r = load_onnx(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Graph g = std::move(r).value();
  EXPECT_EQ(g.opset, 13);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.value(g.inputs[0])->shape, (Shape{N, 3, 224, 224}));
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.value(g.outputs[0])->shape, (Shape{N, 1000}));  // background class removed
  EXPECT_EQ(g.nodes.size(), 100u);
  EXPECT_EQ(g.metadata.count("preprocess.mean"), 1u);

  ASSERT_TRUE(run_passes(g).is_ok());
  int convs = 0, clip_fused = 0, residual = 0;
  for (const Node& n : g.nodes) {
    EXPECT_NE(n.op, OpType::kClip) << n.name;
    EXPECT_NE(n.op, OpType::kBatchNormalization) << n.name;
    EXPECT_NE(n.op, OpType::kAdd) << n.name;
    if (n.op != OpType::kConv) continue;
    ++convs;
    clip_fused += n.attr<ConvAttrs>().activation == Activation::kClip;
    residual += n.attr<ConvAttrs>().has_residual;
  }
  EXPECT_EQ(convs, 53);
  EXPECT_EQ(clip_fused, 35);
  EXPECT_EQ(residual, 10);
  EXPECT_EQ(g.nodes.size(), 55u);  // 53 Conv + GlobalAveragePool + Flatten
  EXPECT_EQ(g.value(g.outputs[0])->shape, (Shape{N, 1000}));
}

// --- Pad and ReduceMean: imported as other ops where they can be ----------------------------------

// x [N,4,8,8] -> Pad(pads) -> `consumer` (built by the caller) -> y.
ModelBuilder padded(const std::vector<int64_t>& pads, int64_t opset = 13) {
  ModelBuilder m(opset);
  m.input("x", {-1, 4, 8, 8});
  m.ints("pads", {8}, pads);
  m.node("Pad", "pad", {"x", "pads"}, {"p"});
  m.output("y");
  return m;
}

TEST(OnnxImportPad, ZeroPadFoldsIntoConvAndAveragePool) {
  // [n_begin, c_begin, h_begin, w_begin, n_end, c_end, h_end, w_end]: top 1, left 2, bottom 3.
  ModelBuilder m = padded({0, 0, 1, 2, 0, 0, 3, 0});
  m.floats("w", {6, 4, 3, 3});
  auto* conv = m.node("Conv", "conv", {"p", "w"}, {"y"});
  set_ints(conv, "pads", {1, 1, 1, 1});
  m.ints("pads2", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
  m.node("Pad", "pad2", {"x", "pads2"}, {"q"});
  auto* pool = m.node("AveragePool", "pool", {"q"}, {"z"});
  set_ints(pool, "kernel_shape", {3, 3});
  m.output("z");
  auto g = load(m.bytes());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_EQ(g->nodes.size(), 2u) << "the Pads are folded, not nodes";
  const Node& c = g->nodes[0];
  EXPECT_EQ(c.inputs[0], "x");
  const Pads& cp = c.attr<ConvAttrs>().pads;
  EXPECT_EQ(cp.top, 2);
  EXPECT_EQ(cp.left, 3);
  EXPECT_EQ(cp.bottom, 4);
  EXPECT_EQ(cp.right, 1);
  EXPECT_EQ(g->value("y")->shape, (Shape{N, 6, 12, 10}));
  const PoolAttrs& pa = g->nodes[1].attr<PoolAttrs>();
  EXPECT_EQ(g->nodes[1].inputs[0], "x");
  EXPECT_TRUE(pa.count_include_pad) << "the Pad's zeros count in the average";
  EXPECT_EQ(pa.pads.top, 1);
  EXPECT_EQ(pa.pads.right, 1);
  EXPECT_EQ(g->value("z")->shape, (Shape{N, 4, 8, 8}));
}

TEST(OnnxImportPad, PadOfAPadIsOnePadding) {
  ModelBuilder m = padded({0, 0, 1, 0, 0, 0, 0, 0});
  m.ints("more", {8}, {0, 0, 0, 2, 0, 0, 3, 0});
  m.node("Pad", "pad2", {"p", "more"}, {"q"});
  m.floats("w", {6, 4, 3, 3});
  m.node("Conv", "conv", {"q", "w"}, {"y"});
  auto g = load(m.bytes());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].inputs[0], "x");
  const Pads& p = g->nodes[0].attr<ConvAttrs>().pads;
  EXPECT_EQ(p.top, 1);
  EXPECT_EQ(p.left, 2);
  EXPECT_EQ(p.bottom, 3);
  EXPECT_EQ(p.right, 0);
}

// A Pad that cannot go into a Conv's or AveragePool's padding is a Pad node; other modes are
// refused by name.
TEST(OnnxImportPad, WhatCannotBeFoldedIsAPadNode) {
  const auto pad_node = [](ModelBuilder& m, const char* what, Shape want) {
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << what << ": " << g.status().to_string();
    EXPECT_EQ(g->nodes[0].op, OpType::kPad) << what;
    EXPECT_EQ(g->value("p")->shape, want) << what;
  };
  {  // MaxPool pads with -inf, not zeros
    ModelBuilder m = padded({0, 0, 1, 1, 0, 0, 1, 1});
    set_ints(m.node("MaxPool", "pool", {"p"}, {"y"}), "kernel_shape", {3, 3});
    pad_node(m, "maxpool", Shape{N, 4, 10, 10});
  }
  {  // an elementwise reader
    ModelBuilder m = padded({0, 0, 1, 1, 0, 0, 1, 1});
    m.node("Relu", "relu", {"p"}, {"y"});
    pad_node(m, "relu", Shape{N, 4, 10, 10});
  }
  {  // channels padded
    ModelBuilder m = padded({0, 1, 0, 0, 0, 0, 0, 0});
    m.floats("w", {6, 5, 1, 1});
    m.node("Conv", "conv", {"p", "w"}, {"y"});
    pad_node(m, "channels", Shape{N, 5, 8, 8});
  }
  {  // a non-zero value
    ModelBuilder m = padded({0, 0, 1, 1, 0, 0, 1, 1});
    m.g()->mutable_node(0)->add_input("v");
    m.floats("v", {}, {1.0f});
    m.floats("w", {6, 4, 1, 1});
    m.node("Conv", "conv", {"p", "w"}, {"y"});
    pad_node(m, "value 1", Shape{N, 4, 10, 10});
  }
  const auto refused = [](ModelBuilder& m, const char* what) {
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok()) << what;
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported) << what << ": " << g.status().to_string();
    EXPECT_THAT(g.status().message(), HasSubstr("'pad' (Pad)")) << what;
  };
  {  // reflect mode
    ModelBuilder m = padded({0, 0, 1, 1, 0, 0, 1, 1});
    set_string(m.g()->mutable_node(0), "mode", "reflect");
    m.floats("w", {6, 4, 1, 1});
    m.node("Conv", "conv", {"p", "w"}, {"y"});
    refused(m, "reflect");
  }
  {  // an AveragePool whose ceil_mode windows would cover more than the Pad
    ModelBuilder m = padded({0, 0, 1, 1, 0, 0, 1, 1});
    auto* pool = m.node("AveragePool", "pool", {"p"}, {"y"});
    set_ints(pool, "kernel_shape", {3, 3});
    set_ints(pool, "strides", {2, 2});
    set_int(pool, "ceil_mode", 1);
    refused(m, "ceil_mode");
  }
}

TEST(OnnxImportReduceMean, SpatialMeanIsAGlobalAveragePool) {
  for (const int64_t keepdims : {0, 1}) {
    ModelBuilder m;
    m.input("x", {-1, 4, 8, 8});
    auto* r = m.node("ReduceMean", "mean", {"x"}, {"y"});
    set_ints(r, "axes", {-1, 2});
    set_int(r, "keepdims", keepdims);
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->nodes[0].op, OpType::kGlobalAveragePool);
    EXPECT_EQ(g->nodes.size(), keepdims ? 1u : 2u);
    EXPECT_EQ(g->value("y")->shape, keepdims ? (Shape{N, 4, 1, 1}) : (Shape{N, 4}));
  }
  {  // opset 18: axes is an input
    ModelBuilder m(18);
    m.input("x", {-1, 4, 8, 8});
    m.ints("axes", {2}, {2, 3});
    set_int(m.node("ReduceMean", "mean", {"x", "axes"}, {"y"}), "keepdims", 0);
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->value("y")->shape, (Shape{N, 4}));
  }
  {  // the channels: a ReduceMean node
    ModelBuilder m;
    m.input("x", {-1, 4, 8, 8});
    set_ints(m.node("ReduceMean", "mean", {"x"}, {"y"}), "axes", {1});
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->nodes[0].op, OpType::kReduceMean);
    EXPECT_EQ(g->value("y")->shape, (Shape{N, 1, 8, 8}));
  }
  {  // the last two axes of a 3-D tensor
    ModelBuilder m;
    m.input("x", {-1, 4, 8});
    auto* r = m.node("ReduceMean", "mean", {"x"}, {"y"});
    set_ints(r, "axes", {1, 2});
    set_int(r, "keepdims", 0);
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->nodes[0].op, OpType::kReduceMean);
    EXPECT_EQ(g->value("y")->shape, (Shape{N}));
  }
  {  // over the batch: refused by name
    ModelBuilder m;
    m.input("x", {-1, 4, 8, 8});
    set_ints(m.node("ReduceMean", "mean", {"x"}, {"y"}), "axes", {0});
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(g.status().message(), HasSubstr("'mean' (ReduceMean)"));
  }
}

// --- the ops of the transformer classifiers ----------------------------------------------------

TEST(OnnxImportTensorOps, AttributesAndFoldedInputs) {
  ModelBuilder m(13);
  m.input("x", {-1, 4, 6});
  set_ints(m.node("Transpose", "t", {"x"}, {"xt"}), "perm", {0, 2, 1});
  m.ints("split", {2}, {2, 4});
  set_int(m.node("Split", "split", {"xt", "split"}, {"a", "b"}), "axis", 1);
  m.ints("axes", {1}, {1});
  m.node("Unsqueeze", "u", {"a", "axes"}, {"au"});
  m.node("Squeeze", "sq", {"au", "axes"}, {"as"});
  m.floats("scale", {4});
  auto* ln = m.node("LayerNormalization", "ln", {"b", "scale"}, {"ln"});
  set_float(ln, "epsilon", 1e-6f);
  set_string(m.node("Gelu", "gelu", {"ln"}, {"g"}), "approximate", "tanh");
  set_int(m.node("Cast", "cast", {"g"}, {"c"}), "to", onnx::TensorProto::DOUBLE);
  m.output("c");
  m.output("as");
  auto g = load(m.bytes());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  ASSERT_EQ(g->nodes.size(), 7u);
  EXPECT_EQ(g->nodes[0].attr<TransposeAttrs>().perm, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(g->nodes[1].attr<SplitAttrs>().sizes, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(g->nodes[1].inputs.size(), 1u) << "the split input is folded into the attribute";
  EXPECT_EQ(g->value("b")->shape, (Shape{N, 4, 4}));
  EXPECT_EQ(g->nodes[3].attr<UnsqueezeAttrs>().axes, (std::vector<int64_t>{1}));
  EXPECT_EQ(g->value("as")->shape, (Shape{N, 2, 4}));
  EXPECT_FLOAT_EQ(g->nodes[4].attr<LayerNormAttrs>().epsilon, 1e-6f);
  EXPECT_EQ(g->nodes[4].attr<LayerNormAttrs>().axis, -1);
  EXPECT_TRUE(g->nodes[5].attr<GeluAttrs>().tanh_approximation);
  EXPECT_EQ(g->nodes[6].attr<CastAttrs>().to, DataType::kFloat32) << "float64 is held as float32";
}

TEST(OnnxImportTensorOps, EinsumIsAMatMulOrRefusedByName) {
  for (const auto& [equation, transposes] : std::vector<std::pair<std::string, size_t>>{
           {"bhid,bhjd->bhij", 1}, {"B H I J, B H J D -> B H I D", 0}}) {
    ModelBuilder m(13);
    m.input("q", {-1, 2, 5, 8});
    m.input("k", {-1, 2, transposes ? 5 : 8, 8});  // [B, H, J, D]: J keys, or J = the contracted 8
    set_string(m.node("Einsum", "einsum", {"q", "k"}, {"s"}), "equation", equation);
    m.output("s");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << equation << ": " << g.status().to_string();
    ASSERT_EQ(g->nodes.size(), transposes + 1) << equation;
    EXPECT_EQ(g->nodes.back().op, OpType::kMatMul);
    EXPECT_EQ(g->value("s")->shape, (Shape{N, 2, 5, transposes ? 5 : 8}));
  }
  ModelBuilder m(13);
  m.input("a", {-1, 3});
  m.input("b", {-1, 3});
  set_string(m.node("Einsum", "dot", {"a", "b"}, {"s"}), "equation", "ni,ni->n");
  m.output("s");
  auto g = load(m.bytes());
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(g.status().message(), HasSubstr("'dot' (Einsum)"));
  EXPECT_THAT(g.status().message(), HasSubstr("ni,ni->n"));
}

TEST(OnnxImportTensorOps, ConstantOfShapeValueAndDropoutOfRatioZero) {
  ModelBuilder m(13);
  m.input("x", {-1, 3});
  m.ints("shape", {1}, {3});
  auto* c = m.node("ConstantOfShape", "c", {"shape"}, {"ones"});
  auto* value = c->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(1);
  // F.dropout(x, p=0.0) with its default training=True, as Swin calls it.
  m.floats("ratio", {}, {0.0f});
  auto* training = m.g()->add_initializer();
  training->set_name("training");
  training->set_data_type(onnx::TensorProto::BOOL);
  training->add_int32_data(1);
  m.node("Dropout", "dropout", {"x", "ratio", "training"}, {"y"});
  m.output("y");
  m.output("ones");
  auto g = load(m.bytes());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const auto& a = g->nodes[0].attr<ConstantOfShapeAttrs>();
  EXPECT_EQ(a.dtype, DataType::kInt64);
  EXPECT_EQ(a.value, 1.0);
  EXPECT_EQ(g->value("ones")->known_values, (std::vector<int64_t>{1, 1, 1}));

  m.g()->mutable_initializer(1)->set_float_data(0, 0.5f);  // a real dropout in training mode
  auto refused = load(m.bytes());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("training_mode"));
}

TEST(OnnxImportTensorOps, RefusalsNameTheNode) {
  {  // LayerNormalization's Mean output in use
    ModelBuilder m(17);
    m.input("x", {-1, 4});
    m.floats("scale", {4});
    m.node("LayerNormalization", "ln", {"x", "scale"}, {"y", "mean"});
    m.node("Relu", "r", {"mean"}, {"z"});
    m.output("y");
    m.output("z");
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok());
    EXPECT_THAT(g.status().message(), HasSubstr("'ln' (LayerNormalization)"));
  }
  {  // LpNormalization with p 3
    ModelBuilder m(17);
    m.input("x", {-1, 4});
    set_int(m.node("LpNormalization", "lp", {"x"}, {"y"}), "p", 3);
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidModel);
    EXPECT_THAT(g.status().message(), HasSubstr("p 3 is not 1 or 2"));
  }
  {  // LpNormalization's defaults: the last axis, p 2, no epsilon
    ModelBuilder m(17);
    m.input("x", {-1, 4});
    m.node("LpNormalization", "lp", {"x"}, {"y"});
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->nodes[0].attr<LpNormAttrs>().axis, -1);
    EXPECT_EQ(g->nodes[0].attr<LpNormAttrs>().p, 2);
    EXPECT_EQ(g->nodes[0].attr<LpNormAttrs>().epsilon, 0.0f);
    EXPECT_EQ(g->value("y")->shape, (Shape{N, 4}));
  }
  {  // Attention is gpulab's own node, not an op it reads
    ModelBuilder m(17);
    m.input("x", {-1, 4});
    m.node("Attention", "att", {"x", "x", "x"}, {"y"});
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
    EXPECT_THAT(g.status().message(), HasSubstr("'att' (Attention)"));
  }
  {  // a ScatterND with a reduction
    ModelBuilder m(16);
    m.input("x", {-1, 4});
    m.ints("i", {1, 1}, {0});
    m.floats("u", {1, 4});
    set_string(m.node("ScatterND", "scatter", {"x", "i", "u"}, {"y"}), "reduction", "add");
    m.output("y");
    auto g = load(m.bytes());
    ASSERT_FALSE(g.is_ok());
    EXPECT_THAT(g.status().message(), HasSubstr("'scatter' (ScatterND)"));
  }
}

}  // namespace
}  // namespace gpulab
