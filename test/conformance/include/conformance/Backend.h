//===- Backend.h - Where the conformance cases run --------------*- C++ -*-===//
//
// The cases only need memory, copies, a stream and a bundle that holds the
// description's kernels; everything else goes through kvrt exactly as an
// application would call it. A Backend supplies those for one device kind:
// the GPU suite's Backend uses the CUDA runtime and one prebuilt bundle, the
// host suite's JIT-compiles each description and registers host kernels
// (kvrt_bundle_set_host_kernel) so the same cases run on kDLCPU tensors.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_BACKEND_H
#define KVGEN_CONFORMANCE_BACKEND_H

#include "conformance/Description.h"

#include <dlpack/dlpack.h>
#include <kvrt/kvrt.h>

#include <cstddef>
#include <string>

namespace kvgen::conformance {

/// Every method that can fail returns false and leaves the reason in
/// lastError(); a failure fails the case that asked, not the suite.
class Backend {
public:
  virtual ~Backend() = default;

  /// The device the tensors are on (kDLCUDA or kDLCPU, and its id).
  virtual DLDevice device() const = 0;

  /// Device memory, aligned to at least 256 bytes (what cudaMalloc gives);
  /// nullptr on failure. `bytes` may be 0 (return a valid pointer anyway).
  virtual void *allocate(size_t bytes) = 0;
  virtual void deallocate(void *pointer) = 0;

  /// `bytes` (a multiple of 256) of device memory that end exactly where an
  /// inaccessible address range begins, so a kernel that reads past the end
  /// faults (or is reported by compute-sanitizer) instead of reading some
  /// neighbour. The padding case puts K/V rows that must never be read
  /// there. nullptr where the Backend cannot (the default): the case then
  /// backs every row with memory and that one check is lost. Freed with
  /// deallocateFenced().
  virtual void *allocateFenced(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void deallocateFenced(void *pointer) { (void)pointer; }

  /// Synchronous with respect to the host: when a copy returns, the data is
  /// there. Copies do not wait for work queued on stream(): the runner calls
  /// synchronize() before it reads results.
  virtual bool copyToDevice(void *deviceDst, const void *hostSrc,
                            size_t bytes) = 0;
  virtual bool copyToHost(void *hostDst, const void *deviceSrc,
                          size_t bytes) = 0;
  virtual bool fill(void *deviceDst, unsigned char byte, size_t bytes) = 0;

  /// A bundle that holds every kernel of `desc` (desc.kernelNames()), owned
  /// by the Backend and alive until it is destroyed or the next call (the
  /// runner asks once per description); nullptr on failure (e.g. the
  /// description did not compile).
  virtual kvrt_bundle *bundleFor(const Description &desc) = 0;

  /// The stream the runner passes to kvrt (nullptr: the default stream).
  virtual kvrt_stream stream() = 0;
  /// Waits for everything queued on stream().
  virtual bool synchronize() = 0;

  /// Why the last failing call failed.
  virtual std::string lastError() const = 0;
};

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_BACKEND_H
