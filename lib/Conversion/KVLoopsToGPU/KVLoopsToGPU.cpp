//===- KVLoopsToGPU.cpp - map kv loop nests onto GPU blocks and threads ---===//
//
// The only GPU-specific step of kvgen: each loop-nest function becomes a
// gpu.func with the same parameters, and the scf.parallel's (token, chunk)
// induction variables become hardware indices. The loop body is cloned as it
// is, so the host and the GPU run the same index math.
//
//   token = block_id.x * tokens_per_block + thread_id.y  (< num_tokens)
//   chunk = thread_id.x, thread_id.x + threads_x, ...     (< chunks_per_token)
//
// The grid is ceil(num_tokens / tokens_per_block) blocks: a function of the
// shapes only, never of the slots, so the launch can be captured in a graph.
//
// A dynamic scale's iteration is a group of chunks whose amax must be known
// before the first store. kv-to-loops spells its lanes as inner scf.parallel
// loops, which the host runs in sequence; here they become `lanes` adjacent
// threads (chunk = thread_id.x / lanes, lane = thread_id.x mod lanes), and
// the amax loop's scf.reduce a butterfly of warp shuffles. This is the only
// place that knows threads exist, so the cross-thread reduction belongs
// here, and the host keeps the plain sequential loop that needs no shuffles.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/Passes.h"
#include "kvgen/Plan/KernelPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/MathExtras.h"

namespace kvgen {
#define GEN_PASS_DEF_KVLOOPSTOGPU
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;

/// The lane count of the lane loops nested in `loop`'s body (1 if none):
/// they must all run from 0 by 1 to the same constant power of two of at
/// most a warp, dividing threads_x, so that an iteration's lanes are
/// adjacent threads of one warp.
static FailureOr<int64_t> laneCount(scf::ParallelOp loop, int64_t threadsX) {
  int64_t lanes = 1;
  WalkResult walk = loop.getBody()->walk([&](scf::ParallelOp inner) {
    std::optional<int64_t> lb = getConstantIntValue(inner.getLowerBound()[0]);
    std::optional<int64_t> ub = getConstantIntValue(inner.getUpperBound()[0]);
    std::optional<int64_t> step = getConstantIntValue(inner.getStep()[0]);
    if (inner.getNumLoops() != 1 || lb != 0 || step != 1 || !ub ||
        !llvm::isPowerOf2_64(*ub) || *ub > 32 || threadsX % *ub != 0 ||
        (lanes != 1 && *ub != lanes)) {
      inner.emitError() << "a lane loop runs from 0 by 1 to a power of two "
                           "of at most 32 that divides threads_x = "
                        << threadsX << ", the same in one kernel";
      return WalkResult::interrupt();
    }
    lanes = *ub;
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return lanes;
}

/// Whether a reduction's combine is a maximum or minimum, whose result does
/// not depend on the order it combines in.
static bool isOrderFree(Block &combine) {
  auto ops = combine.without_terminator();
  if (!llvm::hasSingleElement(ops))
    return false;
  return isa<arith::MaximumFOp, arith::MinimumFOp, arith::MaxNumFOp,
             arith::MinNumFOp, arith::MaxSIOp, arith::MinSIOp, arith::MaxUIOp,
             arith::MinUIOp>(*ops.begin());
}

/// Replaces the lane loop `inner` by its body for thread `lane` of `lanes`.
/// A maximum (a dynamic scale's amax) becomes log2(lanes) butterfly steps of
/// shfl.sync over the lanes of this iteration (their bits of the warp as the
/// member mask: other iterations in the same warp may be on another branch,
/// e.g. a padding token), then is combined with the loop's initial value.
/// Any other combine (the prologue's fp32 sum of squares) is not
/// associative: each lane gathers every lane's value (shfl.idx) and combines
/// them from the initial value in lane order, which is the order the host
/// runs the lane loop in, so both give the same bits.
static void inlineLaneLoop(ImplicitLocOpBuilder &b, scf::ParallelOp inner,
                           Value lane, int64_t lanes) {
  b.setInsertionPoint(inner);
  IRMapping map;
  map.map(inner.getInductionVars()[0], lane);
  for (Operation &op : inner.getBody()->without_terminator())
    b.clone(op, map);
  auto reduce = cast<scf::ReduceOp>(inner.getBody()->getTerminator());
  Value memberMask, firstLane;
  Type i32 = b.getI32Type();
  auto c32 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i32, v); };
  if (reduce.getNumOperands() != 0) {
    memberMask = c32(-1);
    firstLane = c32(0);
    if (lanes < 32) {
      Value laneId = arith::IndexCastOp::create(
          b, i32, gpu::LaneIdOp::create(b, /*upper_bound=*/nullptr));
      firstLane = arith::AndIOp::create(b, laneId, c32(32 - lanes));
      memberMask =
          arith::ShLIOp::create(b, c32((int64_t(1) << lanes) - 1), firstLane);
    }
  }
  auto combine = [&](Block &body, Value x, Value y) {
    IRMapping args;
    args.map(body.getArgument(0), x);
    args.map(body.getArgument(1), y);
    for (Operation &op : body.without_terminator())
      b.clone(op, args);
    return args.lookupOrDefault(
        cast<scf::ReduceReturnOp>(body.getTerminator()).getResult());
  };
  SmallVector<Value> results;
  for (auto [i, operand] : llvm::enumerate(reduce.getOperands())) {
    Block &body = reduce.getReductions()[i].front();
    Value x = map.lookupOrDefault(operand);
    if (!isOrderFree(body)) {
      Value acc = inner.getInitVals()[i];
      for (int64_t from = 0; from < lanes; ++from) {
        Value y = NVVM::ShflOp::create(
            b, x.getType(), memberMask, x,
            arith::AddIOp::create(b, firstLane, c32(from)), c32(0x1f),
            NVVM::ShflKind::idx, /*return_value_and_is_valid=*/nullptr);
        acc = combine(body, acc, y);
      }
      results.push_back(acc);
      continue;
    }
    for (int64_t offset = 1; offset < lanes; offset *= 2) {
      Value y = NVVM::ShflOp::create(
          b, x.getType(), memberMask, x,
          arith::ConstantIntOp::create(b, b.getI32Type(), offset),
          arith::ConstantIntOp::create(b, b.getI32Type(), 0x1f),
          NVVM::ShflKind::bfly, /*return_value_and_is_valid=*/nullptr);
      x = combine(body, x, y);
    }
    results.push_back(combine(body, inner.getInitVals()[i], x));
  }
  inner.replaceAllUsesWith(results);
  inner.erase();
}

/// Clones `func` (a kv-to-loops function) into `gpuModule` as a kernel.
static LogicalResult mapToKernel(func::FuncOp func, gpu::GPUModuleOp gpuModule,
                                 bool elideTokenCheck) {
  auto launch = func->getAttrOfType<kv::LaunchAttr>(kLaunchAttrName);
  if (!launch)
    return func.emitError()
           << "a kv loop nest needs 'kv.launch = #kv.launch<threads_x = ..., "
              "tokens_per_block = ..., chunks_per_token = ...>'";
  int64_t threadsX = launch.getThreadsX();
  int64_t tokensPerBlock = launch.getTokensPerBlock();
  int64_t chunks = launch.getChunksPerToken();

  if (func.getBody().empty())
    return func.emitError("a kv loop nest needs a body");
  Block &entry = func.getBody().front();
  auto loops = entry.getOps<scf::ParallelOp>();
  if (!llvm::hasSingleElement(loops))
    return func.emitError("expected one scf.parallel in a kv loop nest");
  scf::ParallelOp loop = *loops.begin();
  // The mapping replaces the loop by (token, chunk) hardware indices: the
  // loop must be exactly that, from 0 by 1. The chunk dimension has one
  // iteration per chunk, or per group of chunks spread over lanes (dynamic
  // scales); the canonicalizer drops it when there is one iteration.
  bool hasChunkLoop = loop.getNumLoops() == 2;
  if (!hasChunkLoop && loop.getNumLoops() != 1)
    return loop.emitError() << "expected a 2-d scf.parallel over (token, "
                               "chunk), got "
                            << loop.getNumLoops() << " induction variables";
  auto isConst = [](Value v, int64_t want) {
    std::optional<int64_t> c = getConstantIntValue(v);
    return c && *c == want;
  };
  for (unsigned d = 0, e = loop.getNumLoops(); d < e; ++d)
    if (!isConst(loop.getLowerBound()[d], 0) || !isConst(loop.getStep()[d], 1))
      return loop.emitError("a kv loop nest runs from 0 by 1");
  int64_t iterations = 1;
  if (hasChunkLoop) {
    std::optional<int64_t> bound = getConstantIntValue(loop.getUpperBound()[1]);
    if (!bound)
      return loop.emitError("the chunk loop's bound must be a constant");
    iterations = *bound;
  }
  if (loop.getUpperBound()[0].getParentBlock() == loop.getBody())
    return loop.emitError("the token bound must be defined before the loop");
  FailureOr<int64_t> lanes = laneCount(loop, threadsX);
  if (failed(lanes))
    return failure();
  // Every lane of every iteration takes an equal share of a token's chunks,
  // and every thread of the x extent has a lane.
  int64_t laneSlots = iterations * *lanes;
  if (chunks % laneSlots != 0)
    return loop.emitError()
           << "the chunk loop's " << iterations << " iterations x " << *lanes
           << " lanes must divide chunks_per_token = " << chunks;
  if (threadsX > laneSlots)
    return loop.emitError()
           << "threads_x " << threadsX << " is more than the chunk loop's "
           << iterations << " iterations x " << *lanes
           << " lanes: threads would have no chunk";

  OpBuilder builder = OpBuilder::atBlockEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(builder, func.getLoc(), func.getName(),
                                       func.getFunctionType());
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  kernel.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
      {int32_t(threadsX), int32_t(tokensPerBlock), 1}));
  kernel->setAttr(kLaunchAttrName, launch);
  // The plan's occupancy bound becomes ptxas's .minnctapersm.
  if (IntegerAttr minBlocks = func->getContext()
                                  ->getLoadedDialect<kv::KVDialect>()
                                  ->getMinBlocksPerSmAttrHelper()
                                  .getAttr(func))
    kernel->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                    builder.getI32IntegerAttr(int32_t(minBlocks.getInt())));
  SmallVector<Attribute> names;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (Attribute name =
            func.getArgAttr(i, kv::KVDialect::getParamNameAttrName())) {
      kernel.setArgAttr(i, kv::KVDialect::getParamNameAttrName(), name);
      names.push_back(name);
    }
  // convert-gpu-to-nvvm drops the argument attributes it does not know,
  // kv.name among them; the names, in argument order, ride on the kernel
  // itself for kv-mark-kernel-noalias, which must tell query and q_out apart
  // from the other buffers.
  if (names.size() == func.getNumArguments())
    kernel->setAttr(kv::KVDialect::ParamNamesAttrHelper::getNameStr(),
                    builder.getArrayAttr(names));

  IRMapping map;
  map.map(func.getArguments(), kernel.getArguments());
  ImplicitLocOpBuilder b(func.getLoc(), builder);
  b.setInsertionPointToStart(&kernel.getBody().front());
  for (Operation &op : entry.without_terminator()) {
    if (&op == loop.getOperation())
      break;
    b.clone(op, map);
  }

  Value tokenBound = map.lookupOrDefault(loop.getUpperBound()[0]);
  Value blockId = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tx = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value token = blockId;
  if (tokensPerBlock > 1)
    token = arith::AddIOp::create(
        b,
        arith::MulIOp::create(
            b, blockId, arith::ConstantIndexOp::create(b, tokensPerBlock)),
        gpu::ThreadIdOp::create(b, gpu::Dimension::y));
  // With one token a block, the grid of the launch ABI has exactly
  // num_tokens blocks and the bound holds by construction; the test then
  // only delays the slot load behind a parameter load (0.03-0.07 us of a
  // decode call in a graph, docs/dev/TUNING.md).
  if (tokensPerBlock > 1 || !elideTokenCheck) {
    auto inRange = scf::IfOp::create(
        b,
        arith::CmpIOp::create(b, arith::CmpIPredicate::ult, token, tokenBound),
        /*withElseRegion=*/false);
    b.setInsertionPointToStart(inRange.thenBlock());
  }

  // One chunk per thread (or per `lanes` threads) when the token fits in the
  // block's x extent (the common case: no loop, no bound check); otherwise a
  // strided loop. A chunk's lanes share its token and trip count, so they
  // reach the shuffles together.
  Value chunk = tx, lane;
  if (*lanes > 1) {
    Value l = arith::ConstantIndexOp::create(b, *lanes);
    chunk = arith::DivUIOp::create(b, tx, l);
    lane = arith::RemUIOp::create(b, tx, l);
  }
  int64_t iterationsInX = threadsX / *lanes;
  if (iterations > iterationsInX) {
    auto chunkLoop = scf::ForOp::create(
        b, chunk, arith::ConstantIndexOp::create(b, iterations),
        arith::ConstantIndexOp::create(b, iterationsInX));
    b.setInsertionPointToStart(chunkLoop.getBody());
    chunk = chunkLoop.getInductionVar();
  }
  map.map(loop.getInductionVars()[0], token);
  if (hasChunkLoop)
    map.map(loop.getInductionVars()[1], chunk);
  for (Operation &op : loop.getBody()->without_terminator())
    b.clone(op, map);

  SmallVector<scf::ParallelOp> laneLoops;
  kernel.walk([&](scf::ParallelOp inner) { laneLoops.push_back(inner); });
  for (scf::ParallelOp inner : laneLoops)
    inlineLaneLoop(b, inner, lane, *lanes);

  b.setInsertionPointToEnd(&kernel.getBody().front());
  gpu::ReturnOp::create(b);
  return success();
}

namespace {
struct KVLoopsToGPUPass
    : public kvgen::impl::KVLoopsToGPUBase<KVLoopsToGPUPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs;
    // A kv loop nest is a function whose parameters carry kv.name (kv-to-loops
    // writes both); one without its launch geometry is an error, not skipped.
    for (auto func : module.getOps<func::FuncOp>()) {
      bool named = false;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        named |= static_cast<bool>(
            func.getArgAttr(i, kv::KVDialect::getParamNameAttrName()));
      if (func->hasAttr(kLaunchAttrName) || named)
        funcs.push_back(func);
    }
    if (funcs.empty())
      return;

    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(module.getContext()));
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto gpuModule =
        gpu::GPUModuleOp::create(builder, module.getLoc(), "kv_kernels");
    bool ok = true;
    for (func::FuncOp func : funcs)
      ok &= succeeded(mapToKernel(func, gpuModule, elideTokenCheck));
    if (!ok)
      return signalPassFailure();
    for (func::FuncOp func : funcs)
      func.erase();
  }
};
} // namespace
