//===- KVBarePointerParams.cpp - one pointer per kv kernel buffer ---------===//
//
// The memref lowering expands each 1-D buffer into five parameters (allocated
// pointer, aligned pointer, offset, size, stride). For a kv kernel four of
// them are dead weight: kvrt always passes offset 0 and stride 1 (the kernels
// index with their own stride scalars) and nothing reads the size. Each
// 8-byte parameter costs constant-bank loads and launch bytes, which a decode
// step of one token feels. Upstream's bare-pointer calling convention would
// do this but refuses dynamically shaped memrefs, and a kv buffer's extent is
// known only at launch; so the rewrite happens here, after lowering, on the
// LLVM signature: the five become one pointer, offset and stride become the
// constants kvrt promises, the size becomes poison.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Plan/KernelPlan.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/BitVector.h"

namespace kvgen {
#define GEN_PASS_DEF_KVBAREPOINTERPARAMS
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

/// The five expanded parameters of a 1-D memref descriptor start at `i`.
static bool isDescriptorAt(TypeRange types, unsigned i) {
  if (i + 5 > types.size())
    return false;
  auto isPtr = [&](unsigned j) { return isa<LLVM::LLVMPointerType>(types[j]); };
  auto isI64 = [&](unsigned j) { return types[j].isInteger(64); };
  return isPtr(i) && isPtr(i + 1) && isI64(i + 2) && isI64(i + 3) &&
         isI64(i + 4);
}

static LogicalResult useBarePointers(LLVM::LLVMFuncOp func) {
  Block &entry = func.getBody().front();
  SmallVector<Type> oldTypes(func.getArgumentTypes());
  OpBuilder b = OpBuilder::atBlockBegin(&entry);
  Location loc = func.getLoc();
  Type i64 = b.getI64Type();
  Value zero = LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(0));
  Value one = LLVM::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(1));
  Value size = LLVM::PoisonOp::create(b, loc, i64);

  SmallVector<Type> newTypes;
  SmallVector<DictionaryAttr> newAttrs;
  SmallVector<unsigned> groups; // old index of each descriptor
  for (unsigned i = 0, e = oldTypes.size(); i < e;) {
    if (isDescriptorAt(oldTypes, i)) {
      groups.push_back(i);
      newTypes.push_back(oldTypes[i + 1]);
      newAttrs.push_back(func.getArgAttrDict(i + 1));
      i += 5;
      continue;
    }
    // Scalars are i32; a pointer outside a descriptor is not a kv kernel's.
    if (isa<LLVM::LLVMPointerType>(oldTypes[i]))
      return func.emitError() << "parameter " << i
                              << " of a kv kernel is a pointer that does not "
                                 "start an expanded 1-D memref descriptor";
    newTypes.push_back(oldTypes[i]);
    newAttrs.push_back(func.getArgAttrDict(i));
    ++i;
  }

  // The allocated pointer's parameter becomes the bare pointer (kvrt passes
  // the first element in both); the other four go.
  llvm::BitVector erase(entry.getNumArguments());
  for (unsigned oldIndex : groups) {
    BlockArgument ptr = entry.getArgument(oldIndex);
    entry.getArgument(oldIndex + 1).replaceAllUsesWith(ptr);
    entry.getArgument(oldIndex + 2).replaceAllUsesWith(zero);
    entry.getArgument(oldIndex + 3).replaceAllUsesWith(size);
    entry.getArgument(oldIndex + 4).replaceAllUsesWith(one);
    for (unsigned j = 1; j < 5; ++j)
      erase.set(oldIndex + j);
  }
  entry.eraseArguments(erase);

  auto fnType = func.getFunctionType();
  func.setFunctionType(
      LLVM::LLVMFunctionType::get(fnType.getReturnType(), newTypes));
  func.setAllArgAttrs(newAttrs);
  return success();
}

namespace {
struct KVBarePointerParamsPass
    : public kvgen::impl::KVBarePointerParamsBase<KVBarePointerParamsPass> {
  void runOnOperation() override {
    // A kv kernel not yet lowered would keep its memref parameters and
    // silently miss the ABI's one pointer per buffer.
    WalkResult unlowered = getOperation()->walk([](FunctionOpInterface func) {
      if (isa<LLVM::LLVMFuncOp>(func) || !func->hasAttr(kvgen::kLaunchAttrName))
        return WalkResult::advance();
      func->emitError() << "kv-bare-pointer-params runs on kv kernels "
                           "lowered to llvm.func (after convert-func-to-"
                           "llvm or convert-gpu-to-nvvm), got '"
                        << func->getName() << "'";
      return WalkResult::interrupt();
    });
    if (unlowered.wasInterrupted())
      return signalPassFailure();
    WalkResult result = getOperation()->walk([](LLVM::LLVMFuncOp func) {
      // Only kernels that kv-to-loops made: kvrt packs their parameters.
      if (!func->hasAttr(kvgen::kLaunchAttrName) || func.isExternal())
        return WalkResult::advance();
      return failed(useBarePointers(func)) ? WalkResult::interrupt()
                                           : WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
