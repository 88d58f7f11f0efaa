//===- KVMarkKernelNoAlias.cpp - noalias on kv kernels' buffer pointers ---===//

#include "kvgen/Plan/KernelPlan.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVMARKKERNELNOALIAS
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

namespace {
struct KVMarkKernelNoAliasPass
    : public kvgen::impl::KVMarkKernelNoAliasBase<KVMarkKernelNoAliasPass> {
  void runOnOperation() override {
    // A gpu.func kernel not yet lowered has memrefs, not pointers: marking
    // nothing would silently lose the promise.
    WalkResult unlowered = getOperation().walk([](gpu::GPUFuncOp func) {
      if (!func->hasAttr(kvgen::kLaunchAttrName))
        return WalkResult::advance();
      func.emitError("kv-mark-kernel-noalias runs on kv kernels lowered to "
                     "llvm.func (after convert-gpu-to-nvvm)");
      return WalkResult::interrupt();
    });
    if (unlowered.wasInterrupted())
      return signalPassFailure();
    getOperation().walk([](LLVM::LLVMFuncOp func) {
      // Only kernels that kv-to-loops made: their buffers are kvrt-checked.
      if (!func->hasAttr(kvgen::kLaunchAttrName))
        return;
      for (auto [i, type] : llvm::enumerate(func.getArgumentTypes()))
        if (isa<LLVM::LLVMPointerType>(type))
          func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                          UnitAttr::get(func.getContext()));
    });
  }
};
} // namespace
