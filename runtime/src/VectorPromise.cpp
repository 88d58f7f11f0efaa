//===- VectorPromise.cpp - may a launch use the vector variant? -----------===//
//
// The vector variant assumes aligned base pointers, a unit inner stride and
// outer strides that are multiples of its vector width (docs/KERNEL-ABI.md,
// "The vector promise"). AUTO checks without allocating and falls back to
// the scalar variant; a forced VECTOR launch is refused with the breach.
//

#include "Validation.h"

namespace kvrt::impl {

bool checkVectorPromise(const LaunchPlan &plan, const KernelDescription &vector,
                        PromiseBreach *breach) {
  // Powers of two in practice: masks instead of 64-bit divisions.
  uint64_t alignmentMask = static_cast<uint64_t>(vector.alignment) - 1;
  int64_t elems = vector.vectorElems;
  bool elemsPowerOfTwo = (elems & (elems - 1)) == 0;
  auto multiple = [&](int64_t stride) {
    return elemsPowerOfTwo ? (stride & (elems - 1)) == 0 : stride % elems == 0;
  };
  for (int p = 0; p < plan.numPromised; ++p) {
    const TensorView &view = plan.buffers[plan.promised[p]];
    if (view.extent == 0)
      continue;
    breach->view = &view;
    if (view.begin() & alignmentMask) {
      breach->rule = PromiseBreach::Alignment;
      return false;
    }
    int inner = view.rank - 1;
    for (int i = 0; i < view.rank; ++i) {
      if (view.shape[i] == 1)
        continue;
      if (i == inner && view.strides[i] != 1) {
        breach->rule = PromiseBreach::InnerStride;
        breach->dim = i;
        return false;
      }
      if (i != inner && !multiple(view.strides[i])) {
        breach->rule = PromiseBreach::OuterStride;
        breach->dim = i;
        return false;
      }
    }
  }
  breach->view = nullptr;
  return true;
}

Status describeBreach(const PromiseBreach &breach,
                      const KernelDescription &vector) {
  const TensorView &view = *breach.view;
  switch (breach.rule) {
  case PromiseBreach::Alignment:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: data + byte_offset (%p) is not aligned to %lld "
                      "bytes, which the %s variant '%s' assumes (AUTO "
                      "would use the scalar variant)",
                      view.name, static_cast<void *>(view.first),
                      static_cast<long long>(vector.alignment),
                      variantName(vector.variant), vector.name.c_str());
  case PromiseBreach::InnerStride:
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: stride[%d] is %lld but the %s variant '%s' "
                      "assumes a contiguous innermost dimension (stride 1) "
                      "(AUTO would use the scalar variant)",
                      view.name, breach.dim,
                      static_cast<long long>(view.strides[breach.dim]),
                      variantName(vector.variant), vector.name.c_str());
  case PromiseBreach::OuterStride:
    break;
  }
  return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: stride[%d] is %lld, not a multiple of vector_elems "
                    "(%lld), which the %s variant '%s' assumes (AUTO would "
                    "use the scalar variant)",
                    view.name, breach.dim,
                    static_cast<long long>(view.strides[breach.dim]),
                    static_cast<long long>(vector.vectorElems),
                    variantName(vector.variant), vector.name.c_str());
}

} // namespace kvrt::impl
