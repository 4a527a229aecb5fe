// Reading a parsed JSON document field by field without exceptions, for the readers of gpulab's
// own result files (sweep --resume, report). Every problem is a kInvalidFile Status whose message
// names the field by its path: "points[3].telemetry.power_mean_w: not a number".
//
// nlohmann::json's get<T>() and value() throw on a type mismatch; a reader that only goes
// through these accessors never throws on any input. Cheap to copy (a reference and a string).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "gpulab/status.h"

namespace gpulab {

struct JsonReader {
  const nlohmann::json& doc;  // the object whose fields are read
  std::string where;          // its path in the document ("sweep", "points[3].telemetry"; "" for the root)

  // kInvalidFile "<where>.<key>: <what>" ("<where>: <what>" for an empty key).
  Status bad(std::string_view key, std::string_view what) const;

  Result<double> number(const char* key) const;
  Result<int64_t> integer(const char* key) const;
  Result<std::string> text(const char* key) const;
  Result<bool> boolean(const char* key) const;
  // Missing or null: nullopt; present with another type: an error.
  template <typename T>
  Result<std::optional<T>> optional(const char* key) const;
  Result<const nlohmann::json*> object(const char* key) const;
  Result<const nlohmann::json*> array(const char* key) const;
  // Missing or null: nullptr; present but not an object: an error.
  Result<const nlohmann::json*> optional_object(const char* key) const;

  // The reader of a nested value, with its path: child(j, "plan") reads "<where>.plan".
  JsonReader child(const nlohmann::json& value, std::string_view key) const;
  // The reader of an array element: element(j, 3) reads "<where>[3]".
  JsonReader element(const nlohmann::json& value, size_t index) const;
};

// The string value of `key` when `doc` is an object holding a string there, else `fallback`
// (never throws, unlike nlohmann's value()).
std::string json_string_or(const nlohmann::json& doc, const char* key, std::string_view fallback);

template <typename T>
Result<std::optional<T>> JsonReader::optional(const char* key) const {
  if (!doc.is_object() || !doc.contains(key) || doc[key].is_null()) return std::optional<T>();
  const nlohmann::json& v = doc[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) return bad(key, "not a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return bad(key, "not a boolean");
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return bad(key, "not an integer");
  } else {
    if (!v.is_number()) return bad(key, "not a number");
  }
  return std::optional<T>(v.get<T>());
}

}  // namespace gpulab
