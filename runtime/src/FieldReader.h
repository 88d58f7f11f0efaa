//===- FieldReader.h - read and check the manifest's JSON fields ----------===//
//
// Every manifest error names the field by its path ("kernels[2].cache.
// block_size") and never echoes a JSON value recursively: a string is quoted
// (escaped, bounded), anything else is named by its type.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_FIELDREADER_H
#define KVRT_SRC_FIELDREADER_H

#include "Status.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace kvrt::impl {

using json = nlohmann::json;

inline bool isPowerOfTwo(int64_t value) {
  return value > 0 && (value & (value - 1)) == 0;
}

// PTX entry names: what cuModuleGetFunction will be asked for.
inline bool isIdentifier(const std::string &name) {
  if (name.empty() ||
      !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
  });
}

inline bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.substr(text.size() - suffix.size()) == suffix;
}

/// A JSON value for a message: a string quoted, anything else by its type.
/// Never dump(): it recurses, and a deeply nested value overflows the stack.
inline std::string describeValue(const json &value) {
  if (value.is_string())
    return quote(value.get_ref<const std::string &>());
  return formatString("a JSON %s", value.type_name());
}

/// Reads fields of one JSON object; every error names the field by its path
/// in the manifest ("kernels[2].cache.block_size").
class FieldReader {
public:
  FieldReader(const json &object, std::string path)
      : object(&object), path(std::move(path)) {}

  std::string field(const char *key) const {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  bool has(const char *key) const { return object->contains(key); }

  Status getString(const char *key, std::string *out,
                   bool required = true) const {
    auto it = object->find(key);
    if (it == object->end()) {
      if (!required)
        return Status();
      return missing(key);
    }
    if (!it->is_string())
      return wrongType(key, "a string");
    *out = it->get<std::string>();
    return Status();
  }

  Status getInt(const char *key, int64_t *out, bool required = true) const {
    auto it = object->find(key);
    if (it == object->end()) {
      if (!required)
        return Status();
      return missing(key);
    }
    if (!it->is_number_integer())
      return wrongType(key, "an integer");
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s is out of range",
                        field(key).c_str());
    *out = it->get<int64_t>();
    return Status();
  }

  Status getPositive(const char *key, int64_t *out,
                     bool required = true) const {
    bool present = has(key);
    KVRT_RETURN_IF_ERROR(getInt(key, out, required));
    if (present && *out <= 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                        "bundle: %s must be positive, got %lld",
                        field(key).c_str(), static_cast<long long>(*out));
    return Status();
  }

  Status getBool(const char *key, bool *out, bool required = true) const {
    auto it = object->find(key);
    if (it == object->end()) {
      if (!required)
        return Status();
      return missing(key);
    }
    if (!it->is_boolean())
      return wrongType(key, "true or false");
    *out = it->get<bool>();
    return Status();
  }

  Status getObject(const char *key, const json **out) const {
    auto it = object->find(key);
    if (it == object->end())
      return missing(key);
    if (!it->is_object())
      return wrongType(key, "an object");
    *out = &*it;
    return Status();
  }

  Status missing(const char *key) const {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE,
                      "bundle: %s is missing (required)", field(key).c_str());
  }

  Status wrongType(const char *key, const char *what) const {
    return KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: %s must be %s",
                      field(key).c_str(), what);
  }

private:
  // A pointer, not a reference, so that a reader can be reassigned.
  const json *object;
  std::string path;
};

/// The names of a vocabulary table for a message: "a, b or c".
template <size_t N> std::string nameList(const char *const (&names)[N]) {
  std::string list;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0)
      list += i + 1 == N ? " or " : ", ";
    list += names[i];
  }
  return list;
}

} // namespace kvrt::impl

#endif // KVRT_SRC_FIELDREADER_H
