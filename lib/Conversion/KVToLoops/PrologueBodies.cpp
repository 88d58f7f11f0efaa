//===- PrologueBodies.cpp - the fused prologue of an append ---------------===//
//
// What one iteration of an append with a `#kv.prologue` does: one head (a K
// head with its V head, or a Q head) spread over lanes, RMSNorm's sum of
// squares over the lanes, RoPE (a NeoX pair of chunks in one lane), then the
// cache's own quantization and store (K, V) or the rounded store to q_out
// (Q). The order of operations is docs/CONTRACT.md's ("The
// fused prologue"); the slot rules and index math are KVToLoops.cpp's.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"
#include "Quantize.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

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
  int64_t chunks = plan.chunksPerGroup;
  Type f32 = b.getF32Type();
  auto f32Const = [&](double v) -> Value {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
  };
  Value source = arg(isQ ? P::Query : P::Key);
  SourceStrides strides =
      isQ ? SourceStrides{arg(P::QueryStrideToken), arg(P::QueryStrideHead),
                          arg(P::QueryStrideDim)}
          : sourceStrides(/*isKey=*/true);

  // The head's units of work (docs/CONTRACT.md, "The fused prologue"): a
  // chunk, or for NeoX a pair of chunks `(u, u + pairChunks)` for each chunk
  // `u` of the rotary part's first half, then the chunks past the rotary
  // part one a unit. A lane reads and writes only its own units' chunks, so
  // no lane reads what another writes: q_out may be query itself.
  bool neox = prologue.hasRope() && prologue.isNeox();
  int64_t pairChunks = neox ? prologue.getRotaryDim() / 2 / vec : 0;
  int64_t units = chunks - pairChunks;
  // Unit j of lane l is unit l + j * lanes, as in a dynamic scale's group:
  // adjacent lanes touch adjacent chunks. The plan's lanes need not divide
  // the units (a NeoX head's half may be odd): the last round is guarded.
  int64_t perLane = (units + lanes - 1) / lanes;
  bool guarded = units % lanes != 0;
  auto laneUnit = [&](Value lane, Value j) {
    return add(toI64(lane), mul(j, i64(lanes)));
  };
  // An scf.if whose branches `then` and `other` (null: the values `acc`)
  // yield values of acc's types; their results.
  auto ifElse = [&](Value cond, ValueRange acc,
                    llvm::function_ref<SmallVector<Value>()> then,
                    llvm::function_ref<SmallVector<Value>()> other)
      -> SmallVector<Value> {
    auto ifOp = scf::IfOp::create(b, acc.getTypes(), cond,
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard inner(b);
    for (bool isThen : {true, false}) {
      Block *block = isThen ? ifOp.thenBlock() : ifOp.elseBlock();
      b.setInsertionPointToStart(block);
      SmallVector<Value> out =
          isThen ? then() : (other ? other() : SmallVector<Value>(acc));
      if (!acc.empty())
        scf::YieldOp::create(b, out);
    }
    return SmallVector<Value>(ifOp.getResults());
  };
  // `body` on each unit of `lane`: its chunks' first elements (two for a
  // NeoX pair, the first rotated against the second; one otherwise) and the
  // values carried from the lane's previous unit.
  using UnitBody =
      llvm::function_ref<SmallVector<Value>(ArrayRef<Value>, ValueRange)>;
  auto onUnit = [&](Value u, ValueRange acc,
                    UnitBody body) -> SmallVector<Value> {
    auto pair = [&] {
      return body({mul(u, i64(vec)), mul(add(u, i64(pairChunks)), i64(vec))},
                  acc);
    };
    auto single = [&] {
      return body({mul(add(u, i64(pairChunks)), i64(vec))}, acc);
    };
    if (pairChunks == 0)
      return single();
    if (units == pairChunks)
      return pair();
    return ifElse(cmp(arith::CmpIPredicate::ult, u, i64(pairChunks)), acc, pair,
                  single);
  };
  constexpr int64_t kMaxUnitsInRegisters = 4;
  auto forEachLaneUnit = [&](Value lane, ValueRange init,
                             UnitBody body) -> SmallVector<Value> {
    auto step = [&](Value u, ValueRange acc) -> SmallVector<Value> {
      if (!guarded)
        return onUnit(u, acc, body);
      return ifElse(
          cmp(arith::CmpIPredicate::ult, u, i64(units)), acc,
          [&] { return onUnit(u, acc, body); }, nullptr);
    };
    SmallVector<Value> acc(init);
    if (perLane <= kMaxUnitsInRegisters) {
      for (int64_t j = 0; j < perLane; ++j)
        acc = step(laneUnit(lane, i64(j)), acc);
      return acc;
    }
    auto loop = scf::ForOp::create(b, index(0), index(perLane), index(1), acc);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> next =
        step(laneUnit(lane, toI64(loop.getInductionVar())),
             loop.getRegionIterArgs());
    if (!next.empty())
      scf::YieldOp::create(b, next);
    return SmallVector<Value>(loop.getResults());
  };
  auto loadX = [&](Value d0) {
    return toF32Elements(loadChunk(source, strides, t, head, d0));
  };

  // RMSNorm's factor 1 / sqrt(sum(x^2) / head_dim + eps). Each lane sums
  // the squares of its units' chunks in order, element by element; the
  // lanes' sums are then added in lane order (an scf.reduce whose combine is
  // not associative, which the GPU mapping gathers in that order), so the
  // host and the GPU add in the same order (docs/CONTRACT.md).
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
      SmallVector<Value> acc =
          forEachLaneUnit(sumLoop.getInductionVars()[0], {zero},
                          [&](ArrayRef<Value> d0s, ValueRange in) {
                            Value sum = in[0];
                            for (Value d0 : d0s)
                              for (Value x : loadX(d0))
                                sum = arith::AddFOp::create(
                                    b, sum, arith::MulFOp::create(b, x, x));
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
  // cos and sin of pair i: the two halves of the token's row of the cos/sin
  // cache.
  Value table = prologue.hasRope() ? arg(P::CosSinCache) : Value();
  auto cosSinOf = [&](Value i) {
    auto load = [&](Value idx) {
      return emitFloatCast(
          b, memref::LoadOp::create(b, table, ValueRange{toIndex(idx)}), f32);
    };
    Value at = add(cosSin, i);
    return std::make_pair(load(at),
                          load(add(at, i64(prologue.getRotaryDim() / 2))));
  };
  auto mulf = [&](Value a, Value c) { return arith::MulFOp::create(b, a, c); };
  // (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), each product rounded.
  auto rotatePair = [&](Value x1, Value x2, Value c, Value s) {
    return std::make_pair(
        Value(arith::SubFOp::create(b, mulf(x1, c), mulf(x2, s))),
        Value(arith::AddFOp::create(b, mulf(x2, c), mulf(x1, s))));
  };
  // The unit at d0s, normalized and rotated. NeoX: element e of the first
  // chunk (pair index d0 + e, below rotary_dim / 2) pairs with element e of
  // the second; the plan's vector width divides rotary_dim / 2, so both are
  // whole chunks, and a single chunk lies past rotary_dim. GPT-J: element 2i
  // pairs with 2i + 1 inside the chunk (d0 is even), which lies wholly
  // inside the first rotary_dim elements or past them.
  auto rotated = [&](ArrayRef<Value> d0s) -> SmallVector<SmallVector<Value>> {
    SmallVector<SmallVector<Value>> x;
    for (Value d0 : d0s)
      x.push_back(normalized(d0));
    if (!prologue.hasRope() || (neox && d0s.size() == 1))
      return x;
    if (neox) {
      SmallVector<Value> first, second;
      for (int64_t e = 0; e < vec; ++e) {
        auto [c, s] = cosSinOf(add(d0s[0], i64(e)));
        auto [y1, y2] = rotatePair(x[0][e], x[1][e], c, s);
        first.push_back(y1);
        second.push_back(y2);
      }
      return {first, second};
    }
    Value d0 = d0s[0];
    SmallVector<Type> types(vec, f32);
    auto ifRotated = scf::IfOp::create(
        b, types,
        cmp(arith::CmpIPredicate::ult, d0, i64(prologue.getRotaryDim())),
        /*withElseRegion=*/true);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(ifRotated.elseBlock());
    scf::YieldOp::create(b, x[0]);
    b.setInsertionPointToStart(ifRotated.thenBlock());
    Value j0 = divConst(d0, 2);
    SmallVector<Value> out(vec);
    for (int64_t e = 0; e < vec; e += 2) {
      auto [c, s] = cosSinOf(add(j0, i64(e / 2)));
      std::tie(out[e], out[e + 1]) = rotatePair(x[0][e], x[0][e + 1], c, s);
    }
    scf::YieldOp::create(b, out);
    return {SmallVector<Value>(ifRotated.getResults())};
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
  // q_out's dtype: the source's, or fp8 e4m3 with Q's own static scale
  // (q_quant): Q / q_scale, IEEE division, saturated and rounded as a
  // static fp8 cache quantizes.
  Type qType = plan.sourceType;
  Value qScale;
  if (isQ && prologue.hasQQuant()) {
    qType = b.getType<Float8E4M3FNType>();
    qScale = memref::LoadOp::create(b, arg(P::QScale), ValueRange{index(0)});
  }
  auto storeLoop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)});
  OpBuilder::InsertionGuard inner(b);
  b.setInsertionPointToStart(storeLoop.getBody());
  forEachLaneUnit(
      storeLoop.getInductionVars()[0], {},
      [&](ArrayRef<Value> d0s, ValueRange) {
        // Every load of the unit (K or Q, V) before its first store.
        SmallVector<SmallVector<Value>> x = rotated(d0s);
        if (isQ) {
          for (auto [d0, y] : llvm::zip_equal(d0s, x))
            storeRowChunk(
                fromElements(map(y,
                                 [&](Value v) {
                                   if (!qScale)
                                     return emitFloatCast(b, v, qType);
                                   // fp8's rounding saturates.
                                   return Value(arith::TruncFOp::create(
                                       b, qType,
                                       arith::DivFOp::create(b, v, qScale)));
                                 }),
                             qType),
                arg(P::QOut),
                {arg(P::QOutStrideToken), arg(P::QOutStrideHead),
                 arg(P::QOutStrideDim)},
                t, head, d0);
          return SmallVector<Value>();
        }
        SmallVector<SmallVector<Value>> v;
        for (Value d0 : d0s)
          v.push_back(toF32Elements(loadChunk(
              arg(P::Value), sourceStrides(/*isKey=*/false), t, head, d0)));
        for (auto [d0, k, vv] : llvm::zip_equal(d0s, x, v))
          for (bool isKey : {true, false}) {
            CacheStrides s = cacheStrides(isKey);
            storeChunkAt(toCache(isKey ? k : vv, isKey ? keyScale : valueScale),
                         arg(isKey ? P::KeyCache : P::ValueCache), s,
                         cacheOffset(s, block, head, pos, d0, isKey), isKey);
          }
        return SmallVector<Value>();
      });
}
