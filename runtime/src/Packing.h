//===- Packing.h - the kernel's void *params[] ----------------------------===//
//
// docs/KERNEL-ABI.md, "Parameters": one pointer per buffer (its first
// element, data + byte_offset), then the i32 scalars in order. cuLaunchKernel
// and the host target's packed wrapper both take one pointer per parameter, so
// one array serves both. The storage lives inside the object, on the caller's
// stack: the launch path allocates nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PACKING_H
#define KVRT_SRC_PACKING_H

#include "Validation.h"

namespace kvrt::impl {

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
