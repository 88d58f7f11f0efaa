//===- Description.h - Cache descriptions, the matrix -----------*- C++ -*-===//
//
// A Description is one kv op (append, slot_mapping or fused_append) on one
// cache type, in the words of the kv dialect. The matrix is the list every
// suite runs: the host suite JIT-compiles each description on the CPU, the GPU
// suite compiles all of them into one bundle at build time.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_DESCRIPTION_H
#define KVGEN_CONFORMANCE_DESCRIPTION_H

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen::conformance {

enum class DType { F32, F16, BF16 };

/// Bytes of one element.
size_t dtypeBytes(DType type);
/// The dialect's spelling: f32, f16, bf16.
const char *dtypeName(DType type);
DLDataType toDLDataType(DType type);

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

enum class Kind { Append, SlotMapping, FusedAppend };

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
  /// Dtype of the new K/V rows; unused by slot_mapping.
  DType sourceDtype = DType::BF16;
  DType cacheDtype = DType::BF16;

  /// vllm_vectorized: elements of the cache dtype in 16 bytes.
  int64_t x() const {
    return 16 / static_cast<int64_t>(dtypeBytes(cacheDtype));
  }

  /// `!kv.cache<...>`.
  std::string cacheType() const;
  /// The op, one line, e.g.
  /// `kv.append @a : !kv.cache<layout = paged_nhd, ...> from bf16`.
  std::string toMlir() const;

  /// The kernels the bundle holds for this description: `name` (the vector
  /// variant, or the only kernel of slot_mapping) and `name_scalar`.
  std::string scalarKernelName() const { return name + "_scalar"; }
  std::vector<std::string> kernelNames() const;

  /// A one-line summary for logs.
  std::string summary() const;
};

/// `module { ... }` holding every description's op.
std::string toMlirModule(const std::vector<Description> &descriptions);

/// The conformance matrix: every layout x dtype pair, with heads x head_dim x
/// block size covered pairwise, plus slot_mapping and fused_append
/// descriptions for the paged layouts and the few descriptions the GPU-only
/// tests use (names starting with `gpu_`). A few hundred in all.
std::vector<Description> conformanceMatrix();

/// A subset of conformanceMatrix() (same names) small enough for
/// compute-sanitizer: each layout and kind, each dtype pair, each block size,
/// head count and head dim at least once.
std::vector<Description> reducedMatrix();

/// The description named `name` in `matrix`, if any.
std::optional<Description>
findDescription(const std::vector<Description> &matrix, std::string_view name);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_DESCRIPTION_H
