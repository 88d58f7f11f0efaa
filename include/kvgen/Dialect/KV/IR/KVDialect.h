//===- KVDialect.h - the kv dialect -----------------------------*- C++ -*-===//
//
// Declarations of the kv dialect, its enums, attributes, types and ops.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_DIALECT_KV_IR_KVDIALECT_H
#define KVGEN_DIALECT_KV_IR_KVDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "kvgen/ABI/ABI.h"

namespace kvgen::kv {
/// The dialect's layouts are the kernel ABI's (include/kvgen/ABI/
/// Layouts.def): one list for the compiler, kvrt and kvbench.
using LayoutKind = ::kvgen::abi::Layout;
inline llvm::StringRef stringifyLayoutKind(LayoutKind layout) {
  return ::kvgen::abi::layoutName(layout);
}
/// Parses a layout by its ABI name; an unknown name is an error that lists
/// the known ones.
mlir::FailureOr<LayoutKind> parseLayout(mlir::AsmParser &parser);
} // namespace kvgen::kv

#include "kvgen/Dialect/KV/IR/KVOpsDialect.h.inc"

#include "kvgen/Dialect/KV/IR/KVEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVOpsTypes.h.inc"

#define GET_OP_CLASSES
#include "kvgen/Dialect/KV/IR/KVOps.h.inc"

namespace kvgen::kv {
/// Bytes of one element of a cache or source dtype (f32, f16, bf16, fp8, i8).
int64_t getElementBytes(mlir::Type type);
/// The dtype's name in bundles and messages: f32, f16, bf16, f8e4m3, ...
std::string getDTypeName(mlir::Type type);
} // namespace kvgen::kv

#endif // KVGEN_DIALECT_KV_IR_KVDIALECT_H
