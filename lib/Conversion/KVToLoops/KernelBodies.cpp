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

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

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

//===----------------------------------------------------------------------===//
// The fused prologue
//===----------------------------------------------------------------------===//

SmallVector<Value> KernelBuilder::toF32Elements(ArrayRef<Value> chunk) {
  Type f32 = b.getF32Type();
  SmallVector<Value> out;
  if (plan.vectorAccess()) {
    for (int64_t e = 0; e < plan.vectorElems; ++e)
      out.push_back(emitFloatCast(
          b, vector::ExtractOp::create(b, chunk.front(), e), f32));
    return out;
  }
  for (Value v : chunk)
    out.push_back(emitFloatCast(b, v, f32));
  return out;
}

SmallVector<Value> KernelBuilder::fromElements(ArrayRef<Value> elements,
                                               Type type) {
  if (plan.vectorAccess())
    return {vector::FromElementsOp::create(
        b, VectorType::get({plan.vectorElems}, type), elements)};
  return SmallVector<Value>(elements);
}

void KernelBuilder::emitPrologueGroup(Value slot, Value t, Value c,
                                      Value position) {
  using P = abi::Param;
  OpBuilder::InsertionGuard guard(b);
  kv::PrologueAttr prologue = plan.prologue;
  Value head = toI64(c);
  int64_t numKvHeads = cache.getNumKvHeads();
  // The token's row of the cos/sin cache. A position outside [0,
  // max_position) (one unsigned compare) would read past the cache: such a
  // token writes nothing, neither its K and V nor its Q.
  Value cosSin, inCache;
  if (prologue.hasRope()) {
    if (!position)
      position = memref::LoadOp::create(b, arg(P::RopePositions),
                                        ValueRange{toIndex(t)});
    inCache = cmp(arith::CmpIPredicate::ult, position, arg64(P::MaxPosition));
    cosSin = mul(position, i64(prologue.getRotaryDim()));
  }
  auto ifInCache = [&] {
    if (!inCache)
      return;
    auto ifOp = scf::IfOp::create(b, inCache, /*withElseRegion=*/false);
    b.setInsertionPointToStart(ifOp.thenBlock());
  };
  if (!prologue.hasQ()) {
    Value block, pos;
    emitIfValidSlot(slot, block, pos);
    ifInCache();
    emitPrologueHead(/*isQ=*/false, t, head, block, pos, cosSin);
    return;
  }
  // The K heads come first; the Q heads follow, for every token: vLLM's
  // unfused sequence rotates Q whatever the slot, padding included.
  auto kOrQ = scf::IfOp::create(
      b, cmp(arith::CmpIPredicate::ult, head, i64(numKvHeads)),
      /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(kOrQ.thenBlock());
    Value block, pos;
    emitIfValidSlot(slot, block, pos);
    ifInCache();
    emitPrologueHead(/*isQ=*/false, t, head, block, pos, cosSin);
  }
  b.setInsertionPointToStart(kOrQ.elseBlock());
  ifInCache();
  emitPrologueHead(/*isQ=*/true, t, sub(head, i64(numKvHeads)), Value(),
                   Value(), cosSin);
}

void KernelBuilder::emitPrologueHead(bool isQ, Value t, Value head, Value block,
                                     Value pos, Value cosSin) {
  using P = abi::Param;
  kv::PrologueAttr prologue = plan.prologue;
  int64_t vec = plan.vectorElems;
  int64_t lanes = plan.lanesPerGroup;
  int64_t perLane = plan.chunksPerGroup / lanes;
  Type f32 = b.getF32Type();
  auto f32Const = [&](double v) -> Value {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
  };
  Value source = arg(isQ ? P::Query : P::Key);
  SourceStrides strides =
      isQ ? SourceStrides{arg(P::QueryStrideToken), arg(P::QueryStrideHead),
                          arg(P::QueryStrideDim)}
          : sourceStrides(/*isKey=*/true);
  // Chunk j of lane l is chunk l + j * lanes of the head, as in a dynamic
  // scale's group: adjacent lanes touch adjacent chunks.
  auto laneD0 = [&](Value lane, Value j) {
    return mul(add(toI64(lane), mul(j, i64(lanes))), i64(vec));
  };
  constexpr int64_t kMaxChunksInRegisters = 4;
  auto forEachLaneChunk =
      [&](Value lane, ValueRange init,
          llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body)
      -> SmallVector<Value> {
    SmallVector<Value> acc(init);
    if (perLane <= kMaxChunksInRegisters) {
      for (int64_t j = 0; j < perLane; ++j)
        acc = body(laneD0(lane, i64(j)), acc);
      return acc;
    }
    auto loop = scf::ForOp::create(b, index(0), index(perLane), index(1), acc);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> next = body(laneD0(lane, toI64(loop.getInductionVar())),
                                   loop.getRegionIterArgs());
    if (!next.empty())
      scf::YieldOp::create(b, next);
    return SmallVector<Value>(loop.getResults());
  };
  auto loadX = [&](Value d0) {
    return toF32Elements(loadChunk(source, strides, t, head, d0));
  };

  // RMSNorm's factor 1 / sqrt(sum(x^2) / head_dim + eps). Each lane sums
  // the squares of its chunks in order, element by element; the lanes'
  // sums are then added in lane order (an scf.reduce whose combine is not
  // associative, which the GPU mapping gathers in that order), so the host
  // and the GPU add in the same order (docs/CONTRACT.md).
  Value factor;
  Value weights;
  if (prologue.hasNorm()) {
    weights = arg(isQ ? P::QNormWeight : P::KNormWeight);
    Value zero = f32Const(0.0);
    auto sumLoop = scf::ParallelOp::create(
        b, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)},
        ValueRange{zero});
    {
      OpBuilder::InsertionGuard inner(b);
      b.setInsertionPointToStart(sumLoop.getBody());
      SmallVector<Value> acc = forEachLaneChunk(
          sumLoop.getInductionVars()[0], {zero}, [&](Value d0, ValueRange in) {
            Value sum = in[0];
            for (Value x : loadX(d0))
              sum =
                  arith::AddFOp::create(b, sum, arith::MulFOp::create(b, x, x));
            return SmallVector<Value>{sum};
          });
      auto reduce = scf::ReduceOp::create(b, acc);
      Block &combine = reduce.getReductions()[0].front();
      b.setInsertionPointToStart(&combine);
      scf::ReduceReturnOp::create(
          b, arith::AddFOp::create(b, combine.getArgument(0),
                                   combine.getArgument(1)));
    }
    Value mean = arith::DivFOp::create(b, sumLoop.getResult(0),
                                       f32Const(cache.getHeadDim()));
    Value eps =
        memref::LoadOp::create(b, arg(P::Epsilon), ValueRange{index(0)});
    // IEEE sqrt and division, on the host and on the GPU (sqrt.rn.f32,
    // div.rn.f32): no rsqrt, whose approximation differs between targets.
    // The intrinsic by name, because the GPU lowering takes llvm.intr.sqrt
    // for a libdevice call.
    Value root = LLVM::CallIntrinsicOp::create(
                     b, f32, b.getStringAttr("llvm.sqrt.f32"),
                     ValueRange{arith::AddFOp::create(b, mean, eps)})
                     .getResult(0);
    factor = arith::DivFOp::create(b, f32Const(1.0), root);
  }
  // The chunk at d0 as f32, normalized: (x * factor) * w.
  SourceStrides compact{i32(0), i32(0), i32(1)};
  auto normalized = [&](Value d0) {
    SmallVector<Value> x = loadX(d0);
    if (!factor)
      return x;
    SmallVector<Value> w = toF32Elements(loadChunkAt(weights, compact, d0));
    for (size_t e = 0; e < x.size(); ++e)
      x[e] = arith::MulFOp::create(b, arith::MulFOp::create(b, x[e], factor),
                                   w[e]);
    return x;
  };
  // RoPE of the chunk at d0 (its normalized values x) at the token's row of
  // the cos/sin cache: a chunk lies wholly inside the first rotary_dim
  // elements or past them (the plan's vector width divides rotary_dim, and
  // for NeoX rotary_dim / 2).
  auto rotate = [&](Value d0, SmallVector<Value> x) -> SmallVector<Value> {
    if (!prologue.hasRope())
      return x;
    int64_t rotary = prologue.getRotaryDim();
    int64_t half = rotary / 2;
    SmallVector<Type> types(vec, f32);
    auto ifRotated = scf::IfOp::create(
        b, types, cmp(arith::CmpIPredicate::ult, d0, i64(rotary)),
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(ifRotated.elseBlock());
    scf::YieldOp::create(b, x);
    b.setInsertionPointToStart(ifRotated.thenBlock());
    Value table = arg(P::CosSinCache);
    auto load = [&](Value idx) {
      return emitFloatCast(
          b, memref::LoadOp::create(b, table, ValueRange{toIndex(idx)}), f32);
    };
    // cos of pair j, sin of pair j: the two halves of the token's row.
    auto cosSinOf = [&](Value j) {
      Value at = add(cosSin, j);
      return std::make_pair(load(at), load(add(at, i64(half))));
    };
    auto mulf = [&](Value a, Value c) {
      return arith::MulFOp::create(b, a, c);
    };
    SmallVector<Value> out;
    if (prologue.isNeox()) {
      // Element i pairs with i + rotary_dim / 2: the partner chunk is read
      // again from the source (and normalized alike), so no lane waits for
      // another.
      Value first = cmp(arith::CmpIPredicate::ult, d0, i64(half));
      Value j0 = arith::SelectOp::create(b, first, d0, sub(d0, i64(half)));
      Value partnerD0 =
          arith::SelectOp::create(b, first, add(d0, i64(half)), j0);
      SmallVector<Value> partner = normalized(partnerD0);
      for (int64_t e = 0; e < vec; ++e) {
        auto [c, s] = cosSinOf(add(j0, i64(e)));
        Value xc = mulf(x[e], c);
        Value ps = mulf(partner[e], s);
        // (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)
        out.push_back(
            arith::SelectOp::create(b, first, arith::SubFOp::create(b, xc, ps),
                                    arith::AddFOp::create(b, xc, ps)));
      }
    } else {
      // Element 2i pairs with 2i + 1, inside the chunk (d0 is even).
      Value j0 = divConst(d0, 2);
      for (int64_t e = 0; e < vec; ++e) {
        auto [c, s] = cosSinOf(add(j0, i64(e / 2)));
        Value xc = mulf(x[e], c);
        Value ps = mulf(x[e ^ 1], s);
        out.push_back(e % 2 == 0 ? Value(arith::SubFOp::create(b, xc, ps))
                                 : Value(arith::AddFOp::create(b, xc, ps)));
      }
    }
    scf::YieldOp::create(b, out);
    return SmallVector<Value>(ifRotated.getResults());
  };

  // K's and V's static scales, one per head.
  kv::QuantAttr quant = cache.getQuant();
  Value keyScale, valueScale;
  if (!isQ && quant) {
    keyScale = staticScale(/*isKey=*/true, t, head, block);
    valueScale = staticScale(/*isKey=*/false, t, head, block);
    if (quant.getReciprocal()) {
      keyScale = arith::DivFOp::create(b, f32Const(1.0), keyScale);
      valueScale = arith::DivFOp::create(b, f32Const(1.0), valueScale);
    }
  }
  auto toCache = [&](ArrayRef<Value> x, Value scale) {
    Type storage = cache.getDtype();
    return fromElements(map(x,
                            [&](Value v) {
                              return quant
                                         ? emitQuantize(b, v, scale, quant,
                                                        storage,
                                                        /*fastDivision=*/false)
                                         : emitFloatCast(b, v, storage);
                            }),
                        storage);
  };
  auto storeLoop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)});
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(storeLoop.getBody());
  forEachLaneChunk(
      storeLoop.getInductionVars()[0], {}, [&](Value d0, ValueRange) {
        // Every load of the chunk (K or Q, its partner, V) before its first
        // store.
        SmallVector<Value> x = rotate(d0, normalized(d0));
        if (isQ) {
          storeRowChunk(fromElements(map(x,
                                         [&](Value v) {
                                           return emitFloatCast(
                                               b, v, plan.sourceType);
                                         }),
                                     plan.sourceType),
                        arg(P::QOut),
                        {arg(P::QOutStrideToken), arg(P::QOutStrideHead),
                         arg(P::QOutStrideDim)},
                        t, head, d0);
          return SmallVector<Value>();
        }
        SmallVector<Value> v = toF32Elements(loadChunk(
            arg(P::Value), sourceStrides(/*isKey=*/false), t, head, d0));
        for (bool isKey : {true, false}) {
          CacheStrides s = cacheStrides(isKey);
          storeChunkAt(toCache(isKey ? x : v, isKey ? keyScale : valueScale),
                       arg(isKey ? P::KeyCache : P::ValueCache), s,
                       cacheOffset(s, block, head, pos, d0, isKey), isKey);
        }
        return SmallVector<Value>();
      });
}
