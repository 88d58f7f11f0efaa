//===- Description.h - reading a cache description safely -------*- C++ -*-===//
//
// A description is one module of kv ops. Before MLIR's parser sees the text,
// it is checked against limits that keep the parser's recursion and kvgen's
// cost bounded; after parsing, the module's shape is checked (no nested
// modules, no foreign ops, at least one kernel). Every refusal is a located
// diagnostic, never a crash.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_DESCRIPTION_H
#define KVGEN_PIPELINE_DESCRIPTION_H

#include "kvgen/Plan/ChipTable.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstddef>
#include <optional>
#include <string>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace kvgen {

/// The largest description kvgen reads. 4096 kv ops of the longest realistic
/// spelling fit ten times over; past it, memory and time grow with the text.
inline constexpr size_t kMaxDescriptionBytes = size_t(4) << 20;
/// How deeply brackets ( [ { < may nest. MLIR's parser recurses once per
/// level, so an unbounded depth overflows the stack; a real description
/// nests about four deep.
inline constexpr unsigned kMaxNestingDepth = 64;
/// The most arithmetic operators (+ - * floordiv ceildiv mod) a description
/// may hold. MLIR's affine expression parser recurses once per operator
/// (a unary minus, each `+` of a chain) without a bracket, at about 1 KB of
/// stack a level (7,500 minus signs overflowed 8 MiB); kv ops take none but
/// the sign of a number or an exponent.
inline constexpr unsigned kMaxOperators = 256;
/// The most kv ops one description may hold. Each becomes one or two
/// kernels and costs kvgen tens of milliseconds (4096 appends took 198 s and
/// 1 GB), so a description past this is more likely a mistake than a model.
inline constexpr size_t kMaxKernelOps = 1024;

/// Refuses the main buffer of `sourceMgr` if it is larger than
/// kMaxDescriptionBytes, nests brackets deeper than kMaxNestingDepth or holds
/// more than kMaxOperators arithmetic operators (outside strings and
/// comments). The diagnostic points at the byte that
/// crossed the limit.
mlir::LogicalResult checkDescriptionText(const llvm::SourceMgr &sourceMgr,
                                         mlir::MLIRContext *context);

/// Refuses a parsed description that holds anything but kv ops at the top
/// level (nested modules included), no kv op at all, or more than
/// kMaxKernelOps of them.
mlir::LogicalResult verifyDescription(mlir::ModuleOp module);

/// checkDescriptionText, parse and verify, verifyDescription: the one way
/// kvgen, its fuzzer and the C++ API read a description.
mlir::OwningOpRef<mlir::ModuleOp> parseDescription(llvm::SourceMgr &sourceMgr,
                                                   mlir::MLIRContext *context);

/// parseDescription on kv IR text (named "<description>" in diagnostics).
mlir::OwningOpRef<mlir::ModuleOp> parseDescription(llvm::StringRef text,
                                                   mlir::MLIRContext *context);

/// The Llama-3-8B-like default: paged NHD, block 16, 8 KV heads, head_dim
/// 128, bf16; an append, a slot-mapping builder and a fused append.
llvm::StringRef getDefaultDescription();

/// Whether `chip` names a GPU that the NVPTX back end (and so ptxas) knows:
/// sm_XX, sm_XXa or sm_XXf, and that has a row in kvgen's chip table
/// (kvgen/Plan/ChipTable.h). `known`, if given, receives the list.
bool isKnownChip(llvm::StringRef chip, std::string *known = nullptr);

/// The PTX ISA version (major * 10 + minor) kvgen emits for a known chip:
/// the lowest that knows the chip, raised where the back end needs a later
/// one for an instruction of kvgen's kernels (the chip table, ChipTable.cpp).
/// 0 for a
/// chip kvgen does not know.
unsigned ptxVersionFor(llvm::StringRef chip);

/// ptxVersionFor as NVPTX features ("+ptx80"); empty for an unknown chip.
std::string ptxFeaturesFor(llvm::StringRef chip);

/// Why `features` (--kvgen-features) cannot be used for `chip`, or nothing
/// when it can: it must be one PTX ISA version the back end knows, not older
/// than ptxVersionFor(chip) (the back end aborts on an older one).
std::optional<std::string> checkPTXFeatures(llvm::StringRef chip,
                                            llvm::StringRef features);

} // namespace kvgen

#endif // KVGEN_PIPELINE_DESCRIPTION_H
