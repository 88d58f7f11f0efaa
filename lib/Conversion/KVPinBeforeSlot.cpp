//===- KVPinBeforeSlot.cpp - keep slot-independent math before the slot ---===//
//
// A decode step moves one token: its time is latency, and the slot load is
// the longest wait in it. kv-to-loops therefore computes what does not need
// the slot before loading it. LLVM's instcombine sinks such math into the
// only block that uses it, behind the slot check, where it adds to the
// critical path again. An opaque identity (a side-effecting PTX mov) is the
// one thing LLVM will not sink; ptxas still schedules it freely. The same
// identity keeps a narrowed block or token index narrow (kv.keep_narrow),
// which LLVM would otherwise widen back, having proved the narrowing
// redundant.
//
//===----------------------------------------------------------------------===//

#include "OpaqueCopy.h"

#include "kvgen/Conversion/KernelPlan.h"
#include "kvgen/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVPINBEFORESLOT
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

namespace {
struct KVPinBeforeSlotPass
    : public kvgen::impl::KVPinBeforeSlotBase<KVPinBeforeSlotPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<std::pair<Operation *, StringRef>> marked;
    getOperation()->walk([&](Operation *op) {
      for (StringRef mark :
           {kvgen::kBeforeSlotAttrName, kvgen::kKeepNarrowAttrName,
            kvgen::kKeepWideAttrName})
        if (op->hasAttr(mark)) {
          marked.push_back({op, mark});
          break;
        }
    });
    for (auto [op, mark] : marked) {
      unsigned width = mark == kvgen::kKeepNarrowAttrName ? 32 : 64;
      op->removeAttr(mark);
      if (!nvvm || (mark == kvgen::kKeepWideAttrName && !wide))
        continue;
      // kv-to-loops marks 64-bit address terms before the slot, the slot's
      // 64-bit token index and 32-bit block and token indices; a mark on
      // anything else would silently go unpinned.
      if (op->getNumResults() != 1 ||
          !op->getResult(0).getType().isInteger(width)) {
        op->emitOpError() << "is marked " << mark
                          << ", but only an op with one i" << width
                          << " result can be pinned";
        return signalPassFailure();
      }
      Value value = op->getResult(0);
      OpBuilder b(op->getContext());
      b.setInsertionPointAfter(op);
      auto pin = kvgen::createOpaqueCopy(b, op->getLoc(), value);
      value.replaceAllUsesExcept(pin.getResult(0), pin);
      // kv-to-loops marks only source offsets before the slot.
      if (mark == kvgen::kBeforeSlotAttrName)
        pin->setAttr(kvgen::kSourceOffsetPinAttrName, b.getUnitAttr());
    }
  }
};
} // namespace
