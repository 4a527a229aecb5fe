// Internal to the ONNX importer: typed access to a NodeProto's attributes. Remembers which were
// read, so that check_all_read() refuses any other (an unknown attribute changes semantics gpulab
// does not implement).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

class AttrReader {
 public:
  AttrReader(const onnx::NodeProto& node, std::string where) : node_(node), where_(std::move(where)) {}

  const onnx::AttributeProto* find(const std::string& name) {
    for (const auto& a : node_.attribute()) {
      if (a.name() == name) {
        read_.insert(name);
        return &a;
      }
    }
    return nullptr;
  }
  bool has(const std::string& name) {
    for (const auto& a : node_.attribute())
      if (a.name() == name) return true;
    return false;
  }

  Result<int64_t> get_int(const std::string& name, int64_t fallback) {
    const auto* a = find(name);
    if (!a) return fallback;
    if (a->type() != onnx::AttributeProto::INT) return type_error(name, "an int");
    return a->i();
  }
  Result<float> get_float(const std::string& name, float fallback) {
    const auto* a = find(name);
    if (!a) return fallback;
    if (a->type() != onnx::AttributeProto::FLOAT) return type_error(name, "a float");
    return a->f();
  }
  Result<std::string> get_string(const std::string& name, std::string fallback) {
    const auto* a = find(name);
    if (!a) return fallback;
    if (a->type() != onnx::AttributeProto::STRING) return type_error(name, "a string");
    return a->s();
  }
  // nullopt when absent.
  Result<std::optional<std::vector<int64_t>>> get_ints(const std::string& name) {
    const auto* a = find(name);
    if (!a) return std::optional<std::vector<int64_t>>();
    if (a->type() != onnx::AttributeProto::INTS) return type_error(name, "a list of ints");
    return std::optional<std::vector<int64_t>>(std::vector<int64_t>(a->ints().begin(), a->ints().end()));
  }

  // Every attribute must have been read: an unknown one changes semantics we do not implement.
  Status check_all_read() const {
    for (const auto& a : node_.attribute()) {
      if (!read_.count(a.name())) {
        return Status::unsupported(where_ + ": attribute '" + a.name() +
                                   "' is not supported. Re-export the model without it.");
      }
    }
    return Status::ok();
  }

 private:
  Status type_error(const std::string& name, const char* want) const {
    return Status::invalid_model(where_ + ": attribute '" + name + "' should be " + want + ".");
  }

  const onnx::NodeProto& node_;
  std::string where_;
  std::set<std::string> read_;
};

}  // namespace gpulab
