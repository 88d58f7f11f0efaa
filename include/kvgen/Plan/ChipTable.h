//===- ChipTable.h - what kvgen knows of each GPU ---------------*- C++ -*-===//
//
// One row per chip kvgen generates for: the PTX ISA it emits for the chip,
// and the thresholds the kernel plan takes from it (token counts that pick a
// variant, occupancy bounds). Every row says where its thresholds come from:
// measured on that chip, or assumed to be another chip's until someone
// measures.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PLAN_CHIPTABLE_H
#define KVGEN_PLAN_CHIPTABLE_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace kvgen {

/// The kernel plan's chip-dependent numbers (KernelPlan.cpp says what each
/// decides).
struct PlanThresholds {
  /// The fewest threads of a block of small tokens, so that the SM's block
  /// slots do not limit occupancy.
  int64_t minThreadsPerBlock;
  /// The most threads of a block grown to whole warps (whole-warps).
  int64_t wholeWarpsMaxThreads;
  /// Threads an SM holds, for the occupancy bound of the quantized appends
  /// that fit it (.minnctapersm = this / the block's threads).
  int64_t threadsPerSM;
  /// Threads an SM holds under the bound of a fused append's fp8 wide kernel
  /// with per-head scales (ten blocks of 128: at most 51 registers a thread).
  int64_t fusedFP8WideThreadsPerSM;
  /// The fewest tokens for the wide variant: four chunks a thread; two
  /// chunks a thread; a quantized cache's two-chunk kernel; the IEEE kernel
  /// of a split division; the same for per-token scales.
  int64_t wideMinTokensFourChunks;
  int64_t wideMinTokensTwoChunks;
  int64_t wideMinTokensQuantized;
  int64_t wideMinTokensDivision;
  int64_t wideMinTokensDivisionPerToken;
  /// The fewest tokens from which an unquantized cache's two-chunk wide
  /// kernel goes back to the vector kernel.
  int64_t wideMaxTokensTwoChunks;
};

/// Where a row's thresholds come from.
enum class ThresholdSource {
  /// Measured on this chip (the bench's shapes, docs/dev/TUNING.md).
  Measured,
  /// Not measured on this chip: sm_90's values.
  AssumedSameAsSM90,
};

struct ChipInfo {
  /// The chip's number: 90 for sm_90, sm_90a.
  unsigned number;
  /// The PTX ISA versions (major * 10 + minor) kvgen emits for the plain
  /// chip, its `a` (architecture-specific) and its `f` (family) form; 0
  /// where the form does not exist.
  unsigned ptxPlain, ptxArch, ptxFamily;
  PlanThresholds plan;
  ThresholdSource source;
};

/// The row of chip `number`, or null for a chip kvgen does not generate for.
const ChipInfo *findChip(unsigned number);

/// The row of `chip` (sm_XX, sm_XXa, sm_XXf), or null.
const ChipInfo *findChip(llvm::StringRef chip);

/// The chip number of an sm_XX[a|f] name; 0 if it is not one.
unsigned chipNumber(llvm::StringRef chip);

} // namespace kvgen

#endif // KVGEN_PLAN_CHIPTABLE_H
