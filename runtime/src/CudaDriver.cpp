//===- CudaDriver.cpp - dlopen libcuda.so.1 and resolve the table ---------===//

#include "CudaDriver.h"

#include <dlfcn.h>

namespace kvrt::impl {

Status CudaDriver::load(const char *library, CudaDriver *out) {
  void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    return KVRT_ERROR(KVRT_ERROR_NO_DRIVER,
                      "no CUDA driver: %s could not be loaded (%s); GPU "
                      "launches need the NVIDIA driver, host (kDLCPU) "
                      "launches do not",
                      library, reason ? reason : "unknown reason");
  }
  CudaDriver driver;
#define KVRT_CU_REQUIRED(member, symbol, ...)                                  \
  driver.member =                                                              \
      reinterpret_cast<decltype(driver.member)>(dlsym(handle, symbol));        \
  if (!driver.member)                                                          \
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,                                    \
                      "the CUDA driver %s has no entry point %s (driver too "  \
                      "old?)",                                                 \
                      library, symbol);
#define KVRT_CU_OPTIONAL(member, symbol, ...)                                  \
  driver.member =                                                              \
      reinterpret_cast<decltype(driver.member)>(dlsym(handle, symbol));
#include "CudaSymbolTable.h"
#undef KVRT_CU_REQUIRED
#undef KVRT_CU_OPTIONAL
  *out = driver;
  return Status();
}

Status CudaDriver::initialize(const char *library, CudaDriver *out) {
  CudaDriver driver;
  KVRT_RETURN_IF_ERROR(load(library, &driver));
  if (cuda::CUresult error = driver.cuInit(0))
    return KVRT_ERROR(KVRT_ERROR_NO_DEVICE,
                      "no usable CUDA device: cuInit failed: %s",
                      driver.describe(error).c_str());
  int count = 0;
  if (cuda::CUresult error = driver.cuDeviceGetCount(&count))
    return KVRT_ERROR(KVRT_ERROR_NO_DEVICE,
                      "no usable CUDA device: cuDeviceGetCount failed: %s",
                      driver.describe(error).c_str());
  if (count == 0)
    return KVRT_ERROR(KVRT_ERROR_NO_DEVICE,
                      "no usable CUDA device: the driver reports zero "
                      "devices");
  *out = driver;
  return Status();
}

static const char *processLibrary = "libcuda.so.1";

void CudaDriver::setLibraryForTesting(const char *library) {
  processLibrary = library;
}

namespace {
struct ProcessDriver {
  CudaDriver driver;
  Status status;
};
} // namespace

Status CudaDriver::get(const CudaDriver **out) {
  // Initialized once, thread-safely (C++11 function-local static); a failure
  // is kept too: retrying dlopen on every launch would only slow a host
  // that has no driver.
  static const ProcessDriver process = [] {
    ProcessDriver result;
    result.status = initialize(processLibrary, &result.driver);
    return result;
  }();
  if (!process.status.ok())
    return process.status;
  *out = &process.driver;
  return Status();
}

std::string CudaDriver::describe(CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  if (cuGetErrorName(result, &name) != cuda::CUDA_SUCCESS || !name)
    name = "unknown CUresult";
  if (cuGetErrorString(result, &text) != cuda::CUDA_SUCCESS || !text)
    text = "no description";
  return formatString("%s (%d: %s)", name, result, text);
}

Status CudaDriver::check(CUresult result, const char *call, const char *file,
                         int line) const {
  if (result == cuda::CUDA_SUCCESS)
    return Status();
  return Status::error(
      KVRT_ERROR_DRIVER,
      formatString("%s failed: %s", call, describe(result).c_str()), file,
      line);
}

} // namespace kvrt::impl
