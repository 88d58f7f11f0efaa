//===- CudaSymbolTable.h - the driver entry points kvrt resolves ----------===//
//
// One X-macro table, expanded by CudaDriver.h (function-pointer members) and
// CudaDriver.cpp (dlsym). Names are the ABI symbols: where cuda.h maps an API
// to a versioned symbol (cuCtxPushCurrent -> cuCtxPushCurrent_v2) the table
// names the versioned one, because dlsym bypasses cuda.h's #defines and the
// unversioned symbol is the legacy ABI. cuCtxGetDevice stays unversioned: its
// _v2 (CUDA 13) takes a different argument list and older drivers lack it.
//
//   KVRT_CU_REQUIRED(member, "symbol", argument types...)
//   KVRT_CU_OPTIONAL(member, "symbol", argument types...)  may be missing
//
// This file has no include guard on purpose.
//
//===----------------------------------------------------------------------===//

KVRT_CU_REQUIRED(cuGetErrorName, "cuGetErrorName", CUresult, const char **)
KVRT_CU_REQUIRED(cuGetErrorString, "cuGetErrorString", CUresult, const char **)
KVRT_CU_REQUIRED(cuInit, "cuInit", unsigned int)
KVRT_CU_REQUIRED(cuDriverGetVersion, "cuDriverGetVersion", int *)
KVRT_CU_REQUIRED(cuDeviceGet, "cuDeviceGet", CUdevice *, int)
KVRT_CU_REQUIRED(cuDeviceGetCount, "cuDeviceGetCount", int *)
KVRT_CU_REQUIRED(cuDeviceGetAttribute, "cuDeviceGetAttribute", int *,
                 CUdevice_attribute, CUdevice)
KVRT_CU_REQUIRED(cuCtxGetCurrent, "cuCtxGetCurrent", CUcontext *)
KVRT_CU_REQUIRED(cuCtxGetDevice, "cuCtxGetDevice", CUdevice *)
KVRT_CU_REQUIRED(cuCtxSetCurrent, "cuCtxSetCurrent", CUcontext)
KVRT_CU_REQUIRED(cuCtxPushCurrent, "cuCtxPushCurrent_v2", CUcontext)
KVRT_CU_REQUIRED(cuCtxPopCurrent, "cuCtxPopCurrent_v2", CUcontext *)
KVRT_CU_REQUIRED(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",
                 CUcontext *, CUdevice)
KVRT_CU_REQUIRED(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
                 CUdevice)
KVRT_CU_REQUIRED(cuModuleLoadDataEx, "cuModuleLoadDataEx", CUmodule *,
                 const void *, unsigned int, CUjit_option *, void **)
KVRT_CU_REQUIRED(cuModuleGetFunction, "cuModuleGetFunction", CUfunction *,
                 CUmodule, const char *)
KVRT_CU_REQUIRED(cuModuleUnload, "cuModuleUnload", CUmodule)
KVRT_CU_REQUIRED(cuLaunchKernel, "cuLaunchKernel", CUfunction, unsigned int,
                 unsigned int, unsigned int, unsigned int, unsigned int,
                 unsigned int, unsigned int, CUstream, void **, void **)
KVRT_CU_REQUIRED(cuPointerGetAttributes, "cuPointerGetAttributes", unsigned int,
                 CUpointer_attribute *, void **, CUdeviceptr)
// Checked mode: the slots copied to the host before an append.
KVRT_CU_REQUIRED(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", void *, CUdeviceptr,
                 size_t, CUstream)
KVRT_CU_REQUIRED(cuStreamSynchronize, "cuStreamSynchronize", CUstream)
// CUDA 12.0+: a context's unique id. Keys the module cache where available, so
// that a context created at the address of a destroyed one is not mistaken
// for it.
KVRT_CU_OPTIONAL(cuCtxGetId, "cuCtxGetId", CUcontext, unsigned long long *)
// CUDA 12.0+: a launch with attributes. Only programmatic dependent launch
// (kvrt_bundle_set_programmatic_launch) uses it.
KVRT_CU_OPTIONAL(cuLaunchKernelEx, "cuLaunchKernelEx", const CUlaunchConfig *,
                 CUfunction, void **, void **)
// kvrt_copy_blocks: one block's bytes, within a device or to and from the host.
KVRT_CU_OPTIONAL(cuMemcpyAsync, "cuMemcpyAsync", CUdeviceptr, CUdeviceptr,
                 size_t, CUstream)
