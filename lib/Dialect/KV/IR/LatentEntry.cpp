//===- LatentEntry.cpp - latent entries with inline scales ----------------===//
//
// #kv.latent and its #kv.inline_scales: a latent entry whose latent part is
// quantized in groups, each group's scale stored in the entry (DeepSeek
// V3.2's fp8_ds_mla is `group_size = 128` over `kv_lora_rank = 512` in fp8
// e4m3, then 64 bf16 RoPE values). Each rule has an expected-error test in
// test/Dialect/KV/inline-scales-invalid.mlir.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Dialect/KV/IR/LatentEntry.h"

#include <cmath>

using namespace mlir;
using namespace kvgen::kv;
namespace abi = kvgen::abi;

static bool isRowFloat(Type type) {
  return type.isF32() || type.isF16() || type.isBF16();
}

LogicalResult LatentAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t kvLoraRank, int64_t ropeDim,
                                 InlineScalesAttr scales) {
  // An entry with inline scales may have no RoPE part (fp8_ds_mla's
  // "nope" rows: the latent and its scales only); any other entry has both
  // parts.
  if (kvLoraRank <= 0 || ropeDim < 0 || (ropeDim == 0 && !scales))
    return emitError() << "kv_lora_rank and rope_dim must be positive"
                       << (scales ? " (rope_dim may be 0 with inline scales)"
                                  : "")
                       << ", got " << kvLoraRank << " and " << ropeDim;
  if (scales && kvLoraRank % scales.getGroupSize() != 0)
    return emitError() << "inline scales of group_size "
                       << scales.getGroupSize() << " must divide kv_lora_rank "
                       << kvLoraRank
                       << ": each group of the latent has one scale";
  return success();
}

LogicalResult
InlineScalesAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         int64_t groupSize, Type ropeDtype, FloatAttr minScale,
                         bool powerOfTwo) {
  if (groupSize <= 0)
    return emitError() << "group_size must be positive, got " << groupSize;
  if (!isRowFloat(ropeDtype))
    return emitError() << "rope_dtype must be f32, f16 or bf16 (the RoPE "
                          "part is stored unquantized), got "
                       << ropeDtype;
  if (minScale) {
    double v = minScale.getValueAsDouble();
    if (!minScale.getType().isF32() || !(v > 0) || !std::isfinite(v))
      return emitError() << "min_scale must be a positive finite f32, got "
                         << minScale;
  }
  return success();
}

int64_t InlineScalesAttr::getEntryBytes(int64_t kvLoraRank, int64_t ropeDim,
                                        int64_t valueBytes) const {
  return kvLoraRank * valueBytes + kvLoraRank / getGroupSize() * 4 +
         ropeDim * getElementBytes(getRopeDtype());
}

InlineScalesAttr kvgen::kv::getInlineScales(CacheType cache) {
  LatentAttr latent = cache.getLatent();
  return latent ? latent.getScales() : InlineScalesAttr();
}

InlineScalesLayout kvgen::kv::getInlineScalesLayout(CacheType cache) {
  InlineScalesLayout l;
  InlineScalesAttr scales = getInlineScales(cache);
  if (!scales)
    return l;
  LatentAttr latent = cache.getLatent();
  int64_t rank = latent.getKvLoraRank();
  l.groups = rank / scales.getGroupSize();
  l.scalesOffset = rank * getElementBytes(cache.getDtype());
  l.ropeOffset = l.scalesOffset + 4 * l.groups;
  l.ropeBytes = getElementBytes(scales.getRopeDtype());
  l.entryBytes = scales.getEntryBytes(rank, latent.getRopeDim(),
                                      getElementBytes(cache.getDtype()));
  return l;
}

LogicalResult
kvgen::kv::verifyInlineScalesCache(function_ref<InFlightDiagnostic()> emitError,
                                   Type dtype, QuantAttr quant,
                                   LatentAttr latent) {
  InlineScalesAttr scales = latent.getScales();
  if (!scales)
    return success();
  // The kernel computes each group's scale from the values it writes: the
  // cache's quantization says which kind, and that the scales are dynamic
  // and a token's.
  if (!quant)
    return emitError() << "a latent entry with inline scales stores "
                          "quantized values: give quant = #kv.quant<kind = "
                          "..., granularity = per_token, mode = dynamic>";
  if (quant.getMode() != ScaleMode::Dynamic ||
      quant.getGranularity() != ScaleGranularity::PerToken)
    return emitError() << "a latent entry's inline scales are computed by "
                          "the kernel and stored in the token's entry: give "
                          "granularity = per_token, mode = dynamic, got "
                       << abi::granularityName(quant.getGranularity()) << ", "
                       << abi::scaleModeName(quant.getMode());
  // Every quant kind stores one byte (the cache dtype is its storage type),
  // so the entry's offsets are its bytes.
  // The entry is at most 5 * head_dim bytes (a scale per value, f32 RoPE
  // values): within the elements-per-token limit wherever head_dim is within
  // its own (Limits.def), so it needs no limit of its own.
  return success();
}

LogicalResult kvgen::kv::verifyInlineScalesOp(Operation *op,
                                              abi::KernelKind kind,
                                              CacheType cache, Type rows) {
  InlineScalesAttr scales = getInlineScales(cache);
  if (!scales)
    return success();
  // The latent appends write the entry (and no K/V append writes a latent
  // cache, KVDialect.cpp); a slot_mapping kernel does not touch it; a
  // gather would read its bytes as values of the cache's dtype.
  abi::KindTraits traits = abi::kindTraits(kind);
  if (traits.rows == abi::KindRows::OutOf)
    return op->emitOpError()
           << "cannot read a latent entry with inline scales: no gather "
              "reads its scales yet";
  if (traits.rows != abi::KindRows::Into)
    return success();
  if (rows != scales.getRopeDtype())
    return op->emitOpError()
           << "writes the RoPE part unquantized as rope_dtype "
           << scales.getRopeDtype() << ": the source dtype must be "
           << scales.getRopeDtype() << ", got " << rows;
  return success();
}
