//===- KVDialect.cpp - kv dialect: types, attributes, verifiers -----------===//
//
// Every rule a cache description must satisfy lives here (the cache type's
// own in KVCacheType.cpp), as a verifier, so that kvgen, kvgen-opt and the
// C++ API reject the same descriptions with the same words. Each rule has an
// expected-error test in test/Dialect/KV/.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/ABI/Limits.h"
#include "kvgen/Dialect/KV/IR/LatentEntry.h"
#include "kvgen/Dialect/KV/IR/Nvfp4.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace kvgen::kv;
namespace abi = kvgen::abi;

#include "kvgen/Dialect/KV/IR/KVOpsDialect.cpp.inc"

FailureOr<LayoutKind> kvgen::kv::parseLayout(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef name;
  if (failed(parser.parseKeyword(&name)))
    return failure();
  LayoutKind layout;
  if (!kvgen::abi::parseLayout(name, &layout)) {
    std::string known;
    for (const char *knownName : kvgen::abi::kLayoutNames)
      known += (known.empty() ? "" : ", ") + std::string(knownName);
    return parser.emitError(loc)
           << "unknown layout '" << name << "': expected one of " << known;
  }
  return layout;
}

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "kvgen/Dialect/KV/IR/KVOpsTypes.cpp.inc"

#define GET_OP_CLASSES
#include "kvgen/Dialect/KV/IR/KVOps.cpp.inc"

void KVDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kvgen/Dialect/KV/IR/KVAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "kvgen/Dialect/KV/IR/KVOpsTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "kvgen/Dialect/KV/IR/KVOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

int64_t kvgen::kv::getElementBytes(Type type) {
  return type.getIntOrFloatBitWidth() / 8;
}

std::string kvgen::kv::getDTypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isF16())
    return "f16";
  if (type.isBF16())
    return "bf16";
  if (isa<Float8E4M3FNType>(type))
    return "f8e4m3";
  if (isa<Float8E5M2Type>(type))
    return "f8e5m2";
  if (type.isInteger(8))
    return "i8";
  std::string name;
  llvm::raw_string_ostream os(name);
  type.print(os);
  return name;
}

bool kvgen::kv::isPlainFloat(Type type) {
  return type.isF32() || type.isF16() || type.isBF16();
}

//===----------------------------------------------------------------------===//
// QuantAttr
//===----------------------------------------------------------------------===//

Type QuantAttr::getStorageType(MLIRContext *context) const {
  switch (getKind()) {
  case QuantKind::FP8E4M3:
    return Float8E4M3FNType::get(context);
  case QuantKind::FP8E5M2:
    return Float8E5M2Type::get(context);
  case QuantKind::Int8:
  case QuantKind::NVFP4: // bytes: packed e2m1 values and e4m3 scales
    return IntegerType::get(context, 8);
  }
  llvm_unreachable("unknown quantization kind");
}

LogicalResult QuantAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                QuantKind kind, ScaleGranularity granularity,
                                ScaleMode mode, bool reciprocal) {
  // int4 needs a zero point, two values per byte and a min/max dynamic
  // scale: a different convention, not another storage type.
  if (kind == kUnsupportedInt4)
    return emitError() << "int4 caches are not supported in this release "
                          "(docs/CONTRACT.md): use fp8_e4m3, fp8_e5m2, int8 or "
                          "nvfp4";
  // A scale computed in the kernel must be computable from what one program
  // sees: a per-tensor amax needs a reduction over every token of the launch,
  // and a per-block scale would have to rescale tokens written by earlier
  // steps. Both are static-only.
  if (mode == ScaleMode::Dynamic && granularity == ScaleGranularity::PerTensor)
    return emitError() << "a dynamic per_tensor scale needs a reduction over "
                          "all tokens of the launch; use a static scale or "
                          "per_token / per_head / per_token_head";
  if (mode == ScaleMode::Dynamic && granularity == ScaleGranularity::PerHead)
    return emitError() << "a dynamic per_head scale needs a reduction over "
                          "all tokens of the launch and would rescale tokens "
                          "already in the cache; use a static per_head scale "
                          "or a dynamic per_token_head one";
  if (mode == ScaleMode::Dynamic && granularity == ScaleGranularity::PerBlock)
    return emitError() << "a dynamic per_block scale would rescale tokens "
                          "already in the block; per_block scales must be "
                          "static";
  return success();
}

//===----------------------------------------------------------------------===//
// LaunchAttr
//===----------------------------------------------------------------------===//

LogicalResult LaunchAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t threadsX, int64_t tokensPerBlock,
                                 int64_t chunksPerToken) {
  if (threadsX <= 0 || tokensPerBlock <= 0 || chunksPerToken <= 0)
    return emitError() << "threads_x, tokens_per_block and chunks_per_token "
                          "must be positive, got "
                       << threadsX << ", " << tokensPerBlock << ", "
                       << chunksPerToken;
  // A CUDA block holds at most 1024 threads (docs/CONTRACT.md, "Limits").
  if (threadsX * tokensPerBlock > 1024)
    return emitError() << "a block of threads_x * tokens_per_block = "
                       << threadsX * tokensPerBlock
                       << " threads is over the limit of 1024";
  if (threadsX > chunksPerToken)
    return emitError() << "threads_x " << threadsX
                       << " is more than chunks_per_token " << chunksPerToken
                       << ": threads would have no chunk";
  return success();
}

LogicalResult KVDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() == "kv.launch" && !isa<LaunchAttr>(attr.getValue()))
    return op->emitError() << "'kv.launch' must be a #kv.launch<threads_x = "
                              "..., tokens_per_block = ..., chunks_per_token "
                              "= ...>, got "
                           << attr.getValue();
  // A misplaced kv.name would be dropped silently by every pass that reads
  // it from the parameters.
  if (attr.getName() == getParamNameAttrName())
    return op->emitError() << "'" << getParamNameAttrName()
                           << "' names a kernel parameter: it belongs on a "
                              "function argument, not on an operation";
  if (attr.getName() == "kv.launch")
    return success();
  return verifyContractAttribute(op, attr);
}

/// Whether `op` has one result, of type i`width`.
static bool hasOneIntegerResult(Operation *op, unsigned width) {
  return op->getNumResults() == 1 &&
         op->getResult(0).getType().isInteger(width);
}

LogicalResult KVDialect::verifyContractAttribute(Operation *op,
                                                 NamedAttribute attr) {
  StringAttr name = attr.getName();
  Attribute value = attr.getValue();
  auto emit = [&]() {
    return op->emitError() << "'" << name.getValue() << "' ";
  };
  if (name == getMinBlocksPerSmAttrHelper().getName()) {
    auto bound = dyn_cast<IntegerAttr>(value);
    if (!bound || !bound.getType().isInteger(64) || bound.getInt() < 1)
      return emit() << "must be a positive i64 (blocks a kernel keeps room "
                       "for on one SM), got "
                    << value;
    if (!isa<FunctionOpInterface>(op))
      return emit() << "is a kernel's occupancy bound: it belongs on a "
                       "function, not on '"
                    << op->getName() << "'";
    return success();
  }
  struct Mark {
    StringAttr name;
    unsigned width;
    const char *what;
  };
  const Mark marks[] = {
      {getBeforeSlotAttrHelper().getName(), 64,
       "an address term computed before the slot load"},
      {getKeepWideAttrHelper().getName(), 64, "the slot's 64-bit token index"},
      {getKeepNarrowAttrHelper().getName(), 32, "a narrowed 32-bit index"},
  };
  for (const Mark &mark : marks) {
    if (name != mark.name)
      continue;
    if (!isa<UnitAttr>(value))
      return emit() << "is a unit attribute, got " << value;
    if (!hasOneIntegerResult(op, mark.width))
      return emit() << "marks " << mark.what
                    << ": it belongs on an operation of one i" << mark.width
                    << " result";
    return success();
  }
  // The kernel's parameter names in argument order, from kv-loops-to-gpu to
  // kv-mark-kernel-noalias: convert-gpu-to-nvvm drops kv.name from the
  // arguments.
  if (name.getValue() == ParamNamesAttrHelper::getNameStr()) {
    auto names = dyn_cast<ArrayAttr>(value);
    if (!names || !llvm::all_of(names, llvm::IsaPred<StringAttr>))
      return emit() << "must be an array of parameter names, got " << value;
    if (!isa<FunctionOpInterface>(op))
      return emit() << "names a kernel's parameters: it belongs on a "
                       "function, not on '"
                    << op->getName() << "'";
    for (Attribute entry : names) {
      StringRef param = cast<StringAttr>(entry).getValue();
      if (llvm::none_of(kvgen::abi::kParams,
                        [&](const kvgen::abi::ParamInfo &info) {
                          return param == info.name;
                        }))
        return emit() << "'" << param
                      << "' is not a parameter of the kernel ABI";
    }
    return success();
  }
  if (name == getSourceOffsetPinAttrHelper().getName()) {
    if (!isa<UnitAttr>(value))
      return emit() << "is a unit attribute, got " << value;
    if (op->getName().getStringRef() != "llvm.inline_asm" ||
        op->getNumOperands() != 1 || !hasOneIntegerResult(op, 64) ||
        !op->getOperand(0).getType().isInteger(64))
      return emit() << "marks the opaque copy of a source offset: it belongs "
                       "on an 'llvm.inline_asm' of one i64 operand and one "
                       "i64 result";
    return success();
  }
  return op->emitError()
         << "'" << name.getValue()
         << "' is not an attribute of the kv dialect; expected kv.launch, "
            "kv.min_blocks_per_sm, kv.before_slot, kv.keep_wide, "
            "kv.keep_narrow, kv.source_offset_pin or kv.param_names (kv.name "
            "belongs on a function argument)";
}

//===----------------------------------------------------------------------===//
// kv.name
//===----------------------------------------------------------------------===//

LogicalResult KVDialect::verifyRegionArgAttribute(Operation *op,
                                                  unsigned /*regionIndex*/,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  if (attr.getName() != getParamNameAttrName())
    return success();
  auto name = dyn_cast<StringAttr>(attr.getValue());
  if (!name)
    return op->emitError() << "'" << getParamNameAttrName() << "' of argument "
                           << argIndex
                           << " must be a string naming a kernel parameter, "
                              "got "
                           << attr.getValue();
  for (const kvgen::abi::ParamInfo &param : kvgen::abi::kParams)
    if (name.getValue() == param.name)
      return success();
  std::string known;
  for (const kvgen::abi::ParamInfo &param : kvgen::abi::kParams)
    known += (known.empty() ? "" : ", ") + std::string(param.name);
  return op->emitError() << "'" << getParamNameAttrName() << "' of argument "
                         << argIndex << ": '" << name.getValue()
                         << "' is not a parameter of the kernel ABI; expected "
                            "one of "
                         << known;
}

LogicalResult KVDialect::verifyRegionResultAttribute(Operation *op,
                                                     unsigned /*regionIndex*/,
                                                     unsigned resultIndex,
                                                     NamedAttribute attr) {
  if (attr.getName() == getParamNameAttrName())
    return op->emitError() << "'" << getParamNameAttrName() << "' of result "
                           << resultIndex
                           << " names a kernel parameter: it belongs on a "
                              "function argument, not on a result";
  return success();
}

//===----------------------------------------------------------------------===//
// Kernel ops
//===----------------------------------------------------------------------===//

/// Kernel names become PTX entry points and C identifiers in generated
/// headers.
static LogicalResult verifyKernelName(Operation *op, StringRef name) {
  auto isIdentChar = [](char c) { return llvm::isAlnum(c) || c == '_'; };
  if (name.empty() || llvm::isDigit(name.front()) ||
      !llvm::all_of(name, isIdentChar))
    return op->emitOpError()
           << "kernel name '" << name << "' must be a C identifier";
  return success();
}

/// K and V arrive in `source`; the cache stores `cache.dtype`.
static LogicalResult verifySourceType(Operation *op, CacheType cache,
                                      Type source) {
  if (!isPlainFloat(source))
    return op->emitOpError()
           << "source dtype must be f32, f16 or bf16, got " << source;
  if (cache.getQuant())
    return success();
  Type dtype = cache.getDtype();
  if (source == dtype || source.isF32() || dtype.isF32())
    return success();
  return op->emitOpError()
         << "cannot cast " << source << " to " << dtype
         << ": the only casts are fp32 <-> 16-bit (f16 <-> bf16 loses range "
            "one way and precision the other)";
}

static LogicalResult verifyPaged(Operation *op, CacheType cache) {
  if (!cache.isPaged())
    return op->emitOpError()
           << "needs a paged layout: a " << cache.getLayoutInfo().name
           << " cache has no block table (its slot is req * max_seq_len + "
              "pos)";
  return success();
}

/// The kinds that write a latent cache's rows, as a verifier names them:
/// "kv.mla_append or kv.mla_fused_append".
static std::string latentWriters() {
  std::string names;
  for (size_t i = 0; i < std::size(abi::kKindNames); ++i) {
    abi::KindTraits traits = abi::kindTraits(static_cast<abi::KernelKind>(i));
    if (traits.rows != abi::KindRows::Into ||
        traits.entry != abi::KindEntry::Latent)
      continue;
    names +=
        (names.empty() ? "kv." : " or kv.") + std::string(abi::kKindNames[i]);
  }
  return names;
}

/// A latent cache is written by the latent kinds only: its entry comes from
/// two sources.
static LogicalResult verifyNotLatent(Operation *op, CacheType cache) {
  if (cache.getLatent())
    return op->emitOpError() << "cannot write a latent cache: its entry is "
                                "kv_c followed by k_pe (use "
                             << latentWriters() << ")";
  return success();
}

/// Reading back is the append's cast the other way round: the same rules.
static LogicalResult verifyOutputType(Operation *op, CacheType cache,
                                      Type output) {
  if (!isPlainFloat(output))
    return op->emitOpError()
           << "output dtype must be f32, f16 or bf16, got " << output;
  Type dtype = cache.getDtype();
  if (cache.getQuant() || output == dtype || output.isF32() || dtype.isF32())
    return success();
  return op->emitOpError() << "cannot cast " << dtype << " to " << output
                           << ": the only casts are fp32 <-> 16-bit";
}

LogicalResult kvgen::kv::verifyKernelOp(Operation *op, abi::KernelKind kind,
                                        CacheType cache, Type rows) {
  abi::KindTraits traits = abi::kindTraits(kind);
  if (failed(verifyKernelName(op, SymbolTable::getSymbolName(op).getValue())) ||
      failed(verifyInlineScalesOp(op, kind, cache, rows)) ||
      failed(verifyNvfp4Op(op, kind, cache)))
    return failure();
  // A slot from the block table or a page table needs blocks.
  if (traits.slot != abi::KindSlot::Mapping && failed(verifyPaged(op, cache)))
    return failure();
  switch (traits.rows) {
  case abi::KindRows::Into:
    if (traits.entry == abi::KindEntry::Latent && !cache.getLatent())
      return op->emitOpError()
             << "needs a latent cache (latent = #kv.latent<...>)";
    if (traits.entry == abi::KindEntry::KV &&
        failed(verifyNotLatent(op, cache)))
      return failure();
    return verifySourceType(op, cache, rows);
  case abi::KindRows::OutOf:
    return verifyOutputType(op, cache, rows);
  case abi::KindRows::None:
    break;
  }
  return success();
}

namespace {
/// getKernelOpInfo for the ops `Ops` (the dialect's op list).
template <typename... Ops> struct KernelOps {
  static std::optional<KernelOpInfo> find(Operation *op) {
    std::optional<KernelOpInfo> info;
    (void)(tryOne<Ops>(op, info) || ...);
    return info;
  }
  template <typename Op>
  static bool tryOne(Operation *op, std::optional<KernelOpInfo> &info) {
    auto kernel = dyn_cast<Op>(op);
    if (!kernel)
      return false;
    info = KernelOpInfo{Op::kKind, kernel.getCacheType(), kernel.getRowsType()};
    return true;
  }
};
} // namespace

std::optional<KernelOpInfo> kvgen::kv::getKernelOpInfo(Operation *op) {
  return KernelOps<
#define GET_OP_LIST
#include "kvgen/Dialect/KV/IR/KVOps.cpp.inc"
      >::find(op);
}
