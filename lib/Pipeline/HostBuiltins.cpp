//===- HostBuiltins.cpp - runtime functions the host code may call --------===//
//
// bf16 has no arithmetic on a generic x86-64 CPU. The lowering only loads,
// moves and stores bf16 values (its conversions are integer code), but
// LLVM's optimizer may merge two stores of bf16 vectors into one behind a
// phi, or turn a select of their bits into a select of bf16 values; the
// code generator then promotes those values to f32 and back, and the way
// back is a call to compiler-rt's `__truncsfbf2`. libgcc has it only since
// GCC 13, and a JIT resolves it from the process, so kvgen brings its own.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/HostBuiltins.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

/// `bf16 __truncsfbf2(f32 x)`: the top half of x's bits rounded to nearest
/// even; a NaN keeps its sign and top payload bits, made quiet, as
/// compiler-rt's does. The values the code generator passes are bf16 values
/// widened, for which this is exact.
static void defineTruncSFBF2(ModuleOp module) {
  constexpr StringLiteral kName = "__truncsfbf2";
  if (module.lookupSymbol(kName))
    return;
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  Location loc = module.getLoc();
  Type f32 = b.getF32Type(), bf16 = b.getBF16Type();
  Type i32 = b.getI32Type(), i16 = b.getI16Type();
  auto fn = LLVM::LLVMFuncOp::create(b, loc, kName,
                                     LLVM::LLVMFunctionType::get(bf16, {f32}));
  fn.setVisibility_(LLVM::Visibility::Hidden);
  fn.setDsoLocal(true);
  Block *entry = fn.addEntryBlock(b);
  b.setInsertionPointToStart(entry);
  auto c32 = [&](uint32_t v) {
    return LLVM::ConstantOp::create(b, loc, i32, b.getI32IntegerAttr(v));
  };
  Value bits = LLVM::BitcastOp::create(b, loc, i32, entry->getArgument(0));
  Value high = LLVM::LShrOp::create(b, loc, bits, c32(16));
  Value odd = LLVM::AndOp::create(b, loc, high, c32(1));
  Value bias = LLVM::AddOp::create(b, loc, odd, c32(0x7fff));
  Value rounded = LLVM::LShrOp::create(
      b, loc, LLVM::AddOp::create(b, loc, bits, bias), c32(16));
  Value magnitude = LLVM::AndOp::create(b, loc, bits, c32(0x7fffffff));
  Value isNaN = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ugt,
                                     magnitude, c32(0x7f800000));
  Value quiet = LLVM::OrOp::create(b, loc, high, c32(0x40));
  Value result = LLVM::SelectOp::create(b, loc, isNaN, quiet, rounded);
  Value half = LLVM::TruncOp::create(b, loc, i16, result);
  LLVM::ReturnOp::create(b, loc, LLVM::BitcastOp::create(b, loc, bf16, half));
}

void kvgen::defineHostBuiltins(ModuleOp module) { defineTruncSFBF2(module); }
