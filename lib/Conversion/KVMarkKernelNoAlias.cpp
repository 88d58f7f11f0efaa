//===- KVMarkKernelNoAlias.cpp - noalias on kv kernels' buffer pointers ---===//

#include "kvgen/Conversion/KernelPlan.h"
#include "kvgen/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVMARKKERNELNOALIAS
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

namespace {
struct KVMarkKernelNoAliasPass
    : public kvgen::impl::KVMarkKernelNoAliasBase<KVMarkKernelNoAliasPass> {
  void runOnOperation() override {
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
