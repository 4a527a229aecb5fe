// Builds small ONNX models with the ONNX protobuf API, for tests that need model files with a
// particular shape or op (import errors, CLI error paths).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpulab::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(7);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }
  onnx::GraphProto* g() { return model_.mutable_graph(); }

  // dims: -1 means the symbolic batch "N".
  ModelBuilder& input(const std::string& name, std::vector<int64_t> dims,
                      int elem = onnx::TensorProto::FLOAT) {
    fill_value(g()->add_input(), name, dims, elem);
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    fill_value(g()->add_output(), name, {}, onnx::TensorProto::FLOAT, /*with_shape=*/false);
    return *this;
  }
  onnx::TensorProto* floats(const std::string& name, std::vector<int64_t> dims,
                            std::vector<float> values = {}) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    if (values.empty())
      for (int64_t i = 0; i < n; ++i) values.push_back(0.01f * static_cast<float>(i % 17) - 0.05f);
    for (float v : values) t->add_float_data(v);
    return t;
  }
  onnx::TensorProto* ints(const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> values) {
    auto* t = g()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
    return t;
  }
  onnx::NodeProto* node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                        std::vector<std::string> outputs) {
    auto* n = g()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : inputs) n->add_input(i);
    for (auto& o : outputs) n->add_output(o);
    return n;
  }
  std::string bytes() const { return model_.SerializeAsString(); }
  onnx::ModelProto& model() { return model_; }

 private:
  static void fill_value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims,
                         int elem, bool with_shape = true) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    if (!with_shape) return;
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) {
        dim->set_dim_param("N");
      } else {
        dim->set_dim_value(d);
      }
    }
  }
  onnx::ModelProto model_;
};

}  // namespace gpulab::testing
