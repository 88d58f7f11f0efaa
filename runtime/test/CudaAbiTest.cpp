//===- CudaAbiTest.cpp - kvrt's CUDA declarations against cuda.h ----------===//
//
// Built only where the CUDA toolkit is installed: kvrt itself never includes
// cuda.h. Checks the enum values kvrt declares, and that each entry of the
// symbol table is the ABI symbol cuda.h maps the API name to (so that dlsym
// finds the same function a program compiled against cuda.h would call).
//
//===----------------------------------------------------------------------===//

#include "CudaTypes.h"

#include <cuda.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace ours = kvrt::impl::cuda;

// Compared as integers: the two sides are different enum types.
#define KVRT_SAME(name)                                                        \
  static_assert(static_cast<long long>(ours::name) ==                          \
                    static_cast<long long>(name),                              \
                #name)

KVRT_SAME(CUDA_SUCCESS);
KVRT_SAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
KVRT_SAME(CUDA_ERROR_NOT_FOUND);
KVRT_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
KVRT_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
KVRT_SAME(CU_JIT_INFO_LOG_BUFFER);
KVRT_SAME(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
KVRT_SAME(CU_JIT_ERROR_LOG_BUFFER);
KVRT_SAME(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
KVRT_SAME(CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
KVRT_SAME(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
KVRT_SAME(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
KVRT_SAME(CU_POINTER_ATTRIBUTE_RANGE_SIZE);
KVRT_SAME(CU_MEMORYTYPE_HOST);
KVRT_SAME(CU_MEMORYTYPE_DEVICE);
static_assert(sizeof(ours::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(sizeof(ours::CUdevice) == sizeof(CUdevice));
static_assert(sizeof(ours::CUresult) == sizeof(CUresult));
KVRT_SAME(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
static_assert(sizeof(ours::CUlaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(ours::CUlaunchAttribute, value) ==
              offsetof(CUlaunchAttribute, value));
static_assert(sizeof(ours::CUlaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(ours::CUlaunchConfig, hStream) ==
              offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(ours::CUlaunchConfig, attrs) ==
              offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(ours::CUlaunchConfig, numAttrs) ==
              offsetof(CUlaunchConfig, numAttrs));

#define KVRT_STRINGIFY(x) #x
// Expands cuda.h's #define (cuCtxPushCurrent -> cuCtxPushCurrent_v2) first.
#define KVRT_ABI_NAME(x) KVRT_STRINGIFY(x)

TEST(CudaAbi, SymbolTableNamesTheAbiSymbols) {
  int checked = 0;
#define KVRT_CU_REQUIRED(member, symbol, ...)                                  \
  EXPECT_EQ(std::string(symbol), KVRT_ABI_NAME(member));                       \
  ++checked;
#define KVRT_CU_OPTIONAL KVRT_CU_REQUIRED
#include "CudaSymbolTable.h"
#undef KVRT_CU_REQUIRED
#undef KVRT_CU_OPTIONAL
  EXPECT_GT(checked, 15);
}
