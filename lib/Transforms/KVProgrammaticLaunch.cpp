//===- KVProgrammaticLaunch.cpp - griddepcontrol around a kernel's reads --===//
//
// Programmatic dependent launch lets a kernel start while the previous one in
// its stream is still running: in a graph of layers, the append's launch
// latency then hides behind the producer of its K/V. That is correct only if
// the kernel reads nothing before the producer is done: griddepcontrol.wait
// blocks until the previous grid has completed and its writes are visible,
// so it goes before the first read of any input, the slot load included.
// griddepcontrol.launch_dependents, after the last read, lets the next kernel
// start launching in turn while this one stores; where it sits never affects
// correctness, because the next kernel waits for this one's completion too.
//
// The pass runs on the structured form (scf), where "before the first read"
// and "after the last read" are positions in a block, not in a CFG.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/StringExtras.h"

namespace kvgen {
#define GEN_PASS_DEF_KVPROGRAMMATICLAUNCH
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

namespace {

/// Whether `op` itself may read memory. An operation that declares no effects
/// and does not derive them from its regions is unknown: it may.
bool readsItself(Operation *op) {
  if (auto effects = dyn_cast<MemoryEffectOpInterface>(op))
    return effects.hasEffect<MemoryEffects::Read>();
  return !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() &&
         !op->hasTrait<OpTrait::IsTerminator>();
}

/// Whether `op` or anything nested in it may read memory.
bool mayRead(Operation *op) {
  return op
      ->walk([](Operation *nested) {
        return readsItself(nested) ? WalkResult::interrupt()
                                   : WalkResult::advance();
      })
      .wasInterrupted();
}

void addGridDep(OpBuilder &b, Location loc, NVVM::GridDepActionKind kind) {
  NVVM::GriddepcontrolOp::create(b, loc, kind);
}

/// An empty side-effecting asm that clobbers memory: LLVM's griddepcontrol
/// intrinsics are IntrNoMem, so nothing else stops it from hoisting a load
/// above the wait. It emits no instruction (CUDA's own
/// cudaGridDependencySynchronize is the same asm with a "memory" clobber).
void addMemoryClobber(OpBuilder &b, Location loc) {
  LLVM::InlineAsmOp::create(
      b, loc, /*res=*/TypeRange(), /*operands=*/ValueRange(), /*asm_string=*/"",
      /*constraints=*/"~{memory}", /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      /*asm_dialect=*/LLVM::AsmDialectAttr(), /*operand_attrs=*/ArrayAttr());
}

/// Puts launch_dependents after the last read in `block`: right after it,
/// or, for an scf.if, after the last read of each branch.
void triggerAfterLastRead(Block &block) {
  Operation *last = nullptr;
  for (Operation &op : llvm::reverse(block)) {
    if (mayRead(&op)) {
      last = &op;
      break;
    }
  }
  if (!last)
    return;
  if (auto branch = dyn_cast<scf::IfOp>(last)) {
    for (Region *region : {&branch.getThenRegion(), &branch.getElseRegion()})
      if (!region->empty())
        triggerAfterLastRead(region->front());
    return;
  }
  OpBuilder b(last->getContext());
  b.setInsertionPointAfter(last);
  addGridDep(b, last->getLoc(), NVVM::GridDepActionKind::launch_dependents);
}

/// The compute capability of "sm_90", "sm_90a", "sm_100f"; 0 if malformed.
unsigned computeCapability(StringRef chip) {
  if (!chip.consume_front("sm_"))
    return 0;
  StringRef digits = chip.take_while(llvm::isDigit);
  StringRef suffix = chip.drop_front(digits.size());
  unsigned value = 0;
  if (digits.empty() || digits.getAsInteger(10, value) ||
      !(suffix.empty() || suffix == "a" || suffix == "f"))
    return 0;
  return value;
}

struct KVProgrammaticLaunchPass
    : public kvgen::impl::KVProgrammaticLaunchBase<KVProgrammaticLaunchPass> {
  using Base::Base;

  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    unsigned capability = computeCapability(chip);
    if (capability == 0) {
      module.emitError() << "kv-programmatic-launch: chip '" << chip
                         << "' is not sm_<digits>[a|f]";
      return signalPassFailure();
    }
    if (capability < 90) {
      module.emitError()
          << "kv-programmatic-launch: programmatic dependent launch "
             "(griddepcontrol) needs sm_90 or newer; the target is "
          << chip;
      return signalPassFailure();
    }
    for (auto kernel : module.getOps<gpu::GPUFuncOp>()) {
      if (!kernel.isKernel() || kernel.getBody().empty())
        continue;
      WalkResult existing = kernel.walk([](NVVM::GriddepcontrolOp op) {
        op.emitError() << "kv-programmatic-launch: the kernel already has a "
                          "griddepcontrol; the pass places them and runs "
                          "once";
        return WalkResult::interrupt();
      });
      if (existing.wasInterrupted())
        return signalPassFailure();

      Block &entry = kernel.getBody().front();
      Operation *firstRead = nullptr;
      for (Operation &op : entry) {
        if (mayRead(&op) || op.hasTrait<OpTrait::IsTerminator>()) {
          firstRead = &op;
          break;
        }
      }
      // A terminator always ends the entry block.
      OpBuilder b(firstRead);
      addGridDep(b, firstRead->getLoc(), NVVM::GridDepActionKind::wait);
      addMemoryClobber(b, firstRead->getLoc());
      triggerAfterLastRead(entry);
    }
  }
};

} // namespace
