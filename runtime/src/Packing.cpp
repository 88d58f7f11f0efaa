//===- Packing.cpp - the kernel's void *params[] --------------------------===//

#include "Packing.h"

namespace kvrt::impl {

PackedParams::PackedParams(const LaunchPlan &plan) {
  for (int i = 0; i < plan.numBuffers; ++i) {
    // One pointer per buffer, its first element: the kernel indexes from it
    // with the explicit stride scalars.
    pointers[i] = plan.buffers[i].first;
    params[count++] = &pointers[i];
  }
  for (int i = 0; i < plan.numScalars; ++i) {
    scalars[i] = plan.scalars[i];
    params[count++] = &scalars[i];
  }
}

} // namespace kvrt::impl
