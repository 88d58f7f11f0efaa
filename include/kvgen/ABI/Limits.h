//===- Limits.h - the largest caches a kernel supports ----------*- C++ -*-===//
//
// The limits of docs/CONTRACT.md as constants (kMaxBlockSize, kMaxHeadDim,
// ...), from the one table in Limits.def: the dialect's verifier refuses a
// description past one (so kvgen never plans a kernel it cannot launch), and
// kvrt refuses a bundle past one. With these bounds, elements per token times
// tokens per block is at most 2^40, so no offset computed from the
// compile-time geometry can wrap.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_ABI_LIMITS_H
#define KVGEN_ABI_LIMITS_H

#include <cstdint>

namespace kvgen::abi {

#define KVGEN_ABI_LIMIT(Id, Name, Value) inline constexpr int64_t k##Id = Value;
#include "kvgen/ABI/Limits.def"

} // namespace kvgen::abi

#endif // KVGEN_ABI_LIMITS_H
