//===- Validation.h - check every tensor before a launch ------------------===//
//
// A launch is planned before anything runs: every DLTensor is checked against
// the kernel's description (docs/KERNEL-ABI.md, "Tensors kvrt accepts") and
// turned into a TensorView (shape, strides in elements, first element, extent)
// from which Packing builds the parameters. A refusal names the tensor and the
// rule. Planning touches no driver and allocates nothing unless it refuses.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_VALIDATION_H
#define KVRT_SRC_VALIDATION_H

#include "Manifest.h"
#include "Status.h"

#include "kvrt/kvrt.h"

namespace kvrt::impl {

constexpr int kMaxRank = 5;
constexpr int kMaxBuffers = 7;  // fused_append
constexpr int kMaxScalars = 19; // fused_append
constexpr int kMaxParams = kMaxBuffers * 5 + kMaxScalars;

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
};

/// The specs of an append-like description's K/V inputs and caches.
struct OperationSpecs {
  TensorSpec key, value, keyCache, valueCache;
};

OperationSpecs makeSpecs(const KernelDescription &kernel);

/// One validated tensor, or the K or V view of a dual_stacked cache. Left
/// uninitialized by default: a launch fills only what it uses.
struct TensorView {
  const char *name;
  const DLTensor *tensor;
  /// tensor->data: MLIR's "allocated pointer".
  char *allocated;
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

/// A launch that passed every check: the buffers in ABI order, the i64
/// scalars in ABI order, and the tensors the vector promise covers.
struct LaunchPlan {
  KernelKind kind = KernelKind::Append;
  const Operation *operation = nullptr;
  DLDevice device = {kDLCPU, 0};
  int64_t numTokens = 0;
  /// What checked mode reads (indices into `buffers`, -1 where the kind has
  /// no such tensor), and the cache's slots: num_blocks * block_size.
  int slotMapping = -1;
  int blockTable = -1;
  int queryStartLoc = -1;
  int contextLens = -1;
  int64_t numBlocks = 0;
  int64_t blockSize = 0;
  TensorView buffers[kMaxBuffers];
  int numBuffers = 0;
  int64_t scalars[kMaxScalars];
  int numScalars = 0;
  /// Indices into `buffers` of the tensors the vector variant reads or
  /// writes 16 bytes at a time.
  int promised[4];
  int numPromised = 0;
};

/// The first tensor, and its rule, that breaks the vector promise.
struct PromiseBreach {
  const TensorView *view = nullptr;
  enum Rule { Alignment, InnerStride, OuterStride } rule = Alignment;
  int dim = 0;
};

/// The description (cache, dtypes) shared by the variants of `operation`.
const KernelDescription &describingKernel(const Manifest &manifest,
                                          const Operation &operation);

Status planAppend(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs, const kvrt_append_args &args,
                  LaunchPlan *plan);
Status planSlotMapping(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_slot_mapping_args &args, LaunchPlan *plan);
Status planFusedAppend(const Manifest &manifest, const Operation &operation,
                       const OperationSpecs &specs,
                       const kvrt_fused_append_args &args, LaunchPlan *plan);

/// Whether every promised tensor meets `vector`'s promise; the first breach
/// otherwise. Allocates nothing: AUTO falls back without a message.
bool checkVectorPromise(const LaunchPlan &plan, const KernelDescription &vector,
                        PromiseBreach *breach);

/// The refusal for a forced VECTOR launch that breaks the promise.
Status describeBreach(const PromiseBreach &breach,
                      const KernelDescription &vector);

/// "cuda:0", "cpu:0".
std::string describeDevice(DLDevice device);
/// "bf16", "f16", "u8", or "code 7, 16 bits" for what kvrt does not name.
std::string describeDType(DLDataType dtype);

} // namespace kvrt::impl

#endif // KVRT_SRC_VALIDATION_H
