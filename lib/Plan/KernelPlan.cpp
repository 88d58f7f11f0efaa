//===- KernelPlan.cpp - kernels, vector widths, launch geometry -----------===//

#include "kvgen/Plan/KernelPlan.h"
#include "kvgen/Dialect/KV/IR/LatentEntry.h"
#include "kvgen/Dialect/KV/IR/Nvfp4.h"
#include "llvm/ADT/bit.h"

#include <numeric>

using namespace mlir;
using namespace kvgen;

abi::Quantization KernelPlan::getQuantization() const {
  kv::QuantAttr quant = cache.getQuant();
  // Inline scales are written into the entry: no scale parameter.
  if (!quant || kv::getInlineScales(cache))
    return abi::Quantization::None;
  return quant.getMode() == kv::ScaleMode::Dynamic ? abi::Quantization::Dynamic
                                                   : abi::Quantization::Static;
}

std::vector<abi::Param> KernelPlan::getParams() const {
  std::vector<abi::Param> params;
  abi::forEachParam(
      kind, getQuantization(), !cache.hasValue(),
      prologue ? prologue.getParts() : abi::PrologueParts{},
      [&](const abi::ParamInfo &info) { params.push_back(info.id); });
  return params;
}

/// Chooses threads per token and tokens per block. A block of at least 128
/// threads keeps the SM's block slots from limiting occupancy when a token is
/// small (MQA); more than 256 threads per token would only add idle threads,
/// so big tokens loop over their chunks instead. A dynamic kernel's
/// iteration takes `lanesPerGroup` threads (256 is a multiple of any lane
/// count, so a group's lanes are never split).
///
/// A block is then grown to whole warps where up to 512 threads allow it:
/// the SM schedules warps, so a block of 72 threads (an MLA token of 576
/// bf16) holds three warps' registers and slots for 72 threads' work, and
/// the SM's 64 warps then hold 21 tokens' worth of loads instead of 28.
/// Measured on DeepSeek-V3's latent append: bf16 prefill at 65536 tokens
/// from 75% to 81% of the copy ceiling (docs/dev/TUNING.md).
static void chooseLaunch(KernelPlan &plan, const PlanOptions &options,
                         const PlanThresholds &chip) {
  constexpr int64_t kMaxThreadsPerToken = 256;
  constexpr int64_t kWarp = 32;
  plan.threadsX = std::min(plan.getIterationsPerToken() * plan.lanesPerGroup,
                           kMaxThreadsPerToken);
  plan.tokensPerBlock =
      std::max<int64_t>(1, chip.minThreadsPerBlock / plan.threadsX);
  if (options.tokensPerBlock > 0 &&
      plan.threadsX * options.tokensPerBlock <= 1024) {
    plan.tokensPerBlock = options.tokensPerBlock;
    return;
  }
  if (!options.wholeWarps || plan.threadsX * plan.tokensPerBlock % kWarp == 0)
    return;
  // The fewest tokens that fill whole warps: a multiple of
  // 32 / gcd(threadsX, 32), at least the 128-thread rule's count.
  int64_t step = kWarp / std::gcd(plan.threadsX, kWarp);
  int64_t tokens = (plan.tokensPerBlock + step - 1) / step * step;
  if (plan.threadsX * tokens <= chip.wholeWarpsMaxThreads)
    plan.tokensPerBlock = tokens;
}

/// Full occupancy for the quantized appends that fit it: the vector variant
/// of an append whose cache sides are both chunk contiguous (a side that is
/// not takes element stores) with one token a block and one chunk (or group) a
/// thread, quantized with one scale a token (static per_tensor or per_token)
/// or a dynamic per_token_head scale. Their divisions (16 a chunk pair, IEEE
/// or the fast division with its IEEE fallback) take such a kernel a few
/// registers past 32, which at 128 threads a block leaves room for 12 blocks
/// of 16 on an SM; held to 32 (.minnctapersm), ptxas fits them without
/// spilling (test/Target/ptxas-quant.test and ptxas-occupancy.test; the fast
/// division measured 2-5% faster in prefill with the bound than without). Other
/// shapes (a chunk loop, per-head scales, four tokens a block) spill when held
/// to 32, and get no bound.
static int64_t chooseMinBlocksPerSM(const KernelPlan &plan,
                                    const PlanOptions &options,
                                    const PlanThresholds &chip) {
  if (options.minBlocksPerSM >= 0)
    return options.minBlocksPerSM;
  kv::QuantAttr quant = plan.cache.getQuant();
  // An NVFP4 group's two candidate scales and error sums were never
  // measured against the bound: no bound.
  if (plan.prologue || plan.cache.getNvfp4() || !plan.appendsRows() ||
      plan.traits().slot != abi::KindSlot::Mapping || !plan.vectorAccess() ||
      !quant || !plan.cache.getLayoutInfo().chunkContiguous() ||
      plan.tokensPerBlock != 1 || plan.chunksPerThread != 1 ||
      plan.getIterationsPerToken() * plan.lanesPerGroup != plan.threadsX)
    return 0;
  kv::ScaleGranularity g = quant.getGranularity();
  bool fits = quant.getMode() == kv::ScaleMode::Static
                  ? g == kv::ScaleGranularity::PerTensor ||
                        g == kv::ScaleGranularity::PerToken
                  : g == kv::ScaleGranularity::PerTokenHead;
  if (!fits)
    return 0;
  return chip.threadsPerSM / plan.threadsX;
}

/// Whether an append splits its quantizing division by launch size: a
/// dynamic scale (no reciprocal flag) of a 16-bit source. The fast division
/// (Quantize.h) takes the group's scale like a static one, but its kernel
/// needs more than 32 registers: held to the bound it spills, unbounded it
/// runs at 9 blocks an SM. Measured on the bench's int8 per-(token, head)
/// append (docs/dev/TUNING.md): unbounded, decode
/// is 6-11% faster than IEEE division at 32 registers and prefill 3-7%
/// slower. So the vector kernel takes the fast division and the wide kernel,
/// for many tokens, keeps IEEE division at the bound.
static bool splitsDivision(const KernelPlan &base, const PlanOptions &options) {
  kv::QuantAttr quant = base.cache.getQuant();
  return options.fastDivision && quant &&
         quant.getMode() == kv::ScaleMode::Dynamic && !quant.getReciprocal() &&
         base.appendsRows() &&
         (base.sourceType.isBF16() || base.sourceType.isF16());
}

/// Chunks of K and of V one thread of an append's wide variant moves (the
/// variant that has no split division): four where the cache is
/// unquantized, both of its sides store whole chunks and a token's chunks
/// divide by four, else two.
///
/// Four chunks put eight 16-byte loads in flight a thread where the vector
/// kernel has two. Measured on the bench's bf16 8 x 128 append beside the
/// vector kernel and the two-chunk kernel in one process (docs/dev/TUNING.md):
/// from 2048 tokens to 32768 it led both by 0.5-7% in all
/// but two comparisons, both at 2048 (3.6% at 4096 with the caches flushed),
/// and was level at 65536; at 1024 the vector kernel leads. Where a side takes
/// element stores (a value cache whose innermost axis is the block position)
/// it reached 11.4% and 12.7% of the copy ceiling at 4096 and 16384 tokens,
/// where the two-chunk kernel's earlier runs reached 12% and 13%; and a
/// quantized cache's four-chunk kernel gained nothing on its vector kernel
/// (fp8 e4m3 per tensor: 0.945-0.959 of Triton from 16384 tokens on against
/// 0.943-0.957). Both keep two chunks.
static int64_t wideChunksPerThread(const KernelPlan &base) {
  return !base.cache.getQuant() &&
                 base.cache.getLayoutInfo().chunkContiguous() &&
                 base.chunksPerToken % 4 == 0
             ? 4
             : 2;
}

/// The fewest tokens for which an append's wide variant is picked, or 0 for
/// a plan that gets none (the numbers below are the chip table's sm_90 row,
/// where they were measured). Below the threshold the vector variant is as fast
/// or faster. Two kinds of append get one:
/// - one whose quantizing division splits by launch size (splitsDivision):
///   the wide kernel is the IEEE division's, from 2048 tokens on, 16384 for
///   per-token scales (measured: per (token, head), the fast division
///   leads below 2048 tokens and trails by 1.5-10% from 2048 on; per token,
///   whose IEEE kernel takes half the fast one's registers over a token's
///   128 chunks, it leads by 24% at one token and 5-12% at 4096, is level at
///   16384 and 1% behind at 65536);
/// - otherwise a K/V append (plain or fused) whose iteration is one chunk of
///   a token of an even number of chunks: the wide kernel moves two or four
///   chunks a thread (wideChunksPerThread). Four chunks lead the vector
///   kernel from 2048 tokens on. Two, measured on the bench's 8 x 128
///   append: bf16 gains 3-4% at 4096 tokens
///   and is level from 16384 on, but loses 1-5% in decode; a quantized one,
///   whose vector kernel keeps full occupancy at the 32-register bound,
///   gains only from 16384 tokens on (1.5-2%) and loses 1-3% at 2048-4096.
static int64_t wideMinTokens(const KernelPlan &base, const PlanOptions &options,
                             const PlanThresholds &chip) {
  // A prologue's iteration is already a whole head.
  if (base.prologue)
    return 0;
  bool division = splitsDivision(base, options);
  bool twoChunks = base.appendsRows() && base.chunksPerGroup == 1 &&
                   base.chunksPerThread == 1 && base.chunksPerToken % 2 == 0;
  if ((!division && !twoChunks) || options.wideMinTokens == 0)
    return 0;
  if (options.wideMinTokens > 0)
    return options.wideMinTokens;
  if (division)
    return base.cache.getQuant().getGranularity() ==
                   kv::ScaleGranularity::PerToken
               ? chip.wideMinTokensDivisionPerToken
               : chip.wideMinTokensDivision;
  if (base.cache.getQuant())
    return chip.wideMinTokensQuantized;
  return wideChunksPerThread(base) == 4 ? chip.wideMinTokensFourChunks
                                        : chip.wideMinTokensTwoChunks;
}

/// The fewest tokens from which kvrt goes back from the wide variant (whose
/// threshold is `minTokens`) to the vector variant, or 0 for no bound. Only
/// the two-chunk kernel of an unquantized cache has one: on the bench's bf16
/// 8 x 128 append (docs/dev/TUNING.md) it leads the vector
/// kernel at 4096 tokens (0.961-0.990 of Triton against 0.996-1.010) but
/// trails it from 16384 on, by up to 2% (0.5% typical) with random blocks
/// and by 2.0-2.4% with consecutive ones, where both run near the copy
/// ceiling: halving the blocks of a grid that fills the SMs many times over
/// buys nothing there. The four-chunk kernel stays ahead or level up to
/// 65536 tokens, and a quantized cache's two-chunk kernel
/// and the IEEE kernel of a split division stay ahead from their thresholds
/// on.
static int64_t wideMaxTokens(const KernelPlan &base, int64_t minTokens,
                             bool division, const PlanOptions &options,
                             const PlanThresholds &chip) {
  int64_t maxTokens = 0;
  if (options.wideMaxTokens >= 0)
    maxTokens = options.wideMaxTokens;
  else if (!division && !base.cache.getQuant() &&
           wideChunksPerThread(base) == 2)
    maxTokens = chip.wideMaxTokensTwoChunks;
  return maxTokens > minTokens ? maxTokens : 0;
}

std::optional<std::string> kvgen::checkPlanOptions(const PlanOptions &options) {
  if (!findChip(options.chip))
    return "chip=" + options.chip +
           ": no row in the chip table (ChipTable.cpp); expected sm_XX, "
           "sm_XXa or sm_XXf of a chip kvgen generates for";
  auto atLeast = [](llvm::StringRef name, int64_t value,
                    int64_t least) -> std::optional<std::string> {
    if (value >= least)
      return std::nullopt;
    return (name + "=" + llvm::Twine(value) + ": expected " +
            (least == 0 ? "0 (the plan's choice) or more"
                        : "-1 (the plan's choice), 0 or more"))
        .str();
  };
  if (auto why = atLeast("chunks-per-thread", options.chunksPerThread, 0))
    return why;
  if (auto why = atLeast("tokens-per-block", options.tokensPerBlock, 0))
    return why;
  if (auto why = atLeast("min-blocks-per-sm", options.minBlocksPerSM, -1))
    return why;
  if (auto why = atLeast("wide-min-tokens", options.wideMinTokens, -1))
    return why;
  if (auto why = atLeast("wide-max-tokens", options.wideMaxTokens, -1))
    return why;
  return std::nullopt;
}

std::vector<KernelPlan> kvgen::planKernels(Operation *op,
                                           const PlanOptions &options) {
  std::vector<KernelPlan> plans;
  const ChipInfo *chipInfo = findChip(options.chip);
  assert(chipInfo && "checkPlanOptions refuses a chip with no row");
  const PlanThresholds &chip = chipInfo->plan;
  KernelPlan base;
  base.name = SymbolTable::getSymbolName(op).str();
  std::optional<kv::KernelOpInfo> info = kv::getKernelOpInfo(op);
  if (!info)
    return plans;
  base.kind = info->kind;
  base.cache = info->cache;
  base.sourceType = info->rows;
  base.prologue = op->getAttrOfType<kv::PrologueAttr>("prologue");

  if (base.traits().rows == abi::KindRows::None) {
    // A kind that moves no rows (slot_mapping): one thread per token; 256
    // tokens per block.
    base.variant = KernelVariant::Scalar;
    base.alignment = 4;
    base.vectorBytes = 8;
    base.chunksPerToken = 1;
    base.threadsX = 1;
    base.tokensPerBlock = 256;
    plans.push_back(base);
    return plans;
  }

  // Vector width: 16 bytes of the wider of the two dtypes, halved until it
  // divides head_dim, so a chunk never straddles two heads (nor, in a
  // latent cache, the two parts of the entry). Where V's head size differs
  // it divides both: the chunk loop walks a head of the longer side, and
  // the shorter side's chunks past its row are skipped (KernelBodies.cpp).
  int64_t srcBytes = kv::getElementBytes(base.sourceType);
  int64_t cacheBytes = kv::getElementBytes(base.cache.getDtype());
  int64_t widest = std::max(srcBytes, cacheBytes);
  int64_t headDim = base.cache.getHeadDim();
  int64_t vec = 16 / widest;
  int64_t part = headDim;
  if (kv::LatentAttr latent = base.cache.getLatent())
    part = std::gcd(latent.getKvLoraRank(), latent.getRopeDim());
  if (base.cache.isAsymmetric())
    part = std::gcd(headDim, base.cache.getValueHeadDim());
  kv::InlineScalesAttr inlineScales = kv::getInlineScales(base.cache);
  // Nor a group of a latent with inline scales.
  if (inlineScales)
    part = std::gcd(part, inlineScales.getGroupSize());
  // RoPE: a chunk lies wholly inside the rotated elements or wholly past
  // them, and a NeoX chunk wholly in one half, so that its partner is a
  // whole chunk rotary_dim / 2 away.
  if (base.prologue && base.prologue.hasRope()) {
    int64_t rotary = base.prologue.getRotaryDim();
    part = std::gcd(part, base.prologue.isNeox() ? rotary / 2 : rotary);
  }
  while (part % vec != 0)
    vec /= 2;
  base.vectorElems = vec;
  base.chunksPerToken = base.cache.getNumKvHeads() * base.rowDim() / vec;
  // The prologue's Q heads follow the K heads in the chunk loop.
  if (base.prologue)
    base.chunksPerToken += base.prologue.getQHeads() * headDim / vec;
  // A dynamic scale needs the amax of its whole group before the first
  // store: one iteration of the chunk loop takes the group (a token's head,
  // or the token), spread over up to a warp of lanes. The lane count is the
  // largest power of two dividing the group's chunks (a butterfly reduction
  // needs a power of two; a lane never has a partial share), capped at a
  // warp so that the reduction is shuffles only: 128 bf16 elements of a
  // head are 16 lanes of one chunk, 8 heads x 128 are 32 lanes of 4 chunks.
  kv::QuantAttr quant = base.cache.getQuant();
  if (inlineScales) {
    // One iteration a group of the latent, its lanes as a dynamic scale's
    // (the butterfly needs a power of two); the RoPE chunks, unquantized,
    // are spread over the same lanes.
    base.chunksPerGroup = inlineScales.getGroupSize() / vec;
    base.latentGroups =
        base.cache.getLatent().getKvLoraRank() / inlineScales.getGroupSize();
    // The chunks the lanes own are the latent's: the RoPE chunks ride on
    // them (no lane has a RoPE chunk alone).
    base.chunksPerToken = base.latentGroups * base.chunksPerGroup;
    constexpr int64_t kWarp = 32;
    int64_t g = base.chunksPerGroup;
    base.lanesPerGroup = std::min<int64_t>(g & -g, kWarp);
  } else if (base.prologue && base.writesLatent()) {
    // An MLA prologue is RoPE alone (no norm): nothing spans a head, so an
    // iteration is one unit on one lane (PrologueMLA.cpp): a chunk of kv_c,
    // a unit of k_pe, or a unit of one q_pe head, where a unit of the rope
    // part is a NeoX pair of chunks (i, i + rope_dim / 2) or a chunk.
    kv::LatentAttr latent = base.cache.getLatent();
    int64_t ropeChunks = latent.getRopeDim() / vec;
    int64_t ropeUnits =
        base.prologue.isNeox() ? ropeChunks - ropeChunks / 2 : ropeChunks;
    base.chunksPerToken = latent.getKvLoraRank() / vec +
                          ropeUnits * (1 + base.prologue.getQHeads());
  } else if (base.cache.getNvfp4()) {
    // One iteration a group of 16 values of a head (of K and V), in one
    // thread: its amax, its candidate scales and its packing need all 16
    // (Nvfp4Bodies.cpp). A chunk never straddles a group: 16 is a multiple
    // of the chunk and head_dim of 16.
    base.chunksPerGroup = kv::kNvfp4GroupSize / vec;
    base.lanesPerGroup = 1;
  } else if (base.prologue) {
    // RMSNorm needs the sum of squares of the whole head before the first
    // store: one iteration takes a head, over lanes as a dynamic scale's
    // group does. A lane's units are chunks, or for NeoX a pair of chunks
    // (i, i + rotary_dim / 2) for each chunk of the rotary part's first
    // half (PrologueBodies.cpp): no more lanes than units, so that a lane
    // reads and writes only its own chunks and none idles.
    constexpr int64_t kWarp = 32;
    base.chunksPerGroup = headDim / vec;
    int64_t g = base.chunksPerGroup;
    int64_t units = g;
    if (base.prologue.hasRope() && base.prologue.isNeox())
      units -= base.prologue.getRotaryDim() / 2 / vec;
    base.lanesPerGroup = std::min<int64_t>(
        {g & -g, kWarp,
         static_cast<int64_t>(llvm::bit_floor(static_cast<uint64_t>(units)))});
  } else if (quant && quant.getMode() == kv::ScaleMode::Dynamic &&
             !base.readsRows()) {
    bool perToken = quant.getGranularity() == kv::ScaleGranularity::PerToken;
    base.chunksPerGroup = perToken ? base.chunksPerToken : headDim / vec;
    constexpr int64_t kWarp = 32;
    int64_t g = base.chunksPerGroup;
    base.lanesPerGroup = std::min<int64_t>(g & -g, kWarp);
  } else if (!base.readsRows() && options.chunksPerThread > 0) {
    if (base.chunksPerToken % options.chunksPerThread == 0)
      base.chunksPerThread = options.chunksPerThread;
  } else if (base.writesLatent() && !quant && base.chunksPerToken % 2 == 0) {
    // A latent entry has no V: a thread of one chunk keeps one 16-byte load
    // in flight where a K/V append keeps two. Two chunks a thread restore
    // the two (MLA 512 + 64 bf16 prefill at 65536 tokens: 81% to 87% of the
    // copy ceiling). Quantized, the second chunk's divisions lengthen decode
    // more than prefill gains (fp8 latent decode 1.89 against 1.59 us at one
    // token with two chunks; docs/dev/TUNING.md).
    base.chunksPerThread = 2;
  }
  // The quantizing division of a 16-bit float source by a static scale:
  // one reciprocal a scale, then a multiply, two fmas and a sign fix an
  // element, the same bytes as IEEE division (Quantize.h, emitDivide), where
  // IEEE division is a reciprocal, a check and a slow-path branch per element
  // (docs/dev/TUNING.md). A dynamic scale's kernels take
  // it below (splitsDivision): its kernel spills at the register bound and,
  // unbounded, loses 3-7% in prefill for 6-11% in decode,
  // so only the vector kernel, for fewer tokens, has it.
  // The prologue's values are fp32 by the time they are quantized.
  base.fastDivision = options.fastDivision && quant && !base.prologue &&
                      !base.cache.getNvfp4() &&
                      quant.getMode() == kv::ScaleMode::Static &&
                      !quant.getReciprocal() && !base.readsRows() &&
                      (base.sourceType.isBF16() || base.sourceType.isF16());
  chooseLaunch(base, options, chip);

  KernelPlan vector = base;
  vector.variant = KernelVariant::Vector;
  vector.vectorBytes = vec * widest;
  vector.alignment = vec * widest;
  vector.minBlocksPerSM = chooseMinBlocksPerSM(vector, options, chip);
  // Where the division splits, the plan above (IEEE division, bounded) is
  // the wide kernel's; the vector kernel, for fewer tokens, takes the fast
  // division without the bound (splitsDivision).
  int64_t minTokens = wideMinTokens(base, options, chip);
  bool division = minTokens > 0 && splitsDivision(base, options);
  KernelPlan wide = vector;
  if (division) {
    vector.fastDivision = true;
    vector.minBlocksPerSM = 0;
  }
  plans.push_back(vector);

  KernelPlan scalar = base;
  scalar.name += abi::variantSuffix(KernelVariant::Scalar);
  scalar.variant = KernelVariant::Scalar;
  scalar.vectorBytes = widest;
  scalar.alignment = std::min(srcBytes, cacheBytes);
  // The scalar variant takes a group of inline scales in one thread, as the
  // host does: no lane reduction. Spread over lanes, its kernels stored
  // wrong scales on the GPU (test/conformance's "scalar" cases, the vector
  // variant's lanes correct); the scalar variant serves unaligned tensors,
  // where correctness is what counts.
  if (inlineScales) {
    scalar.lanesPerGroup = 1;
    chooseLaunch(scalar, options, chip);
  }
  scalar.minBlocksPerSM = chooseMinBlocksPerSM(scalar, options, chip);
  plans.push_back(scalar);

  // The wide variant, for many tokens. Unless the division splits: two or
  // four chunks a thread (wideChunksPerThread), so that a thread has that
  // many chunks of K and of V in flight. Where a launch fills the SMs, that
  // raises the bytes in flight per SM past what one chunk a thread reaches
  // at full occupancy; for a few tokens it cuts the threads and lengthens
  // each. A dynamic scale's iteration is already its group, and a latent
  // append already moves two chunks a thread.
  if (minTokens > 0) {
    wide.name += abi::variantSuffix(KernelVariant::Wide);
    wide.variant = KernelVariant::Wide;
    wide.minTokens = minTokens;
    wide.maxTokens = wideMaxTokens(base, minTokens, division, options, chip);
    if (!division) {
      wide.chunksPerThread = wideChunksPerThread(base);
      chooseLaunch(wide, options, chip);
      wide.minBlocksPerSM = chooseMinBlocksPerSM(wide, options, chip);
      // A fused append's fp8 cache with static per-head scales: unbounded,
      // ptxas aims at 40 registers (12 blocks of 128 threads an SM) and
      // spills there on sm_90 and sm_120, held to 12 blocks it still spills
      // on sm_100 and sm_120; the kernel needs 44-48. Ten blocks (at most 51
      // registers) keep ptxas from chasing 40, without a spill on any chip
      // (test/Target/ptxas-quant.test).
      kv::QuantAttr q = wide.cache.getQuant();
      if (options.minBlocksPerSM < 0 && wide.appendsRows() &&
          wide.slotFromBlockTable() && q &&
          (q.getKind() == kv::QuantKind::FP8E4M3 ||
           q.getKind() == kv::QuantKind::FP8E5M2) &&
          q.getMode() == kv::ScaleMode::Static &&
          (q.getGranularity() == kv::ScaleGranularity::PerHead ||
           q.getGranularity() == kv::ScaleGranularity::PerTokenHead))
        wide.minBlocksPerSM = chip.fusedFP8WideThreadsPerSM /
                              (wide.threadsX * wide.tokensPerBlock);
    }
    plans.push_back(wide);
  }
  return plans;
}
