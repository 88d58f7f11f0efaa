//===- ManifestNvfp4.cpp - an NVFP4 cache's page in the manifest ----------===//
//
// The cache object's "nvfp4" object (docs/KERNEL-ABI.md, "NVFP4 caches"):
// where an NVFP4 cache's values and block scales go, checked against the
// rules the compiler's verifier keeps (lib/Dialect/KV/IR/Nvfp4.cpp).
//
//===----------------------------------------------------------------------===//

#include "FieldReader.h"
#include "Manifest.h"

namespace kvrt::impl {

/// "nvfp4": an NVFP4 cache's page (kvgen's #kv.nvfp4), with quant kind
/// nvfp4 and only there; its row is head_dim / 2 bytes of values and
/// head_dim / 16 scale bytes, on a paged layout of whole rows, each side
/// apart.
Status parseNvfp4(const FieldReader &cache, CacheDescription *out) {
  bool kind = out->quantized && out->quant.kind == QuantKind::NVFP4;
  out->nvfp4 = cache.has(key::cache::nvfp4);
  if (!out->nvfp4) {
    if (kind)
      return KVRT_BUNDLE_ERROR("%s: an nvfp4 cache needs its nvfp4 object "
                               "(the page of its values and scales)",
                               cache.field(key::cache::quant).c_str());
    return Status();
  }
  FieldReader page = cache;
  KVRT_RETURN_IF_ERROR(cache.getObject(key::cache::nvfp4, &page));
  out->nvfp4RowBytes = page.getInt(key::nvfp4::row_bytes);
  out->nvfp4KScales = page.getString(key::nvfp4::k_scales);
  out->nvfp4VScales = page.getString(key::nvfp4::v_scales);
  out->nvfp4Search = page.getString(key::nvfp4::search);
  auto scaleLayout = [](const std::string &s) {
    return s == "linear" || s == "swizzled";
  };
  const abi::LayoutInfo &info = abi::layoutInfo(out->layout);
  bool layoutOk = info.paged() && !info.stacked() && !info.hasX() &&
                  info.axes(false) == info.axes(true);
  if (!kind || out->quant.granularity != ScaleGranularity::PerTensor ||
      out->quant.mode != ScaleMode::Static || !layoutOk ||
      out->headDim % 16 != 0 || out->valueHeadDim != 0 ||
      out->nvfp4RowBytes != out->headDim / 2 + out->headDim / 16 ||
      !scaleLayout(out->nvfp4KScales) || !scaleLayout(out->nvfp4VScales) ||
      (out->nvfp4Search != "divisor_six" &&
       out->nvfp4Search != "four_over_six"))
    return KVRT_BUNDLE_ERROR(
        "%s: an nvfp4 page is a static per_tensor nvfp4 quant on a paged "
        "layout of whole rows, head_dim a multiple of 16 and row_bytes "
        "head_dim / 2 + head_dim / 16 (%lld), scales linear or swizzled, "
        "search divisor_six or four_over_six; got row_bytes %lld",
        cache.field(key::cache::nvfp4).c_str(),
        static_cast<long long>(out->headDim / 2 + out->headDim / 16),
        static_cast<long long>(out->nvfp4RowBytes));
  return Status();
}

} // namespace kvrt::impl
