//===- KVMarkKernelNoAlias.cpp - noalias on kv kernels' buffer pointers ---===//

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Plan/KernelPlan.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVMARKKERNELNOALIAS
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

/// The kernel's parameter names in argument order (kv-loops-to-gpu keeps
/// them there, as convert-gpu-to-nvvm drops kv.name from the arguments).
static constexpr llvm::StringLiteral kParamNamesAttrName =
    kvgen::kv::KVDialect::ParamNamesAttrHelper::getNameStr();

/// Whether a buffer may share its elements with another buffer of the same
/// launch: `q_out` may be `query` itself (the prologue rotates Q in place;
/// kvrt accepts exactly that alias). A store through `q_out` then writes
/// what `query` reads, so neither pointer may be `noalias` (LLVM's rules
/// make that undefined), nor may `query` be read through the non-coherent
/// cache, which `noalias` would let LLVM choose (kv-pin-addresses marks
/// loads invariant only through `noalias` parameters).
/// Likewise an MLA prologue's `k_pe_out` may be `k_pe` (vLLM rotates k_pe in
/// place); `k_pe` of a kernel without `k_pe_out` keeps noalias.
static bool mayShareWithAnother(StringAttr name, bool hasKPeOut) {
  using kvgen::abi::Param;
  return name.getValue() == kvgen::abi::paramName(Param::Query) ||
         name.getValue() == kvgen::abi::paramName(Param::QOut) ||
         (hasKPeOut &&
          (name.getValue() == kvgen::abi::paramName(Param::KPe) ||
           name.getValue() == kvgen::abi::paramName(Param::KPeOut)));
}

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
    WalkResult marked = getOperation().walk([](LLVM::LLVMFuncOp func) {
      // Only kernels that kv-to-loops made: their buffers are kvrt-checked.
      if (!func->hasAttr(kvgen::kLaunchAttrName))
        return WalkResult::advance();
      // The names, where the kernel carries them (kv-loops-to-gpu writes
      // them; a hand-written kernel may not), one per argument now that
      // kv-bare-pointer-params has made each buffer one pointer.
      auto names = func->getAttrOfType<ArrayAttr>(kParamNamesAttrName);
      if (names && names.size() != func.getNumArguments()) {
        func.emitError() << kParamNamesAttrName << " names " << names.size()
                         << " parameters, the kernel has "
                         << func.getNumArguments()
                         << " (kv-mark-kernel-noalias runs after "
                            "kv-bare-pointer-params)";
        return WalkResult::interrupt();
      }
      bool hasKPeOut =
          names && llvm::any_of(names, [](Attribute name) {
            return cast<StringAttr>(name).getValue() ==
                   kvgen::abi::paramName(kvgen::abi::Param::KPeOut);
          });
      for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
        if (!isa<LLVM::LLVMPointerType>(type))
          continue;
        if (names && mayShareWithAnother(cast<StringAttr>(names[i]), hasKPeOut))
          continue;
        func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                        UnitAttr::get(func.getContext()));
      }
      return WalkResult::advance();
    });
    if (marked.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
