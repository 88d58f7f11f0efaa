//===- FakeCuda.cpp - a fake libcuda for testing kvrt's GPU path ----------===//

#include "FakeCuda.h"

#include <cstdio>
#include <cstring>

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

int cuGetErrorName(int error, const char **out) {
  *out = error == 0     ? "CUDA_SUCCESS"
         : error == 218 ? "CUDA_ERROR_INVALID_PTX"
         : error == 100 ? "CUDA_ERROR_NO_DEVICE"
                        : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int, const char **out) {
  *out = "fake driver error";
  return 0;
}
int cuInit(unsigned) { return state.initResult; }
int cuDriverGetVersion(int *version) {
  *version = 13000;
  return 0;
}
int cuDeviceGet(int *device, int ordinal) {
  if (ordinal < 0 || ordinal >= state.deviceCount)
    return 101; // CUDA_ERROR_INVALID_DEVICE
  *device = ordinal;
  return 0;
}
int cuDeviceGetCount(int *count) {
  *count = state.deviceCount;
  return 0;
}
int cuDeviceGetAttribute(int *value, int attribute, int) {
  if (attribute == 75)
    *value = state.computeMajor;
  else if (attribute == 76)
    *value = state.computeMinor;
  else
    return 1;
  return 0;
}
int cuCtxGetCurrent(void **context) {
  *context = state.current;
  return 0;
}
int cuCtxGetDevice(int *device) {
  if (!state.current)
    return 201;
  *device = deviceOf(state.current);
  return 0;
}
int cuCtxSetCurrent(void *context) {
  state.current = context;
  return 0;
}
int cuCtxPushCurrent_v2(void *context) {
  ++state.pushes;
  contextStack[stackDepth++] = state.current;
  state.current = context;
  return 0;
}
int cuCtxPopCurrent_v2(void **context) {
  ++state.pops;
  if (context)
    *context = state.current;
  state.current = stackDepth > 0 ? contextStack[--stackDepth] : nullptr;
  return 0;
}
int cuDevicePrimaryCtxRetain(void **context, int device) {
  ++state.primaryRetains;
  *context = &primaryContexts[device];
  return 0;
}
int cuDevicePrimaryCtxRelease_v2(int) {
  ++state.primaryReleases;
  return 0;
}
int cuCtxGetId(void *context, unsigned long long *id) {
  *id = reinterpret_cast<uintptr_t>(context) + state.contextIdOffset;
  return 0;
}
int cuModuleLoadDataEx(void **module, const void *image, unsigned count,
                       int *options, void **values) {
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
  *module = &modules[state.moduleLoads % 64];
  return 0;
}
int cuModuleGetFunction(void **function, void *, const char *name) {
  ++state.functionLookups;
  if (std::strcmp(name, state.missingFunction) == 0)
    return 500;
  Function &entry = functions[numFunctions++ % 256];
  std::snprintf(entry.name, sizeof(entry.name), "%s", name);
  *function = &entry;
  return 0;
}
int cuModuleUnload(void *) {
  ++state.moduleUnloads;
  return 0;
}
int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz,
                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                   void *stream, void **params, void **) {
  ++state.launches;
  std::snprintf(state.lastFunction, sizeof(state.lastFunction), "%s",
                static_cast<Function *>(function)->name);
  state.grid[0] = gx, state.grid[1] = gy, state.grid[2] = gz;
  state.block[0] = bx, state.block[1] = by, state.block[2] = bz;
  state.sharedBytes = shared;
  state.stream = stream;
  state.launchContext = state.current;
  for (int i = 0; i < state.paramsToRecord && i < 64; ++i)
    std::memcpy(&state.params[i], params[i], sizeof(int64_t));
  return 0;
}
int cuPointerGetAttributes(unsigned count, int *attributes, void **data,
                           unsigned long long pointer) {
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

int cuMemcpyDtoHAsync_v2(void *destination, unsigned long long source,
                         size_t bytes, void *stream) {
  ++state.copies;
  state.copyStream = stream;
  state.copyContext = state.current;
  std::memcpy(destination, reinterpret_cast<const void *>(source), bytes);
  return 0;
}
int cuStreamSynchronize(void *) {
  ++state.synchronizes;
  return 0;
}

} // extern "C"
