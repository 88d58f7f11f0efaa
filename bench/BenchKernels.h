//===- BenchKernels.h - kvbench's own device code, host-callable ----------===//
//
// The CUDA side of kvbench, compiled by nvcc for sm_90 only: the hand-written
// reference append that every generated kernel is compared against, and the
// helpers the timing needs (random fill, L2 flush, empty kernels, a device
// mismatch count for the correctness check). The rest of kvbench is plain C++
// and reaches all of it through these functions.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_BENCHKERNELS_H
#define KVGEN_BENCH_BENCHKERNELS_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace kvbench {

/// Fills `count` 16-bit elements with randomBits16(seed, i). `count` must be a
/// multiple of 8 and `data` 16-byte aligned (cudaMalloc's 256 bytes are).
cudaError_t fillRandom16(uint16_t *data, uint64_t count, uint32_t seed,
                         cudaStream_t stream);

/// A read-only pass over `bytes` (a multiple of 16) of `buffer`: evicts every
/// line of L2, the method of docs/PERFORMANCE.md. `sink`
/// (one device uint32) is written only if an impossible checksum comes out,
/// so the loads cannot be dropped.
cudaError_t flushL2(const void *buffer, uint64_t bytes, uint32_t *sink,
                    cudaStream_t stream);

/// Adds to `*deviceCount` the number of elements i of `data` that differ
/// from randomBits16(seed, i). `count` must be a multiple of 8.
cudaError_t countMismatches16(const uint16_t *data, uint64_t count,
                              uint32_t seed, unsigned long long *deviceCount,
                              cudaStream_t stream);

/// An empty kernel, <<<1, 1>>>: the launch-cost anchor (docs/PERFORMANCE.md).
cudaError_t launchEmptyKernel(cudaStream_t stream);

/// The number of parameters of emptyAbiKernel: what kvrt packs for an
/// append (5 buffer pointers, then 16 i32 scalars; KERNEL-ABI.md).
constexpr int kAppendAbiParams = 21;

/// The address of an empty __global__ function taking kAppendAbiParams
/// parameters, for cudaGetFuncBySymbol: launched through
/// cuLaunchKernel it is the closest empty twin of a kvrt launch.
const void *emptyAbiKernelSymbol();

/// What the reference append needs. Element strides, 16-bit elements. A
/// token's K/V row is read in 16-byte chunks: chunk j of head h of token t
/// starts at element t * strideToken + h * strideHead + 8 * j of the input.
struct ReferenceAppendParams {
  const uint16_t *key = nullptr;
  const uint16_t *value = nullptr;
  const int64_t *slotMapping = nullptr;
  uint16_t *keyCache = nullptr;
  uint16_t *valueCache = nullptr;
  int64_t numTokens = 0;
  /// Blocks of the cache (a Batch-axis layout: its batch); a slot past them
  /// writes nothing.
  int64_t numBlocks = 0;
  int64_t numHeads = 0;
  /// log2 of the slots per block (a Batch-axis layout: of max_seq_len).
  int log2BlockSize = 0;
  /// log2 of the 16-byte chunks per head (head_dim / 8).
  int log2ChunksPerHead = 0;
  int64_t keyStrideToken = 0, keyStrideHead = 0;
  int64_t valueStrideToken = 0, valueStrideHead = 0;
  /// Chunk j of (block, head, pos) is stored at
  /// block * strideBlock + head * strideHead + pos * stridePos + j *
  /// strideChunk.
  int64_t keyCacheStrideBlock = 0, keyCacheStrideHead = 0,
          keyCacheStridePos = 0, keyCacheStrideChunk = 0;
  int64_t valueCacheStrideBlock = 0, valueCacheStrideHead = 0,
          valueCacheStridePos = 0, valueCacheStrideChunk = 0;
  /// A value cache whose head_dim is not innermost ([nb, H, D, bs]): a
  /// chunk's 8 elements go to 8 places, valueCacheStrideDim apart (the chunk
  /// stride is unused).
  bool valueTransposed = false;
  int64_t valueCacheStrideDim = 0;
  /// If > 0, at most this many thread blocks: every block then strides over
  /// several token groups, which the correctness check needs to exercise
  /// (its few tokens never fill the natural grid).
  int64_t maxGridBlocks = 0;
};

/// One shape of the reference: `tokensPerThread` tokens' loads in flight per
/// thread, `rows` tokens side by side in a 128 x rows thread block, either
/// one block per group of tokens or a persistent grid that strides over them,
/// and plain or streaming (evict-first: ld/st.global.cs) accesses.
///
/// Two shapes probe where a copy's bandwidth goes rather than how many bytes
/// a thread keeps in flight: `splitKV` gives K and V their own blocks (the
/// first half of the grid writes only the key cache, the second only the
/// value cache), so the DRAM sees one write stream at a time instead of two
/// interleaved ones; `bulk` moves each head row with the Hopper bulk copy
/// engine (cp.async.bulk global -> shared -> global, one warp a block,
/// `tokensPerThread` tokens a block), so no thread holds the bytes at all.
struct ReferenceConfig {
  const char *name;
  int tokensPerThread;
  int rows;
  bool persistent;
  bool streaming;
  bool splitKV;
  bool bulk;
};

/// The configurations kvbench tries, fastest per size kept.
const std::vector<ReferenceConfig> &referenceConfigs();

/// Reads the device's multiprocessor count and each persistent
/// configuration's occupancy; call once before launchReferenceAppend.
cudaError_t initReference(int device);

/// Launches the reference append with configuration `configIndex`; returns
/// the launch's error (cudaGetLastError), never synchronizes.
cudaError_t launchReferenceAppend(const ReferenceAppendParams &params,
                                  int configIndex, cudaStream_t stream);

/// The grid the launch above uses (for the log).
int64_t referenceGridSize(const ReferenceAppendParams &params, int configIndex);

} // namespace kvbench

#endif // KVGEN_BENCH_BENCHKERNELS_H
