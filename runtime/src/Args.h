//===- Args.h - kvrt.h's args structs, field by ABI parameter ---*- C++ -*-===//
//
// Each args struct's tensors are its kind's buffers (include/kvgen/ABI/
// Params.def), named alike. This table says which field is which parameter,
// so that one entry point, one cache key and one planner serve every kind: a
// new kind's struct is a KVRT_ARGS row and one KVRT_ARGS_TENSOR per tensor.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_ARGS_H
#define KVRT_SRC_ARGS_H

#include "Manifest.h"

#include "kvrt/kvrt.h"

#include <algorithm>
#include <type_traits>

// KVRT_ARGS(Struct, Kind, FirstSize, Entry): the struct of Kind's launches,
// the size of its first version (struct_size below it is refused) and the
// C entry point that takes it.
#define KVRT_FOR_EACH_ARGS(X)                                                  \
  X(kvrt_append_args, Append, KVRT_APPEND_ARGS_STRUCT_SIZE, kvrt_append)       \
  X(kvrt_slot_mapping_args, SlotMapping, KVRT_SLOT_MAPPING_ARGS_STRUCT_SIZE,   \
    kvrt_build_slot_mapping)                                                   \
  X(kvrt_fused_append_args, FusedAppend, KVRT_FUSED_APPEND_ARGS_STRUCT_SIZE,   \
    kvrt_fused_append)                                                         \
  X(kvrt_paged_kv_append_args, PagedKvAppend,                                  \
    KVRT_PAGED_KV_APPEND_ARGS_STRUCT_SIZE, kvrt_paged_kv_append)               \
  X(kvrt_gather_args, Gather, KVRT_GATHER_ARGS_STRUCT_SIZE, kvrt_gather)       \
  X(kvrt_mla_append_args, MlaAppend, KVRT_MLA_APPEND_ARGS_STRUCT_SIZE,         \
    kvrt_mla_append)                                                           \
  X(kvrt_mla_fused_append_args, MlaFusedAppend,                                \
    KVRT_MLA_FUSED_APPEND_ARGS_STRUCT_SIZE, kvrt_mla_fused_append)             \
  X(kvrt_fused_gather_args, FusedGather, KVRT_FUSED_GATHER_ARGS_STRUCT_SIZE,   \
    kvrt_fused_gather)

// KVRT_ARGS_TENSOR(Struct, field, Param): the tensor fields, in struct order.
#define KVRT_SCALE_TENSORS(X, S)                                               \
  X(S, key_scale, KeyScale)                                                    \
  X(S, value_scale, ValueScale)                                                \
  X(S, key_scale_cache, KeyScaleCache)                                         \
  X(S, value_scale_cache, ValueScaleCache)
#define KVRT_REQUEST_TENSORS(X, S)                                             \
  X(S, block_table, BlockTable)                                                \
  X(S, query_start_loc, QueryStartLoc)                                         \
  X(S, context_lens, ContextLens)
#define KVRT_FOR_EACH_ARGS_TENSOR(X)                                           \
  X(kvrt_append_args, key, Key)                                                \
  X(kvrt_append_args, value, Value)                                            \
  X(kvrt_append_args, slot_mapping, SlotMapping)                               \
  X(kvrt_append_args, key_cache, KeyCache)                                     \
  X(kvrt_append_args, value_cache, ValueCache)                                 \
  KVRT_SCALE_TENSORS(X, kvrt_append_args)                                      \
  KVRT_REQUEST_TENSORS(X, kvrt_slot_mapping_args)                              \
  X(kvrt_slot_mapping_args, slot_mapping, SlotMapping)                         \
  X(kvrt_fused_append_args, key, Key)                                          \
  X(kvrt_fused_append_args, value, Value)                                      \
  KVRT_REQUEST_TENSORS(X, kvrt_fused_append_args)                              \
  X(kvrt_fused_append_args, key_cache, KeyCache)                               \
  X(kvrt_fused_append_args, value_cache, ValueCache)                           \
  KVRT_SCALE_TENSORS(X, kvrt_fused_append_args)                                \
  X(kvrt_paged_kv_append_args, key, Key)                                       \
  X(kvrt_paged_kv_append_args, value, Value)                                   \
  X(kvrt_paged_kv_append_args, batch_indices, BatchIndices)                    \
  X(kvrt_paged_kv_append_args, positions, Positions)                           \
  X(kvrt_paged_kv_append_args, kv_indices, KvIndices)                          \
  X(kvrt_paged_kv_append_args, kv_indptr, KvIndptr)                            \
  X(kvrt_paged_kv_append_args, key_cache, KeyCache)                            \
  X(kvrt_paged_kv_append_args, value_cache, ValueCache)                        \
  KVRT_SCALE_TENSORS(X, kvrt_paged_kv_append_args)                             \
  X(kvrt_gather_args, key_cache, KeyCache)                                     \
  X(kvrt_gather_args, value_cache, ValueCache)                                 \
  X(kvrt_gather_args, slot_mapping, SlotMapping)                               \
  X(kvrt_gather_args, key_out, KeyOut)                                         \
  X(kvrt_gather_args, value_out, ValueOut)                                     \
  KVRT_SCALE_TENSORS(X, kvrt_gather_args)                                      \
  X(kvrt_mla_append_args, kv_c, KvC)                                           \
  X(kvrt_mla_append_args, k_pe, KPe)                                           \
  X(kvrt_mla_append_args, slot_mapping, SlotMapping)                           \
  X(kvrt_mla_append_args, key_cache, KeyCache)                                 \
  X(kvrt_mla_append_args, key_scale, KeyScale)                                 \
  X(kvrt_mla_fused_append_args, kv_c, KvC)                                     \
  X(kvrt_mla_fused_append_args, k_pe, KPe)                                     \
  KVRT_REQUEST_TENSORS(X, kvrt_mla_fused_append_args)                          \
  X(kvrt_mla_fused_append_args, key_cache, KeyCache)                           \
  X(kvrt_mla_fused_append_args, key_scale, KeyScale)                           \
  KVRT_REQUEST_TENSORS(X, kvrt_fused_gather_args)                              \
  X(kvrt_fused_gather_args, key_cache, KeyCache)                               \
  X(kvrt_fused_gather_args, value_cache, ValueCache)                           \
  X(kvrt_fused_gather_args, key_out, KeyOut)                                   \
  X(kvrt_fused_gather_args, value_out, ValueOut)                               \
  KVRT_SCALE_TENSORS(X, kvrt_fused_gather_args)

namespace kvrt::impl {

/// The kind, name and first version's size of an args struct.
template <typename Args> struct ArgsInfo;
#define KVRT_ARGS_INFO(Struct, Kind, FirstSize, Entry)                         \
  template <> struct ArgsInfo<Struct> {                                        \
    static constexpr KernelKind kind = KernelKind::Kind;                       \
    static constexpr const char *name = #Struct;                               \
    static constexpr size_t minimum = FirstSize;                               \
  };
KVRT_FOR_EACH_ARGS(KVRT_ARGS_INFO)
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
  KVRT_FOR_EACH_ARGS_TENSOR(KVRT_ARGS_TENSOR)
#undef KVRT_ARGS_TENSOR
  return count;
}
inline constexpr int kMaxArgsTensors = std::max({
#define KVRT_ARGS_TENSORS(Struct, Kind, FirstSize, Entry) numTensors<Struct>(),
    KVRT_FOR_EACH_ARGS(KVRT_ARGS_TENSORS)
#undef KVRT_ARGS_TENSORS
});

/// Calls fn(const DLTensor *, abi::Param) for each tensor field of `args`,
/// in struct order.
template <typename Args, typename Fn>
void forEachTensor(const Args &args, Fn &&fn) {
#define KVRT_ARGS_TENSOR(Struct, Field, Id)                                    \
  if constexpr (std::is_same_v<Args, Struct>)                                  \
    fn(args.Field, abi::Param::Id);
  KVRT_FOR_EACH_ARGS_TENSOR(KVRT_ARGS_TENSOR)
#undef KVRT_ARGS_TENSOR
}

} // namespace kvrt::impl

#endif // KVRT_SRC_ARGS_H
