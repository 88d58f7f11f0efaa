//===- CudaBackend.cpp - The conformance Backend on a CUDA device ---------===//

#include "CudaBackend.h"

#include <cuda.h>

namespace kvgen::gpu {

namespace {

/// The driver's virtual memory entry points, found through the runtime so
/// that the suite links no libcuda (the machine that builds it has none).
struct VirtualMemory {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) addressFree = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) setAccess = nullptr;

  template <typename F> static bool find(const char *symbol, F &fn) {
    cudaDriverEntryPointQueryResult found;
    void *pointer = nullptr;
    if (cudaGetDriverEntryPointByVersion(symbol, &pointer, 12000,
                                         cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return false;
    fn = reinterpret_cast<F>(pointer);
    return true;
  }

  static const VirtualMemory *get() {
    static const VirtualMemory api = [] {
      VirtualMemory vm;
      bool ok = find("cuMemGetAllocationGranularity", vm.granularity) &&
                find("cuMemAddressReserve", vm.reserve) &&
                find("cuMemAddressFree", vm.addressFree) &&
                find("cuMemCreate", vm.create) &&
                find("cuMemRelease", vm.release) && find("cuMemMap", vm.map) &&
                find("cuMemUnmap", vm.unmap) &&
                find("cuMemSetAccess", vm.setAccess);
      if (!ok)
        vm.granularity = nullptr;
      return vm;
    }();
    return api.granularity ? &api : nullptr;
  }
};

} // namespace

std::string noDeviceReason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    return std::string(cudaGetErrorName(status)) + ": " +
           cudaGetErrorString(status);
  if (count == 0)
    return "cudaGetDeviceCount reports 0 devices";
  return "";
}

bool CudaBackend::check(cudaError_t status, const char *what) {
  if (status == cudaSuccess)
    return true;
  error = std::string(what) + ": " + cudaGetErrorName(status) + " (" +
          cudaGetErrorString(status) + ")";
  return false;
}

bool CudaBackend::init(kvrt_bundle *bundle, std::string &message, int device) {
  this->bundle = bundle;
  deviceId = device;
  // cudaFree(0) creates the primary context and makes it current, which is
  // the context kvrt finds and loads its modules in.
  if (!check(cudaSetDevice(deviceId), "cudaSetDevice") ||
      !check(cudaFree(nullptr), "cudaFree(0)") ||
      !check(cudaStreamCreateWithFlags(&cudaStream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags")) {
    message = error;
    return false;
  }
  return true;
}

CudaBackend::~CudaBackend() {
  if (cudaStream)
    cudaStreamDestroy(cudaStream);
}

void *CudaBackend::allocate(size_t bytes) {
  void *pointer = nullptr;
  if (!check(cudaMalloc(&pointer, bytes), "cudaMalloc"))
    return nullptr;
  return pointer;
}

void CudaBackend::deallocate(void *pointer) { cudaFree(pointer); }

void *CudaBackend::allocateFenced(size_t bytes) {
  const VirtualMemory *vm = VirtualMemory::get();
  if (!vm || bytes == 0 || bytes % 256 != 0)
    return nullptr;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = deviceId;
  size_t granule = 0;
  if (vm->granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS ||
      granule == 0)
    return nullptr;
  Fenced f;
  f.mapped = (bytes + granule - 1) / granule * granule;
  f.reserved = f.mapped + granule; // the last granule stays unmapped
  CUdeviceptr base = 0;
  if (vm->reserve(&base, f.reserved, granule, 0, 0) != CUDA_SUCCESS)
    return nullptr;
  f.base = base;
  CUmemGenericAllocationHandle handle = 0;
  if (vm->create(&handle, f.mapped, &prop, 0) != CUDA_SUCCESS) {
    vm->addressFree(base, f.reserved);
    return nullptr;
  }
  f.handle = handle;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (vm->map(base, f.mapped, 0, handle, 0) != CUDA_SUCCESS) {
    vm->release(handle);
    vm->addressFree(base, f.reserved);
    return nullptr;
  }
  if (vm->setAccess(base, f.mapped, &access, 1) != CUDA_SUCCESS) {
    vm->unmap(base, f.mapped);
    vm->release(handle);
    vm->addressFree(base, f.reserved);
    return nullptr;
  }
  void *pointer = reinterpret_cast<void *>(base + f.mapped - bytes);
  fenced[pointer] = f;
  return pointer;
}

void CudaBackend::deallocateFenced(void *pointer) {
  auto it = fenced.find(pointer);
  const VirtualMemory *vm = VirtualMemory::get();
  if (it == fenced.end() || !vm)
    return;
  // Work on the stream may still read the buffer.
  cudaStreamSynchronize(cudaStream);
  const Fenced &f = it->second;
  vm->unmap(f.base, f.mapped);
  vm->release(f.handle);
  vm->addressFree(f.base, f.reserved);
  fenced.erase(it);
}

bool CudaBackend::copyToDevice(void *deviceDst, const void *hostSrc,
                               size_t bytes) {
  return check(cudaMemcpyAsync(deviceDst, hostSrc, bytes,
                               cudaMemcpyHostToDevice, cudaStream),
               "cudaMemcpyAsync (to device)") &&
         synchronize();
}

bool CudaBackend::copyToHost(void *hostDst, const void *deviceSrc,
                             size_t bytes) {
  return check(cudaMemcpyAsync(hostDst, deviceSrc, bytes,
                               cudaMemcpyDeviceToHost, cudaStream),
               "cudaMemcpyAsync (to host)") &&
         synchronize();
}

bool CudaBackend::fill(void *deviceDst, unsigned char byte, size_t bytes) {
  return check(cudaMemsetAsync(deviceDst, byte, bytes, cudaStream),
               "cudaMemsetAsync") &&
         synchronize();
}

kvrt_bundle *CudaBackend::bundleFor(const conformance::Description &) {
  if (!bundle)
    error = "no bundle loaded";
  return bundle;
}

bool CudaBackend::synchronize() {
  // A kernel fault (an illegal address, say) surfaces here.
  return check(cudaStreamSynchronize(cudaStream), "cudaStreamSynchronize");
}

} // namespace kvgen::gpu
