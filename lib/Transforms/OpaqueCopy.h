//===- OpaqueCopy.h - a PTX mov that LLVM cannot see through ----*- C++ -*-===//
//
// kv-pin-before-slot and kv-pin-addresses keep values where kv-to-loops put
// them, and in the form it gave them, by passing them through a PTX `mov`
// in a side-effecting inline asm: LLVM must neither move it nor look into
// it, and ptxas, which sees a plain register copy, drops it.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_LIB_TRANSFORMS_OPAQUECOPY_H
#define KVGEN_LIB_TRANSFORMS_OPAQUECOPY_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kvgen {

/// An opaque copy of `value` (an i32, an i64 or a pointer), built at `b`'s
/// insertion point.
inline mlir::LLVM::InlineAsmOp
createOpaqueCopy(mlir::OpBuilder &b, mlir::Location loc, mlir::Value value) {
  bool narrow = value.getType().isInteger(32);
  return mlir::LLVM::InlineAsmOp::create(
      b, loc, value.getType(), mlir::ValueRange{value},
      narrow ? "mov.b32 $0, $1;" : "mov.b64 $0, $1;", narrow ? "=r,r" : "=l,l",
      /*has_side_effects=*/true,
      /*is_align_stack=*/false, mlir::LLVM::tailcallkind::TailCallKind::None,
      /*asm_dialect=*/mlir::LLVM::AsmDialectAttr(),
      /*operand_attrs=*/mlir::ArrayAttr());
}

} // namespace kvgen

#endif // KVGEN_LIB_TRANSFORMS_OPAQUECOPY_H
