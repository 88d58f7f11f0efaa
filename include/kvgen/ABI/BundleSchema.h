//===- BundleSchema.h - the bundle's keys, from Bundle.def ------*- C++ -*-===//
//
// The manifest's objects and keys as the compiler writes them and kvrt reads
// them: key::<object>::<key> names a key ("kernel::min_tokens"), and
// fieldsOf / findField give the table kvrt checks an object against. Like
// ABI.h it depends on nothing but the standard library.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_ABI_BUNDLESCHEMA_H
#define KVGEN_ABI_BUNDLESCHEMA_H

#include <cstddef>
#include <string_view>

namespace kvgen::abi::bundle {

enum class Object {
#define KVGEN_BUNDLE_OBJECT(Object, What) Object,
#include "kvgen/ABI/Bundle.def"
};

enum class Type { String, Integer, Positive, Boolean, Object, Array };

enum class Presence { Required, Optional, Conditional };

struct Field {
  Object object;
  const char *key;
  Type type;
  Presence presence;
};

/// Every key of every object, objects in Bundle.def's order.
inline constexpr Field kFields[] = {
#define KVGEN_BUNDLE_FIELD(O, Key, T, P)                                       \
  {Object::O, #Key, Type::T, Presence::P},
#include "kvgen/ABI/Bundle.def"
};

/// The keys, for the writer and the reader to spell: key::kernel::min_tokens.
namespace key {
#define KVGEN_BUNDLE_FIELD(O, Key, T, P)                                       \
  namespace O {                                                                \
  inline constexpr char Key[] = #Key;                                          \
  }
#include "kvgen/ABI/Bundle.def"
} // namespace key

/// What an object is, for a message ("the manifest", "cache.quant").
constexpr const char *objectName(Object object) {
  switch (object) {
#define KVGEN_BUNDLE_OBJECT(O, What)                                           \
  case Object::O:                                                              \
    return What;
#include "kvgen/ABI/Bundle.def"
  }
  return "";
}

/// An object's fields: a range of kFields.
struct FieldRange {
  const Field *first = nullptr, *last = nullptr;
  constexpr const Field *begin() const { return first; }
  constexpr const Field *end() const { return last; }
};

constexpr FieldRange fieldsOf(Object object) {
  const Field *first = nullptr;
  const Field *last = nullptr;
  for (const Field &field : kFields) {
    if (field.object != object)
      continue;
    if (!first)
      first = &field;
    last = &field + 1;
  }
  return {first, last};
}

/// The field `key` of `object`; nullptr if the schema has no such key.
constexpr const Field *findField(Object object, std::string_view key) {
  for (const Field &field : fieldsOf(object))
    if (key == field.key)
      return &field;
  return nullptr;
}

/// The object an Object-typed field holds: the kind its key names.
constexpr Object objectOf(const Field &field) {
#define KVGEN_BUNDLE_OBJECT(O, What)                                           \
  if (std::string_view(field.key) == #O)                                       \
    return Object::O;
#include "kvgen/ABI/Bundle.def"
  return Object::root;
}

} // namespace kvgen::abi::bundle

#endif // KVGEN_ABI_BUNDLESCHEMA_H
