//===- KVToLoops.cpp - kv kernel descriptions to loop nests ---------------===//
//
// Every layout- and dtype-specific decision of kvgen is made here, once: the
// slot decomposition, the cache offset of each layout, the vector width, the
// casts. The result is a func.func per kernel whose body is one scf.parallel
// over (token, chunk); the host target runs that nest as it is and the GPU
// target only maps its two induction variables onto hardware indices.
//
// The order inside one iteration is part of the kernel contract: the slot is
// loaded and checked first, and no K or V element is read unless the slot is
// valid. K and V are both loaded before either is stored, so two loads are in
// flight even though the compiler cannot prove that the caches do not alias
// the inputs.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/KernelPlan.h"
#include "kvgen/Conversion/Passes.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

namespace kvgen {
#define GEN_PASS_DEF_KVTOLOOPS
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;

namespace {

/// Strides of one cache, in elements (see docs/KERNEL-ABI.md).
struct CacheStrides {
  Value block, head, pos, dim;
};

/// Strides of one source tensor [num_tokens, num_kv_heads, head_dim].
struct SourceStrides {
  Value token, head, dim;
};

/// Builds the body of one kernel from its plan. Values are i64 unless named
/// otherwise; memref indices are converted at the access.
class KernelBuilder {
public:
  KernelBuilder(ImplicitLocOpBuilder &b, const KernelPlan &plan,
                func::FuncOp func)
      : b(b), plan(plan), cache(plan.cache) {
    for (auto [param, arg] : llvm::zip(plan.getParams(), func.getArguments()))
      args[static_cast<size_t>(param)] = arg;
  }

  /// Emits the whole function body.
  void build();

private:
  Value arg(abi::Param param) {
    Value v = args[static_cast<size_t>(param)];
    assert(v && "parameter not in the plan");
    return v;
  }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
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
      return arith::ShRUIOp::create(b, v, i64(llvm::Log2_64(d)));
    return arith::DivUIOp::create(b, v, i64(d));
  }
  Value remConst(Value v, int64_t d) {
    if (llvm::isPowerOf2_64(d))
      return arith::AndIOp::create(b, v, i64(d - 1));
    return arith::RemUIOp::create(b, v, i64(d));
  }
  Value loadI32AsI64(Value memref, Value idx) {
    Value v = memref::LoadOp::create(b, memref, ValueRange{toIndex(idx)});
    return arith::ExtSIOp::create(b, b.getI64Type(), v);
  }

  CacheStrides cacheStrides(bool isKey) {
    using P = abi::Param;
    if (isKey)
      return {arg(P::KeyCacheStrideBlock), arg(P::KeyCacheStrideHead),
              arg(P::KeyCacheStridePos), arg(P::KeyCacheStrideDim)};
    return {arg(P::ValueCacheStrideBlock), arg(P::ValueCacheStrideHead),
            arg(P::ValueCacheStridePos), arg(P::ValueCacheStrideDim)};
  }
  SourceStrides sourceStrides(bool isKey) {
    using P = abi::Param;
    if (isKey)
      return {arg(P::KeyStrideToken), arg(P::KeyStrideHead),
              arg(P::KeyStrideDim)};
    return {arg(P::ValueStrideToken), arg(P::ValueStrideHead),
            arg(P::ValueStrideDim)};
  }

  /// The slot of token `t` from the block table and positions (the
  /// slot_mapping rule of docs/KERNEL-ABI.md); -1 for padding tokens.
  Value emitSlotFromBlockTable(Value t);
  /// Writes chunk `c` of token `t`'s K and V at `slot`, if the slot is valid.
  void emitAppendChunk(Value slot, Value t, Value c);

  /// Offset of element (block, head, pos, d) in a cache; `isKey` selects the
  /// key or value half of layouts that differ (vllm_vectorized).
  Value cacheOffset(const CacheStrides &s, Value block, Value head, Value pos,
                    Value d, bool isKey);
  /// Whether a chunk's elements are contiguous in this cache.
  bool cacheChunkContiguous(bool isKey) const {
    return !(cache.getLayout() == kv::LayoutKind::VllmVectorized && !isKey);
  }

  /// Loads one chunk of a source tensor and converts it to the cache dtype:
  /// a vector for the vector variant, a list of scalars for the scalar one.
  SmallVector<Value> loadChunk(Value memref, const SourceStrides &s, Value t,
                               Value head, Value d0);
  void storeChunk(ArrayRef<Value> chunk, Value memref, const CacheStrides &s,
                  Value block, Value head, Value pos, Value d0, bool isKey);
  Value convert(Value v);

  ImplicitLocOpBuilder &b;
  const KernelPlan &plan;
  kv::CacheType cache;
  /// The function's arguments, indexed by abi::Param.
  std::array<Value, std::size(abi::kParams)> args{};
};

} // namespace

Value KernelBuilder::cacheOffset(const CacheStrides &s, Value block, Value head,
                                 Value pos, Value d, bool isKey) {
  Value off = add(add(mul(block, s.block), mul(head, s.head)), mul(pos, s.pos));
  if (cache.getLayout() == kv::LayoutKind::VllmVectorized && isKey) {
    // [nb, H, D/x, bs, x]: d picks a 16-byte group and an element in it.
    int64_t x = cache.getX();
    return add(off, add(mul(divConst(d, x), s.dim), remConst(d, x)));
  }
  if (plan.variant == KernelVariant::Vector && cacheChunkContiguous(isKey))
    return add(off, d); // the promise: unit dim stride
  return add(off, mul(d, s.dim));
}

Value KernelBuilder::convert(Value v) {
  Type from = getElementTypeOrSelf(v.getType());
  Type to = cache.getDtype();
  if (from == to)
    return v;
  Type target = to;
  if (auto vt = dyn_cast<VectorType>(v.getType()))
    target = VectorType::get(vt.getShape(), to);
  // f32 -> 16-bit rounds to nearest even; 16-bit -> f32 is exact.
  if (from.getIntOrFloatBitWidth() > to.getIntOrFloatBitWidth())
    return arith::TruncFOp::create(b, target, v);
  return arith::ExtFOp::create(b, target, v);
}

SmallVector<Value> KernelBuilder::loadChunk(Value memref,
                                            const SourceStrides &s, Value t,
                                            Value head, Value d0) {
  int64_t vec = plan.vectorElems;
  // The vector variant's promise includes a unit dim stride: no multiply.
  Value dimOffset = plan.variant == KernelVariant::Vector ? d0 : mul(d0, s.dim);
  Value base = add(add(mul(t, s.token), mul(head, s.head)), dimOffset);
  Type elt = plan.sourceType;
  if (plan.variant == KernelVariant::Vector) {
    // The runtime guarantees dim stride 1 and `vec`-aligned offsets here.
    auto type = VectorType::get({vec}, elt);
    Value v = vector::LoadOp::create(
        b, type, memref, ValueRange{toIndex(base)}, /*nontemporal=*/false,
        llvm::MaybeAlign(vec * kv::getElementBytes(elt)));
    return {convert(v)};
  }
  SmallVector<Value> out;
  for (int64_t e = 0; e < vec; ++e) {
    Value idx = e == 0 ? base : add(base, mul(i64(e), s.dim));
    out.push_back(
        convert(memref::LoadOp::create(b, memref, ValueRange{toIndex(idx)})));
  }
  return out;
}

void KernelBuilder::storeChunk(ArrayRef<Value> chunk, Value memref,
                               const CacheStrides &s, Value block, Value head,
                               Value pos, Value d0, bool isKey) {
  int64_t vec = plan.vectorElems;
  Value base = cacheOffset(s, block, head, pos, d0, isKey);
  if (plan.variant == KernelVariant::Vector && cacheChunkContiguous(isKey)) {
    vector::StoreOp::create(
        b, chunk.front(), memref, ValueRange{toIndex(base)},
        /*nontemporal=*/false,
        llvm::MaybeAlign(vec * kv::getElementBytes(cache.getDtype())));
    return;
  }
  // Element e of the chunk is d0 + e. A chunk never crosses an x group of
  // the vllm_vectorized key cache (vec divides x), so there consecutive
  // elements are adjacent; elsewhere they are s_dim apart.
  bool packedKey = cache.getLayout() == kv::LayoutKind::VllmVectorized && isKey;
  Value step = packedKey ? i64(1) : s.dim;
  for (int64_t e = 0; e < vec; ++e) {
    Value elt = plan.variant == KernelVariant::Vector
                    ? Value(vector::ExtractOp::create(b, chunk.front(), e))
                    : chunk[e];
    Value idx = e == 0 ? base : add(base, mul(i64(e), step));
    memref::StoreOp::create(b, elt, memref, ValueRange{toIndex(idx)});
  }
}

void KernelBuilder::emitAppendChunk(Value slot, Value t, Value c) {
  int64_t tokensPerBlock = cache.getTokensPerBlock();
  Value block = divConst(slot, tokensPerBlock);
  Value pos = remConst(slot, tokensPerBlock);
  // slot < 0 is padding; a block past the cache's end writes nothing. The
  // unsigned compare folds both: a negative slot shifts to a huge block.
  Value valid = arith::AndIOp::create(
      b, cmp(arith::CmpIPredicate::sge, slot, i64(0)),
      cmp(arith::CmpIPredicate::ult, block, arg(abi::Param::NumBlocks)));
  auto ifOp = scf::IfOp::create(b, valid, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());

  int64_t chunksPerHead = cache.getHeadDim() / plan.vectorElems;
  Value c64 = toI64(c);
  Value head = divConst(c64, chunksPerHead);
  Value d0 = mul(remConst(c64, chunksPerHead), i64(plan.vectorElems));

  SmallVector<Value> k = loadChunk(arg(abi::Param::Key),
                                   sourceStrides(/*isKey=*/true), t, head, d0);
  SmallVector<Value> v = loadChunk(arg(abi::Param::Value),
                                   sourceStrides(/*isKey=*/false), t, head, d0);
  storeChunk(k, arg(abi::Param::KeyCache), cacheStrides(/*isKey=*/true), block,
             head, pos, d0, /*isKey=*/true);
  storeChunk(v, arg(abi::Param::ValueCache), cacheStrides(/*isKey=*/false),
             block, head, pos, d0, /*isKey=*/false);
}

Value KernelBuilder::emitSlotFromBlockTable(Value t) {
  Type i64Type = b.getI64Type();
  Value qsl = arg(abi::Param::QueryStartLoc);
  Value numReqs = arg(abi::Param::NumReqs);
  Value total = loadI32AsI64(qsl, numReqs);
  Value isToken = cmp(arith::CmpIPredicate::slt, t, total);

  auto tokenIf = scf::IfOp::create(b, TypeRange{i64Type}, isToken,
                                   /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tokenIf.elseBlock());
    scf::YieldOp::create(b, ValueRange{i64(-1)});

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
                                  arg(abi::Param::MaxBlocksPerReq)));
    auto rowIf = scf::IfOp::create(b, TypeRange{i64Type}, inRow,
                                   /*withElseRegion=*/true);
    scf::YieldOp::create(b, rowIf.getResults());

    b.setInsertionPointToStart(rowIf.elseBlock());
    scf::YieldOp::create(b, ValueRange{i64(-1)});
    b.setInsertionPointToStart(rowIf.thenBlock());
    Value blockId = loadI32AsI64(
        arg(abi::Param::BlockTable),
        add(mul(req, arg(abi::Param::BlockTableStride)), blockIdx));
    Value slot = add(mul(blockId, i64(blockSize)), remConst(pos, blockSize));
    Value isBlock = cmp(arith::CmpIPredicate::sge, blockId, i64(0));
    scf::YieldOp::create(
        b, ValueRange{arith::SelectOp::create(b, isBlock, slot, i64(-1))});
  }
  return tokenIf.getResult(0);
}

void KernelBuilder::build() {
  Value zero = index(0);
  Value one = index(1);
  Value numTokens = toIndex(arg(abi::Param::NumTokens));
  Value chunks = index(plan.chunksPerToken);
  auto loop = scf::ParallelOp::create(b, ValueRange{zero, zero},
                                      ValueRange{numTokens, chunks},
                                      ValueRange{one, one});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value t = toI64(loop.getInductionVars()[0]);
  Value c = loop.getInductionVars()[1];

  switch (plan.kind) {
  case KernelKind::Append: {
    Value slot = memref::LoadOp::create(
        b, arg(abi::Param::SlotMapping), ValueRange{toIndex(t)},
        /*nontemporal=*/false, llvm::MaybeAlign(8));
    emitAppendChunk(slot, t, c);
    break;
  }
  case KernelKind::FusedAppend:
    emitAppendChunk(emitSlotFromBlockTable(t), t, c);
    break;
  case KernelKind::SlotMapping:
    memref::StoreOp::create(b, emitSlotFromBlockTable(t),
                            arg(abi::Param::SlotMapping),
                            ValueRange{toIndex(t)});
    break;
  case KernelKind::Gather:
    llvm_unreachable("gathers are built by buildGather");
  }
}

/// Element type of a buffer parameter of a plan.
static Type bufferElementType(const KernelPlan &plan, abi::ParamElement element,
                              MLIRContext *ctx) {
  switch (element) {
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
      types.push_back(MemRefType::get(
          {ShapedType::kDynamic}, bufferElementType(plan, info.element, ctx)));
    else
      types.push_back(builder.getI64Type());
  }
  auto func = func::FuncOp::create(builder, loc, plan.name,
                                   builder.getFunctionType(types, {}));
  // The launch geometry travels with the loop nest to the GPU mapping.
  func->setAttr(
      kLaunchAttrName,
      builder.getDictionaryAttr({
          builder.getNamedAttr("threads_x",
                               builder.getI64IntegerAttr(plan.threadsX)),
          builder.getNamedAttr("tokens_per_block",
                               builder.getI64IntegerAttr(plan.tokensPerBlock)),
          builder.getNamedAttr("chunks_per_token",
                               builder.getI64IntegerAttr(plan.chunksPerToken)),
      }));
  for (auto [i, param] : llvm::enumerate(params))
    func.setArgAttr(i, "kv.name", builder.getStringAttr(abi::paramName(param)));

  Block *entry = func.addEntryBlock();
  ImplicitLocOpBuilder b(loc, builder);
  b.setInsertionPointToStart(entry);
  KernelBuilder(b, plan, func).build();
  func::ReturnOp::create(b);
  return func;
}

namespace {
struct KVToLoopsPass : public kvgen::impl::KVToLoopsBase<KVToLoopsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> kernels;
    for (Operation &op : module.getBody()->getOperations())
      if (isa<kv::AppendOp, kv::SlotMappingOp, kv::FusedAppendOp>(op))
        kernels.push_back(&op);

    for (Operation *op : kernels) {
      std::vector<KernelPlan> plans = planKernels(op);
      // Quantization is verified by the dialect but not lowered yet: say so
      // rather than write an unquantized kernel for a quantized cache.
      if (plans.front().cache.getQuant()) {
        op->emitOpError()
            << "quantized caches are not lowered yet: the quant attribute is "
               "verified, but kvgen cannot generate its kernel";
        return signalPassFailure();
      }
      OpBuilder builder(op);
      for (const KernelPlan &plan : plans)
        buildKernel(builder, op->getLoc(), plan);
      op->erase();
    }
  }
};
} // namespace
