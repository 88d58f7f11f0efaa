//===- GpuLauncher.cpp - modules per context, and cuLaunchKernel ----------===//

#include "GpuLauncher.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace kvrt::impl {

using namespace cuda;

GpuLauncher::~GpuLauncher() {
  if (!driver)
    return;
  // Errors are ignored: the application may already have destroyed the
  // context (and its modules with it), or the driver may be shutting down.
  for (LoadedModule &loaded : modules) {
    if (driver->cuCtxGetId) {
      unsigned long long id = 0;
      if (driver->cuCtxGetId(loaded.context, &id) != CUDA_SUCCESS ||
          id != loaded.contextId)
        continue;
    }
    if (driver->cuCtxPushCurrent(loaded.context) != CUDA_SUCCESS)
      continue;
    driver->cuModuleUnload(loaded.module);
    CUcontext popped = nullptr;
    driver->cuCtxPopCurrent(&popped);
  }
  for (PrimaryContext &primary : primaries)
    driver->cuDevicePrimaryCtxRelease(primary.device);
}

namespace {
/// Pops the context a launch pushed, on every path out.
class ContextScope {
public:
  ContextScope(const CudaDriver &driver, bool pushed)
      : driver(driver), pushed(pushed) {}
  ~ContextScope() {
    if (pushed) {
      CudaDriver::CUcontext popped = nullptr;
      driver.cuCtxPopCurrent(&popped);
    }
  }

private:
  const CudaDriver &driver;
  bool pushed;
};
} // namespace

Status GpuLauncher::acquireContext(const CudaDriver &driver,
                                   const LaunchPlan &plan, CUcontext *context,
                                   CUdevice *device, bool *push) {
  const char *tensor = plan.buffers[0].name;
  int ordinal = plan.device.device_id;
  int count = 0;
  KVRT_CUDA_CHECK(driver, cuDeviceGetCount(&count));
  if (ordinal >= count)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: on cuda:%d but the driver sees %d device(s)", tensor,
                      ordinal, count);
  KVRT_CUDA_CHECK(driver, cuDeviceGet(device, ordinal));

  CUcontext current = nullptr;
  KVRT_CUDA_CHECK(driver, cuCtxGetCurrent(&current));
  if (current) {
    CUdevice currentDevice = 0;
    KVRT_CUDA_CHECK(driver, cuCtxGetDevice(&currentDevice));
    if (currentDevice != *device)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: on cuda:%d but the calling thread's current CUDA "
                        "context is on device %d; make a context of cuda:%d "
                        "current, or none",
                        tensor, ordinal, static_cast<int>(currentDevice),
                        ordinal);
    *context = current;
    *push = false;
    return Status();
  }

  std::lock_guard<std::mutex> lock(mutex);
  auto it = std::find_if(
      primaries.begin(), primaries.end(),
      [&](const PrimaryContext &primary) { return primary.device == *device; });
  if (it == primaries.end()) {
    PrimaryContext primary;
    primary.device = *device;
    KVRT_CUDA_CHECK(driver,
                    cuDevicePrimaryCtxRetain(&primary.context, *device));
    this->driver = &driver;
    primaries.push_back(primary);
    it = primaries.end() - 1;
  }
  *context = it->context;
  *push = true;
  return Status();
}

namespace {
/// An allocation the driver confirmed as device memory of `ordinal`.
struct VerifiedRange {
  uintptr_t begin;
  uintptr_t end;
  int ordinal;
};
constexpr int kVerifiedRanges = 16;

/// A function resolved in the caller's current context (the header says
/// why it may be remembered).
struct ResolvedFunction {
  /// The launcher's id; 0: an empty entry.
  uint64_t launcher = 0;
  CUcontext context = nullptr;
  unsigned long long contextId = 0;
  /// The tensors' device ordinal, checked against the context's device.
  int ordinal = -1;
  int kernelIndex = -1;
  CUfunction function = nullptr;
};
constexpr int kResolvedFunctions = 8;
} // namespace

// Per thread, so that no lock is taken: caches and the allocator's segments
// recur launch after launch, and a launch inside a known range asks the
// driver nothing (a query costs about 60 ns, a launch 3 us). A range freed and
// reused for other memory is not noticed; the check is defense in depth.
static thread_local VerifiedRange verifiedRanges[kVerifiedRanges];
static thread_local int nextVerifiedRange;
static thread_local ResolvedFunction resolvedFunctions[kResolvedFunctions];
static thread_local int nextResolvedFunction;

void GpuLauncher::forgetVerifiedRanges() {
  for (VerifiedRange &range : verifiedRanges)
    range = VerifiedRange{0, 0, -1};
}

void GpuLauncher::forgetResolvedFunctions() {
  for (ResolvedFunction &entry : resolvedFunctions)
    entry = ResolvedFunction();
}

Status GpuLauncher::checkPointers(const CudaDriver &driver,
                                  const LaunchPlan &plan) const {
  int device = plan.device.device_id;
  for (int i = 0; i < plan.numBuffers; ++i) {
    const TensorView &view = plan.buffers[i];
    // The V view of a stacked cache is the K view's tensor.
    if (view.extent == 0 ||
        (i > 0 && view.tensor == plan.buffers[i - 1].tensor))
      continue;
    uintptr_t address = view.begin();
    auto known = [&](const VerifiedRange &range) {
      return range.begin <= address && address < range.end &&
             range.ordinal == device;
    };
    if (std::any_of(std::begin(verifiedRanges), std::end(verifiedRanges),
                    known))
      continue;

    CUpointer_attribute attributes[4] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    unsigned memoryType = 0;
    int ordinal = -1;
    CUdeviceptr rangeStart = 0;
    size_t rangeSize = 0;
    void *values[4] = {&memoryType, &ordinal, &rangeStart, &rangeSize};
    CUresult result = driver.cuPointerGetAttributes(
        4, attributes, values, static_cast<CUdeviceptr>(address));
    // A driver that cannot answer (an old one, an exotic allocation) is not
    // a reason to refuse; a pointer it does not know at all is.
    if (result != CUDA_SUCCESS)
      continue;
    if (memoryType == 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: device is cuda:%d but its data (%p) is not memory "
                        "the CUDA driver knows (host memory labelled kDLCUDA?)",
                        view.name, device, static_cast<void *>(view.first));
    if (memoryType == CU_MEMORYTYPE_HOST)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: device is cuda:%d but its data (%p) is pinned "
                        "host memory; GPU launches take device memory",
                        view.name, device, static_cast<void *>(view.first));
    if (memoryType == CU_MEMORYTYPE_DEVICE && ordinal >= 0 && ordinal != device)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: device is cuda:%d but its data (%p) was allocated "
                        "on cuda:%d",
                        view.name, device, static_cast<void *>(view.first),
                        ordinal);
    if (memoryType == CU_MEMORYTYPE_DEVICE && ordinal == device &&
        rangeSize > 0) {
      verifiedRanges[nextVerifiedRange] = {
          static_cast<uintptr_t>(rangeStart),
          static_cast<uintptr_t>(rangeStart) + rangeSize, device};
      nextVerifiedRange = (nextVerifiedRange + 1) % kVerifiedRanges;
    }
  }
  return Status();
}

/// The driver's JIT log, trimmed, for an error message.
static std::string jitLog(const char *errorLog, const char *infoLog) {
  std::string log;
  if (errorLog[0])
    log += formatString("; JIT error log: %s", errorLog);
  if (infoLog[0])
    log += formatString("; JIT info log: %s", infoLog);
  while (!log.empty() && (log.back() == '\n' || log.back() == ' '))
    log.pop_back();
  return log;
}

Status GpuLauncher::loadModule(const CudaDriver &driver, CUdevice device,
                               CUmodule *out) {
  const Target &target = manifest.target;
  int major = 0, minor = 0;
  KVRT_CUDA_CHECK(
      driver,
      cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                           device));
  KVRT_CUDA_CHECK(
      driver,
      cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                           device));
  bool exact = major == target.major && minor == target.minor;
  bool supported = target.archSpecific ? exact
                   : target.familySpecific
                       ? major == target.major && minor >= target.minor
                       : major * 10 + minor >= target.major * 10 + target.minor;
  if (!supported)
    return KVRT_ERROR(KVRT_ERROR_UNSUPPORTED_DEVICE,
                      "device %d has compute capability %d.%d but the bundle "
                      "was compiled for %s (%d.%d%s)",
                      static_cast<int>(device), major, minor,
                      target.chip.c_str(), target.major, target.minor,
                      target.archSpecific ? " exactly" : " or newer");

  char errorLog[8192];
  char infoLog[8192];
  CUjit_option options[4] = {
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  auto load = [&](const void *image) {
    errorLog[0] = infoLog[0] = '\0';
    void *values[4] = {
        errorLog, reinterpret_cast<void *>(uintptr_t(sizeof(errorLog))),
        infoLog, reinterpret_cast<void *>(uintptr_t(sizeof(infoLog)))};
    CUresult result = driver.cuModuleLoadDataEx(out, image, 4, options, values);
    errorLog[sizeof(errorLog) - 1] = infoLog[sizeof(infoLog) - 1] = '\0';
    return result;
  };

  // A cubin is the chip's own machine code: no JIT, no JIT cache.
  std::string cubinFailure;
  if (manifest.hasCubin && exact) {
    CUresult result = load(manifest.cubin.data());
    if (result == CUDA_SUCCESS)
      return Status();
    cubinFailure = formatString(" (the cubin was refused first: %s%s)",
                                driver.describe(result).c_str(),
                                jitLog(errorLog, infoLog).c_str());
  }
  if (!manifest.hasPtx) {
    if (!cubinFailure.empty())
      return KVRT_ERROR(KVRT_ERROR_DRIVER,
                        "cuModuleLoadDataEx failed for the bundle's cubin%s",
                        cubinFailure.c_str());
    return KVRT_ERROR(KVRT_ERROR_UNSUPPORTED_DEVICE,
                      "the bundle has only a cubin for %s, which does not run "
                      "on device %d (compute capability %d.%d), and no PTX to "
                      "JIT",
                      target.chip.c_str(), static_cast<int>(device), major,
                      minor);
  }
  CUresult result = load(manifest.ptx.c_str());
  if (result == CUDA_SUCCESS)
    return Status();
  const char *hint = "";
  if (result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    hint = "; the driver is older than the PTX ISA version the bundle uses";
  return KVRT_ERROR(KVRT_ERROR_DRIVER,
                    "cuModuleLoadDataEx could not JIT the bundle's PTX for "
                    "device %d (compute capability %d.%d): %s%s%s%s",
                    static_cast<int>(device), major, minor,
                    driver.describe(result).c_str(), hint,
                    jitLog(errorLog, infoLog).c_str(), cubinFailure.c_str());
}

Status GpuLauncher::getFunction(const CudaDriver &driver, CUcontext context,
                                CUdevice device, int kernelIndex,
                                CUfunction *out) {
  unsigned long long contextId = 0;
  if (driver.cuCtxGetId)
    KVRT_CUDA_CHECK(driver, cuCtxGetId(context, &contextId));

  std::lock_guard<std::mutex> lock(mutex);
  auto it = std::find_if(
      modules.begin(), modules.end(), [&](const LoadedModule &loaded) {
        return loaded.context == context && loaded.contextId == contextId;
      });
  if (it == modules.end()) {
    LoadedModule loaded;
    loaded.context = context;
    loaded.contextId = contextId;
    loaded.functions.assign(manifest.kernels.size(), nullptr);
    KVRT_RETURN_IF_ERROR(loadModule(driver, device, &loaded.module));
    this->driver = &driver;
    modules.push_back(std::move(loaded));
    it = modules.end() - 1;
  }
  CUfunction &function = it->functions[kernelIndex];
  if (!function) {
    const std::string &name = manifest.kernels[kernelIndex].name;
    CUresult result =
        driver.cuModuleGetFunction(&function, it->module, name.c_str());
    if (result == CUDA_ERROR_NOT_FOUND)
      return KVRT_ERROR(KVRT_ERROR_NOT_FOUND,
                        "kernel '%s' is in the manifest but not in the "
                        "bundle's PTX/cubin",
                        name.c_str());
    KVRT_RETURN_IF_ERROR(
        driver.check(result, "cuModuleGetFunction", __FILE__, __LINE__));
  }
  *out = function;
  return Status();
}

Status GpuLauncher::copyToHost(const LaunchPlan &plan, const TensorView &view,
                               void *out, size_t bytes, kvrt_stream stream) {
  const CudaDriver *process = nullptr;
  KVRT_RETURN_IF_ERROR(CudaDriver::get(&process));
  const CudaDriver &cu = *process;
  CUcontext context = nullptr;
  CUdevice device = 0;
  bool push = false;
  KVRT_RETURN_IF_ERROR(acquireContext(cu, plan, &context, &device, &push));
  KVRT_RETURN_IF_ERROR(checkPointers(cu, plan));
  if (push)
    KVRT_CUDA_CHECK(cu, cuCtxPushCurrent(context));
  ContextScope scope(cu, push);
  // On the launch's stream: the slots are whatever earlier work left there.
  CUstream onStream = static_cast<CUstream>(stream);
  KVRT_CUDA_CHECK(cu,
                  cuMemcpyDtoHAsync(out, static_cast<CUdeviceptr>(view.begin()),
                                    bytes, onStream));
  KVRT_CUDA_CHECK(cu, cuStreamSynchronize(onStream));
  return Status();
}

Status GpuLauncher::launch(const LaunchPlan &plan, int kernelIndex,
                           PackedParams &params, kvrt_stream stream,
                           bool programmatic) {
  const CudaDriver *process = nullptr;
  KVRT_RETURN_IF_ERROR(CudaDriver::get(&process));
  const CudaDriver &cu = *process;

  // The fast path: this thread resolved this kernel in the current context
  // before, so the context's device is the tensors' and the module is
  // loaded.
  CUcontext current = nullptr;
  unsigned long long currentId = 0;
  KVRT_CUDA_CHECK(cu, cuCtxGetCurrent(&current));
  if (current && cu.cuCtxGetId)
    KVRT_CUDA_CHECK(cu, cuCtxGetId(current, &currentId));
  CUfunction function = nullptr;
  for (const ResolvedFunction &entry : resolvedFunctions)
    if (current && entry.launcher == id && entry.context == current &&
        entry.contextId == currentId &&
        entry.ordinal == plan.device.device_id &&
        entry.kernelIndex == kernelIndex) {
      function = entry.function;
      break;
    }

  CUcontext context = current;
  CUdevice device = 0;
  bool push = false;
  if (!function)
    KVRT_RETURN_IF_ERROR(acquireContext(cu, plan, &context, &device, &push));
  KVRT_RETURN_IF_ERROR(checkPointers(cu, plan));
  if (push)
    KVRT_CUDA_CHECK(cu, cuCtxPushCurrent(context));
  ContextScope scope(cu, push);

  if (!function) {
    KVRT_RETURN_IF_ERROR(
        getFunction(cu, context, device, kernelIndex, &function));
    if (!push) {
      resolvedFunctions[nextResolvedFunction] = {
          id, context, currentId, plan.device.device_id, kernelIndex, function};
      nextResolvedFunction = (nextResolvedFunction + 1) % kResolvedFunctions;
    }
  }

  const LaunchDescription &geometry = manifest.kernels[kernelIndex].launch;
  int64_t blocks =
      (plan.numTokens + geometry.tokensPerBlock - 1) / geometry.tokensPerBlock;
  if (blocks > INT_MAX)
    return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                      "%s: %lld tokens need %lld blocks, past CUDA's grid "
                      "limit",
                      plan.buffers[0].name,
                      static_cast<long long>(plan.numTokens),
                      static_cast<long long>(blocks));
  // A 1-D grid of 2-D blocks: kvgen's launch geometry.
  unsigned grid = static_cast<unsigned>(blocks);
  unsigned threadsX = static_cast<unsigned>(geometry.threadsX);
  unsigned threadsY = static_cast<unsigned>(geometry.tokensPerBlock);
  CUstream onStream = static_cast<CUstream>(stream);
  if (!programmatic)
    return cu.check(cu.cuLaunchKernel(function, grid, 1, 1, threadsX, threadsY,
                                      1, /*sharedMemBytes=*/0, onStream,
                                      params.data(), /*extra=*/nullptr),
                    "cuLaunchKernel", __FILE__, __LINE__);
  if (!cu.cuLaunchKernelEx)
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
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = config.blockDimZ = 1;
  config.blockDimX = threadsX;
  config.blockDimY = threadsY;
  config.hStream = onStream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cu.check(cu.cuLaunchKernelEx(&config, function, params.data(),
                                      /*extra=*/nullptr),
                  "cuLaunchKernelEx", __FILE__, __LINE__);
}

} // namespace kvrt::impl
