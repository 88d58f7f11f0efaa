//===- HostBuiltinsTest.cpp - the builtins kvgen defines in host code -----===//
//
// defineHostBuiltins (lib/Pipeline/HostBuiltins.cpp) gives the host kernels
// their own __truncsfbf2, which LLVM's code generator calls where it widens
// bf16 values to f32 and narrows them back. These tests JIT it and check it
// against APFloat's f32 -> bf16 conversion, round to nearest even: every
// widened bf16 value comes back with its bits (the calls the code generator
// makes), and across f32 the rounding, its ties, the overflow to infinity and
// the NaNs (quiet, same sign) are IEEE's.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/HostBuiltins.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/TargetSelect.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace mlir;

namespace {

using TruncFn = uint16_t (*)(float);

/// A module with the builtins and `trunc_bits(f32) -> i16`, which calls
/// __truncsfbf2 and returns its bits, JIT-compiled.
class HostBuiltinsTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    context.loadDialect<LLVM::LLVMDialect>();
    registerBuiltinDialectTranslation(context);
    registerLLVMDialectTranslation(context);
    OpBuilder b(&context);
    Location loc = b.getUnknownLoc();
    module = ModuleOp::create(loc);
    kvgen::defineHostBuiltins(*module);
    b.setInsertionPointToEnd(module->getBody());
    auto fn = LLVM::LLVMFuncOp::create(
        b, loc, "trunc_bits",
        LLVM::LLVMFunctionType::get(b.getI16Type(), {b.getF32Type()}));
    Block *entry = fn.addEntryBlock(b);
    b.setInsertionPointToStart(entry);
    auto builtin = module->lookupSymbol<LLVM::LLVMFuncOp>("__truncsfbf2");
    ASSERT_TRUE(builtin);
    Value narrowed =
        LLVM::CallOp::create(b, loc, builtin, entry->getArguments())
            .getResult();
    LLVM::ReturnOp::create(
        b, loc, LLVM::BitcastOp::create(b, loc, b.getI16Type(), narrowed));
    auto created = ExecutionEngine::create(*module);
    ASSERT_TRUE(static_cast<bool>(created))
        << llvm::toString(created.takeError());
    engine = std::move(*created);
    auto symbol = engine->lookup("trunc_bits");
    ASSERT_TRUE(static_cast<bool>(symbol))
        << llvm::toString(symbol.takeError());
    trunc = reinterpret_cast<TruncFn>(*symbol);
  }

  /// APFloat's f32 -> bf16, round to nearest even.
  static uint16_t expected(uint32_t bits) {
    llvm::APFloat value(llvm::bit_cast<float>(bits));
    bool losesInfo = false;
    value.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven,
                  &losesInfo);
    return static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
  }

  /// Checks x's narrowing: APFloat's bits, or for a NaN a quiet NaN of its
  /// sign (the payload's top bits kept, as compiler-rt's).
  void check(uint32_t bits) {
    uint16_t got = trunc(llvm::bit_cast<float>(bits));
    bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    if (!nan) {
      ASSERT_EQ(got, expected(bits)) << "f32 bits 0x" << std::hex << bits;
      return;
    }
    ASSERT_EQ(got, static_cast<uint16_t>((bits >> 16) | 0x40))
        << "NaN bits 0x" << std::hex << bits;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::unique_ptr<ExecutionEngine> engine;
  TruncFn trunc = nullptr;
};

TEST_F(HostBuiltinsTest, EveryBF16ValueComesBackWithItsBits) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t bits = h << 16;
    if ((bits & 0x7fffffffu) > 0x7f800000u)
      EXPECT_EQ(trunc(llvm::bit_cast<float>(bits)), h | 0x40);
    else
      EXPECT_EQ(trunc(llvm::bit_cast<float>(bits)), h)
          << "bf16 0x" << std::hex << h;
  }
}

TEST_F(HostBuiltinsTest, RoundsToNearestEvenAcrossF32) {
  // Every 97th f32 (all exponents, both signs, ties among the low halves),
  // then every low half of a few significands: the ties round to even.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 97)
    check(static_cast<uint32_t>(bits));
  for (uint32_t high : {0x3f80u, 0x3f81u, 0x7f7fu, 0x0000u, 0x0001u, 0x807fu,
                        0xff7fu, 0x7f80u, 0x7fc0u})
    for (uint32_t low = 0; low < 0x10000; ++low)
      check(high << 16 | low);
}

TEST_F(HostBuiltinsTest, TiesAndOverflow) {
  EXPECT_EQ(trunc(llvm::bit_cast<float>(0x3f808000u)), 0x3f80); // tie, even
  EXPECT_EQ(trunc(llvm::bit_cast<float>(0x3f818000u)), 0x3f82); // tie, odd up
  EXPECT_EQ(trunc(llvm::bit_cast<float>(0x7f7fffffu)), 0x7f80); // to +inf
  EXPECT_EQ(trunc(llvm::bit_cast<float>(0xff7fffffu)), 0xff80); // to -inf
  EXPECT_EQ(trunc(llvm::bit_cast<float>(0x7f800001u)), 0x7fc0); // sNaN quiet
}

} // namespace
