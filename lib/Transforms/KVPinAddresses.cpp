//===- KVPinAddresses.cpp - a source address's token row, then its element ===//
//
// kv-pin-before-slot keeps each source offset, `t * stride_token + within`,
// before the slot load; each load after the check then adds it to its
// buffer's pointer. Computed that way, the block index takes part in a
// product with a per-thread term, so ptxas reads it into a vector register
// and builds the slot's address on the vector pipeline as well. Computing
// the token's row first (`base + t * stride_token`, the same for every
// thread of a block when a block holds one token) and then the element in
// it lets ptxas keep the block index, the slot's address and the rows in
// the uniform datapath, as Triton's append does; in a graph of decode
// appends this took the bf16 append from 1.009 to 1.003 of Triton's time
// at 128 tokens (docs/dev/TUNING.md). Both addresses are pinned (the same
// opaque PTX `mov` as the offsets): LLVM would otherwise fold the two steps
// back into one offset, or sink them behind the slot check.
//
// The token's term and the term within the token are told apart by what they
// are (the latter a zero extension of an i32, or a constant), not by their
// order in the sum.
//
// A kernel whose launch puts several tokens in a block keeps its pinned
// offsets: its row differs between threads, so there is no uniform work to
// gain, and the wide paged append measured 4% slower cold at 4096 tokens
// with the split alone.
//
//===----------------------------------------------------------------------===//

#include "OpaqueCopy.h"

#include "kvgen/Plan/KernelPlan.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {
#define GEN_PASS_DEF_KVPINADDRESSES
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;

/// The opaque copy of kv-pin-before-slot, of a pointer.
static Value pinPointer(OpBuilder &b, Location loc, Value pointer) {
  return kvgen::createOpaqueCopy(b, loc, pointer).getResult(0);
}

/// The accesses through a pinned offset, if every use is a GEP of a kernel
/// parameter by that offset alone (an element access of a vector or scalar
/// load); otherwise none, and the offset stays pinned as it is.
static SmallVector<LLVM::GEPOp> addressesOf(Value pinned) {
  SmallVector<LLVM::GEPOp> geps;
  for (Operation *user : pinned.getUsers()) {
    auto gep = dyn_cast<LLVM::GEPOp>(user);
    if (!gep || gep.getIndices().size() != 1 ||
        gep.getDynamicIndices().size() != 1 ||
        gep.getDynamicIndices().front() != pinned ||
        !isa<BlockArgument>(gep.getBase()))
      return {};
    geps.push_back(gep);
  }
  return geps;
}

/// Whether `term` is a source offset's offset within its token: kv-to-loops
/// computes that in 32 bits and zero-extends it (KernelBuilder::sourceOffset),
/// and the canonicalizer folds the extension of a constant.
static bool isWithinToken(Value term) {
  return term.getDefiningOp<LLVM::ZExtOp>() ||
         term.getDefiningOp<LLVM::ConstantOp>();
}

/// The (token term, within the token) of a pinned source offset
/// `t * stride_token + within`, told apart by what each is, not by the
/// order of the sum's operands, which the canonicalizer may swap; nothing
/// for an offset that is not such a sum.
static std::optional<std::pair<Value, Value>> splitSourceOffset(Value offset) {
  auto sum = offset.getDefiningOp<LLVM::AddOp>();
  if (!sum)
    return std::nullopt;
  Value lhs = sum.getLhs(), rhs = sum.getRhs();
  if (isWithinToken(rhs) && !isWithinToken(lhs))
    return std::make_pair(lhs, rhs);
  if (isWithinToken(lhs) && !isWithinToken(rhs))
    return std::make_pair(rhs, lhs);
  return std::nullopt;
}

static void pinAddresses(LLVM::InlineAsmOp pin) {
  std::optional<std::pair<Value, Value>> terms =
      splitSourceOffset(pin.getOperands().front());
  SmallVector<LLVM::GEPOp> geps =
      terms ? addressesOf(pin.getResult(0)) : SmallVector<LLVM::GEPOp>();
  if (geps.empty())
    return;
  auto [tokenTerm, withinToken] = *terms;
  Operation *sum = pin.getOperands().front().getDefiningOp();
  OpBuilder b(pin);
  b.setInsertionPointAfter(pin);
  // The addresses are global ones: an opaque copy of a generic pointer would
  // hide that from LLVM, which would then load through generic addressing.
  auto global = LLVM::LLVMPointerType::get(b.getContext(), /*global=*/1);
  for (LLVM::GEPOp gep : geps) {
    Location loc = gep.getLoc();
    auto func = gep->getParentOfType<LLVM::LLVMFuncOp>();
    auto param = cast<BlockArgument>(gep.getBase());
    Value base = LLVM::AddrSpaceCastOp::create(b, loc, global, param);
    Value row = pinPointer(
        b, loc,
        LLVM::GEPOp::create(b, loc, global, gep.getElemType(), base,
                            ValueRange{tokenTerm}, gep.getNoWrapFlags()));
    Value address = pinPointer(
        b, loc,
        LLVM::GEPOp::create(b, loc, global, gep.getElemType(), row,
                            ValueRange{withinToken}, gep.getNoWrapFlags()));
    Value generic =
        LLVM::AddrSpaceCastOp::create(b, loc, gep.getType(), address);
    // Through the copy LLVM no longer sees the noalias parameter under the
    // load, which is what let it read through the non-coherent cache; no
    // kernel writes a noalias source (kvrt refuses a written buffer that
    // overlaps another), so the loads say so themselves. A source that is
    // not noalias (`query`, which `q_out` may be) keeps plain loads.
    bool noalias =
        func.getArgAttr(param.getArgNumber(),
                        LLVM::LLVMDialect::getNoAliasAttrName()) != nullptr;
    for (Operation *user : gep->getUsers())
      if (auto load = dyn_cast<LLVM::LoadOp>(user); load && noalias)
        load.setInvariant(true);
    gep.replaceAllUsesWith(generic);
    gep.erase();
  }
  pin.erase();
  if (sum->use_empty())
    sum->erase();
}

/// Whether the kernel around a pin holds one token in a block, as its
/// kv.launch says; a function without one (a hand-written test) is taken to.
static bool oneTokenPerBlock(Operation *pin) {
  auto func = pin->getParentOfType<LLVM::LLVMFuncOp>();
  auto launch =
      func ? func->getAttrOfType<kvgen::kv::LaunchAttr>(kvgen::kLaunchAttrName)
           : kvgen::kv::LaunchAttr();
  return !launch || launch.getTokensPerBlock() == 1;
}

namespace {
struct KVPinAddressesPass
    : public kvgen::impl::KVPinAddressesBase<KVPinAddressesPass> {
  using Base::Base;

  void runOnOperation() override {
    auto sourceOffsetPin = getContext()
                               .getLoadedDialect<kvgen::kv::KVDialect>()
                               ->getSourceOffsetPinAttrHelper();
    SmallVector<LLVM::InlineAsmOp> pins;
    getOperation()->walk([&](LLVM::InlineAsmOp pin) {
      if (!sourceOffsetPin.isAttrPresent(pin))
        return;
      sourceOffsetPin.removeAttr(pin);
      if (split && oneTokenPerBlock(pin))
        pins.push_back(pin);
    });
    for (LLVM::InlineAsmOp pin : pins)
      pinAddresses(pin);
  }
};
} // namespace
