//===- PlanParts.h - the parts every launch plan is made of -----*- C++ -*-===//
//
// What Validation.cpp's plans share with the plans kept in files of their
// own (MlaPlan.cpp): the parameter values by ABI id, the cache views, the
// checks of caches, scales, requests and overlaps, and the packing in ABI
// order. Internal to kvrt.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PLANPARTS_H
#define KVRT_SRC_PLANPARTS_H

#include "Validation.h"

namespace kvrt::impl {

/// The value of each parameter of one launch, by abi::Param.
struct ParamValues {
  const TensorView *views[kNumParamIds] = {};
  int64_t scalars[kNumParamIds] = {};

  void set(abi::Param param, const TensorView &view) {
    views[static_cast<int>(param)] = &view;
  }
  void set(abi::Param param, int64_t value) {
    scalars[static_cast<int>(param)] = value;
  }
};

/// The tensors of an append-like launch other than its rows and indices.
struct CacheViews {
  TensorView key, value;
  /// What was passed, for the range checks: the stacked tensor once for a
  /// stacked layout, else the two caches.
  TensorView stacked;
  const TensorView *whole[2];
  int numWhole = 0;
  /// key_scale, value_scale or the two scale caches, by the description.
  TensorView scales[2];
  int numScales = 0;
};

/// The four stride scalars (block, head, pos, dim) of a cache view, per
/// docs/KERNEL-ABI.md's offset table: read at the layout's axes (of the K or
/// V view, for a stacked cache).
void setCacheStrides(ParamValues *values, const CacheDescription &cache,
                     bool isValue, const TensorView &view);

/// Copies the values into `plan` in the kind's ABI order and records where
/// checked mode and the vector promise find their tensors.
Status packInAbiOrder(const KernelDescription &kernel,
                      const ParamValues &values, LaunchPlan *plan);

/// The caches of a launch (value_cache NULL for a cache without V).
Status checkCaches(const KernelDescription &kernel, const OperationSpecs &specs,
                   const DLTensor *keyCache, const DLTensor *valueCache,
                   CacheViews *out);

/// The scale tensors of a launch: those the description takes are checked
/// (NULL refused), the others must be NULL. `rows` binds num_tokens.
Status checkScales(const KernelDescription &kernel, const OperationSpecs &specs,
                   const DLTensor *const given[4], const TensorView &rows,
                   CacheViews *caches, ParamValues *values);

/// The caches (and, for an append, the dynamic scale caches) the kernel
/// writes must not share bytes with anything else of the launch.
Status checkWritesDisjoint(const TensorView *const *written, int numWritten,
                           const TensorView *const *others, int numOthers);

/// The rows, caches and scales shared by append, fused_append and
/// paged_kv_append; for a cache without V, `valueView` is the key's.
Status checkAppendTensors(const KernelDescription &kernel,
                          const OperationSpecs &specs, const DLTensor *key,
                          const DLTensor *value, const DLTensor *keyCache,
                          const DLTensor *valueCache,
                          const DLTensor *const scales[4], TensorView *keyView,
                          TensorView *valueView, CacheViews *caches,
                          ParamValues *values);

/// What an append-like launch writes (Params.def's KVGEN_ABI_KERNEL_WRITES
/// for its kind): the caches, and a dynamic description's scale caches.
int writtenByAppend(const KernelDescription &kernel, const CacheViews &caches,
                    const TensorView *written[4]);

/// The block table, query_start_loc and context_lens of a fused launch.
Status checkRequests(const DLTensor *blockTable, const DLTensor *queryStartLoc,
                     const DLTensor *contextLens, TensorView *table,
                     TensorView *starts, TensorView *lens, ParamValues *values);

} // namespace kvrt::impl

#endif // KVRT_SRC_PLANPARTS_H
