//===- KVDialect.h - the kv dialect -----------------------------*- C++ -*-===//
//
// Declarations of the kv dialect, its attributes, types and ops.
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

#include <iterator>
#include <optional>

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

/// The quantization vocabulary is the kernel ABI's too (include/kvgen/ABI/
/// Quant.def): #kv.quant's parameters are these enums, by their ABI names.
using QuantKind = ::kvgen::abi::QuantKind;
using ScaleGranularity = ::kvgen::abi::ScaleGranularity;
using ScaleMode = ::kvgen::abi::ScaleMode;
inline llvm::StringRef stringifyQuantKind(QuantKind kind) {
  return ::kvgen::abi::quantKindName(kind);
}
inline llvm::StringRef stringifyScaleGranularity(ScaleGranularity granularity) {
  return ::kvgen::abi::granularityName(granularity);
}
inline llvm::StringRef stringifyScaleMode(ScaleMode mode) {
  return ::kvgen::abi::scaleModeName(mode);
}
/// What "int4" parses to: a value no ABI kind has, which exists only for
/// QuantAttr's verifier to refuse with its reason (int4 needs a zero point,
/// not another storage type). No QuantAttr ever holds it.
inline constexpr QuantKind kUnsupportedInt4 =
    static_cast<QuantKind>(std::size(::kvgen::abi::kQuantKindNames));
/// Parse a quant parameter by its ABI name (a keyword or a string); an
/// unknown name is an error that lists the known ones.
mlir::FailureOr<QuantKind> parseQuantKind(mlir::AsmParser &parser);
mlir::FailureOr<ScaleGranularity>
parseScaleGranularity(mlir::AsmParser &parser);
mlir::FailureOr<ScaleMode> parseScaleMode(mlir::AsmParser &parser);

/// Where an NVFP4 side keeps its block scales (#kv.nvfp4, Nvfp4.h): in
/// token-major rows, or in the 4x4 tiles of the sm_100 trtllm-gen reader.
enum class Nvfp4ScaleLayout { Linear, Swizzled };
/// How an NVFP4 group picks its scale: amax / 6, or the better of amax / 6
/// and amax / 4 (four_over_six).
enum class Nvfp4ScaleSearch { DivisorSix, FourOverSix };
llvm::StringRef stringifyNvfp4ScaleLayout(Nvfp4ScaleLayout layout);
llvm::StringRef stringifyNvfp4ScaleSearch(Nvfp4ScaleSearch search);
mlir::FailureOr<Nvfp4ScaleLayout>
parseNvfp4ScaleLayout(mlir::AsmParser &parser);
mlir::FailureOr<Nvfp4ScaleSearch>
parseNvfp4ScaleSearch(mlir::AsmParser &parser);
} // namespace kvgen::kv

#include "kvgen/Dialect/KV/IR/KVOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVOpsTypes.h.inc"

namespace kvgen::kv {
/// The verifier of every kernel op (KVOps.td): its name, and what its kind's
/// traits ask of its cache and its rows' type (null: the kind moves none).
llvm::LogicalResult verifyKernelOp(mlir::Operation *op, abi::KernelKind kind,
                                   CacheType cache, mlir::Type rows);
/// What a kernel op's `prologue` asks of its kind and cache
/// (KVPrologue.cpp); success where it has none.
llvm::LogicalResult verifyKernelPrologue(mlir::Operation *op,
                                         abi::KernelKind kind, CacheType cache,
                                         mlir::Type rows);
} // namespace kvgen::kv

#define GET_OP_CLASSES
#include "kvgen/Dialect/KV/IR/KVOps.h.inc"

namespace kvgen::kv {
/// What the compiler asks of a kernel op, whichever it is.
struct KernelOpInfo {
  abi::KernelKind kind;
  CacheType cache;
  /// The rows' element type: the source's, or the outputs' (null: none).
  mlir::Type rows;
};
/// The kind, cache and rows of `op`, or nothing where `op` is no kernel op.
std::optional<KernelOpInfo> getKernelOpInfo(mlir::Operation *op);

/// Bytes of one element of a cache or source dtype (f32, f16, bf16, fp8, i8).
int64_t getElementBytes(mlir::Type type);
/// The dtype's name in bundles and messages: f32, f16, bf16, f8e4m3, ...
std::string getDTypeName(mlir::Type type);
/// The unquantized element types a cache or a source tensor may have.
bool isPlainFloat(mlir::Type type);
} // namespace kvgen::kv

#endif // KVGEN_DIALECT_KV_IR_KVDIALECT_H
