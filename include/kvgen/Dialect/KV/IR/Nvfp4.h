//===- Nvfp4.h - NVFP4 caches: the page and its rules -----------*- C++ -*-===//
//
// A cache of quant kind nvfp4 (#kv.nvfp4; docs/CONTRACT.md, "NVFP4"): the
// cache's and the kernel op's halves of the verifier, and the byte offsets
// of a side's page that kv-to-loops and the tests share.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_DIALECT_KV_IR_NVFP4_H
#define KVGEN_DIALECT_KV_IR_NVFP4_H

#include "kvgen/Dialect/KV/IR/KVDialect.h"

namespace kvgen::kv {

/// Values one block scale covers.
inline constexpr int64_t kNvfp4GroupSize = 16;

/// The byte geometry of one side (K or V) of one block of an NVFP4 cache:
/// `dataBytes` of packed values, then the scales.
struct Nvfp4Page {
  int64_t numKvHeads = 0;
  int64_t blockSize = 0;
  /// Bytes of one head's values at one position: head_dim / 2.
  int64_t rowDataBytes = 0;
  /// Scales of one head at one position: head_dim / 16.
  int64_t rowScales = 0;
  /// Whether heads are outer to positions in the block (the layout's
  /// axes say).
  bool headMajor = false;
  /// All values of the side's block, where its scales begin.
  int64_t dataBytes() const { return numKvHeads * blockSize * rowDataBytes; }
  /// The row's bytes as the cache tensor's innermost extent.
  int64_t rowBytes() const { return rowDataBytes + rowScales; }
  /// The offset of row (head, pos)'s values in the block.
  int64_t dataOffset(int64_t head, int64_t pos) const {
    return rowIndex(head, pos) * rowDataBytes;
  }
  /// The offset of scale `j` of row (head, pos) in the block.
  int64_t scaleOffset(int64_t head, int64_t pos, int64_t j,
                      Nvfp4ScaleLayout layout) const;
  int64_t rowIndex(int64_t head, int64_t pos) const {
    return headMajor ? head * blockSize + pos : pos * numKvHeads + head;
  }
};

/// The page of an NVFP4 cache (`cache.getNvfp4()` set).
Nvfp4Page getNvfp4Page(CacheType cache);

/// The cache's half: an nvfp4 quant and a #kv.nvfp4 come together, on a
/// paged flash layout, with head_dim a multiple of 16 and what a swizzled
/// side needs. Called by CacheType's verifier.
mlir::LogicalResult
verifyNvfp4Cache(llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
                 ::kvgen::abi::Layout layout, int64_t blockSize,
                 int64_t headDim, std::optional<int64_t> vHeadDim,
                 QuantAttr quant, bool kOnly, LatentAttr latent,
                 Nvfp4Attr nvfp4);

/// The op's half: only kv.append writes an NVFP4 cache. Called by
/// verifyKernelOp.
mlir::LogicalResult verifyNvfp4Op(mlir::Operation *op,
                                  ::kvgen::abi::KernelKind kind,
                                  CacheType cache);

} // namespace kvgen::kv

#endif // KVGEN_DIALECT_KV_IR_NVFP4_H
