//===- KernelBuilder.h - one kernel's loop nest, from its plan -*- C++ -*-===//
//
// The builder kv-to-loops runs for each KernelPlan. Its index math and the
// slot computation are in KVToLoops.cpp; the append and gather bodies in
// KernelBodies.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_LIB_CONVERSION_KERNELBUILDER_H
#define KVGEN_LIB_CONVERSION_KERNELBUILDER_H

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Plan/KernelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

#include <array>
#include <optional>

namespace kvgen::detail {

using namespace mlir;

/// Strides of one cache, in elements (see docs/KERNEL-ABI.md): the i32
/// scalars of the ABI.
struct CacheStrides {
  Value block, head, pos, dim;
};

/// Strides of one source tensor [num_tokens, num_kv_heads, head_dim]: the
/// i32 scalars of the ABI.
struct SourceStrides {
  Value token, head, dim;
};

/// The slot-independent part of a chunk's addresses, in elements: computed
/// before the slot is loaded so that it overlaps the load, leaving only the
/// block and position terms for after the slot check.
struct ChunkAddresses {
  Value t, head, d0;
  /// Offsets of the chunk in key and value; for a latent cache, keySource is
  /// its offset in kv_c and peSource in k_pe. Null where a side is absent
  /// (no value for a K-only cache).
  Value keySource, valueSource, peSource;
  /// Offsets of (head, d0) in a cache, i32: add the block and position
  /// terms.
  Value keyCache, valueCache;
};

/// Builds the body of one kernel from its plan. Values are i64 unless named
/// otherwise; memref indices are converted at the access.
///
/// Offsets are split by what the ABI bounds (docs/KERNEL-ABI.md, "Limits"):
/// the scalars are i32 in [0, 2^31), and so is the offset of any element
/// within one token of a source (head and dim terms) or within one block of
/// a cache (position, head and dim terms), which kvrt checks. That part is
/// i32 arithmetic; only the token's or block's term is a 64-bit product,
/// of two zero-extended i32 values, which the NVPTX backend selects as one
/// mul.wide.u32. The token, head, d0, block and position values are i64
/// zero extensions of i32 values for that reason.
class KernelBuilder {
public:
  KernelBuilder(ImplicitLocOpBuilder &b, const KernelPlan &plan,
                func::FuncOp func)
      : b(b), plan(plan), cache(plan.cache),
        kvDialect(*b.getContext()->getLoadedDialect<kv::KVDialect>()) {
    for (auto [param, arg] : llvm::zip(plan.getParams(), func.getArguments()))
      args[static_cast<size_t>(param)] = arg;
  }

  /// Emits the whole function body.
  void build();

private:
  /// A parameter: a memref for a buffer, an i32 for a scalar.
  Value arg(abi::Param param) {
    Value v = args[static_cast<size_t>(param)];
    assert(v && "parameter not in the plan");
    return v;
  }
  /// A scalar parameter as an i64 (counts compared with i64 values).
  Value arg64(abi::Param param) { return ext(arg(param)); }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  /// The low 32 bits of an i64 known to lie in [0, 2^31).
  Value lo(Value v) { return arith::TruncIOp::create(b, b.getI32Type(), v); }
  /// Zero-extends an i32 in [0, 2^31) to i64.
  Value ext(Value v) { return arith::ExtUIOp::create(b, b.getI64Type(), v); }
  /// An i64 value known to lie in [0, 2^31), as the zero extension of its
  /// low half, so that its products are mul.wide.u32.
  Value narrow(Value v) { return ext(lo(v)); }
  /// The exact 64-bit product of two i32 values in [0, 2^31).
  Value wide(Value a, Value c) { return mul(ext(a), ext(c)); }
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value toIndex(Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Value toI64(Value v) {
    return arith::IndexCastOp::create(b, b.getI64Type(), v);
  }
  Value add(Value a, Value c) { return arith::AddIOp::create(b, a, c); }
  Value sub(Value a, Value c) { return arith::SubIOp::create(b, a, c); }
  Value mul(Value a, Value c) { return arith::MulIOp::create(b, a, c); }
  Value cmp(arith::CmpIPredicate p, Value a, Value c) {
    return arith::CmpIOp::create(b, p, a, c);
  }
  /// Divides or takes the remainder by a non-negative compile-time constant:
  /// a shift or a mask for powers of two, which the contract requires of the
  /// block size.
  Value divConst(Value v, int64_t d) {
    if (llvm::isPowerOf2_64(d))
      return arith::ShRUIOp::create(b, v, like(v, llvm::Log2_64(d)));
    return arith::DivUIOp::create(b, v, like(v, d));
  }
  Value remConst(Value v, int64_t d) {
    if (llvm::isPowerOf2_64(d))
      return arith::AndIOp::create(b, v, like(v, d - 1));
    return arith::RemUIOp::create(b, v, like(v, d));
  }
  /// The constant `v` of `of`'s integer type.
  Value like(Value of, int64_t v) {
    return arith::ConstantIntOp::create(b, of.getType(), v);
  }
  Value loadI32AsI64(Value memref, Value idx) {
    Value v = memref::LoadOp::create(b, memref, ValueRange{toIndex(idx)});
    return arith::ExtSIOp::create(b, b.getI64Type(), v);
  }

  CacheStrides cacheStrides(bool isKey) {
    using P = abi::Param;
    // A latent cache is [num_blocks, block_size, entry]: one head.
    if (plan.writesLatent())
      return {arg(P::KeyCacheStrideBlock), i32(0), arg(P::KeyCacheStridePos),
              arg(P::KeyCacheStrideDim)};
    if (isKey)
      return {arg(P::KeyCacheStrideBlock), arg(P::KeyCacheStrideHead),
              arg(P::KeyCacheStridePos), arg(P::KeyCacheStrideDim)};
    return {arg(P::ValueCacheStrideBlock), arg(P::ValueCacheStrideHead),
            arg(P::ValueCacheStridePos), arg(P::ValueCacheStrideDim)};
  }
  SourceStrides sourceStrides(bool isKey) {
    using P = abi::Param;
    if (plan.readsRows())
      return isKey ? SourceStrides{arg(P::KeyOutStrideToken),
                                   arg(P::KeyOutStrideHead),
                                   arg(P::KeyOutStrideDim)}
                   : SourceStrides{arg(P::ValueOutStrideToken),
                                   arg(P::ValueOutStrideHead),
                                   arg(P::ValueOutStrideDim)};
    if (isKey)
      return {arg(P::KeyStrideToken), arg(P::KeyStrideHead),
              arg(P::KeyStrideDim)};
    return {arg(P::ValueStrideToken), arg(P::ValueStrideHead),
            arg(P::ValueStrideDim)};
  }

  /// The slot of token `t32` (an i32) from slot_mapping.
  Value loadSlot(Value t32);
  /// The slot of token `t` from the block table and positions (the
  /// slot_mapping rule of docs/KERNEL-ABI.md); -1 for padding tokens. With
  /// `position`, also sets it to the token's position (-1 for a padding
  /// token), which a prologue's RoPE needs.
  Value emitSlotFromBlockTable(Value t, Value *position = nullptr);
  /// Token t's slot from FlashInfer's ragged page table (paged_kv_append),
  /// -1 where any index is out of range; docs/CONTRACT.md has the rule.
  Value emitSlotFromPageTable(Value t);
  /// Token t's slot by the kind's slot rule (its Slot trait).
  Value emitSlot(Value t, Value t32);
  /// Opens `if (slot is valid)` and sets `block` and `pos`; the caller
  /// builds inside it.
  void emitIfValidSlot(Value slot, Value &block, Value &pos);
  /// Writes iteration `c` of token `t`'s K and V at `slot`, if the slot is
  /// valid: the plan's chunks per thread (whose addresses `chunks` holds,
  /// computed before the slot), or for dynamic scales one group of chunks
  /// (`chunks` empty).
  void emitAppendChunk(Value slot, Value t, Value c,
                       ArrayRef<ChunkAddresses> chunks);
  /// The fused prologue (docs/dev/PROLOGUE.md): iteration `c` of token `t`
  /// takes one head over the plan's lanes, K head c with V head c (under the
  /// slot check) or, past the K heads, Q head c - num_kv_heads (for every
  /// token); with RoPE, only where the token's position is in the cos/sin
  /// cache.
  /// `position` is the slot rule's (block-table kinds), or null: then
  /// rope_positions[t].
  void emitPrologueGroup(Value slot, Value t, Value c, Value position);
  /// One head of K (with its V) or of Q through the prologue, then stored:
  /// K and V at (block, pos) of the caches, Q at row t of q_out. `cosSin`
  /// is the offset of the token's row of the cos/sin cache (null without
  /// RoPE).
  void emitPrologueHead(bool isQ, Value t, Value head, Value block, Value pos,
                        Value cosSin);
  /// An MLA append's prologue (PrologueMLA.cpp): iteration `c` of token
  /// `t` is one unit, a chunk of kv_c, a unit of k_pe (rotated, stored to
  /// the entry and to k_pe_out) or a unit of a q_pe head (rotated, to
  /// q_out), all under the slot check and the position's.
  void emitMlaPrologueUnit(Value slot, Value t, Value c, Value position);
  /// A chunk's elements as f32 scalars (loadChunkAt's form in).
  SmallVector<Value> toF32Elements(ArrayRef<Value> chunk);
  /// f32 scalars cast (or quantized by `quantize`) into a chunk in
  /// loadChunkAt's form, of element type `type`.
  SmallVector<Value> fromElements(ArrayRef<Value> elements, Type type);
  /// Reads chunk `c` of the row at `slot` into row `t` of the outputs.
  void emitGatherChunk(Value slot, Value t, Value c);
  /// Moves the chunks at `chunks` of K and V to (block, pos), quantizing
  /// when the cache is quantized with `scales` (f32, or the reciprocals):
  /// one per side (K, V) for all chunks, or one per side for each chunk in
  /// turn. Every load comes before the first store.
  void emitAppend(ArrayRef<ChunkAddresses> chunks, Value block, Value pos,
                  ArrayRef<Value> scales);
  /// Runs `body` for a side's chunk at `d0` where the chunk lies in the
  /// side's row: always where the side's head size is the chunk loop's
  /// (plan.rowDim()), under `d0 < head size` for the shorter side of a
  /// cache whose V head size differs from K's.
  void emitIfInRow(bool isKey, Value d0, llvm::function_ref<void()> body);
  /// The slot-independent addresses of the chunk at (head, d0) of token `t`.
  ChunkAddresses chunkAddresses(Value t, Value head, Value d0);
  /// K and V, or K alone for a K-only cache: the sides a kernel moves.
  SmallVector<bool, 2> sides() const {
    if (cache.hasValue())
      return {true, false};
    return {true};
  }
  /// The chunk at `at` of a latent entry: from kv_c below kv_lora_rank,
  /// from k_pe above (MlaBodies.cpp). A chunk never straddles the two.
  SmallVector<Value> loadLatentChunk(const ChunkAddresses &at);
  /// Writes group `c` of token `t`'s latent entry with inline scales at
  /// `slot`, if the slot is valid: its quantized chunks, its scale and the
  /// lanes' share of the RoPE part (MlaBodies.cpp).
  void emitInlineScalesGroup(Value slot, Value t, Value c);
  /// Writes group `c` (16 values of one head) of token `t`'s K and V into
  /// an NVFP4 cache at `slot`, if the slot is valid: the group's packed
  /// values and its scale byte (Nvfp4Bodies.cpp).
  void emitNvfp4Iteration(Value slot, Value t, Value c);
  /// The head and first element of chunk `c` (i64) of a token.
  std::pair<Value, Value> chunkPosition(Value c) {
    int64_t chunksPerHead = plan.rowDim() / plan.vectorElems;
    Value c32 = lo(c);
    return {ext(divConst(c32, chunksPerHead)),
            ext(mul(remConst(c32, chunksPerHead), i32(plan.vectorElems)))};
  }

  /// Offset of element (block, head, pos, d) in a cache; `isKey` selects the
  /// key or value side of layouts whose sides differ (Layouts.def).
  Value cacheOffset(const CacheStrides &s, Value block, Value head, Value pos,
                    Value d, bool isKey) {
    return cacheSlotOffset(s, block, pos, cacheChunkOffset(s, head, d, isKey));
  }
  /// The (head, d) terms of cacheOffset, i32: independent of the slot.
  Value cacheChunkOffset(const CacheStrides &s, Value head, Value d,
                         bool isKey);
  /// Adds the slot's (block, pos) terms to an i32 cacheChunkOffset: the
  /// position's within the block in i32, the block's as a wide product.
  Value cacheSlotOffset(const CacheStrides &s, Value block, Value pos,
                        Value chunkOffset) {
    return add(wide(lo(block), s.block),
               ext(add(mul(lo(pos), s.pos), chunkOffset)));
  }
  /// Offset of element (t, head, d0) in a source or gather output.
  Value sourceOffset(const SourceStrides &s, Value t, Value head, Value d0);
  /// Whether a chunk's elements are contiguous in this cache side.
  bool cacheChunkContiguous(bool isKey) const {
    return cache.getLayoutInfo().chunkContiguous(/*isValue=*/!isKey);
  }
  /// Whether this cache side splits head_dim into groups of x elements.
  bool cacheSideHasX(bool isKey) const {
    return cache.getLayoutInfo().hasX(/*isValue=*/!isKey);
  }

  /// Loads one chunk of a source tensor as it is: a vector for the vector
  /// variant, a list of scalars for the scalar one.
  SmallVector<Value> loadChunk(Value memref, const SourceStrides &s, Value t,
                               Value head, Value d0) {
    return loadChunkAt(memref, s, sourceOffset(s, t, head, d0));
  }
  /// loadChunk from the chunk's first element `base` (a sourceOffset).
  SmallVector<Value> loadChunkAt(Value memref, const SourceStrides &s,
                                 Value base);
  /// Stores a chunk into a gather output, the inverse of loadChunk.
  void storeRowChunk(ArrayRef<Value> chunk, Value memref,
                     const SourceStrides &s, Value t, Value head, Value d0);
  /// Stores a chunk into a cache at its first element `base` (a
  /// cacheOffset).
  void storeChunkAt(ArrayRef<Value> chunk, Value memref, const CacheStrides &s,
                    Value base, bool isKey);
  /// Loads one chunk of a cache (the inverse of storeChunkAt).
  SmallVector<Value> loadCacheChunk(Value memref, const CacheStrides &s,
                                    Value block, Value head, Value pos,
                                    Value d0, bool isKey);
  /// Applies `fn` to each value of a chunk.
  SmallVector<Value> map(ArrayRef<Value> chunk,
                         llvm::function_ref<Value(Value)> fn) {
    return llvm::map_to_vector(chunk, [&](Value v) { return fn(v); });
  }

  /// The static scale of K or V for the element group at (t, head, block).
  Value staticScale(bool isKey, Value t, Value head, Value block);
  /// Index of a dynamic scale in the scale cache.
  Value scaleCacheIndex(Value block, Value pos, Value head);

  /// Marks `v`'s defining op with one of the kv dialect's unit attributes
  /// for kv-pin-before-slot (`kvDialect.get...AttrHelper()`).
  template <typename Helper> void mark(Helper helper, Value v) {
    helper.setAttr(v.getDefiningOp(), b.getUnitAttr());
  }

  ImplicitLocOpBuilder &b;
  const KernelPlan &plan;
  kv::CacheType cache;
  /// The attributes kv-to-loops leaves for later passes are the dialect's.
  kv::KVDialect &kvDialect;
  /// The function's arguments, indexed by abi::Param.
  std::array<Value, std::size(abi::kParams)> args{};
};

} // namespace kvgen::detail

#endif // KVGEN_LIB_CONVERSION_KERNELBUILDER_H
