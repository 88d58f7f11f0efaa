//===- Description.h - Cache descriptions, the matrix -----------*- C++ -*-===//
//
// A Description is one kv op (append, slot_mapping, fused_append,
// paged_kv_append, gather, or an MLA append)
// on one cache type, in the words of the kv dialect. The matrix is the list
// every suite runs: the host suite JIT-compiles each description on the CPU,
// the GPU suite compiles all of them into one bundle at build time.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_DESCRIPTION_H
#define KVGEN_CONFORMANCE_DESCRIPTION_H

#include "conformance/Quant.h"

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen::conformance {

/// Element types: the float types of sources, caches and gather outputs, and
/// the storage types of quantized caches.
enum class DType { F32, F16, BF16, F8E4M3, F8E5M2, I8 };

/// Bytes of one element.
size_t dtypeBytes(DType type);
/// The dialect's spelling: f32, f16, bf16, f8E4M3FN, f8E5M2, i8.
const char *dtypeName(DType type);
/// fp8 caches travel as uint8 (kvrt also takes DLPack's float8 codes, see
/// float8DLDataType()).
DLDataType toDLDataType(DType type);
/// DLPack's float8 codes (10: e4m3fn, 12: e5m2), which DLPack headers before
/// 1.1 do not name.
DLDataType float8DLDataType(DType type);
bool isQuantizedStorage(DType type);
/// The storage type of a quantization kind.
DType storageType(QuantKind kind);

enum class Layout {
  Contiguous,
  PagedNHD,
  PagedHND,
  VllmVectorized,
  DualStacked
};

/// The dialect's spelling: contiguous, paged_nhd, ...
const char *layoutName(Layout layout);
bool isPaged(Layout layout);

enum class Kind {
  Append,
  SlotMapping,
  FusedAppend,
  Gather,
  MlaAppend,
  MlaFusedAppend,
  PagedKvAppend,
  FusedGather
};

/// `#kv.quant<kind, granularity, mode>` (and its `reciprocal` flag).
struct QuantSpec {
  QuantKind kind = QuantKind::FP8E4M3;
  Granularity granularity = Granularity::PerTensor;
  ScaleMode mode = ScaleMode::Static;
  bool reciprocal = false;

  bool dynamic() const { return mode == ScaleMode::Dynamic; }
  /// `#kv.quant<...>`.
  std::string attr() const;
  /// fp8_e4m3_per_tensor_static (and _rcp), for names.
  std::string tag() const;
};

/// The dialect's op name without the `kv.` prefix.
const char *kindName(Kind kind);

struct Description {
  std::string name;
  Kind kind = Kind::Append;
  Layout layout = Layout::PagedNHD;
  /// Tokens per block; for `contiguous` this is max_seq_len (a request is one
  /// "block", see KERNEL-ABI.md).
  int64_t blockSize = 16;
  int64_t numKvHeads = 8;
  int64_t headDim = 128;
  /// V's head size where it differs from K's (`v_head_dim`); 0: headDim.
  int64_t vHeadDim = 0;
  int64_t valueHeadDim() const { return vHeadDim ? vHeadDim : headDim; }
  /// Dtype of the new K/V rows; unused by slot_mapping and gather.
  DType sourceDtype = DType::BF16;
  /// For a quantized cache, the storage type of `quant`.
  DType cacheDtype = DType::BF16;
  std::optional<QuantSpec> quant;
  /// What a gather writes.
  DType outputDtype = DType::F32;
  /// A cache with no V (`k_only = true`).
  bool kOnly = false;
  /// mla_append: the latent cache's two parts (numKvHeads is 1 and headDim
  /// their sum).
  int64_t kvLoraRank = 0;
  int64_t ropeDim = 0;
  bool latent() const { return kvLoraRank > 0; }
  /// A latent entry with inline scales (`#kv.inline_scales`): the group
  /// size (0: none), min_scale (0: none), power_of_two; the RoPE part is the
  /// source dtype (InlineScalesCases.cpp).
  int64_t inlineGroup = 0;
  float inlineMinScale = 0.0f;
  bool inlinePowerOfTwo = false;
  /// An NVFP4 cache (#kv.nvfp4; Nvfp4Cases.cpp): the cache dtype is i8,
  /// `quant` unset (the description writes its nvfp4 quant); each side's
  /// scale layout and the scale search.
  bool nvfp4 = false;
  bool nvfp4KSwizzled = false;
  bool nvfp4VSwizzled = true;
  bool nvfp4FourOverSix = false;
  /// The entry's bytes: the quantized latent, a f32 scale a group, the RoPE
  /// part.
  int64_t entryBytes() const {
    return kvLoraRank + kvLoraRank / inlineGroup * 4 +
           ropeDim * static_cast<int64_t>(dtypeBytes(sourceDtype));
  }

  /// vllm_vectorized: elements of the cache dtype in 16 bytes.
  int64_t x() const {
    return 16 / static_cast<int64_t>(dtypeBytes(cacheDtype));
  }

  /// `!kv.cache<...>`.
  std::string cacheType() const;
  /// The op, e.g.
  /// `kv.append @a : !kv.cache<layout = paged_nhd, ...> from bf16`. A
  /// quantized append or fused_append brings a second line: the gather that
  /// reads its cache back to f32 (gatherKernelName()), for the roundtrip.
  std::string toMlir() const;

  /// The kernels the bundle holds for this description: `name` (the vector
  /// variant, or the only kernel of slot_mapping), `name_scalar`,
  /// `name_wide` where hasWideKernel(), a quantized append's gather (both
  /// variants) and an MLA append's slot_mapping kernel.
  std::vector<std::string> kernelNames() const;
  std::string scalarKernelName() const { return name + "_scalar"; }
  /// Whether the compiler emits a wide variant (`name_wide`, picked by AUTO
  /// from its min_tokens on): a plain or fused K/V (or K-only) append with a
  /// dynamic scale of a 16-bit source (the wide kernel keeps IEEE division,
  /// the vector one takes the fast division), or else one whose chunk-loop
  /// iteration is one chunk, of a token of an even number of chunks (the
  /// wide kernel moves two a thread); not a latent one's (already two
  /// chunks a thread), a gather's or a slot_mapping's. This mirrors
  /// wideMinTokens in
  /// lib/Plan/KernelPlan.cpp under the default plan; runDescription
  /// fails every case of a description whose bundle disagrees, so that a
  /// change of the plan's rule that the suite does not follow is loud.
  bool hasWideKernel() const;
  std::string wideKernelName() const { return name + "_wide"; }
  /// Rows out of the cache: the rows' dtype is the output's.
  bool readsRows() const {
    return kind == Kind::Gather || kind == Kind::FusedGather;
  }
  bool hasRoundtripGather() const {
    return quant && !kOnly &&
           (kind == Kind::Append || kind == Kind::FusedAppend ||
            kind == Kind::PagedKvAppend);
  }
  std::string gatherKernelName() const { return name + "_gather"; }
  /// The description of that gather.
  Description roundtripGather() const {
    Description gather = *this;
    gather.kind = Kind::Gather;
    gather.name = gatherKernelName();
    gather.outputDtype = DType::F32;
    return gather;
  }
  /// An MLA append brings the slot_mapping kernel of its latent cache
  /// (`name_slots`): the case that builds its slots on the device and
  /// appends through them.
  bool hasSlotMappingCompanion() const { return kind == Kind::MlaAppend; }
  std::string slotMappingKernelName() const { return name + "_slots"; }

  /// A one-line summary for logs.
  std::string summary() const;
};

/// `module { ... }` holding every description's op.
std::string toMlirModule(const std::vector<Description> &descriptions);

/// The conformance matrix: every layout x dtype pair, with heads x head_dim x
/// block size covered pairwise; slot_mapping and fused_append descriptions
/// for the paged layouts; one paged_kv_append description per paged layout
/// and two quantized ones; block sizes 1, 3, 16, 48, 528 and 672 on every
/// paged layout and max_seq_len values that are not powers of two; every
/// valid quantized combination (layout x fp8_e4m3 / fp8_e5m2 / int8 x
/// granularity x static / dynamic, append and fused_append); gathers of
/// plain and quantized caches; and the few descriptions the GPU-only tests
/// use (names starting with `gpu_`). A few hundred in all.
std::vector<Description> conformanceMatrix();

/// A subset of conformanceMatrix() (same names) small enough for
/// compute-sanitizer: each layout and kind, each dtype pair, each block size,
/// head count and head dim at least once.
std::vector<Description> reducedMatrix();

/// The K-only and MLA latent descriptions of the matrix (LatentMatrix.cpp).
std::vector<Description> latentMatrix();

/// The descriptions whose V head size differs from K's
/// (AsymmetricCases.cpp).
std::vector<Description> asymmetricMatrix();

/// The description named `name` in `matrix`, if any.
std::optional<Description>
findDescription(const std::vector<Description> &matrix, std::string_view name);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_DESCRIPTION_H
