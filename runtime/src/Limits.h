//===- Limits.h - the limits kvrt enforces --------------------------------===//
//
// The description limits come from the ABI vocabulary (Limits.def, the table
// in docs/CONTRACT.md) so that kvgen and kvrt refuse the same descriptions.
// The rest are kvrt's own: how far a tensor may reach in memory, and how long
// a message may grow.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_LIMITS_H
#define KVRT_SRC_LIMITS_H

#include <cstddef>
#include <cstdint>

namespace kvrt::impl::limits {

#define KVGEN_ABI_LIMIT(Id, Name, Value) inline constexpr int64_t k##Id = Value;
#include "kvgen/ABI/Limits.def"

/// Every byte a tensor addresses (data + byte_offset + its extent) lies below
/// 2^57: no current GPU or CPU maps more (57-bit virtual addresses with
/// 5-level paging), and byte ranges compared as uintptr_t then never wrap.
inline constexpr uint64_t kAddressLimit = uint64_t(1) << 57;

/// The largest scalar parameter (a stride or count) a kernel takes: the ABI
/// passes them as i32. The same bound holds for the offset of any element
/// within one token of a row tensor or within one block (or row) of a cache,
/// which the kernels compute in 32 bits (docs/KERNEL-ABI.md, "Limits").
inline constexpr int64_t kMaxScalar = INT32_MAX;

/// Longest message kvrt_last_error() returns; longer ones end in "...".
inline constexpr size_t kMaxMessageBytes = 2048;
/// Longest string from a bundle quoted inside a message.
inline constexpr size_t kMaxQuotedBytes = 96;

} // namespace kvrt::impl::limits

#endif // KVRT_SRC_LIMITS_H
