//===- Manifest.h - the bundle's manifest, parsed and verified ------------===//
//
// The bundle is a JSON file (docs/KERNEL-ABI.md, "The bundle"). kvrt cannot
// trust that it was written by kvgen, let alone by the kvgen it was built
// with, so every field it uses is checked here, once, at load time; a launch
// then trusts the parsed Manifest.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_MANIFEST_H
#define KVRT_SRC_MANIFEST_H

#include "Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvrt::impl {

enum class DType { F32, F16, BF16, F8E4M3, F8E5M2, I8, I32, I64 };

/// The manifest's name of a dtype ("bf16").
const char *dtypeName(DType dtype);
/// Parses a manifest dtype name; false if unknown.
bool parseDType(std::string_view name, DType *out);
size_t dtypeBytes(DType dtype);

enum class KernelKind { Append, SlotMapping, FusedAppend };
const char *kindName(KernelKind kind);

enum class Variant { Vector, Scalar };
const char *variantName(Variant variant);

enum class Layout {
  Contiguous,
  PagedNHD,
  PagedHND,
  VllmVectorized,
  DualStacked
};
const char *layoutName(Layout layout);

/// The logical parameter list kvrt packs for a kind (a buffer is one name).
const std::vector<std::string_view> &expectedParams(KernelKind kind);

struct CacheDescription {
  Layout layout = Layout::PagedNHD;
  /// Slots per block; max_seq_len for the contiguous layout.
  int64_t blockSize = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  /// Elements of the vllm_vectorized key cache's innermost dimension.
  int64_t x = 0;
  DType dtype = DType::BF16;

  bool operator==(const CacheDescription &other) const;
};

struct LaunchDescription {
  int64_t threadsX = 0;
  int64_t tokensPerBlock = 0;
  int64_t chunksPerToken = 0;
};

/// One kernel of the manifest ("kernels"[i]).
struct KernelDescription {
  std::string name;
  KernelKind kind = KernelKind::Append;
  Variant variant = Variant::Scalar;
  /// The cache and source dtype: append-like kinds only.
  CacheDescription cache;
  DType sourceDtype = DType::BF16;
  /// The vector variant's promise: base pointers aligned to `alignment`
  /// bytes, strides multiples of `vectorElems`.
  int64_t alignment = 1;
  int64_t vectorElems = 1;
  LaunchDescription launch;
};

/// What a launch names: one description of the bundle. An append-like one has
/// a vector kernel `<name>` and/or a scalar kernel `<name>_scalar`; a
/// slot_mapping one has its single kernel as `scalar`.
struct Operation {
  std::string name;
  KernelKind kind = KernelKind::Append;
  /// Indices into Manifest::kernels; -1 if the bundle lacks that variant.
  int vectorKernel = -1;
  int scalarKernel = -1;
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
