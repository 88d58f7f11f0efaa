//===- FieldReader.h - read and check the manifest's JSON fields ----------===//
//
// Every object of the manifest is checked against the bundle schema
// (include/kvgen/ABI/Bundle.def) before it is read. Every error names the
// field by its path ("kernels[2].cache.block_size") and never echoes a JSON
// value recursively: a string is quoted (escaped, bounded), anything else is
// named by its type.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_FIELDREADER_H
#define KVRT_SRC_FIELDREADER_H

#include "Status.h"

#include "kvgen/ABI/ABI.h"
#include "kvgen/ABI/BundleSchema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

/// A refused manifest: KVRT_ERROR_INVALID_BUNDLE, the message after
/// "bundle: ".
#define KVRT_BUNDLE_ERROR(...)                                                 \
  KVRT_ERROR(KVRT_ERROR_INVALID_BUNDLE, "bundle: " __VA_ARGS__)

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

namespace abi = ::kvgen::abi;
namespace schema = ::kvgen::abi::bundle;
namespace key = schema::key;

/// Reads one JSON object of the manifest, checked against its schema
/// (include/kvgen/ABI/Bundle.def); every error names the field by its path in
/// the manifest ("kernels[2].cache.block_size").
class FieldReader {
public:
  FieldReader(const json &object, std::string path, schema::Object kind)
      : object(&object), path(std::move(path)), kind(kind) {}

  std::string field(const char *key) const {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  bool has(const char *key) const { return object->contains(key); }

  /// The object against its schema: every Required key present, every key
  /// of its JSON type (a Positive one above 0), and no key the schema lacks,
  /// which a reader that skipped it would silently misread.
  Status check() const {
    for (const schema::Field &f : schema::fieldsOf(kind))
      KVRT_RETURN_IF_ERROR(checkField(f));
    for (auto it = object->begin(); it != object->end(); ++it)
      if (!schema::findField(kind, it.key()))
        return KVRT_BUNDLE_ERROR("%s has the key %s, which the bundle "
                                 "format does not have (include/kvgen/ABI/"
                                 "Bundle.def)",
                                 path.empty() ? "the manifest" : path.c_str(),
                                 quote(it.key()).c_str());
    return Status();
  }

  /// One key against its schema entry (check() does them all).
  Status checkField(const schema::Field &f) const {
    auto it = object->find(f.key);
    if (it == object->end())
      return f.presence == schema::Presence::Required ? missing(f.key)
                                                      : Status();
    switch (f.type) {
    case schema::Type::String:
      return it->is_string() ? Status() : wrongType(f.key, "a string");
    case schema::Type::Integer:
    case schema::Type::Positive:
      if (!it->is_number_integer())
        return wrongType(f.key, "an integer");
      if (it->is_number_unsigned() &&
          it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return KVRT_BUNDLE_ERROR("%s is out of range", field(f.key).c_str());
      if (f.type == schema::Type::Positive && it->get<int64_t>() <= 0)
        return KVRT_BUNDLE_ERROR("%s must be positive, got %lld",
                                 field(f.key).c_str(),
                                 static_cast<long long>(it->get<int64_t>()));
      return Status();
    case schema::Type::Boolean:
      return it->is_boolean() ? Status() : wrongType(f.key, "true or false");
    case schema::Type::Object:
      return it->is_object() ? Status() : wrongType(f.key, "an object");
    case schema::Type::Array:
      // Its reader checks it, with a message about its elements.
      return Status();
    }
    return Status();
  }

  /// The values of a checked object; absent keys read as empty, `absent`
  /// (0 unless given), false.
  std::string getString(const char *key) const {
    auto it = object->find(key);
    return it == object->end() ? std::string() : it->get<std::string>();
  }
  int64_t getInt(const char *key, int64_t absent = 0) const {
    auto it = object->find(key);
    return it == object->end() ? absent : it->get<int64_t>();
  }
  bool getBool(const char *key) const {
    auto it = object->find(key);
    return it != object->end() && it->get<bool>();
  }

  /// The checked object under `key` (an Object field), or an error if it is
  /// missing.
  Status getObject(const char *key, FieldReader *out) const {
    auto it = object->find(key);
    if (it == object->end())
      return missing(key);
    *out = FieldReader(*it, field(key),
                       schema::objectOf(*schema::findField(kind, key)));
    return out->check();
  }

  /// A Conditional key that the rule at hand requires.
  Status require(const char *key) const {
    return has(key) ? Status() : missing(key);
  }

  /// A Conditional key where its rule does not hold: kvgen never writes one
  /// there, and a reader that skipped it would hide whatever the writer
  /// meant.
  Status refuse(const char *key, const char *rule) const {
    if (!has(key))
      return Status();
    return KVRT_BUNDLE_ERROR("%s is set, but %s", field(key).c_str(), rule);
  }

  /// A String key naming an entry of a vocabulary table (abi::kLayoutNames,
  /// ...), read into `out`; `allowed` may narrow the table, and `expected`
  /// then names what is left.
  template <typename Enum, size_t N>
  Status getName(const char *key, const char *const (&names)[N], Enum *out,
                 bool (*allowed)(Enum) = nullptr,
                 const char *expected = nullptr) const {
    std::string text = getString(key);
    if (abi::parseName(names, text, out) && (!allowed || allowed(*out)))
      return Status();
    return KVRT_BUNDLE_ERROR("%s is %s; expected %s", field(key).c_str(),
                             quote(text).c_str(),
                             expected ? expected : nameList(names).c_str());
  }

  Status missing(const char *key) const {
    return KVRT_BUNDLE_ERROR("%s is missing (required)", field(key).c_str());
  }

  Status wrongType(const char *key, const char *what) const {
    return KVRT_BUNDLE_ERROR("%s must be %s", field(key).c_str(), what);
  }

  const json &value() const { return *object; }

private:
  // A pointer, not a reference, so that a reader can be reassigned.
  const json *object;
  std::string path;
  schema::Object kind;
};

} // namespace kvrt::impl

#endif // KVRT_SRC_FIELDREADER_H
