//===- Packing.h - a launch's parameters in ABI order -----------*- C++ -*-===//
//
// Planning (Validation.h) checks the caller's tensors and records every
// parameter's value by its ABI id; packing puts them in the order of the
// kind's parameter list (include/kvgen/ABI/Params.def), refusing a value the
// kernels cannot take (docs/KERNEL-ABI.md, "Limits"), and builds the
// kernel's void *params[] from the plan: one pointer per buffer (its first
// element, data + byte_offset), then the i32 scalars in order.
// cuLaunchKernel and the host target's packed wrapper both take one pointer
// per parameter, so one array serves both. The storage lives inside the
// object, on the caller's stack: the launch path allocates nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PACKING_H
#define KVRT_SRC_PACKING_H

#include "Validation.h"

namespace kvrt::impl {

/// One description's parameters, in ABI order (buffers first). Walking the
/// ABI's table of every kind's parameters for each launch that plans cost
/// more than the packing itself, so each list (kind, quantization, K-only
/// and prologue parts) is made once, on first use.
struct ParamList {
  const abi::ParamInfo *params[kMaxParams];
  int count = 0;
};
const ParamList &paramList(KernelKind kind, Quantization quant, bool kOnly,
                           abi::PrologueParts prologue = {});

/// The value of each parameter of one launch, by abi::Param.
struct ParamValues {
  const TensorView *views[kNumParamIds] = {};
  int64_t scalars[kNumParamIds] = {};

  const TensorView *view(abi::Param param) const {
    return views[static_cast<int>(param)];
  }
  void set(abi::Param param, const TensorView &view) {
    views[static_cast<int>(param)] = &view;
  }
  void set(abi::Param param, int64_t value) {
    scalars[static_cast<int>(param)] = value;
  }
};

/// Copies the values into `plan` in the kind's ABI order and records where
/// each parameter's buffer is and which the vector promise covers.
Status packInAbiOrder(const KernelDescription &kernel,
                      const ParamValues &values, LaunchPlan *plan);

class PackedParams {
public:
  explicit PackedParams(const LaunchPlan &plan);
  // `params` points into this object: a copy would point into the original.
  PackedParams(const PackedParams &) = delete;
  PackedParams &operator=(const PackedParams &) = delete;

  void **data() { return params; }
  int size() const { return count; }

private:
  void *pointers[kMaxBuffers];
  int32_t scalars[kMaxScalars];
  void *params[kMaxParams];
  int count = 0;
};

} // namespace kvrt::impl

#endif // KVRT_SRC_PACKING_H
