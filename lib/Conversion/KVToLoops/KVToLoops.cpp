//===- KVToLoops.cpp - kv kernel descriptions to loop nests ---------------===//
//
// Every layout- and dtype-specific decision of kvgen is made here, once: the
// slot decomposition, the cache offset of each layout, the vector width, the
// casts. The result is a func.func per kernel whose body is one scf.parallel
// over (token, chunk); the host target runs that nest as it is and the GPU
// target only maps its two induction variables onto hardware indices.
//
// The builder's declaration is in KernelBuilder.h; the append and gather
// bodies (casts, quantization) are in KernelBodies.cpp.
//
// The order inside one iteration is part of the kernel contract: the slot is
// loaded and checked first, and no K or V element is read unless the slot is
// valid. What needs no slot (the source offsets, the head and dim terms of
// the cache offsets) is computed before the slot load, so that it overlaps
// the load's latency; only the block and position terms follow the check. K and
// V are both loaded before either is stored, so two loads are in flight even
// though the compiler cannot prove that the caches do not alias the inputs.
//
//===----------------------------------------------------------------------===//

#include "KernelBuilder.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

namespace kvgen {
#define GEN_PASS_DEF_KVTOLOOPS
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;
using namespace kvgen::detail;

Value KernelBuilder::cacheChunkOffset(const CacheStrides &s, Value head,
                                      Value d, bool isKey) {
  // Within one block: i32 (see the class comment).
  Value off = mul(lo(head), s.head);
  Value d32 = lo(d);
  if (cacheSideHasX(isKey)) {
    // [..., D/x, ..., x]: d picks a 16-byte group and an element in it.
    int64_t x = cache.getX();
    return add(off, add(mul(divConst(d32, x), s.dim), remConst(d32, x)));
  }
  if (plan.vectorAccess() && cacheChunkContiguous(isKey))
    return add(off, d32); // the promise: unit dim stride
  return add(off, mul(d32, s.dim));
}

Value KernelBuilder::sourceOffset(const SourceStrides &s, Value t, Value head,
                                  Value d0) {
  // The vector variant's promise includes a unit dim stride: no multiply.
  Value d32 = lo(d0);
  Value dimOffset = plan.vectorAccess() ? d32 : mul(d32, s.dim);
  // Within one token: i32; the token's term is the wide product.
  return add(wide(lo(t), s.token), ext(add(mul(lo(head), s.head), dimOffset)));
}

ChunkAddresses KernelBuilder::chunkAddresses(Value t, Value head, Value d0) {
  ChunkAddresses at;
  at.t = t;
  at.head = head;
  at.d0 = d0;
  if (plan.writesLatent()) {
    // Both parts' offsets: which part holds the chunk is decided at the
    // load, and each is a few integer ops that overlap the slot load.
    using P = abi::Param;
    int64_t rank = cache.getLatent().getKvLoraRank();
    at.keySource = sourceOffset(
        {arg(P::KvCStrideToken), i32(0), arg(P::KvCStrideDim)}, t, i64(0), d0);
    at.peSource =
        sourceOffset({arg(P::KPeStrideToken), i32(0), arg(P::KPeStrideDim)}, t,
                     i64(0), sub(d0, i64(rank)));
  } else {
    at.keySource = sourceOffset(sourceStrides(/*isKey=*/true), t, head, d0);
  }
  at.keyCache =
      cacheChunkOffset(cacheStrides(/*isKey=*/true), head, d0, /*isKey=*/true);
  if (cache.hasValue()) {
    at.valueSource = sourceOffset(sourceStrides(/*isKey=*/false), t, head, d0);
    at.valueCache = cacheChunkOffset(cacheStrides(/*isKey=*/false), head, d0,
                                     /*isKey=*/false);
  }
  return at;
}

SmallVector<Value>
KernelBuilder::loadChunkAt(Value memref, const SourceStrides &s, Value base) {
  int64_t vec = plan.vectorElems;
  Type elt = cast<MemRefType>(memref.getType()).getElementType();
  if (plan.vectorAccess()) {
    // The runtime guarantees dim stride 1 and `vec`-aligned offsets here.
    auto type = VectorType::get({vec}, elt);
    return {vector::LoadOp::create(
        b, type, memref, ValueRange{toIndex(base)}, /*nontemporal=*/false,
        llvm::MaybeAlign(vec * kv::getElementBytes(elt)))};
  }
  SmallVector<Value> out;
  for (int64_t e = 0; e < vec; ++e) {
    Value idx = e == 0 ? base : add(base, ext(mul(i32(e), s.dim)));
    out.push_back(memref::LoadOp::create(b, memref, ValueRange{toIndex(idx)}));
  }
  return out;
}

void KernelBuilder::storeRowChunk(ArrayRef<Value> chunk, Value memref,
                                  const SourceStrides &s, Value t, Value head,
                                  Value d0) {
  int64_t vec = plan.vectorElems;
  Value base = sourceOffset(s, t, head, d0);
  if (plan.vectorAccess()) {
    vector::StoreOp::create(
        b, chunk.front(), memref, ValueRange{toIndex(base)},
        /*nontemporal=*/false,
        llvm::MaybeAlign(
            vec * kv::getElementBytes(
                      cast<MemRefType>(memref.getType()).getElementType())));
    return;
  }
  for (int64_t e = 0; e < vec; ++e) {
    Value idx = e == 0 ? base : add(base, ext(mul(i32(e), s.dim)));
    memref::StoreOp::create(b, chunk[e], memref, ValueRange{toIndex(idx)});
  }
}

void KernelBuilder::storeChunkAt(ArrayRef<Value> chunk, Value memref,
                                 const CacheStrides &s, Value base,
                                 bool isKey) {
  int64_t vec = plan.vectorElems;
  if (plan.vectorAccess() && cacheChunkContiguous(isKey)) {
    vector::StoreOp::create(
        b, chunk.front(), memref, ValueRange{toIndex(base)},
        /*nontemporal=*/false,
        llvm::MaybeAlign(vec * kv::getElementBytes(cache.getDtype())));
    return;
  }
  // Element e of the chunk is d0 + e. A chunk never crosses an x group of a
  // side with x (vec divides x), so there consecutive elements are
  // adjacent; elsewhere they are s_dim apart.
  Value step = cacheSideHasX(isKey) ? i32(1) : s.dim;
  for (int64_t e = 0; e < vec; ++e) {
    Value elt = plan.vectorAccess()
                    ? Value(vector::ExtractOp::create(b, chunk.front(), e))
                    : chunk[e];
    Value idx = e == 0 ? base : add(base, ext(mul(i32(e), step)));
    memref::StoreOp::create(b, elt, memref, ValueRange{toIndex(idx)});
  }
}

SmallVector<Value>
KernelBuilder::loadCacheChunk(Value memref, const CacheStrides &s, Value block,
                              Value head, Value pos, Value d0, bool isKey) {
  int64_t vec = plan.vectorElems;
  Type elt = cache.getDtype();
  Value base = cacheOffset(s, block, head, pos, d0, isKey);
  if (plan.vectorAccess() && cacheChunkContiguous(isKey))
    return {vector::LoadOp::create(
        b, VectorType::get({vec}, elt), memref, ValueRange{toIndex(base)},
        /*nontemporal=*/false,
        llvm::MaybeAlign(vec * kv::getElementBytes(elt)))};
  Value step = cacheSideHasX(isKey) ? i32(1) : s.dim;
  SmallVector<Value> out;
  for (int64_t e = 0; e < vec; ++e) {
    Value idx = e == 0 ? base : add(base, ext(mul(i32(e), step)));
    out.push_back(memref::LoadOp::create(b, memref, ValueRange{toIndex(idx)}));
  }
  if (plan.vectorAccess())
    return {
        vector::FromElementsOp::create(b, VectorType::get({vec}, elt), out)};
  return out;
}

Value KernelBuilder::emitSlotFromBlockTable(Value t, Value *position) {
  Type i64Type = b.getI64Type();
  // With `position`, each branch yields the position after the slot.
  SmallVector<Type> types{i64Type};
  if (position)
    types.push_back(i64Type);
  auto yield = [&](Value slot, Value pos) {
    SmallVector<Value> values{slot};
    if (position)
      values.push_back(pos);
    scf::YieldOp::create(b, values);
  };
  Value qsl = arg(abi::Param::QueryStartLoc);
  Value numReqs = arg64(abi::Param::NumReqs);
  Value total = loadI32AsI64(qsl, numReqs);
  Value isToken = cmp(arith::CmpIPredicate::slt, t, total);

  auto tokenIf = scf::IfOp::create(b, types, isToken,
                                   /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tokenIf.elseBlock());
    yield(i64(-1), i64(-1));

    // The request r with query_start_loc[r] <= t < query_start_loc[r + 1]:
    // binary search, keeping qsl[lo] <= t < qsl[hi].
    b.setInsertionPointToStart(tokenIf.thenBlock());
    auto search = scf::WhileOp::create(
        b, TypeRange{i64Type, i64Type}, ValueRange{i64(0), numReqs},
        [&](OpBuilder &nb, Location loc, ValueRange iv) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value more =
              arith::CmpIOp::create(ib, arith::CmpIPredicate::sgt,
                                    arith::SubIOp::create(ib, iv[1], iv[0]),
                                    arith::ConstantIntOp::create(ib, 1, 64));
          scf::ConditionOp::create(ib, more, iv);
        },
        [&](OpBuilder &nb, Location loc, ValueRange iv) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value mid = arith::ShRUIOp::create(
              ib, arith::AddIOp::create(ib, iv[0], iv[1]),
              arith::ConstantIntOp::create(ib, 1, 64));
          Value start = arith::ExtSIOp::create(
              ib, ib.getI64Type(),
              memref::LoadOp::create(ib, qsl,
                                     ValueRange{arith::IndexCastOp::create(
                                         ib, ib.getIndexType(), mid)}));
          Value le =
              arith::CmpIOp::create(ib, arith::CmpIPredicate::sle, start, t);
          scf::YieldOp::create(
              ib, ValueRange{arith::SelectOp::create(ib, le, mid, iv[0]),
                             arith::SelectOp::create(ib, le, iv[1], mid)});
        });
    Value req = search.getResult(0);
    // Pre-increment rule: the first new token goes at context_len.
    Value offset = sub(t, loadI32AsI64(qsl, req));
    Value pos = add(loadI32AsI64(arg(abi::Param::ContextLens), req), offset);
    int64_t blockSize = cache.getBlockSize();
    Value blockIdx = divConst(pos, blockSize);
    Value inRow =
        arith::AndIOp::create(b, cmp(arith::CmpIPredicate::sge, pos, i64(0)),
                              cmp(arith::CmpIPredicate::slt, blockIdx,
                                  arg64(abi::Param::MaxBlocksPerReq)));
    auto rowIf = scf::IfOp::create(b, types, inRow,
                                   /*withElseRegion=*/true);
    scf::YieldOp::create(b, rowIf.getResults());

    // A position past the block-table row has no slot, but is the token's.
    b.setInsertionPointToStart(rowIf.elseBlock());
    yield(i64(-1), pos);
    b.setInsertionPointToStart(rowIf.thenBlock());
    Value blockId = loadI32AsI64(
        arg(abi::Param::BlockTable),
        add(mul(req, arg64(abi::Param::BlockTableStride)), blockIdx));
    Value slot = add(mul(blockId, i64(blockSize)), remConst(pos, blockSize));
    Value isBlock = cmp(arith::CmpIPredicate::sge, blockId, i64(0));
    yield(arith::SelectOp::create(b, isBlock, slot, i64(-1)), pos);
  }
  if (position)
    *position = tokenIf.getResult(1);
  return tokenIf.getResult(0);
}

Value KernelBuilder::emitSlotFromPageTable(Value t) {
  using P = abi::Param;
  Type i64Type = b.getI64Type();
  using Pred = arith::CmpIPredicate;
  // batch_indices and positions have num_tokens entries: t indexes both.
  Value batch = loadI32AsI64(arg(P::BatchIndices), t);
  Value pos = loadI32AsI64(arg(P::Positions), t);
  // A batch index outside [0, batch_size) names no row of kv_indptr: one
  // unsigned compare (a negative one is above batch_size as unsigned).
  Value inBatch = cmp(Pred::ult, batch, arg64(P::BatchSize));
  auto batchIf = scf::IfOp::create(b, TypeRange{i64Type}, inBatch,
                                   /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(batchIf.elseBlock());
  scf::YieldOp::create(b, ValueRange{i64(-1)});

  b.setInsertionPointToStart(batchIf.thenBlock());
  Value start = loadI32AsI64(arg(P::KvIndptr), batch);
  Value end = loadI32AsI64(arg(P::KvIndptr), add(batch, i64(1)));
  int64_t blockSize = cache.getBlockSize();
  // The page's index in kv_indices. Every term is an i64 of i32 values: no
  // overflow. A negative position, a range that starts before kv_indices or
  // ends past it, or a page past the request's last one reads no page.
  Value column = add(start, divConst(pos, blockSize));
  Value inRow = cmp(Pred::sge, pos, i64(0));
  for (Value bound :
       {cmp(Pred::sge, start, i64(0)),
        cmp(Pred::sle, end, arg64(P::NumIndices)), cmp(Pred::slt, column, end)})
    inRow = arith::AndIOp::create(b, inRow, bound);
  auto rowIf = scf::IfOp::create(b, TypeRange{i64Type}, inRow,
                                 /*withElseRegion=*/true);
  scf::YieldOp::create(b, rowIf.getResults());

  b.setInsertionPointToStart(rowIf.elseBlock());
  scf::YieldOp::create(b, ValueRange{i64(-1)});
  b.setInsertionPointToStart(rowIf.thenBlock());
  Value page = loadI32AsI64(arg(P::KvIndices), column);
  Value slot = add(mul(page, i64(blockSize)), remConst(pos, blockSize));
  // A negative page id is padding; one past the cache is caught with the
  // slot (emitIfValidSlot).
  Value isPage = cmp(Pred::sge, page, i64(0));
  scf::YieldOp::create(
      b, ValueRange{arith::SelectOp::create(b, isPage, slot, i64(-1))});
  return batchIf.getResult(0);
}

Value KernelBuilder::loadSlot(Value t32) {
  // With one token per block, its own zero extension of the token index,
  // kept wide (kv-pin-before-slot): the slot's address is then the index
  // shifted and added, which ptxas computes once per block in the uniform
  // datapath, not a mul.wide.u32 of it. With several tokens per block the
  // index differs between threads and that gains nothing: the MLA latent
  // append (eight tokens per block) measured 0.02 us slower per decode call
  // with the mark (docs/dev/TUNING.md).
  Value t = ext(t32);
  if (plan.tokensPerBlock == 1)
    mark(kvDialect.getKeepWideAttrHelper(), t);
  return memref::LoadOp::create(b, arg(abi::Param::SlotMapping),
                                ValueRange{toIndex(t)},
                                /*nontemporal=*/false, llvm::MaybeAlign(8));
}

Value KernelBuilder::emitSlot(Value t, Value t32) {
  switch (plan.traits().slot) {
  case abi::KindSlot::Mapping:
    return loadSlot(t32);
  case abi::KindSlot::BlockTable:
    return emitSlotFromBlockTable(t);
  case abi::KindSlot::PageTable:
    return emitSlotFromPageTable(t);
  }
  llvm_unreachable("a slot rule KernelKinds.def does not have");
}

void KernelBuilder::build() {
  Value zero = index(0);
  Value one = index(1);
  Value numTokens = arith::IndexCastUIOp::create(b, b.getIndexType(),
                                                 arg(abi::Param::NumTokens));
  Value chunks = index(plan.getIterationsPerToken());
  auto loop = scf::ParallelOp::create(b, ValueRange{zero, zero},
                                      ValueRange{numTokens, chunks},
                                      ValueRange{one, one});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  // The token index, below num_tokens < 2^31, as a zero-extended i32. With
  // one token per block it is the block index, which LLVM keeps a zero
  // extension; a sum of block and thread indices it would fold back into
  // i64 math, so that one is pinned narrow.
  Value t32 = arith::IndexCastUIOp::create(b, b.getI32Type(),
                                           loop.getInductionVars()[0]);
  if (plan.tokensPerBlock > 1)
    mark(kvDialect.getKeepNarrowAttrHelper(), t32);
  Value t = ext(t32);
  Value c = loop.getInductionVars()[1];

  switch (plan.traits().rows) {
  case abi::KindRows::Into: {
    // The address math that does not need the slot comes first, so that it
    // runs while the slot is loaded (or computed); a dynamic scale's group
    // walks its chunks in loops after the check instead.
    // A latent entry with inline scales: one group an iteration.
    if (plan.latentGroups > 0) {
      emitInlineScalesGroup(emitSlot(t, t32), t, c);
      break;
    }
    // An NVFP4 cache: one group of 16 values (of K and of V) an iteration.
    if (cache.getNvfp4()) {
      emitNvfp4Iteration(emitSlot(t, t32), t, c);
      break;
    }
    SmallVector<ChunkAddresses> chunks;
    kv::QuantAttr quant = cache.getQuant();
    // A prologue's iteration is a head, whose chunks are walked in lane
    // loops after the check, as a dynamic scale's group is.
    if (plan.prologue) {
      // RoPE of a block-table kind takes the slot rule's position.
      Value position;
      Value slot = plan.slotFromBlockTable() && plan.prologue.hasRope()
                       ? emitSlotFromBlockTable(t, &position)
                       : emitSlot(t, t32);
      if (plan.writesLatent())
        emitMlaPrologueUnit(slot, t, c, position);
      else
        emitPrologueGroup(slot, t, c, position);
      break;
    }
    if (!quant || quant.getMode() == kv::ScaleMode::Static) {
      for (int64_t j = 0; j < plan.chunksPerThread; ++j) {
        Value cj = toI64(c);
        if (j > 0)
          cj = add(cj, i64(j * plan.getIterationsPerToken()));
        auto [head, d0] = chunkPosition(cj);
        ChunkAddresses &at = chunks.emplace_back(chunkAddresses(t, head, d0));
        // LLVM would sink the source offsets behind the slot check
        // (kv-pin-before-slot); the loads right after the check need them.
        // The cache offsets are left to sink: the stores wait for the
        // loaded data anyway, and holding them across the loads (and a
        // quantized kernel's divisions) costs registers. A K-only cache has
        // no value terms.
        for (Value v : {at.keySource, at.valueSource, at.peSource})
          if (v && v.getDefiningOp())
            mark(kvDialect.getBeforeSlotAttrHelper(), v);
      }
    }
    emitAppendChunk(emitSlot(t, t32), t, c, chunks);
    break;
  }
  case abi::KindRows::None: // slot_mapping: the slots themselves
    memref::StoreOp::create(b, emitSlot(t, t32), arg(abi::Param::SlotMapping),
                            ValueRange{toIndex(t)});
    break;
  case abi::KindRows::OutOf:
    emitGatherChunk(emitSlot(t, t32), t, c);
    break;
  }
}

/// Element type of a buffer parameter of a plan.
static Type bufferElementType(const KernelPlan &plan, abi::Param param,
                              MLIRContext *ctx) {
  // The prologue's two buffers whose dtype its description picks
  // (include/kvgen/ABI/Params.def).
  if (param == abi::Param::QOut && plan.prologue && plan.prologue.hasQQuant())
    return Float8E4M3FNType::get(ctx);
  if (param == abi::Param::CosSinCache && plan.prologue &&
      plan.prologue.hasF32CosSin())
    return Float32Type::get(ctx);
  switch (abi::paramInfo(param).element) {
  case abi::ParamElement::Source:
  case abi::ParamElement::Output:
    return plan.sourceType;
  case abi::ParamElement::Cache:
    return plan.cache.getDtype();
  case abi::ParamElement::F32:
    return Float32Type::get(ctx);
  case abi::ParamElement::I32:
    return IntegerType::get(ctx, 32);
  case abi::ParamElement::I64:
  case abi::ParamElement::None:
    break;
  }
  return IntegerType::get(ctx, 64);
}

static func::FuncOp buildKernel(OpBuilder &builder, Location loc,
                                const KernelPlan &plan) {
  MLIRContext *ctx = builder.getContext();
  std::vector<abi::Param> params = plan.getParams();
  SmallVector<Type> types;
  for (abi::Param param : params) {
    const abi::ParamInfo &info = abi::paramInfo(param);
    if (info.role == abi::ParamRole::Buffer)
      types.push_back(MemRefType::get({ShapedType::kDynamic},
                                      bufferElementType(plan, param, ctx)));
    else
      types.push_back(builder.getI32Type());
  }
  auto func = func::FuncOp::create(builder, loc, plan.name,
                                   builder.getFunctionType(types, {}));
  // The launch geometry travels with the loop nest to the GPU mapping.
  func->setAttr(kLaunchAttrName,
                kv::LaunchAttr::get(builder.getContext(), plan.threadsX,
                                    plan.tokensPerBlock, plan.chunksPerToken));
  if (plan.minBlocksPerSM > 0)
    ctx->getLoadedDialect<kv::KVDialect>()
        ->getMinBlocksPerSmAttrHelper()
        .setAttr(func, builder.getI64IntegerAttr(plan.minBlocksPerSM));
  for (auto [i, param] : llvm::enumerate(params))
    func.setArgAttr(i, kv::KVDialect::getParamNameAttrName(),
                    builder.getStringAttr(abi::paramName(param)));

  Block *entry = func.addEntryBlock();
  ImplicitLocOpBuilder b(loc, builder);
  b.setInsertionPointToStart(entry);
  KernelBuilder(b, plan, func).build();
  func::ReturnOp::create(b);
  return func;
}

namespace {
struct KVToLoopsPass : public kvgen::impl::KVToLoopsBase<KVToLoopsPass> {
  using Base::Base;

  // The pass's options are protected members of its base.
  template <typename Options>
  friend PlanOptions kvgen::planOptionsFrom(const Options &);
  PlanOptions getPlanOptions() const { return planOptionsFrom(*this); }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    PlanOptions options = getPlanOptions();
    if (std::optional<std::string> why = checkPlanOptions(options)) {
      module.emitError("kv-to-loops: ") << *why;
      return signalPassFailure();
    }
    SmallVector<Operation *> kernels;
    for (Operation &op : module.getBody()->getOperations())
      if (kv::getKernelOpInfo(&op))
        kernels.push_back(&op);

    for (Operation *op : kernels) {
      std::vector<KernelPlan> plans = planKernels(op, options);
      OpBuilder builder(op);
      for (const KernelPlan &plan : plans)
        buildKernel(builder, op->getLoc(), plan);
      op->erase();
    }
  }
};
} // namespace
