//===- Bundle.h - kvrt_bundle and the launches ------------------*- C++ -*-===//

#ifndef KVRT_SRC_BUNDLE_H
#define KVRT_SRC_BUNDLE_H

#include "Args.h"
#include "Checked.h"
#include "GpuLauncher.h"
#include "Manifest.h"
#include "PlanCache.h"
#include "Status.h"
#include "Validation.h"

#include <atomic>
#include <memory>

namespace kvrt::impl {
/// Whether the environment variable `name` is "1": KVRT_CHECKED asks for
/// checked mode at load, KVRT_PDL for programmatic launch.
bool environmentFlag(const char *name);
} // namespace kvrt::impl

struct kvrt_bundle {
  explicit kvrt_bundle(kvrt::impl::Manifest parsed)
      : manifest(std::move(parsed)),
        hostKernels(new std::atomic<kvrt_host_kernel>[manifest.kernels.size()]),
        gpu(manifest, id), checked(kvrt::impl::environmentFlag("KVRT_CHECKED")),
        programmatic(kvrt::impl::environmentFlag("KVRT_PDL")) {
    for (size_t i = 0; i < manifest.kernels.size(); ++i)
      hostKernels[i].store(nullptr, std::memory_order_relaxed);
    for (const kvrt::impl::Operation &operation : manifest.operations)
      specs.push_back(kvrt::impl::makeSpecs(
          kvrt::impl::describingKernel(manifest, operation)));
  }

  /// Unique in the process, never reused (PlanCache's key).
  const uint64_t id = kvrt::impl::nextBundleId();
  /// Immutable after load: launches read it without a lock.
  const kvrt::impl::Manifest manifest;
  /// Per manifest operation: what its tensors must look like.
  std::vector<kvrt::impl::OperationSpecs> specs;
  /// Per manifest kernel; atomic so that registering one races no launch.
  std::unique_ptr<std::atomic<kvrt_host_kernel>[]> hostKernels;
  /// Declared after `manifest`, which it refers to.
  kvrt::impl::GpuLauncher gpu;
  /// Checked mode (Checked.h): KVRT_CHECKED=1 at load, or
  /// kvrt_bundle_set_checked.
  std::atomic<bool> checked;
  /// Programmatic dependent launch (GpuLauncher.h): KVRT_PDL=1 at
  /// load, or kvrt_bundle_set_programmatic_launch.
  std::atomic<bool> programmatic;
};

namespace kvrt::impl {

Status loadBundle(const char *data, size_t size, kvrt_bundle **out);
Status loadBundleFile(const char *path, kvrt_bundle **out);
Status setChecked(kvrt_bundle *bundle, int enabled);
Status setProgrammaticLaunch(kvrt_bundle *bundle, int enabled);
Status setHostKernel(kvrt_bundle *bundle, const char *kernelName,
                     kvrt_host_kernel fn);
/// Plans (or finds the plan of) a launch of any kind and runs it.
template <typename Args>
Status launch(kvrt_bundle *bundle, const Args *args, kvrt_stream stream);

} // namespace kvrt::impl

#endif // KVRT_SRC_BUNDLE_H
