//===- Nvfp4.cpp - NVFP4 caches: the page and its rules -------------------===//

#include "kvgen/Dialect/KV/IR/Nvfp4.h"

#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace kvgen::kv;

//===----------------------------------------------------------------------===//
// Names
//===----------------------------------------------------------------------===//

StringRef kvgen::kv::stringifyNvfp4ScaleLayout(Nvfp4ScaleLayout layout) {
  return layout == Nvfp4ScaleLayout::Linear ? "linear" : "swizzled";
}

StringRef kvgen::kv::stringifyNvfp4ScaleSearch(Nvfp4ScaleSearch search) {
  return search == Nvfp4ScaleSearch::DivisorSix ? "divisor_six"
                                                : "four_over_six";
}

/// One of `names` (indexed by the enum's values), or an error listing them.
template <typename Enum, size_t N>
static FailureOr<Enum>
parseNvfp4Name(AsmParser &parser, const StringRef (&names)[N], StringRef what) {
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  if (failed(parser.parseKeywordOrString(&name)))
    return failure();
  for (size_t i = 0; i < N; ++i)
    if (name == names[i])
      return static_cast<Enum>(i);
  std::string known;
  for (StringRef n : names)
    known += (known.empty() ? "" : ", ") + n.str();
  return parser.emitError(loc) << "unknown " << what << " '" << name
                               << "': expected one of " << known;
}

FailureOr<Nvfp4ScaleLayout>
kvgen::kv::parseNvfp4ScaleLayout(AsmParser &parser) {
  static const StringRef names[] = {"linear", "swizzled"};
  return parseNvfp4Name<Nvfp4ScaleLayout>(parser, names, "NVFP4 scale layout");
}

FailureOr<Nvfp4ScaleSearch>
kvgen::kv::parseNvfp4ScaleSearch(AsmParser &parser) {
  static const StringRef names[] = {"divisor_six", "four_over_six"};
  return parseNvfp4Name<Nvfp4ScaleSearch>(parser, names, "NVFP4 scale search");
}

//===----------------------------------------------------------------------===//
// The page
//===----------------------------------------------------------------------===//

/// A layout an NVFP4 page fits: paged, K's and V's sides apart and alike,
/// whole rows of head_dim (no x groups). Its head and position axes give
/// the order of the block's rows.
static bool isNvfp4Layout(const kvgen::abi::LayoutInfo &info) {
  return info.paged() && !info.stacked() && !info.hasX() &&
         info.axes(false) == info.axes(true) && info.chunkContiguous();
}

int64_t Nvfp4Page::scaleOffset(int64_t head, int64_t pos, int64_t j,
                               Nvfp4ScaleLayout layout) const {
  // Swizzled: the (position, scale) plane of a head in 4x4 tiles, vLLM's
  // swizzle_scale_offset: [T / 4, 4, 4, S / 4] permuted (0, 2, 3, 1).
  if (layout == Nvfp4ScaleLayout::Swizzled) {
    int64_t group = rowScales / 4;
    int64_t t = pos / 4 * 4 + j / group;
    j = j % group * 4 + pos % 4;
    pos = t;
  }
  return dataBytes() + rowIndex(head, pos) * rowScales + j;
}

Nvfp4Page kvgen::kv::getNvfp4Page(CacheType cache) {
  Nvfp4Page page;
  page.numKvHeads = cache.getNumKvHeads();
  page.blockSize = cache.getBlockSize();
  page.rowDataBytes = cache.getHeadDim() / 2;
  page.rowScales = cache.getHeadDim() / kNvfp4GroupSize;
  const kvgen::abi::CacheAxes &axes = cache.getLayoutInfo().axes(false);
  page.headMajor = axes.headAxis() < axes.posAxis();
  return page;
}

//===----------------------------------------------------------------------===//
// Verifier halves
//===----------------------------------------------------------------------===//

LogicalResult kvgen::kv::verifyNvfp4Cache(
    function_ref<InFlightDiagnostic()> emitError, kvgen::abi::Layout layout,
    int64_t blockSize, int64_t headDim, std::optional<int64_t> vHeadDim,
    QuantAttr quant, bool kOnly, LatentAttr latent, Nvfp4Attr nvfp4) {
  bool kind = quant && quant.getKind() == QuantKind::NVFP4;
  if (!kind && !nvfp4)
    return success();
  if (!kind)
    return emitError() << "nvfp4 = #kv.nvfp4<...> places an NVFP4 cache's "
                          "values: give quant = #kv.quant<kind = nvfp4, "
                          "granularity = per_tensor, mode = static>";
  if (!nvfp4)
    return emitError() << "an nvfp4 cache needs nvfp4 = #kv.nvfp4<k_scales = "
                          "..., v_scales = ..., search = ...>: where its "
                          "values and block scales go";
  if (quant.getGranularity() != ScaleGranularity::PerTensor ||
      quant.getMode() != ScaleMode::Static || quant.getReciprocal())
    return emitError() << "an nvfp4 cache's global scale is static and "
                          "per_tensor (its block scales are computed by the "
                          "kernel): give granularity = per_tensor, mode = "
                          "static, no reciprocal";
  if (!isNvfp4Layout(kvgen::abi::layoutInfo(layout)))
    return emitError() << "an nvfp4 cache is "
                       << kvgen::abi::layoutNamesWhere(isNvfp4Layout)
                       << " (a block's values, then its scales, each side "
                          "apart), got "
                       << kvgen::abi::layoutName(layout);
  if (headDim % kNvfp4GroupSize != 0)
    return emitError() << "an nvfp4 cache's head_dim must be a multiple of "
                       << kNvfp4GroupSize << " (one e4m3 scale per "
                       << kNvfp4GroupSize << " values), got " << headDim;
  if (vHeadDim || kOnly || latent)
    return emitError() << "an nvfp4 cache has K and V of one head_dim (no "
                          "v_head_dim, k_only or latent)";
  bool swizzled = nvfp4.getKScales() == Nvfp4ScaleLayout::Swizzled ||
                  nvfp4.getVScales() == Nvfp4ScaleLayout::Swizzled;
  int64_t scales = headDim / kNvfp4GroupSize;
  if (swizzled && (blockSize % 4 != 0 || scales % 4 != 0))
    return emitError() << "swizzled NVFP4 scales are 4x4 tiles of (position, "
                          "scale): block_size and head_dim / 16 must be "
                          "multiples of 4, got block_size "
                       << blockSize << " and head_dim / 16 = " << scales;
  return success();
}

LogicalResult kvgen::kv::verifyNvfp4Op(Operation *op,
                                       kvgen::abi::KernelKind kind,
                                       CacheType cache) {
  if (!cache.getNvfp4() || kind == kvgen::abi::KernelKind::Append ||
      kind == kvgen::abi::KernelKind::SlotMapping)
    return success();
  return op->emitOpError() << "an nvfp4 cache is written by kv.append only "
                              "(its gathers and its block-table and page-table "
                              "appends are not generated yet)";
}
