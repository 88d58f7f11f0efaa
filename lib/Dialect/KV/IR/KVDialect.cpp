//===- KVDialect.cpp - kv dialect: types, attributes, verifiers -----------===//
//
// Every rule a cache description must satisfy lives here, as a verifier, so
// that kvgen, kvgen-opt and the C++ API reject the same descriptions with the
// same words. Each rule has an expected-error test in test/Dialect/KV/.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/ABI/Limits.h"
#include "kvgen/Dialect/KV/IR/LatentEntry.h"

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

/// The unquantized element types a cache or a source tensor may have.
static bool isPlainFloat(Type type) {
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
                          "(docs/CONTRACT.md): use fp8_e4m3, fp8_e5m2 or int8";
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
            "kv.keep_narrow or kv.source_offset_pin (kv.name belongs on a "
            "function argument)";
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
// CacheType
//===----------------------------------------------------------------------===//

const kvgen::abi::LayoutInfo &CacheType::getLayoutInfo() const {
  return kvgen::abi::layoutInfo(getLayout());
}

int64_t CacheType::getTokensPerBlock() const {
  return isPaged() ? getBlockSize() : getMaxSeqLen();
}

int64_t CacheType::getX() const { return 16 / getElementBytes(getDtype()); }

bool CacheType::isPaged() const { return getLayoutInfo().paged(); }

bool CacheType::hasValue() const { return !getKOnly() && !getLatent(); }

int64_t CacheType::getValueHeadDim() const {
  return getVHeadDim().value_or(getHeadDim());
}

// LatentAttr's verifier and the inline scales' rules: LatentEntry.cpp.

/// A K-only or latent cache: the layouts and scales that have a meaning
/// without V.
static LogicalResult verifyKOnly(function_ref<InFlightDiagnostic()> emitError,
                                 LayoutKind layout, int64_t numKvHeads,
                                 int64_t headDim, QuantAttr quant,
                                 LatentAttr latent) {
  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  if (info.stacked())
    return emitError() << "a K-only cache has no V half: the " << info.name
                       << " layout needs both";
  // The dynamic-scale append finds K's and V's amax in one pass; it has no
  // K-only form yet.
  if (quant && quant.getMode() == ScaleMode::Dynamic &&
      !(latent && latent.getScales())) // LatentEntry.cpp
    return emitError() << "a K-only cache takes static scales only";
  if (!latent)
    return success();
  if (!info.tokenMajor())
    return emitError() << "a latent cache is [num_blocks, block_size, "
                          "kv_lora_rank + rope_dim]: give layout = "
                       << kvgen::abi::layoutNamesWhere(
                              [](const kvgen::abi::LayoutInfo &candidate) {
                                return candidate.tokenMajor();
                              });
  if (numKvHeads != 1)
    return emitError() << "a latent cache has one head, got num_kv_heads = "
                       << numKvHeads;
  if (headDim != latent.getKvLoraRank() + latent.getRopeDim())
    return emitError() << "a latent cache's head_dim is kv_lora_rank + "
                          "rope_dim = "
                       << latent.getKvLoraRank() + latent.getRopeDim()
                       << ", got " << headDim;
  if (quant && quant.getGranularity() != ScaleGranularity::PerTensor &&
      quant.getGranularity() != ScaleGranularity::PerToken)
    return emitError() << "a latent cache's entry has one head: its scales "
                          "are per_tensor or per_token";
  return success();
}

/// The limits of docs/CONTRACT.md, checked one at a time so that the product
/// of heads and head_dim cannot overflow.
static LogicalResult
verifyCacheLimits(function_ref<InFlightDiagnostic()> emitError,
                  LayoutKind layout, int64_t tokensPerBlock, int64_t numKvHeads,
                  int64_t headDim) {
  auto tooLarge = [&](StringRef what, int64_t value, int64_t limit) {
    return emitError() << what << " " << value
                       << " is past the limit: a kernel supports at most "
                       << limit;
  };
  using namespace kvgen::abi;
  if (tokensPerBlock > kMaxBlockSize)
    return tooLarge(layoutInfo(layout).tokensName(), tokensPerBlock,
                    kMaxBlockSize);
  if (headDim > kMaxHeadDim)
    return tooLarge("head_dim", headDim, kMaxHeadDim);
  if (numKvHeads > kMaxKvHeads)
    return tooLarge("num_kv_heads", numKvHeads, kMaxKvHeads);
  if (numKvHeads * headDim > kMaxElementsPerToken)
    return tooLarge("num_kv_heads * head_dim", numKvHeads * headDim,
                    kMaxElementsPerToken);
  return success();
}

/// A V head size of its own (`v_head_dim`): the layouts whose V side holds
/// whole rows apart from K's, the limits of head_dim, static scales.
static LogicalResult
verifyValueHeadDim(function_ref<InFlightDiagnostic()> emitError,
                   LayoutKind layout, int64_t numKvHeads, int64_t headDim,
                   int64_t vHeadDim, QuantAttr quant, bool kOnly,
                   LatentAttr latent) {
  if (vHeadDim <= 0)
    return emitError() << "v_head_dim must be positive, got " << vHeadDim;
  // One spelling per cache: the default is head_dim.
  if (vHeadDim == headDim)
    return emitError() << "v_head_dim " << vHeadDim
                       << " is head_dim: leave it out (V's head size "
                          "defaults to head_dim)";
  if (kOnly || latent)
    return emitError() << "a " << (latent ? "latent" : "K-only")
                       << " cache has no V: v_head_dim has no meaning";
  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  auto apart = [](const kvgen::abi::LayoutInfo &candidate) {
    return !candidate.stacked() && !candidate.hasX() &&
           candidate.chunkContiguous();
  };
  if (!apart(info))
    return emitError() << "the " << info.name
                       << " layout has one head size for K and V ("
                       << (info.stacked() ? "its sides are stacked in one "
                                            "tensor"
                                          : "its V side is not whole rows of "
                                            "head_dim")
                       << "): v_head_dim needs layout = "
                       << kvgen::abi::layoutNamesWhere(apart);
  if (vHeadDim > kvgen::abi::kMaxHeadDim)
    return emitError() << "v_head_dim " << vHeadDim
                       << " is past the limit: a kernel supports at most "
                       << kvgen::abi::kMaxHeadDim;
  if (numKvHeads * vHeadDim > kvgen::abi::kMaxElementsPerToken)
    return emitError() << "num_kv_heads * v_head_dim " << numKvHeads * vHeadDim
                       << " is past the limit: a kernel supports at most "
                       << kvgen::abi::kMaxElementsPerToken;
  // The dynamic append finds a group's amax over K's and V's chunks in one
  // lane loop; it has no form for sides of different lengths yet.
  if (quant && quant.getMode() == ScaleMode::Dynamic)
    return emitError() << "a cache with v_head_dim takes static scales only";
  return success();
}

LogicalResult CacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                LayoutKind layout, int64_t blockSize,
                                int64_t maxSeqLen, int64_t numKvHeads,
                                int64_t headDim,
                                std::optional<int64_t> vHeadDim, Type dtype,
                                QuantAttr quant, bool kOnly,
                                LatentAttr latent) {
  if (numKvHeads <= 0)
    return emitError() << "num_kv_heads must be positive, got " << numKvHeads;
  if (headDim <= 0)
    return emitError() << "head_dim must be positive, got " << headDim;

  const kvgen::abi::LayoutInfo &info = kvgen::abi::layoutInfo(layout);
  if (!info.paged()) {
    if (blockSize != 0)
      return emitError() << "the " << info.name
                         << " layout has no blocks: give max_seq_len, not "
                            "block_size";
    if (maxSeqLen <= 0)
      return emitError() << "the " << info.name
                         << " layout needs max_seq_len > 0";
  } else {
    if (maxSeqLen != 0)
      return emitError() << "max_seq_len is for the "
                         << kvgen::abi::layoutNamesWhere(
                                [](const kvgen::abi::LayoutInfo &candidate) {
                                  return !candidate.paged();
                                })
                         << " layout; the " << info.name
                         << " layout takes block_size";
    // Any size: the kernel divides by the compile-time constant (a shift
    // and a mask for powers of two, a multiply-high otherwise).
    if (blockSize <= 0)
      return emitError() << "block_size must be positive, got " << blockSize;
  }
  if (failed(verifyCacheLimits(emitError, layout,
                               info.paged() ? blockSize : maxSeqLen, numKvHeads,
                               headDim)))
    return failure();

  if (!quant) {
    if (!isPlainFloat(dtype))
      return emitError() << "an unquantized cache holds f32, f16 or bf16, "
                            "got "
                         << dtype << " (fp8 and int8 caches need a quant)";
  } else {
    Type storage = quant.getStorageType(dtype.getContext());
    if (dtype != storage)
      return emitError() << stringifyQuantKind(quant.getKind())
                         << " quantization stores " << storage
                         << ", but the cache dtype is " << dtype;
    if (quant.getGranularity() == ScaleGranularity::PerBlock && !info.paged())
      return emitError() << "per_block scales need a paged layout";
  }

  if (info.hasX()) {
    // A side groups head_dim into vectors of x elements (16 bytes).
    int64_t x = 16 / (dtype.getIntOrFloatBitWidth() / 8);
    if (headDim % x != 0)
      return emitError() << "the " << info.name << " layout packs x = " << x
                         << " elements (16 bytes of " << dtype
                         << ") per vector; x must divide head_dim " << headDim;
  }
  if (vHeadDim &&
      failed(verifyValueHeadDim(emitError, layout, numKvHeads, headDim,
                                *vHeadDim, quant, kOnly, latent)))
    return failure();
  if (latent &&
      failed(verifyInlineScalesCache(emitError, dtype, quant, latent)))
    return failure();
  if (kOnly || latent)
    return verifyKOnly(emitError, layout, numKvHeads, headDim, quant, latent);
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
      failed(verifyInlineScalesOp(op, kind, cache, rows)))
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
