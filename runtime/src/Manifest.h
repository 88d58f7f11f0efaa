//===- Manifest.h - the bundle's manifest, parsed and verified ------------===//
//
// The bundle is a JSON file (docs/KERNEL-ABI.md, "The bundle"; its keys are
// include/kvgen/ABI/Bundle.def). kvrt cannot trust that it was written by
// kvgen, let alone by the kvgen it was built with, so every field is checked
// here, once, at load time, and a key the schema lacks is refused; a launch
// then trusts the parsed Manifest.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_MANIFEST_H
#define KVRT_SRC_MANIFEST_H

#include "Status.h"

#include "kvgen/ABI/ABI.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvrt::impl {

// The kernel ABI's vocabulary (include/kvgen/ABI): the names kvgen writes
// are the names kvrt reads.
namespace abi = ::kvgen::abi;
using abi::DType;
using abi::KernelKind;
using abi::Layout;
using abi::Quantization;
using abi::QuantKind;
using abi::ScaleGranularity;
using abi::ScaleMode;
using abi::Variant;

using abi::dtypeBytes;
using abi::dtypeName;
using abi::kindName;
using abi::layoutName;
using abi::variantName;

/// Whether kernels of `kind` touch a cache, and so have variants, a cache
/// and rows to describe (abi::kindTraits); slot_mapping's does not.
inline bool touchesCache(KernelKind kind) {
  return abi::kindTraits(kind).entry != abi::KindEntry::None;
}

/// cache.quant: how a quantized cache stores its values.
struct QuantDescription {
  QuantKind kind = QuantKind::FP8E4M3;
  ScaleGranularity granularity = ScaleGranularity::PerTensor;
  ScaleMode mode = ScaleMode::Static;
  bool reciprocal = false;

  bool operator==(const QuantDescription &other) const {
    return kind == other.kind && granularity == other.granularity &&
           mode == other.mode && reciprocal == other.reciprocal;
  }
};

struct CacheDescription {
  /// Set from the bundle; its traits are abi::layoutInfo(layout).
  Layout layout = {};
  /// Slots per block; max_seq_len for a layout that is not paged.
  int64_t blockSize = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  /// The bundle's v_head_dim, where V's head size differs from K's; 0
  /// where it does not (valueDim() is then headDim).
  int64_t valueHeadDim = 0;
  /// Elements of an x group (16 bytes), for a layout with an X axis; else 0.
  int64_t x = 0;
  DType dtype = DType::BF16;
  bool quantized = false;
  /// Meaningful where `quantized`.
  QuantDescription quant;
  /// A cache without V ("k_only"), or an MLA latent cache ("latent": one
  /// head whose row is kv_c's kvLoraRank elements then k_pe's ropeDim).
  bool kOnly = false;
  bool latent = false;
  int64_t kvLoraRank = 0;
  int64_t ropeDim = 0;
  /// A latent entry with inline scales ("latent.inline_scales"): its latent
  /// is quantized in groups of `groupSize`, each group's f32 scale stored in
  /// the entry, then the RoPE part in `ropeDtype`; the cache is
  /// [num_blocks, block_size, entryBytes] of 1-byte elements, and the
  /// kernels take no scale.
  bool inlineScales = false;
  int64_t groupSize = 0;
  DType ropeDtype = DType::BF16;
  int64_t entryBytes = 0;
  /// An NVFP4 cache ("nvfp4", quant kind nvfp4): a block of each side is
  /// its rows' e2m1 values then their e4m3 scales (kvgen's Nvfp4.h); the
  /// cache is the layout's shape with rows of `nvfp4RowBytes` bytes,
  /// compact below the block. The scale layouts and search are the
  /// kernel's own; kvrt keeps them to compare and to print.
  bool nvfp4 = false;
  int64_t nvfp4RowBytes = 0;
  std::string nvfp4KScales, nvfp4VScales, nvfp4Search;

  /// V's head size.
  int64_t valueDim() const { return valueHeadDim ? valueHeadDim : headDim; }
  /// Whether V's head size differs from K's.
  bool asymmetric() const { return valueDim() != headDim; }

  /// Whether the kernels take V tensors.
  bool hasValue() const { return !kOnly && !latent; }

  /// Which scale parameters the kernels take.
  Quantization quantization() const {
    if (!quantized || inlineScales)
      return Quantization::None;
    return quant.mode == ScaleMode::Static ? Quantization::Static
                                           : Quantization::Dynamic;
  }

  bool operator==(const CacheDescription &other) const;
};

struct LaunchDescription {
  int64_t threadsX = 0;
  int64_t tokensPerBlock = 0;
  int64_t chunksPerToken = 0;
};

/// "prologue": the fused prologue of an append or fused append
/// (docs/CONTRACT.md, "The fused prologue"); every part off without one.
struct PrologueDescription {
  /// Query heads read and written rotated; 0 for none.
  int64_t qHeads = 0;
  bool norm = false;
  /// "neox" or "gptj"; empty without RoPE.
  std::string rope;
  /// The elements of each head RoPE rotates; 0 without RoPE.
  int64_t rotaryDim = 0;
  /// q_out is fp8 e4m3, Q divided by q_scale (q_quant); else source dtype.
  bool qQuant = false;
  /// The cos/sin cache is f32 (cos_sin); else the source dtype.
  bool f32CosSin = false;

  bool any() const { return qHeads > 0 || norm || !rope.empty(); }
  /// The parameter groups the prologue adds (include/kvgen/ABI/Params.def).
  abi::PrologueParts parts() const {
    return {norm, !rope.empty(), qHeads > 0, qQuant};
  }
  bool operator==(const PrologueDescription &other) const {
    return qHeads == other.qHeads && norm == other.norm && rope == other.rope &&
           rotaryDim == other.rotaryDim && qQuant == other.qQuant &&
           f32CosSin == other.f32CosSin;
  }
};

/// One kernel of the manifest ("kernels"[i]).
struct KernelDescription {
  std::string name;
  /// The description it was generated from (informational).
  std::string description;
  KernelKind kind = KernelKind::Append;
  Variant variant = Variant::Scalar;
  /// The wide variant: the fewest tokens for which AUTO picks it (manifest
  /// "min_tokens"); 0 for the other variants.
  int64_t minTokens = 0;
  /// The wide variant: the fewest tokens from which AUTO picks the vector
  /// variant again (manifest "max_tokens", optional, above min_tokens); 0
  /// for no bound and for the other variants.
  int64_t maxTokens = 0;
  /// The cache, and the dtype of the rows moved into it (source) or out of
  /// it (output): every kind that touches a cache (abi::kindTraits).
  CacheDescription cache;
  DType sourceDtype = DType::BF16;
  DType outputDtype = DType::BF16;
  /// The kernel's manifest entry as compact JSON, rebuilt from the fields
  /// above (kvrt_bundle_kernel_manifest).
  std::string manifestJson;
  /// The vector variant's promise: base pointers aligned to `alignment`
  /// bytes, strides multiples of `vectorElems`.
  int64_t alignment = 1;
  int64_t vectorElems = 1;
  /// Bytes a vector moves (manifest "vector_bytes", informational); 0 if
  /// absent.
  int64_t vectorBytes = 0;
  LaunchDescription launch;
  /// The kernel waits (griddepcontrol.wait) before its first load of an
  /// input: it may be launched to overlap the previous kernel in its stream
  /// (manifest "programmatic_launch", optional, false where absent).
  bool programmaticLaunch = false;
  /// The fused prologue; none where the manifest has no "prologue".
  PrologueDescription prologue;
};

/// What a launch names: one description of the bundle. One of a kind that
/// touches a cache has a vector kernel `<name>`, a scalar kernel
/// `<name>_scalar` and a wide kernel `<name>_wide`, each optional; one of a
/// kind that does not (slot_mapping) has its single kernel as `scalar`.
struct Operation {
  std::string name;
  KernelKind kind = KernelKind::Append;
  /// Indices into Manifest::kernels by Variant; -1 if the bundle lacks that
  /// variant.
  int kernels[3] = {-1, -1, -1};

  int kernelOf(Variant variant) const {
    return kernels[static_cast<int>(variant)];
  }
  /// The kernel whose alignment promise the launch checks: the vector
  /// variant's, or the wide one's where the bundle has no vector kernel
  /// (both make the same promise; the manifest's load checks it).
  int promiseKernel() const {
    int vector = kernelOf(Variant::Vector);
    return vector >= 0 ? vector : kernelOf(Variant::Wide);
  }
};

struct Target {
  std::string chip;
  std::string features;
  /// Compute capability of the chip ("sm_90" is 9.0).
  int major = 0;
  int minor = 0;
  /// "sm_90a" runs on exactly 9.0; "sm_100f" on 10.x with x >= 0.
  bool archSpecific = false;
  bool familySpecific = false;
};

struct Manifest {
  int version = 0;
  Target target;
  bool hasPtx = false;
  std::string ptx;
  bool hasCubin = false;
  std::vector<unsigned char> cubin;
  std::vector<KernelDescription> kernels;
  std::vector<Operation> operations;
  /// Operation::name -> index into `operations`.
  std::unordered_map<std::string, size_t> operationByName;
};

/// Parses and verifies a manifest; KVRT_ERROR_INVALID_BUNDLE naming the field
/// on any problem.
Status parseManifest(const char *data, size_t size, Manifest *out);

/// Decodes standard base64 (RFC 4648), ignoring whitespace; false if invalid.
bool decodeBase64(std::string_view text, std::vector<unsigned char> *out);

/// Parses "sm_90", "sm_90a" or "sm_100f" into `out`; false if malformed.
bool parseChip(std::string_view chip, Target *out);

} // namespace kvrt::impl

#endif // KVRT_SRC_MANIFEST_H
