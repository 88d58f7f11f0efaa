//===- HostMemory.h - Host memory standing in for a device ------*- C++ -*-===//
//
// The memory half of a Backend for kDLCPU tensors: 256-byte aligned
// allocations (what cudaMalloc gives, so the vector variant's alignment
// promise holds as it does on a GPU), fenced allocations whose next page is
// PROT_NONE (a read past the stored rows faults, as compute-sanitizer would
// report on the GPU), synchronous copies, no stream. The host suite adds the
// JIT-compiled kernels; the harness's own tests add nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_HOSTMEMORY_H
#define KVGEN_CONFORMANCE_HOSTMEMORY_H

#include "conformance/Backend.h"

#include <cstddef>
#include <map>
#include <utility>

namespace kvgen::conformance {

class HostMemoryBackend : public Backend {
public:
  ~HostMemoryBackend() override;

  DLDevice device() const override { return DLDevice{kDLCPU, 0}; }
  void *allocate(size_t bytes) override;
  void deallocate(void *pointer) override;
  void *allocateFenced(size_t bytes) override;
  void deallocateFenced(void *pointer) override;
  bool copyToDevice(void *dst, const void *src, size_t bytes) override;
  bool copyToHost(void *dst, const void *src, size_t bytes) override;
  bool fill(void *dst, unsigned char byte, size_t bytes) override;
  kvrt_bundle *bundleFor(const Description &) override { return nullptr; }
  kvrt_stream stream() override { return nullptr; }
  bool synchronize() override { return true; }
  std::string lastError() const override { return ""; }

private:
  /// Fenced pointer -> (mapping, its length).
  std::map<void *, std::pair<void *, size_t>> fenced;
};

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_HOSTMEMORY_H
