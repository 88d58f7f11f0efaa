//===- SupportChecker.cpp - a support matrix cell, asked of the dialect ---===//
//
// Nothing here restates a rule: a cell is what the kv dialect's verifier
// says of the description written for it.
//
//===----------------------------------------------------------------------===//

#include "SupportChecker.h"

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Pipeline/Description.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::driver::matrix;

const char *kvgen::driver::matrix::formName(Form form) {
  return form == Form::KV           ? "K and V"
         : form == Form::KVTwoSizes ? "K and V of two head sizes"
         : form == Form::KOnly      ? "K only"
                                    : "latent";
}

std::string Checker::typeText(abi::DType dtype) {
  return dtype == abi::DType::F8E4M3   ? "f8E4M3FN"
         : dtype == abi::DType::F8E5M2 ? "f8E5M2"
                                       : abi::dtypeName(dtype);
}

abi::DType Checker::storageOf(abi::QuantKind kind) {
  Type storage =
      kv::QuantAttr::get(&context, kind, abi::ScaleGranularity::PerTensor,
                         abi::ScaleMode::Static, false)
          .getStorageType(&context);
  abi::DType dtype;
  if (!abi::parseDType(kv::getDTypeName(storage), &dtype))
    llvm::report_fatal_error("a quantization kind stores no ABI dtype");
  return dtype;
}

StringRef Checker::clauseOf(abi::KernelKind kind) {
  if (!RegisteredOperationName::lookup(
          (Twine("kv.") + abi::kindName(kind)).str(), &context))
    llvm::report_fatal_error(Twine("the ABI's kernel kind '") +
                             abi::kindName(kind) + "' has no kv op");
  switch (abi::kindTraits(kind).rows) {
  case abi::KindRows::Into:
    return " from ";
  case abi::KindRows::OutOf:
    return " to ";
  case abi::KindRows::None:
    break;
  }
  return "";
}

std::string Checker::cacheText(abi::Layout layout, Form form, abi::DType dtype,
                               StringRef quant) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "!kv.cache<layout = " << abi::layoutName(layout) << ", "
     << (abi::layoutInfo(layout).paged() ? "block_size = 16"
                                         : "max_seq_len = 4096")
     << (form == Form::Latent ? ", num_kv_heads = 1, head_dim = 576"
                              : ", num_kv_heads = 8, head_dim = 128")
     << (form == Form::KVTwoSizes ? ", v_head_dim = 64" : "")
     << ", dtype = " << typeText(dtype);
  if (!quant.empty())
    os << ", quant = " << quant;
  if (form == Form::KOnly)
    os << ", k_only = true";
  if (form == Form::Latent)
    os << ", latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>";
  os << ">";
  return text;
}

std::string Checker::quantText(abi::QuantKind kind, abi::ScaleGranularity g,
                               abi::ScaleMode mode, bool reciprocal) {
  return (Twine("#kv.quant<kind = ") + abi::quantKindName(kind) +
          ", granularity = " + abi::granularityName(g) +
          ", mode = " + abi::scaleModeName(mode) +
          (reciprocal ? ", reciprocal = true" : "") + ">" +
          // An NVFP4 cache also places its values and scales (the cache's
          // next parameter): vLLM's page.
          (kind == abi::QuantKind::NVFP4
               ? ", nvfp4 = #kv.nvfp4<k_scales = linear, v_scales = "
                 "swizzled, search = divisor_six>"
               : ""))
      .str();
}

std::string Checker::opText(abi::KernelKind kind, StringRef symbol,
                            StringRef cache, abi::DType rows) {
  std::string text =
      (Twine("kv.") + abi::kindName(kind) + " @" + symbol + " : " + cache)
          .str();
  StringRef clause = clauseOf(kind);
  return clause.empty() ? text : text + clause.str() + typeText(rows);
}

bool Checker::accepts(abi::KernelKind kind, StringRef cache, abi::DType rows,
                      StringRef label, std::string *why) {
  std::string op = opText(kind, "k", cache, rows);
  std::string first;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (first.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
      first = diag.str();
    return success();
  });
  OwningOpRef<ModuleOp> module =
      parseDescription("module {\n  " + op + "\n}\n", &context);
  if (!module) {
    if (why)
      *why = first;
    return false;
  }
  if (!label.empty() && kept.insert(op).second) {
    std::string symbol = "k" + std::to_string(keptOps.size());
    keptOps.push_back("  // " + label.str() + "\n  " +
                      opText(kind, symbol, cache, rows) + "\n");
  }
  return true;
}
