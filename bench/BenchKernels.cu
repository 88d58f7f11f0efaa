//===- BenchKernels.cu - the reference append and the timing helpers ------===//
//
// The reference is the best plain CUDA append this bench could write for the
// bench's shapes, so "generated / hand-written" means something: 16-byte
// ld.global.nc loads, every load of a thread issued before its first store
// (several tokens in flight per thread), 64-bit offsets, shift-and-mask slot
// arithmetic, and a choice of grids that kvbench times and keeps the best of
// per size. Two further shapes ask where a copy's bandwidth goes: K and V in
// blocks of their own, and the bulk copy engine instead of threads. It reads
// no K/V of a token whose slot is negative or past the cache, like the
// generated kernels must (docs/CONTRACT.md).
//
//===----------------------------------------------------------------------===//

#include "BenchKernels.h"
#include "BenchRandom.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace kvbench {
namespace {

/// Threads along a token's chunks: 128 chunks of 16 bytes are one bf16 8x128
/// K row, so a warp reads 512 contiguous bytes.
constexpr int kThreadsX = 128;
/// The most token rows a block has; __launch_bounds__ must cover it.
constexpr int kMaxRows = 2;
/// Fixed grid for the helpers; they stride, so any size works.
constexpr int kHelperBlocks = 4096;
constexpr int kHelperThreads = 256;

__global__ void fillRandom16Kernel(uint4 *data, uint64_t numChunks,
                                   uint32_t seed) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t c = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       c < numChunks; c += stride) {
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t index = c * 8 + 2 * w;
      words[w] = uint32_t(randomBits16(seed, index)) |
                 (uint32_t(randomBits16(seed, index + 1)) << 16);
    }
    data[c] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

__global__ void flushL2Kernel(const uint4 *buffer, uint64_t numChunks,
                              uint32_t *sink) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint64_t c = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  // Four independent loads per iteration keep enough bytes in flight for the
  // pass to run near the copy bandwidth, so a flush costs ~0.25 ms per GiB.
  for (; c + 3 * stride < numChunks; c += 4 * stride) {
    const uint4 a = buffer[c];
    const uint4 b = buffer[c + stride];
    const uint4 d = buffer[c + 2 * stride];
    const uint4 e = buffer[c + 3 * stride];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    acc ^= d.x ^ d.y ^ d.z ^ d.w ^ e.x ^ e.y ^ e.z ^ e.w;
  }
  for (; c < numChunks; c += stride) {
    const uint4 a = buffer[c];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u)
    *sink = acc;
}

__global__ void countMismatches16Kernel(const uint4 *data, uint64_t numChunks,
                                        uint32_t seed,
                                        unsigned long long *count) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned local = 0;
  for (uint64_t c = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       c < numChunks; c += stride) {
    const uint4 chunk = data[c];
    const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint16_t got = uint16_t(words[e / 2] >> (16 * (e % 2)));
      local += got != randomBits16(seed, c * 8 + e) ? 1u : 0u;
    }
  }
  // Every lane reaches this (the block is whole warps and nobody returns
  // early), so a full-mask warp reduction is safe.
  local = __reduce_add_sync(0xffffffffu, local);
  if ((threadIdx.x & 31) == 0 && local != 0)
    atomicAdd(count, static_cast<unsigned long long>(local));
}

__global__ void emptyKernel() {}

#define KVBENCH_EIGHT_SCALARS(p)                                               \
  uint32_t p##0, uint32_t p##1, uint32_t p##2, uint32_t p##3, uint32_t p##4,   \
      uint32_t p##5, uint32_t p##6, uint32_t p##7
// 5 + 2 * 8 = 21 = kAppendAbiParams: the parameters a kvrt append packs, five
// buffer pointers and sixteen i32 scalars (104 bytes).
__global__ void emptyAbiKernel(const void *c0, const void *c1, const void *c2,
                               const void *c3, const void *c4,
                               KVBENCH_EIGHT_SCALARS(a),
                               KVBENCH_EIGHT_SCALARS(b)) {}
#undef KVBENCH_EIGHT_SCALARS
static_assert(kAppendAbiParams == 21, "emptyAbiKernel has 21 parameters");

/// The input is read once and the kernel never reads the cache back, so a
/// streaming variant marks both evict-first (ld/st.global.cs) to leave L2 to
/// others. Whether that helps is measured per size, not assumed.
template <bool kStreaming>
__device__ __forceinline__ uint4 loadChunk(const uint16_t *address) {
  const uint4 *chunk = reinterpret_cast<const uint4 *>(address);
  if constexpr (kStreaming)
    return __ldcs(chunk);
  else
    return __ldg(chunk);
}

template <bool kStreaming>
__device__ __forceinline__ void storeChunk(uint16_t *address, uint4 value) {
  uint4 *chunk = reinterpret_cast<uint4 *>(address);
  if constexpr (kStreaming)
    __stcs(chunk, value);
  else
    *chunk = value;
}

template <bool kStreaming>
__device__ __forceinline__ void storeElement(uint16_t *address,
                                             uint16_t value) {
  if constexpr (kStreaming)
    __stcs(reinterpret_cast<unsigned short *>(address), value);
  else
    *address = value;
}

/// The slot of `token`, or -1 where it writes nothing: a token past the
/// launch, a negative slot, or one past the cache (a no-op like a negative
/// one), decided before any K/V load of that token.
__device__ __forceinline__ int64_t slotOf(const ReferenceAppendParams &p,
                                          int64_t token) {
  if (token >= p.numTokens)
    return -1;
  const int64_t s = __ldg(p.slotMapping + token);
  return s >= 0 && (s >> p.log2BlockSize) < p.numBlocks ? s : -1;
}

/// Thread (x, y) of a block handles chunks x, x + 128, ... of the tokens
/// group * tokensPerGroup + u * rows + y, u < kTokensPerThread: the rows of
/// one u are adjacent tokens, so the block's loads of one u are contiguous
/// when the inputs are. With kSplitKV the grid's work is twice the groups:
/// the first numGroups items copy K only, the rest V only.
template <bool kValueTransposed, int kTokensPerThread, bool kStreaming,
          bool kSplitKV>
__global__ void __launch_bounds__(kThreadsX *kMaxRows)
    referenceAppendKernel(const ReferenceAppendParams p) {
  const int rows = blockDim.y;
  const int64_t tokensPerGroup = int64_t(kTokensPerThread) * rows;
  const int64_t numGroups = (p.numTokens + tokensPerGroup - 1) / tokensPerGroup;
  const int64_t numItems = kSplitKV ? 2 * numGroups : numGroups;
  const int64_t chunkMask = (int64_t(1) << p.log2ChunksPerHead) - 1;
  const int numChunks = int(p.numHeads) << p.log2ChunksPerHead;
  const int64_t posMask = (int64_t(1) << p.log2BlockSize) - 1;

  for (int64_t item = blockIdx.x; item < numItems; item += gridDim.x) {
    const bool valueHalf = kSplitKV && item >= numGroups;
    const int64_t group = valueHalf ? item - numGroups : item;
    const bool doKey = !valueHalf;
    const bool doValue = !kSplitKV || valueHalf;
    int64_t token[kTokensPerThread];
    int64_t slot[kTokensPerThread];
#pragma unroll
    for (int u = 0; u < kTokensPerThread; ++u) {
      token[u] = group * tokensPerGroup + int64_t(u) * rows + threadIdx.y;
      slot[u] = slotOf(p, token[u]);
    }

    for (int chunk = threadIdx.x; chunk < numChunks; chunk += blockDim.x) {
      const int64_t head = chunk >> p.log2ChunksPerHead;
      const int64_t j = chunk & chunkMask;
      uint4 keyChunk[kTokensPerThread] = {};
      uint4 valueChunk[kTokensPerThread] = {};
      // All loads first: 2 * kTokensPerThread 16-byte loads in flight.
#pragma unroll
      for (int u = 0; u < kTokensPerThread; ++u) {
        if (slot[u] < 0)
          continue;
        if (doKey)
          keyChunk[u] =
              loadChunk<kStreaming>(p.key + token[u] * p.keyStrideToken +
                                    head * p.keyStrideHead + 8 * j);
        if (doValue)
          valueChunk[u] =
              loadChunk<kStreaming>(p.value + token[u] * p.valueStrideToken +
                                    head * p.valueStrideHead + 8 * j);
      }
#pragma unroll
      for (int u = 0; u < kTokensPerThread; ++u) {
        if (slot[u] < 0)
          continue;
        const int64_t block = slot[u] >> p.log2BlockSize;
        const int64_t pos = slot[u] & posMask;
        if (doKey)
          storeChunk<kStreaming>(p.keyCache + block * p.keyCacheStrideBlock +
                                     head * p.keyCacheStrideHead +
                                     pos * p.keyCacheStridePos +
                                     j * p.keyCacheStrideChunk,
                                 keyChunk[u]);
        if (!doValue)
          continue;
        if constexpr (!kValueTransposed) {
          storeChunk<kStreaming>(
              p.valueCache + block * p.valueCacheStrideBlock +
                  head * p.valueCacheStrideHead + pos * p.valueCacheStridePos +
                  j * p.valueCacheStrideChunk,
              valueChunk[u]);
        } else {
          uint16_t *dst = p.valueCache + block * p.valueCacheStrideBlock +
                          head * p.valueCacheStrideHead +
                          pos * p.valueCacheStridePos +
                          8 * j * p.valueCacheStrideDim;
          const uint32_t words[4] = {valueChunk[u].x, valueChunk[u].y,
                                     valueChunk[u].z, valueChunk[u].w};
#pragma unroll
          for (int e = 0; e < 8; ++e)
            storeElement<kStreaming>(dst + e * p.valueCacheStrideDim,
                                     uint16_t(words[e / 2] >> (16 * (e % 2))));
        }
      }
    }
  }
}

__device__ __forceinline__ uint32_t sharedAddress(const void *pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

/// The bulk copy engine's append: one warp a block, kTokensPerBlock tokens a
/// group. Per group, the warp reads the slots, then its lanes issue one
/// global -> shared bulk copy per head row of K and of V of every token whose
/// slot is in the cache (a row is whole 16-byte chunks, as cp.async.bulk
/// needs), all counted on one mbarrier; once it completes they issue the
/// shared -> global bulk copies into the cache: one per row where the cache's
/// row is contiguous, one per 16-byte chunk where it is not, and element
/// stores from shared memory for a transposed value cache. The stage is
/// reused by the next group only after every lane's bulk stores have read it.
template <bool kValueTransposed, int kTokensPerBlock>
__global__ void __launch_bounds__(32)
    bulkAppendKernel(const ReferenceAppendParams p) {
  extern __shared__ __align__(128) uint8_t stage[];
  __shared__ __align__(8) uint64_t loadedStorage;
  const uint32_t loaded = sharedAddress(&loadedStorage);
  const int lane = threadIdx.x;
  const int chunksPerHead = 1 << p.log2ChunksPerHead;
  const uint32_t rowBytes = 16u * uint32_t(chunksPerHead);
  const int rowsPerToken = 2 * int(p.numHeads); // K's heads, then V's
  const int64_t numGroups =
      (p.numTokens + kTokensPerBlock - 1) / kTokensPerBlock;
  const int64_t posMask = (int64_t(1) << p.log2BlockSize) - 1;

  if (lane == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(loaded)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  uint32_t phase = 0;
  for (int64_t group = blockIdx.x; group < numGroups; group += gridDim.x) {
    int64_t token[kTokensPerBlock];
    int64_t slot[kTokensPerBlock];
    uint32_t bytes = 0;
#pragma unroll
    for (int u = 0; u < kTokensPerBlock; ++u) {
      token[u] = group * kTokensPerBlock + u;
      slot[u] = slotOf(p, token[u]);
      if (slot[u] >= 0)
        bytes += uint32_t(rowsPerToken) * rowBytes;
    }
    if (bytes == 0) // the same for every lane: one group a warp
      continue;
    // Shared memory read by this lane's element stores, then written by the
    // next bulk copies: order the two proxies. Then wait until this lane's
    // bulk stores have read the stage, and the whole warp's.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    __syncwarp();
    if (lane == 0)
      asm volatile(
          "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
              loaded),
          "r"(bytes)
          : "memory");
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kTokensPerBlock; ++u) {
      if (slot[u] < 0)
        continue;
      for (int r = lane; r < rowsPerToken; r += 32) {
        const bool isKey = r < p.numHeads;
        const int64_t head = isKey ? r : r - p.numHeads;
        const uint16_t *source =
            isKey ? p.key + token[u] * p.keyStrideToken + head * p.keyStrideHead
                  : p.value + token[u] * p.valueStrideToken +
                        head * p.valueStrideHead;
        const uint32_t row =
            sharedAddress(stage + (u * rowsPerToken + r) * rowBytes);
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::"
                     "complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(row),
                     "l"(source), "r"(rowBytes), "r"(loaded)
                     : "memory");
      }
    }
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n .reg .pred ready;\n"
                   " mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], "
                   "%2;\n selp.u32 %0, 1, 0, ready;\n}"
                   : "=r"(done)
                   : "r"(loaded), "r"(phase)
                   : "memory");
    phase ^= 1;
#pragma unroll
    for (int u = 0; u < kTokensPerBlock; ++u) {
      if (slot[u] < 0)
        continue;
      const int64_t block = slot[u] >> p.log2BlockSize;
      const int64_t pos = slot[u] & posMask;
      for (int r = lane; r < rowsPerToken; r += 32) {
        const bool isKey = r < p.numHeads;
        const int64_t head = isKey ? r : r - p.numHeads;
        const uint8_t *staged = stage + (u * rowsPerToken + r) * rowBytes;
        uint16_t *dest =
            isKey ? p.keyCache + block * p.keyCacheStrideBlock +
                        head * p.keyCacheStrideHead + pos * p.keyCacheStridePos
                  : p.valueCache + block * p.valueCacheStrideBlock +
                        head * p.valueCacheStrideHead +
                        pos * p.valueCacheStridePos;
        if (kValueTransposed && !isKey) {
          const uint16_t *elements = reinterpret_cast<const uint16_t *>(staged);
          for (int e = 0; e < 8 * chunksPerHead; ++e)
            dest[e * p.valueCacheStrideDim] = elements[e];
          continue;
        }
        const int64_t strideChunk =
            isKey ? p.keyCacheStrideChunk : p.valueCacheStrideChunk;
        if (strideChunk == 8) {
          asm volatile(
              "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::
                  "l"(dest),
              "r"(sharedAddress(staged)), "r"(rowBytes)
              : "memory");
          continue;
        }
        for (int j = 0; j < chunksPerHead; ++j)
          asm volatile(
              "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16;" ::
                  "l"(dest + j * strideChunk),
              "r"(sharedAddress(staged + 16 * j))
              : "memory");
      }
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  // The stage must outlive the reads of this lane's last bulk stores.
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

using ReferenceKernel = void (*)(const ReferenceAppendParams);

template <bool kValueTransposed, bool kStreaming, bool kSplitKV>
ReferenceKernel selectThreadKernel(int tokensPerThread) {
  switch (tokensPerThread) {
  case 1:
    return referenceAppendKernel<kValueTransposed, 1, kStreaming, kSplitKV>;
  case 2:
    return referenceAppendKernel<kValueTransposed, 2, kStreaming, kSplitKV>;
  case 4:
    return referenceAppendKernel<kValueTransposed, 4, kStreaming, kSplitKV>;
  default:
    return nullptr;
  }
}

template <bool kValueTransposed>
ReferenceKernel selectBulkKernel(int tokensPerBlock) {
  switch (tokensPerBlock) {
  case 1:
    return bulkAppendKernel<kValueTransposed, 1>;
  case 2:
    return bulkAppendKernel<kValueTransposed, 2>;
  case 4:
    return bulkAppendKernel<kValueTransposed, 4>;
  default:
    return nullptr;
  }
}

/// The split and streaming shapes are not combined (no configuration asks
/// for both), which keeps the instantiations down.
ReferenceKernel selectKernel(bool valueTransposed,
                             const ReferenceConfig &config) {
  const int tokens = config.tokensPerThread;
  if (config.bulk)
    return valueTransposed ? selectBulkKernel<true>(tokens)
                           : selectBulkKernel<false>(tokens);
  if (config.splitKV && config.streaming)
    return nullptr;
  if (config.splitKV)
    return valueTransposed ? selectThreadKernel<true, false, true>(tokens)
                           : selectThreadKernel<false, false, true>(tokens);
  if (valueTransposed)
    return config.streaming ? selectThreadKernel<true, true, false>(tokens)
                            : selectThreadKernel<true, false, false>(tokens);
  return config.streaming ? selectThreadKernel<false, true, false>(tokens)
                          : selectThreadKernel<false, false, false>(tokens);
}

/// Dynamic shared memory of a bulk configuration: every head row of K and V
/// of its tokens.
size_t bulkStageBytes(const ReferenceAppendParams &params,
                      const ReferenceConfig &config) {
  return size_t(config.tokensPerThread) * 2 * size_t(params.numHeads) *
         (size_t(16) << params.log2ChunksPerHead);
}

const std::vector<ReferenceConfig> kConfigs = {
    {"t1r1", 1, 1, false, false, false, false},
    {"t1r2", 1, 2, false, false, false, false},
    {"t2r1", 2, 1, false, false, false, false},
    {"t2r2", 2, 2, false, false, false, false},
    {"t4r1", 4, 1, false, false, false, false},
    {"t4r2", 4, 2, false, false, false, false},
    {"p-t2r2", 2, 2, true, false, false, false},
    {"p-t4r1", 4, 1, true, false, false, false},
    {"t1r1-cs", 1, 1, false, true, false, false},
    {"t2r2-cs", 2, 2, false, true, false, false},
    {"p-t4r1-cs", 4, 1, true, true, false, false},
    {"t1r1-kv", 1, 1, false, false, true, false},
    {"t2r1-kv", 2, 1, false, false, true, false},
    {"bulk-t1", 1, 1, false, false, false, true},
    {"bulk-t2", 2, 1, false, false, false, true},
    {"bulk-t4", 4, 1, false, false, false, true}};
constexpr size_t kMaxConfigs = 16;

/// Persistent grid per config and value-transposition: resident blocks per
/// SM (from the occupancy calculator) times SMs. 0 until initReference.
int64_t persistentGrid[2][kMaxConfigs] = {};

} // namespace

cudaError_t fillRandom16(uint16_t *data, uint64_t count, uint32_t seed,
                         cudaStream_t stream) {
  if (count % 8 != 0 || reinterpret_cast<uintptr_t>(data) % 16 != 0)
    return cudaErrorInvalidValue;
  fillRandom16Kernel<<<kHelperBlocks, kHelperThreads, 0, stream>>>(
      reinterpret_cast<uint4 *>(data), count / 8, seed);
  return cudaGetLastError();
}

cudaError_t flushL2(const void *buffer, uint64_t bytes, uint32_t *sink,
                    cudaStream_t stream) {
  if (bytes % 16 != 0)
    return cudaErrorInvalidValue;
  flushL2Kernel<<<kHelperBlocks, kHelperThreads, 0, stream>>>(
      static_cast<const uint4 *>(buffer), bytes / 16, sink);
  return cudaGetLastError();
}

cudaError_t countMismatches16(const uint16_t *data, uint64_t count,
                              uint32_t seed, unsigned long long *deviceCount,
                              cudaStream_t stream) {
  if (count % 8 != 0)
    return cudaErrorInvalidValue;
  countMismatches16Kernel<<<kHelperBlocks, kHelperThreads, 0, stream>>>(
      reinterpret_cast<const uint4 *>(data), count / 8, seed, deviceCount);
  return cudaGetLastError();
}

cudaError_t launchEmptyKernel(cudaStream_t stream) {
  emptyKernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

const void *emptyAbiKernelSymbol() {
  return reinterpret_cast<const void *>(emptyAbiKernel);
}

const std::vector<ReferenceConfig> &referenceConfigs() { return kConfigs; }

cudaError_t initReference(int device) {
  if (kConfigs.size() > kMaxConfigs)
    return cudaErrorInvalidValue;
  int numSMs = 0;
  cudaError_t error =
      cudaDeviceGetAttribute(&numSMs, cudaDevAttrMultiProcessorCount, device);
  if (error != cudaSuccess)
    return error;
  for (int transposed = 0; transposed < 2; ++transposed) {
    for (size_t i = 0; i < kConfigs.size(); ++i) {
      const ReferenceConfig &config = kConfigs[i];
      int blocksPerSM = 0;
      if (!config.persistent)
        continue;
      error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocksPerSM, selectKernel(transposed != 0, config),
          kThreadsX * config.rows, 0);
      if (error != cudaSuccess)
        return error;
      persistentGrid[transposed][i] = int64_t(blocksPerSM) * numSMs;
    }
  }
  return cudaSuccess;
}

int64_t referenceGridSize(const ReferenceAppendParams &params,
                          int configIndex) {
  const ReferenceConfig &config = kConfigs[configIndex];
  const int64_t tokensPerGroup = int64_t(config.tokensPerThread) * config.rows;
  const int64_t groups =
      (params.numTokens + tokensPerGroup - 1) / tokensPerGroup;
  int64_t grid = config.splitKV ? 2 * groups : groups;
  if (config.persistent)
    grid = std::min(
        grid, persistentGrid[params.valueTransposed ? 1 : 0][configIndex]);
  if (params.maxGridBlocks > 0)
    grid = std::min(grid, params.maxGridBlocks);
  return grid;
}

cudaError_t launchReferenceAppend(const ReferenceAppendParams &params,
                                  int configIndex, cudaStream_t stream) {
  if (configIndex < 0 || size_t(configIndex) >= kConfigs.size())
    return cudaErrorInvalidValue;
  const ReferenceConfig &config = kConfigs[configIndex];
  if (config.rows > kMaxRows)
    return cudaErrorInvalidConfiguration;
  if (params.numTokens <= 0)
    return cudaSuccess;
  const int64_t grid = referenceGridSize(params, configIndex);
  if (grid <= 0 || grid > 0x7fffffff)
    return cudaErrorInvalidConfiguration;
  ReferenceKernel kernel = selectKernel(params.valueTransposed, config);
  if (!kernel)
    return cudaErrorInvalidConfiguration;
  if (config.bulk) {
    const size_t stageBytes = bulkStageBytes(params, config);
    if (stageBytes > 48 * 1024) {
      const cudaError_t error = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(stageBytes));
      if (error != cudaSuccess)
        return error;
    }
    kernel<<<unsigned(grid), 32, stageBytes, stream>>>(params);
    return cudaGetLastError();
  }
  kernel<<<unsigned(grid), dim3(kThreadsX, config.rows), 0, stream>>>(params);
  return cudaGetLastError();
}

} // namespace kvbench
