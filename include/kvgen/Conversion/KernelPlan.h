//===- KernelPlan.h - what kernels a kv op becomes, and their launch -*- C++
//-*-===//
//
// One place decides, for each kv op, which kernels are generated, their
// vector width, their launch geometry and their logical parameter list.
// kv-to-loops builds the loop nest from it, kv-loops-to-gpu maps it, and the
// bundle's manifest records it: they cannot disagree.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONVERSION_KERNELPLAN_H
#define KVGEN_CONVERSION_KERNELPLAN_H

#include "kvgen/Dialect/KV/IR/KVDialect.h"

#include <string>
#include <vector>

namespace kvgen {

enum class KernelKind { Append, SlotMapping, FusedAppend };
enum class KernelVariant { Vector, Scalar };

llvm::StringRef stringifyKernelKind(KernelKind kind);
llvm::StringRef stringifyKernelVariant(KernelVariant variant);

struct KernelPlan {
  std::string name;
  KernelKind kind;
  KernelVariant variant;
  kv::CacheType cache;
  /// Element type of K and V (null for slot_mapping).
  mlir::Type sourceType;
  /// Elements one thread moves per tensor per chunk.
  int64_t vectorElems = 1;
  /// Bytes of the widest access of a chunk (loads or stores).
  int64_t vectorBytes = 0;
  /// Alignment, in bytes, the kernel assumes of every base pointer.
  int64_t alignment = 1;
  int64_t chunksPerToken = 1;
  int64_t threadsX = 1;
  int64_t tokensPerBlock = 1;
  /// Logical parameters, in ABI order (a buffer is one entry).
  std::vector<std::string> params;
  /// Number of leading params that are buffers (the rest are i64 scalars).
  unsigned numBuffers = 0;
};

/// The kernels generated for `op` (a kv.append, kv.slot_mapping or
/// kv.fused_append): two variants for appends, one for slot mappings.
std::vector<KernelPlan> planKernels(mlir::Operation *op);

/// Name of the function attribute that carries a plan's launch geometry
/// through the loop nest to the GPU mapping.
inline constexpr llvm::StringLiteral kLaunchAttrName = "kv.launch";

} // namespace kvgen

#endif // KVGEN_CONVERSION_KERNELPLAN_H
