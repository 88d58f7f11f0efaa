//===- FakeCuda.h - a fake libcuda for testing kvrt's GPU path on a CPU ---===//
//
// libkvrt_fake_cuda.so exports the driver entry points kvrt resolves, with
// scripted answers and a record of what kvrt asked, so that the internal
// tests exercise the GPU path (contexts, module cache, compute capability,
// JIT logs, launch geometry) on a machine without a GPU. The test reaches the
// state through fake_cuda_state().
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_TEST_FAKECUDA_H
#define KVRT_TEST_FAKECUDA_H

#include <cstdint>

struct FakeCudaState {
  // Answers.
  int initResult = 0;
  int deviceCount = 1;
  int computeMajor = 9;
  int computeMinor = 0;
  /// The calling thread's current context (one thread in these tests).
  void *current = nullptr;
  int currentDevice = 0;
  int loadResult = 0;
  const char *loadErrorLog = "";
  /// cuModuleGetFunction answers CUDA_ERROR_NOT_FOUND for this name.
  const char *missingFunction = "";
  unsigned memoryType = 2; // CU_MEMORYTYPE_DEVICE
  int pointerOrdinal = 0;
  int pointerResult = 0;
  /// The allocation range reported: [pointer, pointer + rangeSize).
  unsigned long long rangeSize = 0;
  /// Added to every context id: a changed offset is a recreated context.
  unsigned long long contextIdOffset = 0;
  /// Parameters cuLaunchKernel records into `params`: the first
  /// `buffersToRecord` are pointers (8 bytes), the rest i32 scalars.
  int paramsToRecord = 0;
  int buffersToRecord = 0;

  // Record.
  int primaryRetains = 0;
  int primaryReleases = 0;
  int pushes = 0;
  int pops = 0;
  int moduleLoads = 0;
  int moduleUnloads = 0;
  /// 1: the last image loaded was a cubin (ELF), 2: PTX text.
  int lastImageKind = 0;
  void *lastLoadContext = nullptr;
  int functionLookups = 0;
  int launches = 0;
  /// Of `launches`, those through cuLaunchKernelEx, and the last one's
  /// programmatic-stream-serialization attribute (-1: not set).
  int launchesEx = 0;
  int lastProgrammatic = -1;
  char lastFunction[64] = {};
  unsigned grid[3] = {};
  unsigned block[3] = {};
  unsigned sharedBytes = 0;
  void *stream = nullptr;
  void *launchContext = nullptr;
  int64_t params[64] = {};
  int pointerQueries = 0;
  /// cuDeviceGetCount calls: the launcher's slow path (acquiring a context).
  int deviceCountQueries = 0;
  /// cuMemcpyDtoHAsync_v2 copies (the "device" pointer is host memory) and
  /// cuStreamSynchronize calls, and the stream and context of the last copy.
  int copies = 0;
  int synchronizes = 0;
  void *copyStream = nullptr;
  void *copyContext = nullptr;
};

extern "C" FakeCudaState *fake_cuda_state(void);
/// Resets the state to its defaults (answers and record).
extern "C" void fake_cuda_reset(void);

#endif // KVRT_TEST_FAKECUDA_H
