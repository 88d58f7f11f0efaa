//===- Args.h - kvrt.h's args structs, field by ABI parameter ---*- C++ -*-===//
//
// Each args struct's tensors are its kind's buffers (include/kvgen/ABI/
// Params.def), named alike. kvrt.h's lists (KVRT_FOR_EACH_KIND,
// KVRT_FOR_EACH_KIND_TENSOR) say which struct is which kind and which field
// is which parameter, so that one entry point, one cache key and one planner
// serve every kind: a new kind's struct needs nothing here.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_ARGS_H
#define KVRT_SRC_ARGS_H

#include "Manifest.h"

#include "kvrt/kvrt.h"

#include <algorithm>
#include <type_traits>

namespace kvrt::impl {

/// The kind, name and first version's size of an args struct.
template <typename Args> struct ArgsInfo;
#define KVRT_ARGS_INFO(Kind, Struct, FirstSize, Entry, Variant)                \
  template <> struct ArgsInfo<Struct> {                                        \
    static constexpr KernelKind kind = KernelKind::Kind;                       \
    static constexpr const char *name = #Struct;                               \
    static constexpr size_t minimum = FirstSize;                               \
  };
KVRT_FOR_EACH_KIND(KVRT_ARGS_INFO)
#undef KVRT_ARGS_INFO

/// Whether the struct has a `variant` (every kind with variants does).
template <typename Args, typename = void>
struct HasVariant : std::false_type {};
template <typename Args>
struct HasVariant<Args, std::void_t<decltype(&Args::variant)>>
    : std::true_type {};

/// The number of tensor fields of `Args`, and the most of any struct.
template <typename Args> constexpr int numTensors() {
  int count = 0;
#define KVRT_ARGS_TENSOR(Struct, Field, Id)                                    \
  count += std::is_same_v<Args, Struct>;
  KVRT_FOR_EACH_KIND_TENSOR(KVRT_ARGS_TENSOR)
#undef KVRT_ARGS_TENSOR
  return count;
}
inline constexpr int kMaxArgsTensors = std::max({
#define KVRT_ARGS_TENSORS(Kind, Struct, FirstSize, Entry, Variant)             \
  numTensors<Struct>(),
    KVRT_FOR_EACH_KIND(KVRT_ARGS_TENSORS)
#undef KVRT_ARGS_TENSORS
});

/// Calls fn(const DLTensor *, abi::Param) for each tensor field of `args`,
/// in struct order.
template <typename Args, typename Fn>
void forEachTensor(const Args &args, Fn &&fn) {
#define KVRT_ARGS_TENSOR(Struct, Field, Id)                                    \
  if constexpr (std::is_same_v<Args, Struct>)                                  \
    fn(args.Field, abi::Param::Id);
  KVRT_FOR_EACH_KIND_TENSOR(KVRT_ARGS_TENSOR)
#undef KVRT_ARGS_TENSOR
}

} // namespace kvrt::impl

#endif // KVRT_SRC_ARGS_H
