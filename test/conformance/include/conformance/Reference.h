//===- Reference.h - The plain C++ reference of every kv op -----*- C++ -*-===//
//
// What the kernels must compute, written the obvious way: a cache element is
// found by its multi-dimensional index in the cache tensor's own shape (for
// each layout, where (block, head, pos, d) sits in that shape) and the
// tensor's strides, never by the flattened offset formulas the kernels use.
// That keeps the reference an independent check of those formulas.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_REFERENCE_H
#define KVGEN_CONFORMANCE_REFERENCE_H

#include "conformance/Description.h"

#include <array>
#include <cstdint>
#include <vector>

namespace kvgen::conformance {

/// A multi-dimensional index of rank <= 5 (the vllm_vectorized key cache).
struct Index {
  std::array<int64_t, 5> values{};
  int rank = 0;
};

/// A strided host tensor: `data` is its first element, strides are in
/// elements, as in DLPack.
struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  /// Compact row-major strides for `shape`.
  static std::vector<int64_t> compactStrides(const std::vector<int64_t> &shape);
  static TensorView compact(void *data, DType dtype,
                            std::vector<int64_t> shape);

  int rank() const { return static_cast<int>(shape.size()); }
  /// Elements from `data` to the element at `index` (bounds-checked; aborts
  /// on an index outside the shape, which would be a bug in the suite).
  int64_t elementOffset(const Index &index) const;
  void *elementPointer(const Index &index) const;
};

/// Which of the two caches. For dual_stacked both live in one tensor.
enum class CacheSide { Key, Value };

/// The DLPack shape of a cache tensor (KERNEL-ABI.md, "Tensors kvrt
/// accepts"); for dual_stacked the one [nb, 2, H, bs, D] tensor.
std::vector<int64_t> cacheShape(const Description &desc, CacheSide side,
                                int64_t numBlocks);

/// Where element (block, head, pos, d) of the K or V cache sits in
/// cacheShape(): the layout's own dimension order.
Index cacheIndex(const Description &desc, CacheSide side, int64_t block,
                 int64_t head, int64_t pos, int64_t d);

/// The inverse of cacheIndex(), for mismatch reports.
struct CacheCoord {
  CacheSide side = CacheSide::Key;
  int64_t block = 0, head = 0, pos = 0, d = 0;
};
CacheCoord cacheCoord(const Description &desc, CacheSide side,
                      const Index &index);

/// One element converted from `from` to `to` (bits in, bits out, in the low
/// bytes of the result): same type is a bit copy; otherwise widen exactly to
/// fp32, then narrow with round to nearest even.
uint32_t convertElement(uint32_t bits, DType from, DType to);
/// Reads / writes the element at `p` as raw bits.
uint32_t loadBits(const void *p, DType type);
void storeBits(void *p, DType type, uint32_t bits);

/// The scales of a quantized description (docs/CONTRACT.md,
/// "Quantization"), K's and V's, as compact fp32 host arrays.
struct ScaleArgs {
  /// Static: the inputs, of staticScaleShape().
  const float *keyScale = nullptr;
  const float *valueScale = nullptr;
  /// Dynamic: the scale caches, of scaleCacheShape(); an append writes the
  /// scale of each token it writes at that token's slot, a gather reads it.
  float *keyScaleCache = nullptr;
  float *valueScaleCache = nullptr;
};

/// A static scale tensor's shape: per_tensor [1], per_head [H], per_token
/// [rows], per_token_head [rows, H], per_block [num_blocks, H]. `rows` is
/// the launch's tokens (an append) or slots (a gather).
std::vector<int64_t> staticScaleShape(const Description &desc, int64_t rows,
                                      int64_t numBlocks);
/// A dynamic scale cache's shape: per_token [num_blocks, block_size],
/// per_token_head [num_blocks, block_size, H] (contiguous: [batch,
/// max_seq_len(, H)]).
std::vector<int64_t> scaleCacheShape(const Description &desc,
                                     int64_t numBlocks);
/// The element of a static scale that covers (row, head) of a token whose
/// slot is in `block`.
int64_t staticScaleIndex(const Description &desc, int64_t row, int64_t head,
                         int64_t block);
/// The element of a scale cache that holds the scale of (block, pos, head).
int64_t scaleCacheIndex(const Description &desc, int64_t block, int64_t pos,
                        int64_t head);

/// The append: for each token t with slot s >= 0 and block s / block_size <
/// num_blocks (cache dim 0), writes key[t, h, d] and value[t, h, d] into the
/// caches at (block, h, s % block_size, d), cast to the cache dtype, or for
/// a quantized cache quantized with `scales` (dynamic: computed per group and
/// written into the scale caches). `key`/`value` are [num_tokens, H, D] of
/// the source dtype; the caches have cacheShape()'s shape (any strides). For
/// dual_stacked pass the kv tensor as `keyCache`; `valueCache` is ignored.
void appendReference(const Description &desc, const TensorView &key,
                     const TensorView &value, const int64_t *slotMapping,
                     const TensorView &keyCache, const TensorView &valueCache,
                     const ScaleArgs *scales = nullptr);

/// The gather: for each row i of `slotMapping` (numRows slots) with a slot
/// the append would write, reads (block, h, pos, d) of both caches into
/// keyOut/valueOut[i, h, d] ([rows, H, D] of desc.outputDtype, any strides):
/// dequantized (x = float(q) * s) for a quantized cache, else converted;
/// narrowed with round to nearest even. Other rows are left as they are.
void gatherReference(const Description &desc, const TensorView &keyCache,
                     const TensorView &valueCache, const int64_t *slotMapping,
                     int64_t numRows, const ScaleArgs *scales,
                     const TensorView &keyOut, const TensorView &valueOut);

/// The fp32 value of an element of a float dtype (f32, f16, bf16), and the
/// bits of `value` in one (round to nearest even).
float elementToFloat(uint32_t bits, DType type);
uint32_t floatToElement(float value, DType type);

/// The slot-mapping builder (KERNEL-ABI.md): token t of request r (the r with
/// query_start_loc[r] <= t < query_start_loc[r + 1]) is at position
/// context_lens[r] + t - query_start_loc[r]; its slot is
/// block_table[r][pos / bs] * bs + pos % bs, or -1 for a token of no
/// request (padding), a position past the row, or a negative table entry.
struct SlotMappingInputs {
  const int32_t *blockTable = nullptr;
  int64_t blockTableStride = 0; ///< elements between rows
  int64_t maxBlocksPerReq = 0;
  const int32_t *queryStartLoc = nullptr; ///< [num_reqs + 1]
  const int32_t *contextLens = nullptr;   ///< [num_reqs]
  int64_t numReqs = 0;
};
std::vector<int64_t> slotMappingReference(int64_t blockSize,
                                          const SlotMappingInputs &inputs,
                                          int64_t numTokens);

/// FlashInfer's page table (paged_kv_append, docs/CONTRACT.md): token i is at
/// position positions[i] of request batch_indices[i], whose pages are
/// kv_indices[kv_indptr[b] .. kv_indptr[b + 1]); its slot is page
/// positions[i] / bs of that list times bs plus positions[i] % bs, or -1
/// where the request, the position, the range of kv_indptr or the page id
/// is out of range (a page past num_blocks too).
struct PageTableInputs {
  std::vector<int32_t> batchIndices, positions; ///< [num_tokens]
  std::vector<int32_t> kvIndices;               ///< [num_indices]
  std::vector<int32_t> kvIndptr;                ///< [batch_size + 1]
};
std::vector<int64_t> pageTableSlotsReference(int64_t blockSize,
                                             int64_t numBlocks,
                                             const PageTableInputs &inputs);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_REFERENCE_H
