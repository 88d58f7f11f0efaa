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
