//===- PrologueMLA.cpp - the fused prologue of an MLA latent append -------===//
//
// An MLA append with a `#kv.prologue<rope = ...>` (docs/dev/PROLOGUE.md):
// RoPE on k_pe, the latent entry's last rope_dim elements, and on each head
// of q_pe, in fp32 with the token's row of the cos/sin cache; kv_c is
// stored as the plain latent append stores it. There is no norm on a latent
// cache, so nothing spans a head: one iteration of the chunk loop is one
// unit on one lane, in this order over a token (KernelPlan.cpp counts them):
//   - a chunk of kv_c, quantized as the cache says and stored;
//   - a unit of k_pe, rotated, rounded to the source dtype and stored to
//     k_pe_out, and that rounded value stored into the entry as the plain
//     latent append would store it (so the entry is mla_append(kv_c,
//     k_pe_out) bit for bit);
//   - a unit of q_pe head h, rotated, rounded and stored to q_out.
// A unit of the rope part is a chunk for GPT-J (its pairs 2i, 2i + 1 lie in
// the chunk) and a pair of chunks (i, i + rope_dim / 2) for NeoX, so a unit
// reads only the elements it writes: k_pe_out may be k_pe and q_out query.
// Everything is under the slot check and then the position check: like
// vLLM's concat_and_cache_mla_rope_fused, a padding token (or one whose
// slot is past the cache, or whose position is outside the cos/sin cache)
// writes nothing, not even q_out or k_pe_out.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"
#include "Quantize.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

void KernelBuilder::emitMlaPrologueUnit(Value slot, Value t, Value c,
                                        Value position) {
  using P = abi::Param;
  using Pred = arith::CmpIPredicate;
  OpBuilder::InsertionGuard guard(b);
  kv::PrologueAttr prologue = plan.prologue;
  kv::LatentAttr latent = cache.getLatent();
  int64_t vec = plan.vectorElems;
  int64_t rank = latent.getKvLoraRank();
  int64_t rope = latent.getRopeDim(); // rotary_dim (the verifier's rule)
  int64_t latentChunks = rank / vec;
  bool neox = prologue.isNeox();
  int64_t ropeChunks = rope / vec;
  int64_t pairChunks = neox ? ropeChunks / 2 : 0;
  int64_t ropeUnits = ropeChunks - pairChunks;
  Type f32 = b.getF32Type();
  Type storage = cache.getDtype();
  kv::QuantAttr quant = cache.getQuant();

  Value u = toI64(c);
  Value block, pos;
  emitIfValidSlot(slot, block, pos);
  if (!position)
    position = memref::LoadOp::create(b, arg(P::RopePositions),
                                      ValueRange{toIndex(t)});
  // One unsigned compare: a negative position is above max_position too.
  auto inCache =
      scf::IfOp::create(b, cmp(Pred::ult, position, arg64(P::MaxPosition)),
                        /*withElseRegion=*/false);
  b.setInsertionPointToStart(inCache.thenBlock());
  Value cosSin = mul(position, i64(rope));

  // The entry's chunk at d0 (of the whole entry), from f32 values:
  // quantized with the latent's static scale, or cast.
  CacheStrides cs = cacheStrides(/*isKey=*/true);
  auto storeEntry = [&](ArrayRef<Value> x, Value d0) {
    Value scale;
    if (quant) {
      scale = staticScale(/*isKey=*/true, t, i64(0), block);
      if (quant.getReciprocal())
        scale = arith::DivFOp::create(
            b, arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f)), scale);
    }
    SmallVector<Value> q = map(x, [&](Value v) {
      return quant ? emitQuantize(b, v, scale, quant, storage,
                                  /*fastDivision=*/false)
                   : emitFloatCast(b, v, storage);
    });
    storeChunkAt(fromElements(q, storage), arg(P::KeyCache), cs,
                 cacheOffset(cs, block, i64(0), pos, d0, /*isKey=*/true),
                 /*isKey=*/true);
  };

  // (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) in f32, each product rounded, as
  // the other prologue rotates (PrologueBodies.cpp).
  Value table = arg(P::CosSinCache);
  auto cosSinOf = [&](Value i) {
    auto load = [&](Value idx) {
      return emitFloatCast(
          b, memref::LoadOp::create(b, table, ValueRange{toIndex(idx)}), f32);
    };
    Value at = add(cosSin, i);
    return std::make_pair(load(at), load(add(at, i64(rope / 2))));
  };
  auto mulf = [&](Value a, Value s) { return arith::MulFOp::create(b, a, s); };
  auto rotatePair = [&](Value x1, Value x2, Value cv, Value sv) {
    return std::make_pair(
        Value(arith::SubFOp::create(b, mulf(x1, cv), mulf(x2, sv))),
        Value(arith::AddFOp::create(b, mulf(x2, cv), mulf(x1, sv))));
  };
  // Unit r of a rope part (k_pe, or q_pe's head `head`) read from `source`
  // with `in` strides, rotated, rounded to the source dtype, stored to `out`
  // with `outStrides`; returns each chunk's first element and its rounded
  // values (as f32) for the entry.
  auto rotateUnit = [&](Value r, Value source, const SourceStrides &in,
                        Value out, const SourceStrides &outStrides,
                        Value head) {
    SmallVector<Value> d0s{mul(r, i64(vec))};
    if (neox)
      d0s.push_back(mul(add(r, i64(pairChunks)), i64(vec)));
    // Every load of the unit before its first store (in place).
    SmallVector<SmallVector<Value>> x;
    for (Value d0 : d0s)
      x.push_back(toF32Elements(loadChunk(source, in, t, head, d0)));
    SmallVector<SmallVector<Value>> y(d0s.size(), SmallVector<Value>(vec));
    if (neox) {
      for (int64_t e = 0; e < vec; ++e) {
        auto [cv, sv] = cosSinOf(add(d0s[0], i64(e)));
        std::tie(y[0][e], y[1][e]) = rotatePair(x[0][e], x[1][e], cv, sv);
      }
    } else {
      Value j0 = divConst(d0s[0], 2);
      for (int64_t e = 0; e < vec; e += 2) {
        auto [cv, sv] = cosSinOf(add(j0, i64(e / 2)));
        std::tie(y[0][e], y[0][e + 1]) =
            rotatePair(x[0][e], x[0][e + 1], cv, sv);
      }
    }
    SmallVector<SmallVector<Value>> rounded;
    for (auto [d0, values] : llvm::zip_equal(d0s, y)) {
      SmallVector<Value> src = map(values, [&](Value v) {
        return emitFloatCast(b, v, plan.sourceType);
      });
      storeRowChunk(fromElements(src, plan.sourceType), out, outStrides, t,
                    head, d0);
      rounded.push_back(
          map(src, [&](Value v) { return emitFloatCast(b, v, f32); }));
    }
    return std::make_pair(d0s, rounded);
  };

  auto isLatent = scf::IfOp::create(b, cmp(Pred::ult, u, i64(latentChunks)),
                                    /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(isLatent.thenBlock());
    Value d0 = mul(u, i64(vec));
    SourceStrides kvC{arg(P::KvCStrideToken), i32(0), arg(P::KvCStrideDim)};
    SmallVector<Value> chunk = loadChunk(arg(P::KvC), kvC, t, i64(0), d0);
    if (!quant) {
      // As the plain latent append: the source cast to the cache's dtype.
      SmallVector<Value> cast =
          map(chunk, [&](Value v) { return emitFloatCast(b, v, storage); });
      storeChunkAt(cast, arg(P::KeyCache), cs,
                   cacheOffset(cs, block, i64(0), pos, d0, /*isKey=*/true),
                   /*isKey=*/true);
    } else {
      storeEntry(toF32Elements(chunk), d0);
    }
  }
  b.setInsertionPointToStart(isLatent.elseBlock());
  Value ru = sub(u, i64(latentChunks));
  auto isK = scf::IfOp::create(b, cmp(Pred::ult, ru, i64(ropeUnits)),
                               /*withElseRegion=*/!!prologue.hasQ());
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(isK.thenBlock());
    SourceStrides kPe{arg(P::KPeStrideToken), i32(0), arg(P::KPeStrideDim)};
    SourceStrides kPeOut{arg(P::KPeOutStrideToken), i32(0),
                         arg(P::KPeOutStrideDim)};
    auto [d0s, rounded] =
        rotateUnit(ru, arg(P::KPe), kPe, arg(P::KPeOut), kPeOut, i64(0));
    for (auto [d0, values] : llvm::zip_equal(d0s, rounded))
      storeEntry(values, add(d0, i64(rank)));
  }
  if (!prologue.hasQ())
    return;
  // The Q units past the K units (the plan's count ends with them).
  b.setInsertionPointToStart(isK.elseBlock());
  Value qu = sub(ru, i64(ropeUnits));
  Value head = divConst(qu, ropeUnits);
  Value r = remConst(qu, ropeUnits);
  rotateUnit(
      r, arg(P::Query),
      {arg(P::QueryStrideToken), arg(P::QueryStrideHead),
       arg(P::QueryStrideDim)},
      arg(P::QOut),
      {arg(P::QOutStrideToken), arg(P::QOutStrideHead), arg(P::QOutStrideDim)},
      head);
}
