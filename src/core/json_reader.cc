#include "core/json_reader.h"

#include <fmt/format.h>

namespace gpulab {

using nlohmann::json;

Status JsonReader::bad(std::string_view key, std::string_view what) const {
  if (key.empty()) return Status::invalid_file(fmt::format("{}: {}", where, what));
  if (where.empty()) return Status::invalid_file(fmt::format("{}: {}", key, what));
  return Status::invalid_file(fmt::format("{}.{}: {}", where, key, what));
}

Result<double> JsonReader::number(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number())
    return bad(key, "missing or not a number");
  return doc[key].get<double>();
}

Result<int64_t> JsonReader::integer(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_number_integer())
    return bad(key, "missing or not an integer");
  return doc[key].get<int64_t>();
}

Result<std::string> JsonReader::text(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string())
    return bad(key, "missing or not a string");
  return doc[key].get<std::string>();
}

Result<bool> JsonReader::boolean(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_boolean())
    return bad(key, "missing or not a boolean");
  return doc[key].get<bool>();
}

Result<const json*> JsonReader::object(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_object())
    return bad(key, "missing or not an object");
  return &doc[key];
}

Result<const json*> JsonReader::array(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_array())
    return bad(key, "missing or not an array");
  return &doc[key];
}

Result<const json*> JsonReader::optional_object(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || doc[key].is_null()) return static_cast<const json*>(nullptr);
  if (!doc[key].is_object()) return bad(key, "not an object");
  return &doc[key];
}

JsonReader JsonReader::child(const json& value, std::string_view key) const {
  if (where.empty()) return JsonReader{value, std::string(key)};
  return JsonReader{value, fmt::format("{}.{}", where, key)};
}

JsonReader JsonReader::element(const json& value, size_t index) const {
  return JsonReader{value, fmt::format("{}[{}]", where, index)};
}

std::string json_string_or(const json& doc, const char* key, std::string_view fallback) {
  if (doc.is_object() && doc.contains(key) && doc[key].is_string()) return doc[key].get<std::string>();
  return std::string(fallback);
}

}  // namespace gpulab
