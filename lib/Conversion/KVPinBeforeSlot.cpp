//===- KVPinBeforeSlot.cpp - keep slot-independent math before the slot ---===//
//
// A decode step moves one token: its time is latency, and the slot load is
// the longest wait in it. kv-to-loops therefore computes what does not need
// the slot before loading it. LLVM's instcombine sinks such math into the
// only block that uses it, behind the slot check, where it adds to the
// critical path again. An opaque identity (a side-effecting PTX mov) is the
// one thing LLVM will not sink; ptxas still schedules it freely.
//
//===----------------------------------------------------------------------===//

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
    SmallVector<Operation *> marked;
    getOperation()->walk([&](Operation *op) {
      if (op->hasAttr(kvgen::kBeforeSlotAttrName))
        marked.push_back(op);
    });
    for (Operation *op : marked) {
      op->removeAttr(kvgen::kBeforeSlotAttrName);
      if (!nvvm)
        continue;
      // kv-to-loops marks 64-bit address terms; a mark on anything else
      // would silently go unpinned.
      if (op->getNumResults() != 1 ||
          !op->getResult(0).getType().isInteger(64)) {
        op->emitOpError("is marked kv.before_slot, but only an op with one "
                        "i64 result can be pinned");
        return signalPassFailure();
      }
      Value value = op->getResult(0);
      OpBuilder b(op->getContext());
      b.setInsertionPointAfter(op);
      auto pin = LLVM::InlineAsmOp::create(
          b, op->getLoc(), value.getType(), ValueRange{value},
          "mov.b64 $0, $1;", "=l,l", /*has_side_effects=*/true,
          /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
          /*asm_dialect=*/LLVM::AsmDialectAttr(),
          /*operand_attrs=*/ArrayAttr());
      value.replaceAllUsesExcept(pin.getResult(0), pin);
    }
  }
};
} // namespace
