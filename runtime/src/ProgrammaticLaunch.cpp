//===- ProgrammaticLaunch.cpp - overlap a launch with its producer's tail -===//

#include "ProgrammaticLaunch.h"

#include <cstdlib>
#include <cstring>

namespace kvrt::impl {

using namespace cuda;

bool programmaticFromEnvironment() {
  const char *value = std::getenv("KVRT_PDL");
  return value && std::strcmp(value, "1") == 0;
}

Status launchProgrammatic(const CudaDriver &driver, CUfunction function,
                          const LaunchShape &shape, CUstream stream,
                          void **params) {
  if (!driver.cuLaunchKernelEx)
    return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                      "programmatic launch needs cuLaunchKernelEx (a CUDA 12 "
                      "driver), which this driver lacks; turn it off "
                      "(kvrt_bundle_set_programmatic_launch(bundle, 0), or "
                      "unset KVRT_PDL)");
  CUlaunchAttribute attribute;
  std::memset(&attribute, 0, sizeof(attribute));
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config;
  std::memset(&config, 0, sizeof(config));
  config.gridDimX = shape.blocks;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = shape.threadsX;
  config.blockDimY = shape.threadsY;
  config.blockDimZ = 1;
  config.sharedMemBytes = 0;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUresult result = driver.cuLaunchKernelEx(&config, function, params,
                                            /*extra=*/nullptr);
  return driver.check(result, "cuLaunchKernelEx", __FILE__, __LINE__);
}

} // namespace kvrt::impl
