//===- CudaTypes.h - the few CUDA driver types kvrt uses ------------------===//
//
// Declared here instead of including cuda.h so that kvrt builds on a machine
// without the CUDA toolkit. The values are the driver ABI, stable across CUDA
// releases; CudaAbiTest checks them against cuda.h wherever the toolkit is
// installed.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_CUDATYPES_H
#define KVRT_SRC_CUDATYPES_H

#include <cstddef>

namespace kvrt::impl::cuda {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef int CUdevice_attribute;
typedef int CUjit_option;
typedef int CUpointer_attribute;

enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_NOT_FOUND = 500,
};

enum : CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

enum : CUjit_option {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

enum : CUpointer_attribute {
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
};

// CUmemorytype.
enum : unsigned {
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
};

// cuLaunchKernelEx's configuration (CUDA 12.0+), for programmatic dependent
// launch: only the one attribute kvrt sets is named.
typedef int CUlaunchAttributeID;
enum : CUlaunchAttributeID {
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};
typedef union CUlaunchAttributeValue {
  char pad[64];
  int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

} // namespace kvrt::impl::cuda

#endif // KVRT_SRC_CUDATYPES_H
