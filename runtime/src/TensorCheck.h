//===- TensorCheck.h - one DLTensor against what the kernel expects -------===//
//
// The rules of one tensor (presence, device, dtype, rank, shape, strides,
// the memory it addresses) and the rules between two tensors of a launch
// (one device, one extent, no aliasing of what the kernel writes). Each rule
// is one check with one message: "<tensor>: <what is wrong>, <the rule>".
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_TENSORCHECK_H
#define KVRT_SRC_TENSORCHECK_H

#include "Manifest.h"
#include "Status.h"

#include <dlpack/dlpack.h>

namespace kvrt::impl {

constexpr int kMaxRank = 5;

/// What one tensor argument must look like. Built once per description, at
/// load time: a launch only compares against it.
struct TensorSpec {
  const char *name = nullptr;
  DType dtype = DType::BF16;
  /// The kernel whose description fixes the dtype and shape; NULL where the
  /// ABI fixes them (index tensors).
  const char *kernel = nullptr;
  int rank = 0;
  const char *shapeText = "";
  const char *dimNames[kMaxRank] = {};
  /// The expected extent of each dimension; -1 where the caller binds it
  /// (num_tokens, num_blocks, num_reqs, ...).
  int64_t dims[kMaxRank] = {-1, -1, -1, -1, -1};
  /// Set for caches and index tensors: the rule an innermost stride other
  /// than 1 breaks.
  const char *innerStrideRule = nullptr;
  /// Caches: no two elements may share an address, or two slots would write
  /// the same bytes.
  bool injective = false;
  /// Scale tensors and scale caches: compact row-major (the kernel indexes
  /// them without strides).
  bool compact = false;
  /// An NVFP4 cache: compact row-major below its block dimension (the
  /// kernel addresses a block as one page of rows), and raw bytes (int8 or
  /// uint8).
  bool compactBelowBlock = false;
  bool rawBytes = false;
};

/// One validated tensor, or the K or V view of a stacked cache. Left
/// uninitialized by default: a launch fills only what it uses.
struct TensorView {
  const char *name;
  const DLTensor *tensor;
  /// The first element: data + byte_offset (+ the V offset of a view).
  char *first;
  size_t elementBytes;
  int rank;
  int64_t shape[kMaxRank];
  /// In elements; compact row-major where DLPack's strides are NULL.
  int64_t strides[kMaxRank];
  /// Elements from the first to one past the last reachable (0 if empty).
  int64_t extent;

  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(first); }
  uintptr_t end() const { return begin() + extent * elementBytes; }
};

/// Checks `tensor` against `spec` and fills `out`.
Status checkTensor(const DLTensor *tensor, const TensorSpec &spec,
                   TensorView *out);

/// Both on one device.
Status checkSameDevice(const TensorView &first, const TensorView &other);

/// `view.shape[dim]` equals `reference.shape[referenceDim] + adjust`.
Status checkSameExtent(const TensorView &reference, int referenceDim,
                       const TensorView &view, int dim, const char *dimName,
                       int64_t adjust = 0);

/// A tensor the kernel writes shares no byte with `other`: the kernel would
/// read what it just wrote, or two caches would interleave.
Status checkDisjoint(const TensorView &written, const TensorView &other);

/// "cuda:0", "cpu:0".
std::string describeDevice(DLDevice device);
/// "bf16", "f16", "u8", or "code 7, 16 bits" for what kvrt does not name.
std::string describeDType(DLDataType dtype);

/// The K (index 0) or V (index 1) view of a stacked cache [num_blocks, 2,
/// ...]: dimension 1 (the Side axis, second in every stacked layout:
/// abi::isWellFormed) dropped, the first element moved to the V half.
void stackedView(const TensorView &stacked, int index, const char *name,
                 TensorView *view);

} // namespace kvrt::impl

#endif // KVRT_SRC_TENSORCHECK_H
