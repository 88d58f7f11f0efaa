//===- FakeCuda.cpp - a fake libcuda for testing kvrt's GPU path ----------===//

#include "FakeCuda.h"

// The driver's own types (as kvrt declares them): kvrt calls these through
// pointers of exactly these types, and a call through a pointer of another
// function type is undefined (UBSan's -fsanitize=function catches it).
#include "CudaTypes.h"

#include <cstdio>
#include <cstring>

using namespace kvrt::impl::cuda;

namespace {
struct Function {
  char name[64];
};

FakeCudaState state;
int primaryContexts[8];
int modules[64];
Function functions[256];
int numFunctions = 0;
void *contextStack[16];
int stackDepth = 0;

int deviceOf(void *context) {
  for (int i = 0; i < 8; ++i)
    if (context == &primaryContexts[i])
      return i;
  return state.currentDevice;
}
} // namespace

extern "C" {

FakeCudaState *fake_cuda_state(void) { return &state; }

void fake_cuda_reset(void) {
  state = FakeCudaState();
  stackDepth = 0;
  numFunctions = 0;
}

CUresult cuGetErrorName(CUresult error, const char **out) {
  *out = error == 0     ? "CUDA_SUCCESS"
         : error == 218 ? "CUDA_ERROR_INVALID_PTX"
         : error == 100 ? "CUDA_ERROR_NO_DEVICE"
                        : "CUDA_ERROR_FAKE";
  return 0;
}
CUresult cuGetErrorString(CUresult, const char **out) {
  *out = "fake driver error";
  return 0;
}
CUresult cuInit(unsigned int) { return state.initResult; }
CUresult cuDriverGetVersion(int *version) {
  *version = 13000;
  return 0;
}
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal < 0 || ordinal >= state.deviceCount)
    return 101; // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return 0;
}
CUresult cuDeviceGetCount(int *count) {
  ++state.deviceCountQueries;
  *count = state.deviceCount;
  return 0;
}
CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute,
                              CUdevice) {
  if (attribute == 75)
    *value = state.computeMajor;
  else if (attribute == 76)
    *value = state.computeMinor;
  else
    return 1;
  return 0;
}
CUresult cuCtxGetCurrent(CUcontext *context) {
  *context = static_cast<CUcontext>(state.current);
  return 0;
}
CUresult cuCtxGetDevice(CUdevice *device) {
  if (!state.current)
    return 201;
  *device = deviceOf(state.current);
  return 0;
}
CUresult cuCtxSetCurrent(CUcontext context) {
  state.current = context;
  return 0;
}
CUresult cuCtxPushCurrent_v2(CUcontext context) {
  ++state.pushes;
  contextStack[stackDepth++] = state.current;
  state.current = context;
  return 0;
}
CUresult cuCtxPopCurrent_v2(CUcontext *context) {
  ++state.pops;
  if (context)
    *context = static_cast<CUcontext>(state.current);
  state.current = stackDepth > 0 ? contextStack[--stackDepth] : nullptr;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  ++state.primaryRetains;
  *context = reinterpret_cast<CUcontext>(&primaryContexts[device]);
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  ++state.primaryReleases;
  return 0;
}
CUresult cuCtxGetId(CUcontext context, unsigned long long *id) {
  *id = reinterpret_cast<uintptr_t>(context) + state.contextIdOffset;
  return 0;
}
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                            unsigned int count, CUjit_option *options,
                            void **values) {
  ++state.moduleLoads;
  state.lastLoadContext = state.current;
  state.lastImageKind = std::memcmp(image,
                                    "\x7f"
                                    "ELF",
                                    4) == 0
                            ? 1
                            : 2;
  if (state.loadResult) {
    for (unsigned i = 0; i + 1 < count; ++i) {
      // CU_JIT_ERROR_LOG_BUFFER, then its size.
      if (options[i] == 5 && options[i + 1] == 6) {
        size_t size = reinterpret_cast<uintptr_t>(values[i + 1]);
        std::snprintf(static_cast<char *>(values[i]), size, "%s",
                      state.loadErrorLog);
      }
    }
    return state.loadResult;
  }
  *module = reinterpret_cast<CUmodule>(&modules[state.moduleLoads % 64]);
  return 0;
}
CUresult cuModuleGetFunction(CUfunction *function, CUmodule, const char *name) {
  ++state.functionLookups;
  if (std::strcmp(name, state.missingFunction) == 0)
    return 500;
  Function &entry = functions[numFunctions++ % 256];
  std::snprintf(entry.name, sizeof(entry.name), "%s", name);
  *function = reinterpret_cast<CUfunction>(&entry);
  return 0;
}
CUresult cuModuleUnload(CUmodule) {
  ++state.moduleUnloads;
  return 0;
}
CUresult cuLaunchKernel(CUfunction function, unsigned gx, unsigned gy,
                        unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void **params,
                        void **) {
  ++state.launches;
  std::snprintf(state.lastFunction, sizeof(state.lastFunction), "%s",
                reinterpret_cast<Function *>(function)->name);
  state.grid[0] = gx, state.grid[1] = gy, state.grid[2] = gz;
  state.block[0] = bx, state.block[1] = by, state.block[2] = bz;
  state.sharedBytes = shared;
  state.stream = stream;
  state.launchContext = state.current;
  for (int i = 0; i < state.paramsToRecord && i < 64; ++i) {
    if (i < state.buffersToRecord) {
      std::memcpy(&state.params[i], params[i], sizeof(int64_t));
      continue;
    }
    int32_t scalar;
    std::memcpy(&scalar, params[i], sizeof(scalar));
    state.params[i] = scalar;
  }
  return 0;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction function,
                          void **params, void **extra) {
  state.lastProgrammatic = -1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id ==
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      state.lastProgrammatic =
          config->attrs[i].value.programmaticStreamSerializationAllowed;
  ++state.launchesEx;
  return cuLaunchKernel(function, config->gridDimX, config->gridDimY,
                        config->gridDimZ, config->blockDimX, config->blockDimY,
                        config->blockDimZ, config->sharedMemBytes,
                        config->hStream, params, extra);
}
CUresult cuPointerGetAttributes(unsigned int count,
                                CUpointer_attribute *attributes, void **data,
                                CUdeviceptr pointer) {
  ++state.pointerQueries;
  if (state.pointerResult)
    return state.pointerResult;
  for (unsigned i = 0; i < count; ++i) {
    if (attributes[i] == 2)
      *static_cast<unsigned *>(data[i]) = state.memoryType;
    else if (attributes[i] == 9)
      *static_cast<int *>(data[i]) = state.pointerOrdinal;
    else if (attributes[i] == 11)
      *static_cast<unsigned long long *>(data[i]) = pointer;
    else if (attributes[i] == 12)
      *static_cast<size_t *>(data[i]) = state.rangeSize;
  }
  return 0;
}

CUresult cuMemcpyDtoHAsync_v2(void *destination, CUdeviceptr source,
                              size_t bytes, CUstream stream) {
  ++state.copies;
  state.copyStream = stream;
  state.copyContext = state.current;
  std::memcpy(destination, reinterpret_cast<const void *>(source), bytes);
  return 0;
}
CUresult cuStreamSynchronize(CUstream) {
  ++state.synchronizes;
  return 0;
}

} // extern "C"
