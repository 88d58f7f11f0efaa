//===- Geometry.cpp - the description and its caches ----------------------===//

#include "Geometry.h"
#include "Latent.h"
#include "Support.h"
#include "Workloads.h"

#include <algorithm>

namespace kvbench {

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int log2Exact(int64_t v) {
  int log = 0;
  while ((int64_t(1) << log) < v)
    ++log;
  return log;
}

int64_t product(const std::vector<int64_t> &shape) {
  int64_t p = 1;
  for (int64_t v : shape)
    p *= v;
  return p;
}

Description defaultDescription(abi::Layout layout) {
  Description d;
  d.layout = layout;
  if (!abi::layoutInfo(layout).paged())
    d.blockSize = kDefaultMaxSeqLen;
  return d;
}

namespace {

bool is16Bit(abi::DType t) {
  return t == abi::DType::BF16 || t == abi::DType::F16;
}

/// The checks every description must pass before anything is allocated.
void verifyTimeable(const Description &desc) {
  // The input pools are filled with 16-bit random patterns.
  if (!is16Bit(desc.sourceDtype))
    fatal(format("kvbench feeds 16-bit sources (bf16, f16); this description "
                 "appends from %s",
                 abi::dtypeName(desc.sourceDtype)));
  if (!desc.quant && desc.cacheDtype != desc.sourceDtype)
    fatal(format("kvbench times unquantized caches fed from their own dtype "
                 "(its check copies bits); this description is %s from %s",
                 abi::dtypeName(desc.cacheDtype),
                 abi::dtypeName(desc.sourceDtype)));
  if (desc.blockSize <= 0 || desc.numHeads <= 0 || desc.headDim < 8 ||
      desc.headDim % 8 != 0)
    fatal(format("kvbench needs a positive block size (max_seq_len) and a "
                 "head_dim that is a multiple of 8, got block %lld head_dim "
                 "%lld heads %lld",
                 (long long)desc.blockSize, (long long)desc.headDim,
                 (long long)desc.numHeads));
  const int64_t elemBytes = int64_t(abi::dtypeBytes(desc.cacheDtype));
  const abi::LayoutInfo &layout = abi::layoutInfo(desc.layout);
  if (layout.hasX() && desc.x * elemBytes != 16)
    fatal(format("%s's x is 16 bytes of the cache dtype (%lld elements of "
                 "%s); the manifest says %lld",
                 layout.name, (long long)(16 / elemBytes),
                 abi::dtypeName(desc.cacheDtype), (long long)desc.x));
  if (!layout.paged() && desc.blockSize < kPrefillRequestTokens)
    fatal(format("the prefill sweep puts requests of %lld tokens in one row: "
                 "a %s description needs max_seq_len >= that, not %lld",
                 (long long)kPrefillRequestTokens, layout.name,
                 (long long)desc.blockSize));
}

std::vector<int64_t> compactStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * shape[i];
  return strides;
}

/// The DLPack shape of a cache tensor with these axes (Layouts.def).
std::vector<int64_t> cacheShape(const abi::CacheAxes &axes, int64_t numBlocks,
                                const Description &desc) {
  std::vector<int64_t> shape;
  for (int i = 0; i < axes.rank; ++i)
    shape.push_back(abi::axisExtent(axes[i], numBlocks, desc.numHeads,
                                    desc.blockSize, desc.headDim, desc.x));
  return shape;
}

/// Where the element (block, head, pos, d) is in a compact cache tensor of
/// these axes: the strides of its Block (Batch), Head, Pos and Dim
/// (DimOverX) axes.
CacheStrides cacheStrides(const abi::CacheAxes &axes,
                          const std::vector<int64_t> &shape, int64_t x) {
  const std::vector<int64_t> s = compactStrides(shape);
  CacheStrides c;
  c.block = s[size_t(axes.blockAxis())];
  c.head = s[size_t(axes.headAxis())];
  c.pos = s[size_t(axes.posAxis())];
  c.dim = s[size_t(axes.dimAxis())];
  c.x = axes.has(abi::Axis::X) ? x : 0;
  return c;
}

} // namespace

CacheGeometry makeGeometry(const Description &desc) {
  verifyTimeable(desc);
  CacheGeometry g;
  g.desc = desc;
  g.elemBytes = int64_t(abi::dtypeBytes(desc.cacheDtype));
  const int64_t H = desc.numHeads, D = desc.headDim, bs = desc.blockSize;
  const int64_t blockBytes = bs * H * D * g.elemBytes;
  g.numBlocks = int64_t((kMinCacheBytes + blockBytes - 1) / blockBytes);
  // Without blocks, a decode token gets its own request (row), so the
  // batch covers the largest decode size.
  const abi::LayoutInfo &layout = abi::layoutInfo(desc.layout);
  if (!layout.paged())
    g.numBlocks = std::max<int64_t>(g.numBlocks, kMaxDecodeTokens);
  g.dual = layout.stacked();
  g.keyShape = cacheShape(layout.key, g.numBlocks, desc);
  g.key = cacheStrides(layout.key, g.keyShape, desc.x);
  if (g.dual) {
    // V is K's tensor at index 1 of the Side axis.
    g.value = g.key;
    g.value.base =
        compactStrides(g.keyShape)[size_t(layout.key.find(abi::Axis::Side))];
  } else {
    g.valueShape = cacheShape(layout.value, g.numBlocks, desc);
    g.value = cacheStrides(layout.value, g.valueShape, desc.x);
  }
  g.keyElems = product(g.keyShape);
  g.valueElems = g.dual ? 0 : product(g.valueShape);
  if (desc.quant && desc.quant->mode == abi::ScaleMode::Dynamic) {
    // docs/KERNEL-ABI.md: a scale per slot (and head); a layout without
    // blocks counts max_seq_len as its block size and the batch as its
    // blocks.
    g.scaleCacheShape = {g.numBlocks, bs};
    if (desc.quant->granularity == abi::ScaleGranularity::PerTokenHead)
      g.scaleCacheShape.push_back(H);
  }
  if (desc.kOnly)
    shapeKOnlyCache(g);
  return g;
}

std::string describe(const CacheGeometry &g) {
  std::string shape = "[";
  for (size_t i = 0; i < g.keyShape.size(); ++i)
    shape += (i ? "," : "") + std::to_string(g.keyShape[i]);
  shape += "]";
  std::string quant;
  if (g.desc.quant)
    quant =
        format(", quantized %s %s %s%s", abi::quantKindName(g.desc.quant->kind),
               abi::granularityName(g.desc.quant->granularity),
               abi::scaleModeName(g.desc.quant->mode),
               g.desc.quant->reciprocal ? " reciprocal" : "");
  return format(
      "%s, %s %lld, %lld heads x %lld, %s from %s%s, %lld blocks, key cache "
      "%s (%.2f GiB%s)",
      abi::layoutName(g.desc.layout),
      abi::layoutInfo(g.desc.layout).tokensName(), (long long)g.desc.blockSize,
      (long long)g.desc.numHeads, (long long)g.desc.headDim,
      abi::dtypeName(g.desc.cacheDtype), abi::dtypeName(g.desc.sourceDtype),
      quant.c_str(), (long long)g.numBlocks, shape.c_str(),
      double(g.keyElems * g.elemBytes) / double(kGiB),
      g.dual         ? ", K and V in one buffer"
      : g.desc.kOnly ? kOnlyText(g.desc).c_str()
                     : ", V the same size");
}

double bytesPerToken(const Description &d) {
  const double row = double(d.numHeads * d.headDim);
  const double source = double(abi::dtypeBytes(d.sourceDtype));
  // An entry with inline scales: the rows read, the slot, the entry
  // written (its scales included).
  if (d.latent && d.latent->entryBytes)
    return row * source + 8 + double(d.latent->entryBytes);
  const double cache = double(abi::dtypeBytes(d.cacheDtype));
  // K and V, or K alone.
  const double parts = d.kOnly ? 1 : 2;
  double scales = 0;
  if (d.quant && d.quant->mode == abi::ScaleMode::Dynamic)
    scales = parts * 4 *
             (d.quant->granularity == abi::ScaleGranularity::PerTokenHead
                  ? double(d.numHeads)
                  : 1.0);
  return row * parts * (source + cache) + 8 + scales;
}

std::string referenceUnsupported(const Description &desc) {
  if (desc.kOnly)
    return "it writes K and V; this cache has no V";
  if (desc.quant)
    return "it does not quantize";
  if (!is16Bit(desc.cacheDtype) || desc.cacheDtype != desc.sourceDtype)
    return "it copies 16-bit elements unchanged";
  if (!isPowerOfTwo(desc.blockSize))
    return format("its slot arithmetic is shift-and-mask: block size %lld "
                  "is not a power of two",
                  (long long)desc.blockSize);
  if (!isPowerOfTwo(desc.headDim))
    return format("it needs a power-of-two head_dim, not %lld",
                  (long long)desc.headDim);
  return "";
}

std::string checkUnsupported(const Description &desc) {
  if (desc.quant)
    return "the check compares the cache with the source's bits; quantized "
           "bytes are checked by the GPU suite";
  if (!is16Bit(desc.cacheDtype))
    return "the check compares 16-bit elements";
  return "";
}

} // namespace kvbench
