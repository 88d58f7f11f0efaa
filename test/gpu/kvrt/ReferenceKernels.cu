//===- ReferenceKernels.cu - the kernel ABI, written by hand in CUDA ------===//
//
// An independent implementation of docs/KERNEL-ABI.md for one description
// (paged_nhd, block 16, 8 KV heads, head_dim 128, bf16 -> bf16), compiled by
// nvcc into a bundle, so that kvrt's GPU path (module loading, packing,
// geometry, variants) is tested on a GPU without kvgen. Parameter lists match
// the manifest's `params` exactly: one pointer per buffer, then the i64
// scalars.
//
//===----------------------------------------------------------------------===//

#include <cstdint>

namespace {
constexpr int64_t kBlockSize = 16;
constexpr int64_t kHeads = 8;
constexpr int64_t kHeadDim = 128;
constexpr int64_t kVectorElems = 8; // 16 bytes of bf16
} // namespace

// One buffer: a pointer to its first element.
#define KVRT_BUFFER(type, name) type *name

// Scalars are i32 (bundle version 4).
#define KVRT_STRIDES                                                           \
  int32_t kT, int32_t kH, int32_t kD, int32_t vT, int32_t vH, int32_t vD,      \
      int32_t kcB, int32_t kcH, int32_t kcP, int32_t kcD, int32_t vcB,         \
      int32_t vcH, int32_t vcP, int32_t vcD

namespace {

__device__ int64_t slotFor(int64_t token, const int32_t *blockTable,
                           const int32_t *queryStartLoc,
                           const int32_t *contextLens, int64_t numReqs,
                           int64_t tableStride, int64_t maxBlocks) {
  for (int64_t r = 0; r < numReqs; ++r) {
    if (token < queryStartLoc[r] || token >= queryStartLoc[r + 1])
      continue;
    int64_t position = contextLens[r] + token - queryStartLoc[r];
    int64_t index = position / kBlockSize;
    if (index >= maxBlocks)
      return -1;
    int64_t block = blockTable[r * tableStride + index];
    if (block < 0)
      return -1;
    return block * kBlockSize + position % kBlockSize;
  }
  return -1;
}

template <bool Vector>
__device__ void copyToken(int64_t token, int64_t slot, int64_t numBlocks,
                          const uint16_t *key, const uint16_t *value,
                          uint16_t *keyCache, uint16_t *valueCache,
                          KVRT_STRIDES) {
  if (slot < 0)
    return;
  int64_t block = slot / kBlockSize, pos = slot % kBlockSize;
  if (block >= numBlocks)
    return;
  constexpr int64_t width = Vector ? kVectorElems : 1;
  constexpr int64_t chunks = kHeads * kHeadDim / width;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    int64_t h = c * width / kHeadDim, d = c * width % kHeadDim;
    const uint16_t *k = key + token * kT + h * kH + d * kD;
    const uint16_t *v = value + token * vT + h * vH + d * vD;
    uint16_t *kc = keyCache + block * kcB + h * kcH + pos * kcP + d * kcD;
    uint16_t *vc = valueCache + block * vcB + h * vcH + pos * vcP + d * vcD;
    if (Vector) {
      *reinterpret_cast<uint4 *>(kc) = *reinterpret_cast<const uint4 *>(k);
      *reinterpret_cast<uint4 *>(vc) = *reinterpret_cast<const uint4 *>(v);
    } else {
      *kc = *k;
      *vc = *v;
    }
  }
}

__device__ int64_t currentToken() {
  return int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
}

template <bool Vector>
__device__ void append(const uint16_t *key, const uint16_t *value,
                       const int64_t *slots, uint16_t *keyCache,
                       uint16_t *valueCache, int64_t numTokens,
                       int64_t numBlocks, KVRT_STRIDES) {
  int64_t token = currentToken();
  if (token >= numTokens)
    return;
  copyToken<Vector>(token, slots[token], numBlocks, key, value, keyCache,
                    valueCache, kT, kH, kD, vT, vH, vD, kcB, kcH, kcP, kcD, vcB,
                    vcH, vcP, vcD);
}

template <bool Vector>
__device__ void fused(const uint16_t *key, const uint16_t *value,
                      const int32_t *blockTable, const int32_t *queryStartLoc,
                      const int32_t *contextLens, uint16_t *keyCache,
                      uint16_t *valueCache, int64_t numTokens,
                      int64_t numBlocks, int64_t numReqs, int64_t tableStride,
                      int64_t maxBlocks, KVRT_STRIDES) {
  int64_t token = currentToken();
  if (token >= numTokens)
    return;
  int64_t slot = slotFor(token, blockTable, queryStartLoc, contextLens, numReqs,
                         tableStride, maxBlocks);
  copyToken<Vector>(token, slot, numBlocks, key, value, keyCache, valueCache,
                    kT, kH, kD, vT, vH, vD, kcB, kcH, kcP, kcD, vcB, vcH, vcP,
                    vcD);
}

} // namespace

#define KVRT_PASS_STRIDES                                                      \
  kT, kH, kD, vT, vH, vD, kcB, kcH, kcP, kcD, vcB, vcH, vcP, vcD

#define KVRT_APPEND_PARAMS                                                     \
  KVRT_BUFFER(const uint16_t, key), KVRT_BUFFER(const uint16_t, value),        \
      KVRT_BUFFER(const int64_t, slots), KVRT_BUFFER(uint16_t, keyCache),      \
      KVRT_BUFFER(uint16_t, valueCache), int32_t numTokens, int32_t numBlocks, \
      KVRT_STRIDES

extern "C" __global__ void kv_append(KVRT_APPEND_PARAMS) {
  append<true>(key, value, slots, keyCache, valueCache, numTokens, numBlocks,
               KVRT_PASS_STRIDES);
}
extern "C" __global__ void kv_append_scalar(KVRT_APPEND_PARAMS) {
  append<false>(key, value, slots, keyCache, valueCache, numTokens, numBlocks,
                KVRT_PASS_STRIDES);
}

extern "C" __global__ void kv_slots(KVRT_BUFFER(const int32_t, blockTable),
                                    KVRT_BUFFER(const int32_t, queryStartLoc),
                                    KVRT_BUFFER(const int32_t, contextLens),
                                    KVRT_BUFFER(int64_t, slots),
                                    int32_t numTokens, int32_t numReqs,
                                    int32_t tableStride, int32_t maxBlocks) {
  int64_t token = currentToken();
  if (token < numTokens)
    slots[token] = slotFor(token, blockTable, queryStartLoc, contextLens,
                           numReqs, tableStride, maxBlocks);
}

#define KVRT_FUSED_PARAMS                                                      \
  KVRT_BUFFER(const uint16_t, key), KVRT_BUFFER(const uint16_t, value),        \
      KVRT_BUFFER(const int32_t, blockTable),                                  \
      KVRT_BUFFER(const int32_t, queryStartLoc),                               \
      KVRT_BUFFER(const int32_t, contextLens),                                 \
      KVRT_BUFFER(uint16_t, keyCache), KVRT_BUFFER(uint16_t, valueCache),      \
      int32_t numTokens, int32_t numBlocks, int32_t numReqs,                   \
      int32_t tableStride, int32_t maxBlocks, KVRT_STRIDES

extern "C" __global__ void kv_fused(KVRT_FUSED_PARAMS) {
  fused<true>(key, value, blockTable, queryStartLoc, contextLens, keyCache,
              valueCache, numTokens, numBlocks, numReqs, tableStride, maxBlocks,
              KVRT_PASS_STRIDES);
}
extern "C" __global__ void kv_fused_scalar(KVRT_FUSED_PARAMS) {
  fused<false>(key, value, blockTable, queryStartLoc, contextLens, keyCache,
               valueCache, numTokens, numBlocks, numReqs, tableStride,
               maxBlocks, KVRT_PASS_STRIDES);
}
