//===- Launchables.cpp - the empty kernels and the reference --------------===//

#include "Launchables.h"

namespace kvbench {

bool EmptyKernel::launch(int, cudaStream_t stream) {
  const cudaError_t e = launchEmptyKernel(stream);
  if (e == cudaSuccess)
    return true;
  error = cudaGetErrorString(e);
  return false;
}

EmptyAbiKernel::EmptyAbiKernel() {
  for (int i = 0; i < kAppendAbiParams; ++i) {
    values[i] = 0;
    params[i] = &values[i];
  }
  void *entry = nullptr;
  cudaDriverEntryPointQueryResult query{};
  cudaError_t e = cudaGetDriverEntryPointByVersion(
      "cuLaunchKernel", &entry, CUDART_VERSION, cudaEnableDefault, &query);
  if (e != cudaSuccess || query != cudaDriverEntryPointSuccess || !entry) {
    error = format("no cuLaunchKernel entry point (%s, query %d)",
                   cudaGetErrorString(e), int(query));
    (void)cudaGetLastError();
    return;
  }
  launchKernel = reinterpret_cast<LaunchKernelFn>(entry);
  cudaFunction_t function = nullptr;
  e = cudaGetFuncBySymbol(&function, emptyAbiKernelSymbol());
  if (e != cudaSuccess || !function) {
    error = format("cudaGetFuncBySymbol: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return;
  }
  kernel = reinterpret_cast<CUfunction>(function);
  // One launch proves the path before any loop relies on it.
  if (!launch(0, nullptr) || cudaDeviceSynchronize() != cudaSuccess) {
    error = "first launch failed: " + error;
    (void)cudaGetLastError();
    kernel = nullptr;
  }
}

bool EmptyAbiKernel::launch(int, cudaStream_t stream) {
  if (!launchKernel || !kernel) {
    error = "the 21-parameter empty kernel is not available";
    return false;
  }
  const CUresult r =
      launchKernel(kernel, 1, 1, 1, 128, 1, 1, 0,
                   reinterpret_cast<CUstream>(stream), params, nullptr);
  if (r == CUDA_SUCCESS)
    return true;
  error = format("cuLaunchKernel returned %d", int(r));
  return false;
}

ReferenceAppend::ReferenceAppend(const CacheGeometry &g,
                                 const DeviceState &state) {
  const int64_t H = g.desc.numHeads, D = g.desc.headDim;
  base.keyCache = reinterpret_cast<uint16_t *>(state.keyCache);
  base.valueCache = reinterpret_cast<uint16_t *>(state.valueCache);
  base.numBlocks = g.numBlocks;
  base.numHeads = H;
  base.log2BlockSize = log2Exact(g.desc.blockSize);
  base.log2ChunksPerHead = log2Exact(D / 8);
  base.keyStrideToken = H * D;
  base.keyStrideHead = D;
  base.valueStrideToken = H * D;
  base.valueStrideHead = D;
  base.keyCacheStrideBlock = g.key.block;
  base.keyCacheStrideHead = g.key.head;
  base.keyCacheStridePos = g.key.pos;
  // A 16-byte chunk is 8 elements along d: 8 * dim apart, but in the
  // vectorized key cache one chunk is one x group, `dim` apart.
  base.keyCacheStrideChunk = g.key.x ? g.key.dim : 8 * g.key.dim;
  base.valueCacheStrideBlock = g.value.block;
  base.valueCacheStrideHead = g.value.head;
  base.valueCacheStridePos = g.value.pos;
  base.valueTransposed =
      !abi::layoutInfo(g.desc.layout).chunkContiguous(/*isValue=*/true);
  base.valueCacheStrideChunk = 8 * g.value.dim;
  base.valueCacheStrideDim = g.value.dim;
}

void ReferenceAppend::prepare(int64_t tokens,
                              const std::vector<SetPointers> &sets) {
  params.assign(sets.size(), base);
  for (size_t s = 0; s < sets.size(); ++s) {
    params[s].numTokens = tokens;
    params[s].key = sets[s].key;
    params[s].value = sets[s].value;
    params[s].slotMapping = sets[s].slots;
  }
}

bool ReferenceAppend::launch(int set, cudaStream_t stream) {
  const cudaError_t e =
      launchReferenceAppend(params[size_t(set)], config, stream);
  if (e == cudaSuccess)
    return true;
  error = format("reference launch (%s): %s", configName().c_str(),
                 cudaGetErrorString(e));
  return false;
}

int64_t ReferenceAppend::gridFor(int64_t tokens) const {
  ReferenceAppendParams p = base;
  p.numTokens = tokens;
  return referenceGridSize(p, config);
}

} // namespace kvbench
