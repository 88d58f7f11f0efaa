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

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVPINBEFORESLOT
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

namespace {
struct KVPinBeforeSlotPass
    : public kvgen::impl::KVPinBeforeSlotBase<KVPinBeforeSlotPass> {
  using Base::Base;

  void runOnOperation() override {
    auto *kvDialect = getContext().getLoadedDialect<kvgen::kv::KVDialect>();
    auto beforeSlot = kvDialect->getBeforeSlotAttrHelper();
    auto keepNarrow = kvDialect->getKeepNarrowAttrHelper();
    auto keepWide = kvDialect->getKeepWideAttrHelper();
    auto sourceOffsetPin = kvDialect->getSourceOffsetPinAttrHelper();
    // The marks are the kv dialect's, verified (KVDialect.cpp) to be on an
    // op of one result of the width they keep.
    struct Marked {
      Operation *op;
      bool sourceOffset, narrow, wideIndex;
    };
    SmallVector<Marked> marked;
    getOperation()->walk([&](Operation *op) {
      Marked m{op, beforeSlot.isAttrPresent(op), keepNarrow.isAttrPresent(op),
               keepWide.isAttrPresent(op)};
      if (m.sourceOffset || m.narrow || m.wideIndex)
        marked.push_back(m);
    });
    for (const Marked &m : marked) {
      Operation *op = m.op;
      for (auto present : {std::make_pair(m.sourceOffset, beforeSlot.getName()),
                           std::make_pair(m.narrow, keepNarrow.getName()),
                           std::make_pair(m.wideIndex, keepWide.getName())})
        if (present.first)
          op->removeAttr(present.second);
      if (!nvvm || (m.wideIndex && !wide && !m.sourceOffset && !m.narrow))
        continue;
      unsigned width = m.narrow ? 32 : 64;
      // The verifier holds this for a module that passed it; a pass that
      // runs without verification still gets a diagnostic, not a bad pin.
      if (op->getNumResults() != 1 ||
          !op->getResult(0).getType().isInteger(width)) {
        op->emitOpError() << "is marked "
                          << (m.sourceOffset ? beforeSlot.getName()
                              : m.narrow     ? keepNarrow.getName()
                                             : keepWide.getName())
                                 .getValue()
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
      if (m.sourceOffset)
        sourceOffsetPin.setAttr(pin, b.getUnitAttr());
    }
  }
};
} // namespace
