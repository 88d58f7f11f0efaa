//===- CudaDriver.h - the CUDA driver, resolved at run time ---------------===//
//
// kvrt links no CUDA library: the driver is dlopen'ed from libcuda.so.1 at the
// first GPU launch, so kvrt builds, links and runs its host path on machines
// without a GPU, and says so clearly when a GPU launch is asked for there.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_CUDADRIVER_H
#define KVRT_SRC_CUDADRIVER_H

#include "CudaTypes.h"
#include "Status.h"

namespace kvrt::impl {

class CudaDriver {
public:
  using CUresult = cuda::CUresult;
  using CUdevice = cuda::CUdevice;
  using CUdeviceptr = cuda::CUdeviceptr;
  using CUcontext = cuda::CUcontext;
  using CUmodule = cuda::CUmodule;
  using CUfunction = cuda::CUfunction;
  using CUstream = cuda::CUstream;
  using CUdevice_attribute = cuda::CUdevice_attribute;
  using CUjit_option = cuda::CUjit_option;
  using CUpointer_attribute = cuda::CUpointer_attribute;
  using CUlaunchConfig = cuda::CUlaunchConfig;

#define KVRT_CU_REQUIRED(member, symbol, ...)                                  \
  CUresult (*member)(__VA_ARGS__) = nullptr;
#define KVRT_CU_OPTIONAL(member, symbol, ...)                                  \
  CUresult (*member)(__VA_ARGS__) = nullptr;
#include "CudaSymbolTable.h"
#undef KVRT_CU_REQUIRED
#undef KVRT_CU_OPTIONAL

  /// The process-wide driver: loaded, resolved and initialized (cuInit, at
  /// least one device) on the first call; later calls return the same result,
  /// failure included, without retrying.
  static Status get(const CudaDriver **out);

  /// load() plus cuInit and at least one device: KVRT_ERROR_NO_DEVICE if
  /// cuInit fails or the driver reports no device. Uncached.
  static Status initialize(const char *library, CudaDriver *out);

  /// The library get() loads: "libcuda.so.1". Tests of the GPU path point it
  /// at a fake driver before the first GPU launch; not exported from kvrt.
  static void setLibraryForTesting(const char *library);

  /// Loads `library` and resolves the table into `out`, without cuInit. A
  /// library that cannot be opened is KVRT_ERROR_NO_DRIVER, a missing
  /// required entry point KVRT_ERROR_NOT_FOUND. The library stays loaded for
  /// the life of the process: contexts outlive any one caller.
  static Status load(const char *library, CudaDriver *out);

  /// OK for CUDA_SUCCESS, else KVRT_ERROR_DRIVER naming the call and the
  /// driver's own name and description of the error.
  Status check(CUresult result, const char *call, const char *file,
               int line) const;

  /// "CUDA_ERROR_INVALID_VALUE (invalid argument)".
  std::string describe(CUresult result) const;
};

} // namespace kvrt::impl

#define KVRT_CUDA_CHECK(driver, call)                                          \
  KVRT_RETURN_IF_ERROR((driver).check((driver).call, #call, __FILE__, __LINE__))

#endif // KVRT_SRC_CUDADRIVER_H
