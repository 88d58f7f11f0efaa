//===- KernelPlan.h - what kernels a kv op becomes, and their launch ------===//
//
// One place decides, for each kv op, which kernels are generated, their
// vector width, their launch geometry and their logical parameter list.
// kv-to-loops builds the loop nest from it, kv-loops-to-gpu maps it, and the
// bundle's manifest records it: they cannot disagree. The kinds, variants
// and parameters are the ABI's vocabulary (kvgen/ABI/ABI.h), which kvrt
// reads too.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PLAN_KERNELPLAN_H
#define KVGEN_PLAN_KERNELPLAN_H

#include "kvgen/ABI/ABI.h"
#include "kvgen/Conversion/Passes.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Plan/ChipTable.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace kvgen {

using KernelKind = abi::KernelKind;
using KernelVariant = abi::Variant;

struct KernelPlan {
  std::string name;
  KernelKind kind;
  /// The kind's traits (KernelKinds.def), which the plan and the loop nest
  /// ask instead of naming kinds.
  abi::KindTraits traits() const { return abi::kindTraits(kind); }
  /// Rows of a latent cache's entry (kv_c then k_pe) into the cache.
  bool writesLatent() const {
    return traits().rows == abi::KindRows::Into &&
           traits().entry == abi::KindEntry::Latent;
  }
  /// The slot comes from the block table and positions.
  bool slotFromBlockTable() const {
    return traits().slot == abi::KindSlot::BlockTable;
  }
  /// The slot comes from FlashInfer's ragged page table.
  bool slotFromPageTable() const {
    return traits().slot == abi::KindSlot::PageTable;
  }
  /// K and V rows (not latent) into the cache, through any slot rule.
  bool appendsRows() const {
    return traits().rows == abi::KindRows::Into &&
           traits().entry == abi::KindEntry::KV;
  }
  /// Rows out of the cache into outputs (the rows' type is the outputs').
  bool readsRows() const { return traits().rows == abi::KindRows::OutOf; }
  KernelVariant variant;
  /// Whether the kernel moves whole chunks with vector accesses (the vector
  /// and wide variants), under the alignment promise.
  bool vectorAccess() const { return abi::hasVectorPromise(variant); }
  /// The wide variant: the fewest tokens for which kvrt picks it over the
  /// vector variant (0 for the other variants).
  int64_t minTokens = 0;
  /// The wide variant: the fewest tokens from which kvrt goes back to the
  /// vector variant, above minTokens; 0 where the wide kernel stays ahead
  /// however many tokens a launch has (and for the other variants).
  int64_t maxTokens = 0;
  kv::CacheType cache;
  /// The fused prologue (norm and RoPE of K and Q) of an append, or null.
  /// Each iteration of the chunk loop then takes one head (a group, spread
  /// over lanes like a dynamic scale's): K head h with V head h, or, past
  /// the K heads, a Q head.
  kv::PrologueAttr prologue;
  /// Element type of K and V for appends, of the outputs for gathers (null
  /// for slot_mapping).
  mlir::Type sourceType;
  /// Elements one thread moves per tensor per chunk.
  int64_t vectorElems = 1;
  /// Bytes of the widest access of a chunk (loads or stores).
  int64_t vectorBytes = 0;
  /// Alignment, in bytes, the kernel assumes of every base pointer.
  int64_t alignment = 1;
  /// Chunks of `vectorElems` per token (per tensor): num_kv_heads rows of
  /// rowDim() elements.
  int64_t chunksPerToken = 1;
  /// The head size the chunk loop walks: head_dim, or where V's head size
  /// differs the longer of the two (the other side skips the chunks past
  /// its row).
  int64_t rowDim() const {
    return std::max(cache.getHeadDim(), cache.getValueHeadDim());
  }
  /// Chunks one iteration of the chunk loop moves: one, or for dynamic
  /// scales the group one scale covers (a token's head, or the token), whose
  /// amax is needed before the first store.
  int64_t chunksPerGroup = 1;
  /// Lanes that share one iteration of a dynamic kernel's chunk loop (or a
  /// prologue's head): a power of two, at most a warp, dividing
  /// `chunksPerGroup`; lane l moves chunks l, l + lanes, ... of the group (a
  /// prologue with NeoX RoPE: its units, a rotary pair of chunks or one
  /// chunk past the rotary part, docs/dev/PROLOGUE.md). The loop nest spells
  /// them as an inner scf.parallel (sequential on the host); the GPU mapping
  /// gives each lane a thread and reduces across them.
  int64_t lanesPerGroup = 1;
  /// Chunks one iteration of a static or unquantized append moves: all
  /// their loads are issued before the first store, so that a thread has
  /// that many chunks of K and of V in flight. Chunk j of iteration c is
  /// c + j * iterations, so adjacent threads still touch adjacent chunks.
  int64_t chunksPerThread = 1;
  int64_t threadsX = 1;
  int64_t tokensPerBlock = 1;
  /// Blocks that must fit on one SM at once (0: no bound): ptxas is held to
  /// the registers that allow it (.minnctapersm), so that a kernel whose
  /// quantization needs a few more registers keeps full occupancy.
  int64_t minBlocksPerSM = 0;
  /// A quantized append divides by its scale with emitDivide (a reciprocal
  /// once, then a multiply, two fmas and a sign fix an element; tested for
  /// 16-bit float sources) instead of IEEE division per element: the same
  /// stored bytes.
  bool fastDivision = false;

  /// A latent entry with inline scales (#kv.inline_scales): the groups of
  /// its latent part, one iteration each, whose lanes also move the RoPE
  /// chunks (MlaBodies.cpp); 0 for any other cache.
  int64_t latentGroups = 0;

  /// Iterations of the chunk loop per token.
  int64_t getIterationsPerToken() const {
    if (latentGroups > 0)
      return latentGroups;
    return chunksPerToken / (chunksPerGroup * chunksPerThread);
  }

  /// Which optional parameter groups (scales, scale caches) the kernel takes.
  abi::Quantization getQuantization() const;
  /// Logical parameters, in ABI order (a buffer is one entry).
  std::vector<abi::Param> getParams() const;
};

/// The plan's options: kv-to-loops' pass options (Passes.td), so that the
/// pass, the named pipelines, kvgen's --pipeline-options and collectPlans
/// (the bundle's manifest) share one struct and its defaults. `chip` picks
/// the row of the chip table the thresholds come from; every other field
/// overrides one choice of the plan (its default leaves the choice to the
/// plan).
using PlanOptions = KVToLoopsOptions;

/// Why `options` cannot plan kernels (a chip with no row in the chip table,
/// a negative count), or nothing when they can.
std::optional<std::string> checkPlanOptions(const PlanOptions &options);

/// The PlanOptions of a struct of options that names each of its fields
/// alike: kv-to-loops' own (the pass) and the pipelines' (PipelineOptions).
/// A new plan option is one line here.
template <typename Options> PlanOptions planOptionsFrom(const Options &given) {
  PlanOptions options;
  options.chip = given.chip;
  options.chunksPerThread = given.chunksPerThread;
  options.tokensPerBlock = given.tokensPerBlock;
  options.wholeWarps = given.wholeWarps;
  options.minBlocksPerSM = given.minBlocksPerSM;
  options.wideMinTokens = given.wideMinTokens;
  options.wideMaxTokens = given.wideMaxTokens;
  options.fastDivision = given.fastDivision;
  return options;
}

/// The kernels generated for `op` (a kv op of kernels): the vector and
/// scalar variants for appends and gathers, and for most appends a wide
/// variant (wideMinTokens and wideMaxTokens in KernelPlan.cpp say which, and
/// for which token counts); one kernel for slot mappings. `options` must
/// pass checkPlanOptions.
std::vector<KernelPlan> planKernels(mlir::Operation *op,
                                    const PlanOptions &options = {});

/// Name of the function attribute that carries a plan's launch geometry
/// through the loop nest to the GPU mapping.
inline constexpr llvm::StringLiteral kLaunchAttrName = "kv.launch";

// The attributes kv-to-loops leaves for later passes (kv.min_blocks_per_sm,
// kv.before_slot, kv.keep_wide, kv.keep_narrow) are the kv dialect's
// discardable attributes (KVDialect.td), verified wherever they appear.

} // namespace kvgen

#endif // KVGEN_PLAN_KERNELPLAN_H
