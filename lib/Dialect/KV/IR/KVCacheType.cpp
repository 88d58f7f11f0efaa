//===- KVCacheType.cpp - kv dialect: !kv.cache, its accessors and rules ---===//
//
// The rules a cache type must satisfy on its own (its extents, limits, dtype
// and quantization, the layout's constraints, a V head size of its own,
// K-only and latent caches), so that kvgen, kvgen-opt and the C++ API refuse
// the same caches with the same words. The rules that tie a cache to a
// kernel op's operands are KVDialect.cpp's (verifyKernelOp). Each rule has an
// expected-error test in test/Dialect/KV/.
//
//===----------------------------------------------------------------------===//

#include "kvgen/ABI/Limits.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Dialect/KV/IR/LatentEntry.h"
#include "kvgen/Dialect/KV/IR/Nvfp4.h"

using namespace mlir;
using namespace kvgen::kv;

const kvgen::abi::LayoutInfo &CacheType::getLayoutInfo() const {
  return kvgen::abi::layoutInfo(getLayout());
}

int64_t CacheType::getTokensPerBlock() const {
  return isPaged() ? getBlockSize() : getMaxSeqLen();
}

int64_t CacheType::getX() const { return 16 / getElementBytes(getDtype()); }

bool CacheType::isPaged() const { return getLayoutInfo().paged(); }

bool CacheType::hasValue() const { return !getKOnly() && !getLatent(); }

int64_t CacheType::getValueHeadDim() const {
  return getVHeadDim().value_or(getHeadDim());
}

// LatentAttr's verifier and the inline scales' rules: LatentEntry.cpp.

/// A K-only or latent cache: the layouts and scales that have a meaning
/// without V.
static LogicalResult verifyKOnly(function_ref<InFlightDiagnostic()> emitError,
                                 LayoutKind layout, int64_t numKvHeads,
                                 int64_t headDim, QuantAttr quant,
                                 LatentAttr latent) {
  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  if (info.stacked())
    return emitError() << "a K-only cache has no V half: the " << info.name
                       << " layout needs both";
  // The dynamic-scale append finds K's and V's amax in one pass; it has no
  // K-only form yet.
  if (quant && quant.getMode() == ScaleMode::Dynamic &&
      !(latent && latent.getScales())) // LatentEntry.cpp
    return emitError() << "a K-only cache takes static scales only";
  if (!latent)
    return success();
  if (!info.tokenMajor())
    return emitError() << "a latent cache is [num_blocks, block_size, "
                          "kv_lora_rank + rope_dim]: give layout = "
                       << kvgen::abi::layoutNamesWhere(
                              [](const kvgen::abi::LayoutInfo &candidate) {
                                return candidate.tokenMajor();
                              });
  if (numKvHeads != 1)
    return emitError() << "a latent cache has one head, got num_kv_heads = "
                       << numKvHeads;
  if (headDim != latent.getKvLoraRank() + latent.getRopeDim())
    return emitError() << "a latent cache's head_dim is kv_lora_rank + "
                          "rope_dim = "
                       << latent.getKvLoraRank() + latent.getRopeDim()
                       << ", got " << headDim;
  if (quant && quant.getGranularity() != ScaleGranularity::PerTensor &&
      quant.getGranularity() != ScaleGranularity::PerToken)
    return emitError() << "a latent cache's entry has one head: its scales "
                          "are per_tensor or per_token";
  return success();
}

/// The limits of docs/CONTRACT.md, checked one at a time so that the product
/// of heads and head_dim cannot overflow.
static LogicalResult
verifyCacheLimits(function_ref<InFlightDiagnostic()> emitError,
                  LayoutKind layout, int64_t tokensPerBlock, int64_t numKvHeads,
                  int64_t headDim) {
  auto tooLarge = [&](StringRef what, int64_t value, int64_t limit) {
    return emitError() << what << " " << value
                       << " is past the limit: a kernel supports at most "
                       << limit;
  };
  using namespace kvgen::abi;
  if (tokensPerBlock > kMaxBlockSize)
    return tooLarge(layoutInfo(layout).tokensName(), tokensPerBlock,
                    kMaxBlockSize);
  if (headDim > kMaxHeadDim)
    return tooLarge("head_dim", headDim, kMaxHeadDim);
  if (numKvHeads > kMaxKvHeads)
    return tooLarge("num_kv_heads", numKvHeads, kMaxKvHeads);
  if (numKvHeads * headDim > kMaxElementsPerToken)
    return tooLarge("num_kv_heads * head_dim", numKvHeads * headDim,
                    kMaxElementsPerToken);
  return success();
}

/// A V head size of its own (`v_head_dim`): the layouts whose V side holds
/// whole rows apart from K's, the limits of head_dim, static scales.
static LogicalResult
verifyValueHeadDim(function_ref<InFlightDiagnostic()> emitError,
                   LayoutKind layout, int64_t numKvHeads, int64_t headDim,
                   int64_t vHeadDim, QuantAttr quant, bool kOnly,
                   LatentAttr latent) {
  if (vHeadDim <= 0)
    return emitError() << "v_head_dim must be positive, got " << vHeadDim;
  // One spelling per cache: the default is head_dim.
  if (vHeadDim == headDim)
    return emitError() << "v_head_dim " << vHeadDim
                       << " is head_dim: leave it out (V's head size "
                          "defaults to head_dim)";
  if (kOnly || latent)
    return emitError() << "a " << (latent ? "latent" : "K-only")
                       << " cache has no V: v_head_dim has no meaning";
  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  auto apart = [](const kvgen::abi::LayoutInfo &candidate) {
    return !candidate.stacked() && !candidate.hasX() &&
           candidate.chunkContiguous();
  };
  if (!apart(info))
    return emitError() << "the " << info.name
                       << " layout has one head size for K and V ("
                       << (info.stacked() ? "its sides are stacked in one "
                                            "tensor"
                                          : "its V side is not whole rows of "
                                            "head_dim")
                       << "): v_head_dim needs layout = "
                       << kvgen::abi::layoutNamesWhere(apart);
  if (vHeadDim > kvgen::abi::kMaxHeadDim)
    return emitError() << "v_head_dim " << vHeadDim
                       << " is past the limit: a kernel supports at most "
                       << kvgen::abi::kMaxHeadDim;
  if (numKvHeads * vHeadDim > kvgen::abi::kMaxElementsPerToken)
    return emitError() << "num_kv_heads * v_head_dim " << numKvHeads * vHeadDim
                       << " is past the limit: a kernel supports at most "
                       << kvgen::abi::kMaxElementsPerToken;
  // The dynamic append finds a group's amax over K's and V's chunks in one
  // lane loop; it has no form for sides of different lengths yet.
  if (quant && quant.getMode() == ScaleMode::Dynamic)
    return emitError() << "a cache with v_head_dim takes static scales only";
  return success();
}

LogicalResult CacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                LayoutKind layout, int64_t blockSize,
                                int64_t maxSeqLen, int64_t numKvHeads,
                                int64_t headDim,
                                std::optional<int64_t> vHeadDim, Type dtype,
                                QuantAttr quant, bool kOnly, LatentAttr latent,
                                Nvfp4Attr nvfp4) {
  if (numKvHeads <= 0)
    return emitError() << "num_kv_heads must be positive, got " << numKvHeads;
  if (headDim <= 0)
    return emitError() << "head_dim must be positive, got " << headDim;

  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  if (!info.paged()) {
    if (blockSize != 0)
      return emitError() << "the " << info.name
                         << " layout has no blocks: give max_seq_len, not "
                            "block_size";
    if (maxSeqLen <= 0)
      return emitError() << "the " << info.name
                         << " layout needs max_seq_len > 0";
  } else {
    if (maxSeqLen != 0)
      return emitError() << "max_seq_len is for the "
                         << kvgen::abi::layoutNamesWhere(
                                [](const kvgen::abi::LayoutInfo &candidate) {
                                  return !candidate.paged();
                                })
                         << " layout; the " << info.name
                         << " layout takes block_size";
    // Any size: the kernel divides by the compile-time constant (a shift
    // and a mask for powers of two, a multiply-high otherwise).
    if (blockSize <= 0)
      return emitError() << "block_size must be positive, got " << blockSize;
  }
  if (failed(verifyCacheLimits(emitError, layout,
                               info.paged() ? blockSize : maxSeqLen, numKvHeads,
                               headDim)))
    return failure();

  if (!quant) {
    if (!isPlainFloat(dtype))
      return emitError() << "an unquantized cache holds f32, f16 or bf16, "
                            "got "
                         << dtype << " (fp8 and int8 caches need a quant)";
  } else {
    Type storage = quant.getStorageType(dtype.getContext());
    if (dtype != storage)
      return emitError() << stringifyQuantKind(quant.getKind())
                         << " quantization stores " << storage
                         << ", but the cache dtype is " << dtype;
    if (quant.getGranularity() == ScaleGranularity::PerBlock && !info.paged())
      return emitError() << "per_block scales need a paged layout";
  }

  if (failed(verifyNvfp4Cache(emitError, layout, blockSize, headDim, vHeadDim,
                              quant, kOnly, latent, nvfp4)))
    return failure();

  if (info.hasX()) {
    // A side groups head_dim into vectors of x elements (16 bytes).
    int64_t x = 16 / (dtype.getIntOrFloatBitWidth() / 8);
    if (headDim % x != 0)
      return emitError() << "the " << info.name << " layout packs x = " << x
                         << " elements (16 bytes of " << dtype
                         << ") per vector; x must divide head_dim " << headDim;
  }
  if (vHeadDim &&
      failed(verifyValueHeadDim(emitError, layout, numKvHeads, headDim,
                                *vHeadDim, quant, kOnly, latent)))
    return failure();
  if (latent &&
      failed(verifyInlineScalesCache(emitError, dtype, quant, latent)))
    return failure();
  if (kOnly || latent)
    return verifyKOnly(emitError, layout, numKvHeads, headDim, quant, latent);
  return success();
}
