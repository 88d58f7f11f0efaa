//===- LatentEntry.h - latent entries with inline scales --------*- C++ -*-===//
//
// The rules of a latent cache whose entry carries its own group scales
// (#kv.inline_scales, DeepSeek V3.2's fp8_ds_mla): the cache's and the
// kernel op's halves of the verifier, and the entry's byte layout that
// kv-to-loops, the bundle and kvrt share.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_DIALECT_KV_IR_LATENTENTRY_H
#define KVGEN_DIALECT_KV_IR_LATENTENTRY_H

#include "kvgen/Dialect/KV/IR/KVDialect.h"

namespace kvgen::kv {

/// The scales of `cache`'s latent entry, where they are inline; null
/// otherwise.
InlineScalesAttr getInlineScales(CacheType cache);

/// Byte offsets inside one entry of a latent cache with inline scales.
struct InlineScalesLayout {
  /// Groups of the latent part: one f32 scale each.
  int64_t groups = 0;
  /// The first scale, right after the quantized latent values.
  int64_t scalesOffset = 0;
  /// The first RoPE value, right after the scales.
  int64_t ropeOffset = 0;
  /// Bytes of one RoPE value.
  int64_t ropeBytes = 0;
  /// The whole entry.
  int64_t entryBytes = 0;
};
InlineScalesLayout getInlineScalesLayout(CacheType cache);

/// The cache's half: what a latent cache with inline scales needs of its
/// dtype and quant. Called by CacheType's verifier for a latent cache.
mlir::LogicalResult verifyInlineScalesCache(
    llvm::function_ref<mlir::InFlightDiagnostic()> emitError, mlir::Type dtype,
    QuantAttr quant, LatentAttr latent);

/// The op's half: only the latent appends write such an entry, from rows of
/// its rope_dtype. Called by verifyKernelOp.
mlir::LogicalResult verifyInlineScalesOp(mlir::Operation *op,
                                         ::kvgen::abi::KernelKind kind,
                                         CacheType cache, mlir::Type rows);

} // namespace kvgen::kv

#endif // KVGEN_DIALECT_KV_IR_LATENTENTRY_H
