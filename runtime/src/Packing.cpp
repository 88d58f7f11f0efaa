//===- Packing.cpp - the kernel's void *params[] --------------------------===//

#include "Packing.h"

namespace kvrt::impl {

PackedParams::PackedParams(const LaunchPlan &plan) {
  for (int i = 0; i < plan.numBuffers; ++i) {
    const TensorView &view = plan.buffers[i];
    // The kernel indexes from the aligned pointer with the explicit stride
    // scalars, so the memref's own offset and stride are the identity; its
    // size is the extent, for the host target's bounds (informational).
    buffers[i] = {view.allocated, view.first, 0, view.extent, 1};
    MemRef1D &buffer = buffers[i];
    params[count++] = &buffer.allocated;
    params[count++] = &buffer.aligned;
    params[count++] = &buffer.offset;
    params[count++] = &buffer.size;
    params[count++] = &buffer.stride;
  }
  for (int i = 0; i < plan.numScalars; ++i) {
    scalars[i] = plan.scalars[i];
    params[count++] = &scalars[i];
  }
}

} // namespace kvrt::impl
