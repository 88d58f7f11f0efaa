//===- ProgrammaticLaunch.h - overlap a launch with its producer's tail ---===//
//
// Programmatic dependent launch (sm_90+): a kernel launched with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start before the
// previous kernel in its stream has finished, so its launch latency hides
// behind that kernel's tail. It is correct only for a kernel that waits
// (griddepcontrol.wait) before it reads anything the previous kernel may
// write, which kvgen's kv-programmatic-launch pass guarantees and the
// manifest records per kernel ("programmatic_launch"). kvrt uses it only
// when asked (kvrt_bundle_set_programmatic_launch, or KVRT_PDL=1).
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PROGRAMMATICLAUNCH_H
#define KVRT_SRC_PROGRAMMATICLAUNCH_H

#include "CudaDriver.h"
#include "Status.h"

namespace kvrt::impl {

/// Whether KVRT_PDL=1 asks for programmatic launch at load.
bool programmaticFromEnvironment();

/// A 1-D grid of 2-D blocks: kvgen's launch geometry.
struct LaunchShape {
  unsigned blocks;
  unsigned threadsX;
  unsigned threadsY;
};

/// Launches `function` through cuLaunchKernelEx with programmatic stream
/// serialization allowed. KVRT_ERROR_NOT_FOUND (nothing launched) where the
/// driver has no cuLaunchKernelEx.
Status launchProgrammatic(const CudaDriver &driver, cuda::CUfunction function,
                          const LaunchShape &shape, cuda::CUstream stream,
                          void **params);

} // namespace kvrt::impl

#endif // KVRT_SRC_PROGRAMMATICLAUNCH_H
