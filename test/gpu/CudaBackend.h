//===- CudaBackend.h - The conformance Backend on a CUDA device -*- C++ -*-===//
//
// Memory and copies through the CUDA runtime, one prebuilt bundle for every
// description (the matrix, compiled at build time), and a non-blocking stream
// of its own, so a kernel that ignored the stream it was given would race
// the copies and be caught.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TEST_GPU_CUDABACKEND_H
#define KVGEN_TEST_GPU_CUDABACKEND_H

#include "conformance/Backend.h"

#include <cuda_runtime.h>

#include <map>
#include <string>

namespace kvgen::gpu {

/// Why there is no usable device ("" if there is one).
std::string noDeviceReason();

class CudaBackend : public conformance::Backend {
public:
  /// Makes `device`'s primary context current on the calling thread (kvrt
  /// launches in the current context) and creates the stream there.
  /// `bundle` stays owned by the caller. Memory is allocated on the calling
  /// thread's current device: use a backend of another device than 0 from a
  /// thread that keeps that device current (the multi-GPU test does).
  bool init(kvrt_bundle *bundle, std::string &error, int device = 0);
  ~CudaBackend() override;

  DLDevice device() const override { return DLDevice{kDLCUDA, deviceId}; }
  void *allocate(size_t bytes) override;
  void deallocate(void *pointer) override;
  /// Through the driver's virtual memory API: the buffer ends at the end of
  /// its mapping, and the next granule of the reserved range is unmapped.
  void *allocateFenced(size_t bytes) override;
  void deallocateFenced(void *pointer) override;
  // Every copy and fill is queued on stream() and waited for, so it is
  // ordered with the kernels on that stream and complete when it returns.
  bool copyToDevice(void *deviceDst, const void *hostSrc,
                    size_t bytes) override;
  bool copyToHost(void *hostDst, const void *deviceSrc, size_t bytes) override;
  bool fill(void *deviceDst, unsigned char byte, size_t bytes) override;
  kvrt_bundle *bundleFor(const conformance::Description &desc) override;
  kvrt_stream stream() override { return cudaStream; }
  bool synchronize() override;
  std::string lastError() const override { return error; }

  cudaStream_t cuda() const { return cudaStream; }

private:
  bool check(cudaError_t status, const char *what);

  struct Fenced {
    unsigned long long base = 0; // CUdeviceptr
    size_t reserved = 0, mapped = 0;
    unsigned long long handle = 0; // CUmemGenericAllocationHandle
  };

  int deviceId = 0;
  std::map<void *, Fenced> fenced;
  kvrt_bundle *bundle = nullptr;
  cudaStream_t cudaStream = nullptr;
  std::string error;
};

} // namespace kvgen::gpu

#endif // KVGEN_TEST_GPU_CUDABACKEND_H
