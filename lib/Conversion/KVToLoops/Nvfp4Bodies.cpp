//===- Nvfp4Bodies.cpp - the append of an NVFP4 cache ---------------------===//
//
// One iteration of the chunk loop is one group of 16 values of one head, of
// K and of V, in one thread (docs/CONTRACT.md, "NVFP4"): the group's amax,
// its candidate scales and the packing of its values all need the 16
// values, which a thread holds in two 16-byte chunks of a 16-bit source. The
// thread stores the group's eight bytes of e2m1 values (one 8-byte store in
// the vector variant, eight byte stores in the scalar one) and its e4m3
// scale byte, where the page puts them (Nvfp4.h): the values at the row's
// place among the block's values, the scale among the block's scales,
// linear or swizzled as the side's description says.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"
#include "Quantize.h"
#include "kvgen/Dialect/KV/IR/Nvfp4.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

void KernelBuilder::emitNvfp4Iteration(Value slot, Value t, Value c) {
  using P = abi::Param;
  OpBuilder::InsertionGuard guard(b);
  kv::Nvfp4Attr nvfp4 = cache.getNvfp4();
  kv::Nvfp4Page page = kv::getNvfp4Page(cache);
  constexpr int64_t kGroup = kv::kNvfp4GroupSize;
  int64_t groupsPerHead = cache.getHeadDim() / kGroup;
  int64_t vec = plan.vectorElems;
  // Group c of the token: head c / groups, group j of the head's row.
  Value c32 = lo(toI64(c));
  Value head32 = divConst(c32, groupsPerHead);
  Value j32 = remConst(c32, groupsPerHead);
  Value head = ext(head32);
  Value d0 = ext(mul(j32, i32(kGroup)));
  bool fourOverSix = nvfp4.getSearch() == kv::Nvfp4ScaleSearch::FourOverSix;

  Value block, pos;
  emitIfValidSlot(slot, block, pos);
  Value pos32 = lo(pos);
  // The row's index among the block's rows, i32 (a block's bytes are
  // below 2^31, kvrt's limit for any cache block).
  Value row = page.headMajor ? add(mul(head32, i32(page.blockSize)), pos32)
                             : add(mul(pos32, i32(page.numKvHeads)), head32);
  for (bool isKey : {true, false}) {
    SourceStrides s = sourceStrides(isKey);
    Value source = arg(isKey ? P::Key : P::Value);
    SmallVector<Value> elems;
    for (int64_t k = 0; k < kGroup / vec; ++k)
      llvm::append_range(
          elems,
          toF32Elements(loadChunk(source, s, t, head, add(d0, i64(k * vec)))));
    Value x = vector::FromElementsOp::create(
        b, VectorType::get({kGroup}, b.getF32Type()), elems);
    auto [g, invG] =
        emitNvfp4LaunchScales(b, staticScale(isKey, t, head, block));
    auto [scale, q] = kvgen::emitNvfp4Group(b, x, g, invG, fourOverSix);

    Value memref = arg(isKey ? P::KeyCache : P::ValueCache);
    CacheStrides cs = cacheStrides(isKey);
    Value blockBase = wide(lo(block), cs.block);
    auto at = [&](Value inBlock) {
      return toIndex(add(blockBase, ext(inBlock)));
    };
    // Two codes a byte, element 2k in the low nibble: widened to bytes and
    // combined, not bitcast from a vector of i4 (which the NVPTX back end
    // takes apart through a stack slot).
    Value codes = arith::ExtUIOp::create(
        b, VectorType::get({kGroup}, b.getI8Type()),
        arith::BitcastOp::create(
            b, VectorType::get({kGroup}, b.getIntegerType(4)), q));
    SmallVector<int64_t> evens, odds;
    for (int64_t e = 0; e < kGroup; e += 2) {
      evens.push_back(e);
      odds.push_back(e + 1);
    }
    Value low = vector::ShuffleOp::create(b, codes, codes, evens);
    Value high = vector::ShuffleOp::create(b, codes, codes, odds);
    Value four = arith::ConstantOp::create(
        b, DenseElementsAttr::get(VectorType::get({kGroup / 2}, b.getI8Type()),
                                  b.getI8IntegerAttr(4)));
    Value bytes =
        arith::OrIOp::create(b, low, arith::ShLIOp::create(b, high, four));
    Value dataOffset =
        add(mul(row, i32(page.rowDataBytes)), mul(j32, i32(kGroup / 2)));
    if (plan.vectorAccess()) {
      // The block is aligned to the vector promise and a row's values are
      // head_dim / 2 bytes, a multiple of 8: the group's 8 bytes are
      // 8-byte aligned.
      vector::StoreOp::create(b, bytes, memref, ValueRange{at(dataOffset)},
                              /*nontemporal=*/false, llvm::MaybeAlign(8));
    } else {
      for (int64_t e = 0; e < kGroup / 2; ++e)
        memref::StoreOp::create(b, vector::ExtractOp::create(b, bytes, e),
                                memref,
                                ValueRange{at(add(dataOffset, i32(e)))});
    }

    // The scale's (position, index) in the side's layout: swizzled, the 4x4
    // tiles of (position, scale) (Nvfp4Page::scaleOffset).
    Value scaleRow = row, scaleIndex = j32;
    kv::Nvfp4ScaleLayout layout =
        isKey ? nvfp4.getKScales() : nvfp4.getVScales();
    if (layout == kv::Nvfp4ScaleLayout::Swizzled) {
      int64_t group = page.rowScales / 4;
      Value tilePos =
          add(mul(divConst(pos32, 4), i32(4)), divConst(j32, group));
      scaleIndex = add(mul(remConst(j32, group), i32(4)), remConst(pos32, 4));
      scaleRow = page.headMajor
                     ? add(mul(head32, i32(page.blockSize)), tilePos)
                     : add(mul(tilePos, i32(page.numKvHeads)), head32);
    }
    Value scaleOffset =
        add(i32(page.dataBytes()),
            add(mul(scaleRow, i32(page.rowScales)), scaleIndex));
    memref::StoreOp::create(b,
                            arith::BitcastOp::create(b, b.getI8Type(), scale),
                            memref, ValueRange{at(scaleOffset)});
  }
}
