//===- Geometry.h - the description and its caches, sized for the bench ---===//
//
// What kvbench needs of a kernel's description (the manifest's "cache" and
// "source_dtype", docs/KERNEL-ABI.md), in the ABI's own vocabulary, and the
// caches it allocates for it: at least 1 GiB each, with every tensor's shape
// and strides and where element (block, head, pos, d) lives.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_GEOMETRY_H
#define KVGEN_BENCH_GEOMETRY_H

#include "kvgen/ABI/ABI.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvbench {

namespace abi = kvgen::abi;

struct QuantDesc {
  abi::QuantKind kind = abi::QuantKind::FP8E4M3;
  abi::ScaleGranularity granularity = abi::ScaleGranularity::PerTensor;
  abi::ScaleMode mode = abi::ScaleMode::Static;
  bool reciprocal = false;
};

/// The two parts of an MLA latent cache's entry (bench/Latent.cpp).
struct LatentDesc {
  int64_t kvLoraRank = 0;
  int64_t ropeDim = 0;
  /// An entry with inline scales (the manifest's "inline_scales", vLLM's
  /// fp8_ds_mla): its bytes, the cache's innermost extent; 0 otherwise.
  int64_t entryBytes = 0;
};

struct Description {
  abi::Layout layout = abi::kDefaultLayout;
  /// Slots per block; max_seq_len for a layout that is not paged.
  int64_t blockSize = 16;
  int64_t numHeads = 8;
  int64_t headDim = 128;
  /// A layout with an X axis: elements of an x group (16 bytes).
  int64_t x = 8;
  abi::DType cacheDtype = abi::DType::BF16;
  abi::DType sourceDtype = abi::DType::BF16;
  std::optional<QuantDesc> quant;
  /// A cache without V (the manifest's "k_only", and every latent cache).
  bool kOnly = false;
  /// An MLA latent cache (the manifest's "latent"): one head of
  /// kvLoraRank + ropeDim elements per slot, written by kvrt_mla_append.
  std::optional<LatentDesc> latent;

  abi::Quantization quantization() const {
    // Inline scales are in the entry: the kernel takes none.
    if (!quant || (latent && latent->entryBytes))
      return abi::Quantization::None;
    return quant->mode == abi::ScaleMode::Dynamic ? abi::Quantization::Dynamic
                                                  : abi::Quantization::Static;
  }
};

/// Max_seq_len of the reference-only description of a layout that is not
/// paged: 512 requests
/// (one per decode token at 512) of 2048 positions make a 2 GiB cache.
constexpr int64_t kDefaultMaxSeqLen = 2048;

/// The reference-only description of a layout: bf16 8x128, block 16.
Description defaultDescription(abi::Layout layout);

/// The strides of one cache tensor in elements, and how the element
/// (block, head, pos, d) is found in it (KERNEL-ABI.md's offset table).
struct CacheStrides {
  int64_t block = 0, head = 0, pos = 0, dim = 0;
  /// A side with an X axis: `dim` strides d / x and d % x is innermost.
  int64_t x = 0;
  /// Element offset of this tensor in its allocation (a stacked cache's V).
  int64_t base = 0;

  int64_t offset(int64_t b, int64_t h, int64_t p, int64_t d) const {
    const int64_t dimPart = x ? (d / x) * dim + d % x : d * dim;
    return base + b * block + h * head + p * pos + dimPart;
  }
};

/// The caches of a description sized for the bench: >= 1 GiB each.
struct CacheGeometry {
  Description desc;
  int64_t numBlocks = 0;
  bool dual = false;
  /// Bytes of one cache element.
  int64_t elemBytes = 2;
  /// DLPack shapes (compact row-major); valueShape is empty for dual.
  std::vector<int64_t> keyShape, valueShape;
  CacheStrides key, value;
  /// Elements of each allocation; a stacked layout and a K-only cache have
  /// one (valueElems = 0).
  int64_t keyElems = 0, valueElems = 0;
  /// Dynamic quantization: the scale cache's shape (fp32), one per K and V.
  std::vector<int64_t> scaleCacheShape;
};

/// Sizes the caches of `desc`; a description kvbench cannot time is fatal,
/// with the reason.
CacheGeometry makeGeometry(const Description &desc);

/// One line: layout, sizes, dtypes, quantization, blocks, the key cache.
std::string describe(const CacheGeometry &g);

/// The minimum bytes of one token: read K+V in the source dtype and the
/// 8-byte slot, write K+V in the cache dtype, plus the scales a dynamic
/// description writes (static scales are read once per call, not counted).
double bytesPerToken(const Description &d);

/// Why the hand-written reference cannot time `desc` ("" if it can): it
/// copies 16-bit elements with shift-and-mask slot arithmetic.
std::string referenceUnsupported(const Description &desc);

/// Why the correctness check cannot judge `desc` ("" if it can): it expects
/// the cache to hold the source's bits.
std::string checkUnsupported(const Description &desc);

bool isPowerOfTwo(int64_t v);
int log2Exact(int64_t v);
int64_t product(const std::vector<int64_t> &shape);

} // namespace kvbench

#endif // KVGEN_BENCH_GEOMETRY_H
