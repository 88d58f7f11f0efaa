//===- FunctionCache.h - a thread's resolved kernels, per current context -===//
//
// Between two launches of one bundle on one thread, with the same CUDA
// context current, nothing the launcher resolves can change: the context's
// device (so the tensors' device check), the module loaded in it and the
// function. Each thread remembers the last few (launcher, context, device,
// kernel) -> function it resolved, so that such a launch asks the driver
// only for the current context and its id (cuCtxGetCurrent, cuCtxGetId: a
// context recreated at the address of a destroyed one has a new id) before
// cuLaunchKernel. Only launches in the caller's current context are
// remembered; one that pushes the primary context resolves every time.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_FUNCTIONCACHE_H
#define KVRT_SRC_FUNCTIONCACHE_H

#include "CudaTypes.h"

#include <cstdint>

namespace kvrt::impl {

struct ResolvedFunction {
  /// The launcher's unique id (never reused); 0: an empty entry.
  uint64_t launcher = 0;
  cuda::CUcontext context = nullptr;
  unsigned long long contextId = 0;
  /// The tensors' device ordinal, checked against the context's device.
  int ordinal = -1;
  int kernelIndex = -1;
  cuda::CUfunction function = nullptr;
};

class FunctionCache {
public:
  /// The function remembered for these, or nullptr.
  static cuda::CUfunction find(uint64_t launcher, cuda::CUcontext context,
                               unsigned long long contextId, int ordinal,
                               int kernelIndex);
  static void remember(const ResolvedFunction &resolved);
  /// Forgets the calling thread's entries (tests).
  static void clear();
};

/// A process-wide id for a launcher, never reused.
uint64_t nextLauncherId();

} // namespace kvrt::impl

#endif // KVRT_SRC_FUNCTIONCACHE_H
