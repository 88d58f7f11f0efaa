//===- Description.cpp - limits and shape of a cache description ----------===//

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;
using namespace kvgen;

/// The location of byte `offset` of the main buffer, for a diagnostic.
static Location locationOf(const llvm::SourceMgr &sourceMgr,
                           MLIRContext *context, size_t offset) {
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  auto [line, column] = sourceMgr.getLineAndColumn(
      llvm::SMLoc::getFromPointer(buffer->getBufferStart() + offset));
  return FileLineColLoc::get(context, buffer->getBufferIdentifier(), line,
                             column);
}

LogicalResult kvgen::checkDescriptionText(const llvm::SourceMgr &sourceMgr,
                                          MLIRContext *context) {
  StringRef text =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())->getBuffer();
  if (text.size() > kMaxDescriptionBytes)
    return emitError(locationOf(sourceMgr, context, 0))
           << "the description is " << text.size()
           << " bytes; kvgen reads at most " << kMaxDescriptionBytes
           << " bytes (4 MiB)";

  // Count the nesting of ( [ { < as the parser will see it. A string or a
  // comment cannot open a level, and the '>' of '->' and '>=' (function
  // types, affine maps and sets) closes none; anything else unbalanced only
  // lowers the count, which the parser refuses anyway.
  //
  // Brackets are not the only recursion: MLIR's affine expression parser
  // (affine_map, affine_set, the affine ops' inline subscripts) recurses
  // once per unary minus and once per operator of a `+` or `*` chain, and
  // the expression trees it builds are walked recursively too, all without
  // a bracket. Every such level consumes one operator token, so a bound on
  // the operators of the whole text bounds that recursion wherever it
  // occurs, whichever dialect's syntax reaches it.
  unsigned depth = 0;
  unsigned operators = 0;
  auto isIdentifierChar = [](char c) {
    return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.';
  };
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (c == '"') {
      // MLIR's strings end at the quote, or (unterminated) at the line.
      for (++i; i < e && text[i] != '"' && text[i] != '\n'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < e && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == StringRef::npos)
        break;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNestingDepth)
        return emitError(locationOf(sourceMgr, context, i))
               << "the description nests brackets more than "
               << kMaxNestingDepth << " deep";
      continue;
    }
    size_t operatorLength = 0;
    if (c == '+' || c == '*' ||
        (c == '-' && !(i + 1 < e && text[i + 1] == '>')))
      operatorLength = 1;
    else if (llvm::isAlpha(c) && (i == 0 || !isIdentifierChar(text[i - 1]))) {
      size_t end = i;
      while (end < e && isIdentifierChar(text[end]))
        ++end;
      StringRef word = text.slice(i, end);
      if (word == "floordiv" || word == "ceildiv" || word == "mod")
        operatorLength = word.size();
      else
        i = end - 1;
    }
    if (operatorLength) {
      if (++operators > kMaxOperators)
        return emitError(locationOf(sourceMgr, context, i))
               << "the description holds more than " << kMaxOperators
               << " arithmetic operators (+ - * floordiv ceildiv mod, "
                  "outside strings and comments); a description of kv ops "
                  "needs none but the sign of a number";
      i += operatorLength - 1;
      continue;
    }
    bool arrowOrCompare = c == '>' && ((i > 0 && text[i - 1] == '-') ||
                                       (i + 1 < e && text[i + 1] == '='));
    if ((c == ')' || c == ']' || c == '}' || (c == '>' && !arrowOrCompare)) &&
        depth > 0)
      --depth;
  }
  return success();
}

LogicalResult kvgen::verifyDescription(ModuleOp module) {
  size_t kernels = 0;
  for (Operation &op : module.getBody()->getOperations()) {
    // A nested module would hide its kv ops from the planner; a description
    // is flat.
    if (isa<ModuleOp>(op))
      return op.emitError("nested modules are not supported: a description "
                          "is one module of kv ops");
    if (!isa_and_nonnull<kv::KVDialect>(op.getDialect()))
      return op.emitError()
             << "'" << op.getName()
             << "' is not a kv op: a description holds kv ops only";
    if (++kernels > kMaxKernelOps)
      return op.emitError()
             << "a description holds at most " << kMaxKernelOps << " kv ops";
  }
  if (kernels == 0)
    return module.emitError("no kernels to generate: the description holds no "
                            "kv ops");
  return success();
}

OwningOpRef<ModuleOp> kvgen::parseDescription(llvm::SourceMgr &sourceMgr,
                                              MLIRContext *context) {
  if (failed(checkDescriptionText(sourceMgr, context)))
    return nullptr;
  // The kv dialect's generated parsers say what a bad value was ("integer
  // value too large" for `reciprocal = 2`), not what the parameter takes: a
  // note says it, for the parameters that are flags.
  ScopedDiagnosticHandler explain(context, [](Diagnostic &diag) {
    std::string text = diag.str();
    StringRef message = text;
    if (diag.getSeverity() == DiagnosticSeverity::Error &&
        message.starts_with("failed to parse KV_") &&
        message.ends_with("which is to be a `bool`")) {
      StringRef name = message.drop_until([](char c) { return c == '\''; })
                           .drop_front()
                           .take_until([](char c) { return c == '\''; });
      diag.attachNote() << "'" << name
                        << "' takes true or false (left out: false)";
    }
    return failure(); // on to the caller's handler
  });
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, context);
  if (!module || failed(verifyDescription(*module)))
    return nullptr;
  return module;
}

StringRef kvgen::getDefaultDescription() {
  return R"mlir(// kvgen's default: a Llama-3-8B-like cache.
module {
  kv.append @kv_append : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
  kv.slot_mapping @kv_slot_mapping : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
  kv.fused_append @kv_fused_append : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16
}
)mlir";
}

OwningOpRef<ModuleOp> kvgen::parseDescription(StringRef text,
                                              MLIRContext *context) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(text, "<description>",
                                       /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  return parseDescription(sourceMgr, context);
}
