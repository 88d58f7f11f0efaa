//===- KVLoopsToGPU.cpp - map kv loop nests onto GPU blocks and threads ---===//
//
// The only GPU-specific step of kvgen: each loop-nest function becomes a
// gpu.func with the same parameters, and the scf.parallel's (token, chunk)
// induction variables become hardware indices. The loop body is cloned as it
// is, so the host and the GPU run the same index math.
//
//   token = block_id.x * tokens_per_block + thread_id.y   (guarded <
//   num_tokens) chunk = thread_id.x, thread_id.x + threads_x, ...     (<
//   chunks_per_token)
//
// The grid is ceil(num_tokens / tokens_per_block) blocks: a function of the
// shapes only, never of the slots, so the launch can be captured in a graph.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Conversion/KernelPlan.h"
#include "kvgen/Conversion/Passes.h"

#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace kvgen {
#define GEN_PASS_DEF_KVLOOPSTOGPU
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;

/// Clones `func` (a kv-to-loops function) into `gpuModule` as a kernel.
static LogicalResult mapToKernel(func::FuncOp func,
                                 gpu::GPUModuleOp gpuModule) {
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
  // loop must be exactly that, from 0 by 1, with chunks_per_token chunks.
  // The canonicalizer drops the chunk dimension when there is one chunk.
  bool hasChunkLoop = loop.getNumLoops() == 2;
  if (!hasChunkLoop && !(loop.getNumLoops() == 1 && chunks == 1))
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
  if (hasChunkLoop && !isConst(loop.getUpperBound()[1], chunks))
    return loop.emitError() << "the chunk loop's bound must be the constant "
                               "chunks_per_token = "
                            << chunks;
  if (loop.getUpperBound()[0].getParentBlock() == loop.getBody())
    return loop.emitError("the token bound must be defined before the loop");

  OpBuilder builder = OpBuilder::atBlockEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(builder, func.getLoc(), func.getName(),
                                       func.getFunctionType());
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  kernel.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
      {int32_t(threadsX), int32_t(tokensPerBlock), 1}));
  kernel->setAttr(kLaunchAttrName, launch);
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (Attribute name = func.getArgAttr(i, "kv.name"))
      kernel.setArgAttr(i, "kv.name", name);

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
  Value ty = gpu::ThreadIdOp::create(b, gpu::Dimension::y);
  Value token = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, blockId,
                            arith::ConstantIndexOp::create(b, tokensPerBlock)),
      ty);
  auto inRange = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, token, tokenBound),
      /*withElseRegion=*/false);
  b.setInsertionPointToStart(inRange.thenBlock());

  // One chunk per thread when the token fits in the block's x extent (the
  // common case: no loop, no bound check); otherwise a strided loop.
  Value chunk = tx;
  if (chunks > threadsX) {
    auto chunkLoop =
        scf::ForOp::create(b, tx, arith::ConstantIndexOp::create(b, chunks),
                           arith::ConstantIndexOp::create(b, threadsX));
    b.setInsertionPointToStart(chunkLoop.getBody());
    chunk = chunkLoop.getInductionVar();
  }
  map.map(loop.getInductionVars()[0], token);
  if (hasChunkLoop)
    map.map(loop.getInductionVars()[1], chunk);
  for (Operation &op : loop.getBody()->without_terminator())
    b.clone(op, map);

  b.setInsertionPointToEnd(&kernel.getBody().front());
  gpu::ReturnOp::create(b);
  return success();
}

namespace {
struct KVLoopsToGPUPass
    : public kvgen::impl::KVLoopsToGPUBase<KVLoopsToGPUPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs;
    // A kv loop nest is a function whose parameters carry kv.name (kv-to-loops
    // writes both); one without its launch geometry is an error, not skipped.
    for (auto func : module.getOps<func::FuncOp>()) {
      bool named = false;
      for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
        named |= static_cast<bool>(func.getArgAttr(i, "kv.name"));
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
      ok &= succeeded(mapToKernel(func, gpuModule));
    if (!ok)
      return signalPassFailure();
    for (func::FuncOp func : funcs)
      func.erase();
  }
};
} // namespace
