//===- GpuLauncher.h - modules per context, and cuLaunchKernel ------------===//
//
// The bundle's PTX (or cubin) is loaded lazily, at the first GPU launch in a
// context, and kept: one module per CUDA context, shared by every kernel of
// the bundle. The context is the caller's current one, or, where none is
// current, the primary context of the tensors' device, which the launcher
// retains until the bundle is destroyed.
//
// Between two launches of one bundle on one thread, with the same context
// current, nothing the launcher resolves can change: the context's device
// (so the tensors' device check), the module loaded in it and the function.
// Each thread therefore remembers the last few (launcher, context, device,
// kernel) -> function it resolved, so that such a launch asks the driver
// only for the current context and its id (cuCtxGetCurrent, cuCtxGetId: a
// context recreated at the address of a destroyed one has a new id) before
// cuLaunchKernel. Only launches in the caller's current context are
// remembered; one that pushes the primary context resolves every time.
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

#ifndef KVRT_SRC_GPULAUNCHER_H
#define KVRT_SRC_GPULAUNCHER_H

#include "CudaDriver.h"
#include "Manifest.h"
#include "Packing.h"
#include "Validation.h"

#include <mutex>
#include <vector>

namespace kvrt::impl {

class GpuLauncher {
public:
  /// `id`: unique in the process, never reused (the bundle's).
  GpuLauncher(const Manifest &manifest, uint64_t id)
      : manifest(manifest), id(id) {}
  GpuLauncher(const GpuLauncher &) = delete;
  GpuLauncher &operator=(const GpuLauncher &) = delete;
  /// Unloads the modules and releases the primary contexts it retained.
  ~GpuLauncher();

  /// Launches manifest kernel `kernelIndex` on `stream`, asynchronously.
  /// With `programmatic`, through cuLaunchKernelEx with programmatic stream
  /// serialization (the kernel must wait for its producer itself);
  /// KVRT_ERROR_NOT_FOUND, nothing launched, where the driver lacks it.
  Status launch(const LaunchPlan &plan, int kernelIndex, PackedParams &params,
                kvrt_stream stream, bool programmatic = false);

  /// Copies `bytes` bytes at `view.first` (device memory of the plan's
  /// device) to `out` on `stream`, and waits for the copy: checked mode.
  Status copyToHost(const LaunchPlan &plan, const TensorView &view, void *out,
                    size_t bytes, kvrt_stream stream);

  /// Empty the calling thread's caches of verified allocation ranges and of
  /// resolved functions (tests).
  static void forgetVerifiedRanges();
  static void forgetResolvedFunctions();

private:
  using CUcontext = cuda::CUcontext;
  using CUdevice = cuda::CUdevice;
  using CUfunction = cuda::CUfunction;
  using CUmodule = cuda::CUmodule;

  struct LoadedModule {
    CUcontext context = nullptr;
    /// cuCtxGetId's unique id where the driver has it: a context created at
    /// the address of a destroyed one is a different context.
    unsigned long long contextId = 0;
    CUmodule module = nullptr;
    /// Per manifest kernel, resolved on first use.
    std::vector<CUfunction> functions;
  };
  struct PrimaryContext {
    CUdevice device = 0;
    CUcontext context = nullptr;
  };

  Status acquireContext(const CudaDriver &driver, const LaunchPlan &plan,
                        CUcontext *context, CUdevice *device, bool *push);
  Status checkPointers(const CudaDriver &driver, const LaunchPlan &plan) const;
  Status getFunction(const CudaDriver &driver, CUcontext context,
                     CUdevice device, int kernelIndex, CUfunction *out);
  Status loadModule(const CudaDriver &driver, CUdevice device, CUmodule *out);

  const Manifest &manifest;
  /// The resolved functions' key.
  const uint64_t id;
  /// Guards everything below; held to find or load a module, not to launch.
  std::mutex mutex;
  /// Set with the first module or retained context: what the destructor
  /// releases them through.
  const CudaDriver *driver = nullptr;
  std::vector<LoadedModule> modules;
  std::vector<PrimaryContext> primaries;
};

} // namespace kvrt::impl

#endif // KVRT_SRC_GPULAUNCHER_H
