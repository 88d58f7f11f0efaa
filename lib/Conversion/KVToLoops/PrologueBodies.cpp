//===- PrologueBodies.cpp - the fused prologue of an append ---------------===//
//
// What one iteration of an append with a `#kv.prologue` does: one head (a K
// head with its V head, or a Q head) spread over lanes, RMSNorm's sum of
// squares over the lanes, RoPE with the partner element read again from the
// source, then the cache's own quantization and store (K, V) or the rounded
// store to q_out (Q). The order of operations is docs/CONTRACT.md's ("The
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
