//===- KernelBodies.cpp - the append and gather bodies --------------------===//
//
// What one iteration of an append or a gather does once its slot is known:
// move a chunk (or, for a dynamic scale, a whole group of chunks) between
// the source or output rows and the cache, casting, quantizing or
// dequantizing on the way (docs/CONTRACT.md, "Quantization"): a chunk's
// static scale, the two lane loops of a dynamic scale (amax of the group,
// then quantize and store, the scale written beside the cache), the gather's
// dequantizing read. The arithmetic itself is in Quantize.cpp; the index
// math in KVToLoops.cpp.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"
#include "Quantize.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

Value KernelBuilder::staticScale(bool isKey, Value t, Value head, Value block) {
  Value numHeads = i64(cache.getNumKvHeads());
  Value idx;
  switch (cache.getQuant().getGranularity()) {
  case kv::ScaleGranularity::PerTensor:
    idx = i64(0);
    break;
  case kv::ScaleGranularity::PerHead:
    idx = head;
    break;
  case kv::ScaleGranularity::PerToken:
    idx = t;
    break;
  case kv::ScaleGranularity::PerTokenHead:
    idx = add(mul(t, numHeads), head);
    break;
  case kv::ScaleGranularity::PerBlock:
    idx = add(mul(block, numHeads), head);
    break;
  }
  Value scales = arg(isKey ? abi::Param::KeyScale : abi::Param::ValueScale);
  return memref::LoadOp::create(b, scales, ValueRange{toIndex(idx)});
}

Value KernelBuilder::scaleCacheIndex(Value block, Value pos, Value head) {
  // [num_blocks, block_size(, H)], compact.
  Value row = add(mul(block, i64(cache.getTokensPerBlock())), pos);
  if (cache.getQuant().getGranularity() == kv::ScaleGranularity::PerToken)
    return row;
  return add(mul(row, i64(cache.getNumKvHeads())), head);
}

void KernelBuilder::emitIfValidSlot(Value slot, Value &block, Value &pos) {
  int64_t tokensPerBlock = cache.getTokensPerBlock();
  // slot < 0 is padding; a block past the cache's end is skipped too. Both
  // are one unsigned compare against the cache's slot count (num_blocks <
  // 2^31 times a block size of at most kMaxBlockSize = 2^20: exact in 64
  // bits; a negative slot is above it as unsigned), computed before the slot
  // arrives. The slot's only use ahead of the K/V loads is then that
  // compare, not the block division (a multiply-high for a block size that
  // is not a power of two), which moves past the check.
  Value capacity = mul(arg64(abi::Param::NumBlocks), i64(tokensPerBlock));
  Value valid = cmp(arith::CmpIPredicate::ult, slot, capacity);
  auto ifOp = scf::IfOp::create(b, valid, /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  block = divConst(slot, tokensPerBlock);
  pos = remConst(slot, tokensPerBlock);
  // Past the check the block is below num_blocks < 2^31: its products are
  // mul.wide.u32 if it stays narrow (kv-pin-before-slot keeps it so).
  Value block32 = lo(block);
  mark(kvDialect.getKeepNarrowAttrHelper(), block32);
  block = ext(block32);
  pos = narrow(pos);
}

void KernelBuilder::emitAppend(ArrayRef<ChunkAddresses> chunks, Value block,
                               Value pos, ArrayRef<Value> scales) {
  kv::QuantAttr quant = cache.getQuant();
  // A quantized cache scales the exact fp32 value: never cast before. The
  // fast division takes the 16-bit source as loaded (its window test reads
  // the source's bits) and extends it itself.
  Type to = !quant              ? cache.getDtype()
            : plan.fastDivision ? plan.sourceType
                                : b.getF32Type();
  auto load = [&](const ChunkAddresses &at, bool isKey) {
    return map(loadChunkAt(arg(isKey ? abi::Param::Key : abi::Param::Value),
                           sourceStrides(isKey),
                           isKey ? at.keySource : at.valueSource),
               [&](Value v) { return emitFloatCast(b, v, to); });
  };
  Type storage = cache.getDtype();
  // One scale per side, or one per side and chunk.
  size_t perChunk = scales.size() == sides().size() ? 0 : sides().size();
  auto quantize = [&](size_t chunk, bool isKey, SmallVector<Value> &data) {
    if (!quant)
      return;
    Value scale = scales[chunk * perChunk + (isKey ? 0 : 1)];
    data = map(data, [&](Value x) {
      return emitQuantize(b, x, scale, quant, storage, plan.fastDivision);
    });
  };
  auto store = [&](const ChunkAddresses &at, bool isKey, ArrayRef<Value> data) {
    CacheStrides s = cacheStrides(isKey);
    Value base =
        cacheSlotOffset(s, block, pos, isKey ? at.keyCache : at.valueCache);
    storeChunkAt(data,
                 arg(isKey ? abi::Param::KeyCache : abi::Param::ValueCache), s,
                 base, isKey);
  };
  // K and V of different head sizes: a chunk of the longer side may lie
  // past the shorter side's row, so each side's chunk is moved under its own
  // check; the loads no longer all come before the first store.
  if (cache.isAsymmetric()) {
    for (auto [i, at] : llvm::enumerate(chunks))
      for (bool isKey : sides())
        emitIfInRow(isKey, at.d0, [&, i = i, &at = at] {
          SmallVector<Value> data = load(at, isKey);
          quantize(i, isKey, data);
          store(at, isKey, data);
        });
    return;
  }
  bool withValue = cache.hasValue();
  // Every chunk's K and V are loaded before the first store: the compiler
  // cannot move a load above a store to a cache that might alias it, so the
  // order written here is the order of the memory operations.
  SmallVector<std::pair<SmallVector<Value>, SmallVector<Value>>> moved;
  for (const ChunkAddresses &at : chunks) {
    // A latent cache's K row is kv_c followed by k_pe (MlaBodies.cpp).
    SmallVector<Value> k =
        plan.writesLatent()
            ? map(loadLatentChunk(at),
                  [&](Value v) { return emitFloatCast(b, v, to); })
            : load(at, /*isKey=*/true);
    SmallVector<Value> v;
    if (withValue)
      v = load(at, /*isKey=*/false);
    moved.emplace_back(std::move(k), std::move(v));
  }
  // With the fast division each side is quantized just before its store:
  // a chunk's K is stored before V's quantization starts, which frees its
  // registers (quantizing both first leaves ptxas past 32 registers and
  // spilling on the hot path). IEEE division keeps quantizing every chunk
  // first, the order its register allocation was tuned in (the int8
  // dynamic kernel ran 3-5% slower in prefill the other way).
  if (!plan.fastDivision)
    for (auto [i, kv] : llvm::enumerate(moved)) {
      quantize(i, /*isKey=*/true, kv.first);
      if (withValue)
        quantize(i, /*isKey=*/false, kv.second);
    }
  // Only the slot's terms of the cache offsets are added here; the rest was
  // computed before the slot.
  for (auto [i, at, kv] : llvm::enumerate(chunks, moved)) {
    for (bool isKey : sides()) {
      SmallVector<Value> &data = isKey ? kv.first : kv.second;
      if (plan.fastDivision)
        quantize(i, isKey, data);
      store(at, isKey, data);
    }
  }
}

/// The reciprocal of an f32 scale (for `reciprocal = true`).
static Value reciprocal(ImplicitLocOpBuilder &b, Value s) {
  return arith::DivFOp::create(
      b, arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f)), s);
}

void KernelBuilder::emitAppendChunk(Value slot, Value t, Value c,
                                    ArrayRef<ChunkAddresses> chunks) {
  OpBuilder::InsertionGuard guard(b);
  Value block, pos;
  emitIfValidSlot(slot, block, pos);
  kv::QuantAttr quant = cache.getQuant();
  Value c64 = toI64(c);
  bool recip = quant && quant.getReciprocal();

  if (!quant || quant.getMode() == kv::ScaleMode::Static) {
    assert(!chunks.empty() && "a chunk's addresses come before its slot");
    // The scale of a granularity finer than the token (per head) differs
    // between the chunks of one thread.
    bool perHead =
        quant &&
        (quant.getGranularity() == kv::ScaleGranularity::PerHead ||
         quant.getGranularity() == kv::ScaleGranularity::PerTokenHead ||
         quant.getGranularity() == kv::ScaleGranularity::PerBlock);
    SmallVector<Value> scales;
    if (quant)
      for (const ChunkAddresses &at : perHead ? chunks : chunks.take_front())
        for (bool isKey : sides()) {
          Value s = staticScale(isKey, t, at.head, block);
          scales.push_back(recip ? reciprocal(b, s) : s);
        }
    emitAppend(chunks, block, pos, scales);
    return;
  }

  // Dynamic: this iteration owns one group (the token, or one of its heads),
  // so it sees every value its scale covers. Its chunks are spread over
  // `lanesPerGroup` lanes, each an iteration of an inner scf.parallel: lane
  // l takes chunks l, l + lanes, ..., so adjacent lanes touch adjacent
  // chunks. A first lane loop finds amax of K and V with an scf.reduce, a
  // second quantizes and stores. The host runs both loops in sequence; the
  // GPU mapping gives each lane a thread and turns the scf.reduce into warp
  // shuffles, and there the second loop's loads are the first loop's (same
  // addresses, read-only inputs), so K and V are read once and stay in
  // registers.
  int64_t lanes = plan.lanesPerGroup;
  int64_t perLane = plan.chunksPerGroup / lanes;
  Value first = mul(c64, i64(plan.chunksPerGroup));
  auto laneChunk = [&](Value lane, Value j) {
    return chunkPosition(add(first, add(toI64(lane), mul(j, i64(lanes)))));
  };
  // A lane's chunks are unrolled when few, so that its K and V stay in
  // registers from the amax to the stores; past that they would spill (a
  // token of many heads over one warp, or a group with an odd chunk count),
  // and a loop re-reads them instead (from the L1, just read).
  constexpr int64_t kMaxChunksInRegisters = 4;
  auto forEachLaneChunk =
      [&](Value lane, ValueRange init,
          llvm::function_ref<SmallVector<Value>(Value, Value, ValueRange)> body)
      -> SmallVector<Value> {
    SmallVector<Value> acc(init);
    if (perLane <= kMaxChunksInRegisters) {
      for (int64_t j = 0; j < perLane; ++j) {
        auto [head, d0] = laneChunk(lane, i64(j));
        acc = body(head, d0, acc);
      }
      return acc;
    }
    auto loop = scf::ForOp::create(b, index(0), index(perLane), index(1), acc);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(loop.getBody());
    auto [head, d0] = laneChunk(lane, toI64(loop.getInductionVar()));
    SmallVector<Value> next = body(head, d0, loop.getRegionIterArgs());
    if (!next.empty())
      scf::YieldOp::create(b, next);
    return SmallVector<Value>(loop.getResults());
  };
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  auto amaxLoop =
      scf::ParallelOp::create(b, ValueRange{index(0)}, ValueRange{index(lanes)},
                              ValueRange{index(1)}, ValueRange{zero, zero});
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(amaxLoop.getBody());
    SmallVector<Value> acc = forEachLaneChunk(
        amaxLoop.getInductionVars()[0], {zero, zero},
        [&](Value head, Value d0, ValueRange in) {
          SmallVector<Value> out(in);
          for (bool isKey : {true, false})
            for (Value x :
                 loadChunk(arg(isKey ? abi::Param::Key : abi::Param::Value),
                           sourceStrides(isKey), t, head, d0))
              out[isKey ? 0 : 1] = emitAbsMaxFinite(
                  b, emitFloatCast(b, x, b.getF32Type()), out[isKey ? 0 : 1]);
          return out;
        });
    auto reduce = scf::ReduceOp::create(b, acc);
    for (Region &region : reduce.getReductions()) {
      Block &combine = region.front();
      b.setInsertionPointToStart(&combine);
      scf::ReduceReturnOp::create(
          b, arith::MaximumFOp::create(b, combine.getArgument(0),
                                       combine.getArgument(1)));
    }
  }
  // Every lane of a GPU group stores the same scale to the same address;
  // the hardware merges those into one write.
  Value groupHead = chunkPosition(first).first;
  Value scaleIdx = toIndex(scaleCacheIndex(block, pos, groupHead));
  SmallVector<Value> scales;
  for (bool isKey : {true, false}) {
    Value s = emitDynamicScale(b, amaxLoop.getResult(isKey ? 0 : 1), quant);
    memref::StoreOp::create(
        b, s,
        arg(isKey ? abi::Param::KeyScaleCache : abi::Param::ValueScaleCache),
        ValueRange{scaleIdx});
    scales.push_back(recip ? reciprocal(b, s) : s);
  }
  auto storeLoop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)});
  b.setInsertionPointToStart(storeLoop.getBody());
  forEachLaneChunk(storeLoop.getInductionVars()[0], {},
                   [&](Value head, Value d0, ValueRange) {
                     emitAppend(chunkAddresses(t, head, d0), block, pos,
                                scales);
                     return SmallVector<Value>();
                   });
}

void KernelBuilder::emitIfInRow(bool isKey, Value d0,
                                llvm::function_ref<void()> body) {
  int64_t headDim = cache.getSideHeadDim(isKey);
  if (headDim == plan.rowDim()) {
    body();
    return;
  }
  // d0 is a multiple of the vector width, which divides both head sizes:
  // a chunk lies wholly inside the row or wholly past it.
  OpBuilder::InsertionGuard guard(b);
  auto ifOp =
      scf::IfOp::create(b, cmp(arith::CmpIPredicate::ult, d0, i64(headDim)),
                        /*withElseRegion=*/false);
  b.setInsertionPointToStart(ifOp.thenBlock());
  body();
}

void KernelBuilder::emitGatherChunk(Value slot, Value t, Value c) {
  OpBuilder::InsertionGuard guard(b);
  Value block, pos;
  emitIfValidSlot(slot, block, pos);
  auto [head, d0] = chunkPosition(toI64(c));
  kv::QuantAttr quant = cache.getQuant();
  for (bool isKey : sides())
    emitIfInRow(isKey, d0, [&, head = head, d0 = d0] {
      SmallVector<Value> q = loadCacheChunk(
          arg(isKey ? abi::Param::KeyCache : abi::Param::ValueCache),
          cacheStrides(isKey), block, head, pos, d0, isKey);
      if (quant) {
        Value s =
            quant.getMode() == kv::ScaleMode::Static
                ? staticScale(isKey, t, head, block)
                : memref::LoadOp::create(
                      b,
                      arg(isKey ? abi::Param::KeyScaleCache
                                : abi::Param::ValueScaleCache),
                      ValueRange{toIndex(scaleCacheIndex(block, pos, head))});
        q = map(q, [&](Value v) { return emitDequantize(b, v, s, quant); });
      }
      q = map(q, [&](Value v) { return emitFloatCast(b, v, plan.sourceType); });
      storeRowChunk(q, arg(isKey ? abi::Param::KeyOut : abi::Param::ValueOut),
                    sourceStrides(isKey), t, head, d0);
    });
}
