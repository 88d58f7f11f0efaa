//===- GpuLauncher.h - modules per context, and cuLaunchKernel ------------===//
//
// The bundle's PTX (or cubin) is loaded lazily, at the first GPU launch in a
// context, and kept: one module per CUDA context, shared by every kernel of
// the bundle. The context is the caller's current one, or, where none is
// current, the primary context of the tensors' device, which the launcher
// retains until the bundle is destroyed.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_GPULAUNCHER_H
#define KVRT_SRC_GPULAUNCHER_H

#include "CudaDriver.h"
#include "FunctionCache.h"
#include "Manifest.h"
#include "Packing.h"
#include "Validation.h"

#include <mutex>
#include <vector>

namespace kvrt::impl {

class GpuLauncher {
public:
  explicit GpuLauncher(const Manifest &manifest)
      : manifest(manifest), id(nextLauncherId()) {}
  GpuLauncher(const GpuLauncher &) = delete;
  GpuLauncher &operator=(const GpuLauncher &) = delete;
  /// Unloads the modules and releases the primary contexts it retained.
  ~GpuLauncher();

  /// Launches manifest kernel `kernelIndex` on `stream`, asynchronously.
  /// With `programmatic`, through cuLaunchKernelEx with programmatic stream
  /// serialization (the kernel must wait for its producer itself).
  Status launch(const LaunchPlan &plan, int kernelIndex, PackedParams &params,
                kvrt_stream stream, bool programmatic = false);

  /// Copies `bytes` bytes at `view.first` (device memory of the plan's
  /// device) to `out` on `stream`, and waits for the copy: checked mode.
  Status copyToHost(const LaunchPlan &plan, const TensorView &view, void *out,
                    size_t bytes, kvrt_stream stream);

  /// Empties the calling thread's cache of verified allocation ranges.
  static void forgetVerifiedRanges();

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
  Status loadModule(const CudaDriver &driver, CUcontext context,
                    CUdevice device, CUmodule *out);

  const Manifest &manifest;
  /// FunctionCache's key: unique in the process.
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
