//===- MlaBodies.cpp - the source side of an MLA latent append ------------===//
//
// A latent cache's entry is `kv_c [kv_lora_rank]` followed by
// `k_pe [rope_dim]` (vLLM's concat_and_cache_mla). The append is the K-only
// append of KernelBodies.cpp with one difference: a chunk of the entry is
// read from whichever part holds it. The vector width divides both part
// sizes (KernelPlan.cpp), so a chunk is wholly in one part and one branch
// per chunk picks it; nothing depends on the sizes being 512 and 64.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"
#include "Quantize.h"

#include "kvgen/Dialect/KV/IR/LatentEntry.h"

#include <numeric>

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

SmallVector<Value> KernelBuilder::loadLatentChunk(const ChunkAddresses &at) {
  using P = abi::Param;
  int64_t rank = cache.getLatent().getKvLoraRank();
  // A part is [num_tokens, size]: a source with one head. Its offset was
  // computed before the slot (chunkAddresses).
  auto loadPart = [&](P part, P strideToken, P strideDim, Value base) {
    SourceStrides strides{arg(strideToken), i32(0), arg(strideDim)};
    return loadChunkAt(arg(part), strides, base);
  };
  SmallVector<Type> types;
  if (plan.vectorAccess())
    types.push_back(VectorType::get({plan.vectorElems}, plan.sourceType));
  else
    types.assign(plan.vectorElems, plan.sourceType);

  auto inLatent = scf::IfOp::create(
      b, types, cmp(arith::CmpIPredicate::slt, at.d0, i64(rank)),
      /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(inLatent.thenBlock());
    scf::YieldOp::create(
        b, loadPart(P::KvC, P::KvCStrideToken, P::KvCStrideDim, at.keySource));
    b.setInsertionPointToStart(inLatent.elseBlock());
    scf::YieldOp::create(
        b, loadPart(P::KPe, P::KPeStrideToken, P::KPeStrideDim, at.peSource));
  }
  return SmallVector<Value>(inLatent.getResults());
}

//===----------------------------------------------------------------------===//
// A latent entry with inline scales (#kv.inline_scales)
//===----------------------------------------------------------------------===//
//
// The entry is bytes: the quantized latent, one f32 scale per group of it,
// then the RoPE part in rope_dtype, unquantized (LatentEntry.h has the
// offsets). One iteration of the chunk loop is one group, and its lanes
// are a dynamic scale's (KernelBodies.cpp, emitAppendChunk): a first lane
// loop finds the group's amax with an scf.reduce, which the GPU mapping
// turns into a shuffle butterfly; the scale is stored once into the entry;
// a second lane loop quantizes and stores the group's chunks and then moves
// the lane's share of the RoPE chunks, which are spread over every lane of
// every group. The cache's innermost stride is 1 (kvrt's rule for every
// cache), so an entry's byte offsets are its element offsets.

/// `v` (a scalar or vector float, or a list of scalars) as the bytes of the
/// 1-byte `cacheType`, for a raw store into the entry.
static Value asBytes(ImplicitLocOpBuilder &b, ArrayRef<Value> chunk,
                     Type cacheType) {
  Value v = chunk.front();
  if (!isa<VectorType>(v.getType())) {
    auto type =
        VectorType::get({static_cast<int64_t>(chunk.size())}, v.getType());
    v = vector::FromElementsOp::create(b, type, chunk);
  }
  auto type = cast<VectorType>(v.getType());
  int64_t bytes =
      type.getNumElements() * kv::getElementBytes(type.getElementType());
  return vector::BitCastOp::create(b, VectorType::get({bytes}, cacheType), v);
}

/// The group's scale from its amax, as the description computes it: amax /
/// qmax in f32, at least min_scale (else 1 for a group of zeros, as any
/// dynamic scale), rounded up to a power of two where asked: a scale that is
/// one already stays, any other goes to the next, by its exponent bits (no
/// log2 or exp2, so that the host and the GPU agree on every bit).
static Value emitInlineScale(ImplicitLocOpBuilder &b, Value amax,
                             kv::QuantAttr quant, kv::InlineScalesAttr scales) {
  Type f32 = b.getF32Type();
  Type i32 = b.getI32Type();
  auto fconst = [&](float v) {
    return arith::ConstantOp::create(b, f32, b.getF32FloatAttr(v));
  };
  auto iconst = [&](uint32_t v) {
    return arith::ConstantOp::create(
        b, i32, b.getI32IntegerAttr(static_cast<int32_t>(v)));
  };
  Value s;
  if (FloatAttr minScale = scales.getMinScale()) {
    s = arith::DivFOp::create(b, amax, fconst(abi::quantMax(quant.getKind())));
    // amax is finite and not NaN (emitAbsMaxFinite): maximumf is max.
    s = arith::MaximumFOp::create(
        b, s, fconst(static_cast<float>(minScale.getValueAsDouble())));
  } else {
    s = emitDynamicScale(b, amax, quant);
  }
  if (!scales.getPowerOfTwo())
    return s;
  // s is positive and finite. Its significand bits are zero exactly when
  // it is a power of two (a normal one; a subnormal goes up to 2^-126).
  Value bits = arith::BitcastOp::create(b, i32, s);
  Value significand = arith::AndIOp::create(b, bits, iconst(0x007FFFFF));
  Value exponent = arith::AndIOp::create(b, bits, iconst(0x7F800000));
  Value isPower = arith::AndIOp::create(
      b,
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, significand,
                            iconst(0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::ne, exponent, iconst(0)));
  Value next = arith::AddIOp::create(b, exponent, iconst(0x00800000));
  return arith::BitcastOp::create(
      b, f32, arith::SelectOp::create(b, isPower, bits, next));
}

void KernelBuilder::emitInlineScalesGroup(Value slot, Value t, Value c) {
  using P = abi::Param;
  OpBuilder::InsertionGuard guard(b);
  Value block, pos;
  emitIfValidSlot(slot, block, pos);
  kv::LatentAttr latent = cache.getLatent();
  kv::InlineScalesAttr scales = latent.getScales();
  kv::InlineScalesLayout entry = kv::getInlineScalesLayout(cache);
  kv::QuantAttr quant = cache.getQuant();
  Type storage = cache.getDtype();
  int64_t vec = plan.vectorElems;
  int64_t lanes = plan.lanesPerGroup;
  int64_t perLane = plan.chunksPerGroup / lanes;
  Value entries = arg(P::KeyCache);
  CacheStrides cs = cacheStrides(/*isKey=*/true);
  SourceStrides kvC{arg(P::KvCStrideToken), i32(0), arg(P::KvCStrideDim)};
  SourceStrides kPe{arg(P::KPeStrideToken), i32(0), arg(P::KPeStrideDim)};
  // Byte `offset` (i32) of this slot's entry, as a cache index.
  auto at = [&](Value offset) {
    return cacheSlotOffset(cs, block, pos, offset);
  };
  // The alignment an access at a multiple of `step` bytes past the entry's
  // `start` has: the vector promise aligns an entry to a chunk of the cache
  // (vectorElems bytes); the scalar variant promises a byte.
  auto alignAt = [&](int64_t start, int64_t step, int64_t size) {
    int64_t entryAlign = plan.vectorAccess() ? vec : 1;
    int64_t a = std::gcd(std::gcd(entryAlign, start), std::gcd(step, size));
    return llvm::MaybeAlign(a);
  };
  Value c64 = toI64(c);
  Value first = mul(c64, i64(plan.chunksPerGroup));
  // The first element of lane `lane`'s chunk `j` of the group: adjacent
  // lanes touch adjacent chunks.
  auto laneD0 = [&](Value lane, int64_t j) {
    return mul(add(first, add(toI64(lane), i64(j * lanes))), i64(vec));
  };
  auto loadLatent = [&](Value d0) {
    return loadChunkAt(arg(P::KvC), kvC, sourceOffset(kvC, t, i64(0), d0));
  };

  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  auto amaxLoop =
      scf::ParallelOp::create(b, ValueRange{index(0)}, ValueRange{index(lanes)},
                              ValueRange{index(1)}, ValueRange{zero});
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(amaxLoop.getBody());
    Value lane = amaxLoop.getInductionVars()[0];
    Value acc = zero;
    for (int64_t j = 0; j < perLane; ++j)
      for (Value x : loadLatent(laneD0(lane, j)))
        acc = emitAbsMaxFinite(b, emitFloatCast(b, x, b.getF32Type()), acc);
    auto reduce = scf::ReduceOp::create(b, ValueRange{acc});
    Block &combine = reduce.getReductions().front().front();
    b.setInsertionPointToStart(&combine);
    scf::ReduceReturnOp::create(
        b, arith::MaximumFOp::create(b, combine.getArgument(0),
                                     combine.getArgument(1)));
  }
  Value scale = emitInlineScale(b, amaxLoop.getResult(0), quant, scales);
  // Every lane of a GPU group stores the same scale to the same address;
  // the hardware merges those into one write.
  vector::StoreOp::create(
      b, asBytes(b, scale, storage), entries,
      ValueRange{
          toIndex(at(lo(add(i64(entry.scalesOffset), mul(c64, i64(4))))))},
      /*nontemporal=*/false, alignAt(entry.scalesOffset, 4, 4));
  // A power of two's reciprocal is exact, and so is the product: the
  // division's bytes for a multiply.
  kv::QuantAttr divide = quant;
  if (scales.getPowerOfTwo()) {
    divide = kv::QuantAttr::get(b.getContext(), quant.getKind(),
                                quant.getGranularity(), quant.getMode(),
                                /*reciprocal=*/true);
    scale = arith::DivFOp::create(
        b, arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f)), scale);
  }

  int64_t ropeChunks = latent.getRopeDim() / vec;
  int64_t allLanes = entry.groups * lanes;
  int64_t ropeRounds = (ropeChunks + allLanes - 1) / allLanes;
  auto storeLoop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(lanes)}, ValueRange{index(1)});
  b.setInsertionPointToStart(storeLoop.getBody());
  Value lane = storeLoop.getInductionVars()[0];
  for (int64_t j = 0; j < perLane; ++j) {
    Value d0 = laneD0(lane, j);
    SmallVector<Value> q = map(loadLatent(d0), [&](Value x) {
      return emitQuantize(b, x, scale, divide, storage,
                          /*fastDivision=*/false);
    });
    // The latent's values are the entry's first bytes, d0 is their offset.
    storeChunkAt(q, entries, cs, at(lo(d0)), /*isKey=*/true);
  }
  for (int64_t k = 0; k < ropeRounds; ++k) {
    // RoPE chunk r of the token: lane l of group g takes g * lanes + l,
    // then that plus every lane of the token's groups.
    Value r = add(add(mul(c64, i64(lanes)), toI64(lane)), i64(k * allLanes));
    OpBuilder::InsertionGuard inRope(b);
    if ((k + 1) * allLanes > ropeChunks) {
      auto ifOp = scf::IfOp::create(
          b, cmp(arith::CmpIPredicate::ult, r, i64(ropeChunks)),
          /*withElseRegion=*/false);
      b.setInsertionPointToStart(ifOp.thenBlock());
    }
    Value d0 = mul(r, i64(vec));
    SmallVector<Value> pe = map(
        loadChunkAt(arg(P::KPe), kPe, sourceOffset(kPe, t, i64(0), d0)),
        [&](Value v) { return emitFloatCast(b, v, scales.getRopeDtype()); });
    int64_t chunkBytes = vec * entry.ropeBytes;
    Value offset =
        lo(add(i64(entry.ropeOffset), mul(d0, i64(entry.ropeBytes))));
    vector::StoreOp::create(b, asBytes(b, pe, storage), entries,
                            ValueRange{toIndex(at(offset))},
                            /*nontemporal=*/false,
                            alignAt(entry.ropeOffset, chunkBytes, chunkBytes));
  }
}
