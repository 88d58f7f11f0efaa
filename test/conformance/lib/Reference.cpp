//===- Reference.cpp - The plain C++ reference of every kv op -------------===//

#include "conformance/Reference.h"

#include "conformance/Float16.h"
#include "conformance/Quant.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvgen::conformance {

[[noreturn]] static void suiteBug(const char *message) {
  std::fprintf(stderr, "kvgen conformance suite bug: %s\n", message);
  std::abort();
}

std::vector<int64_t>
TensorView::compactStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

TensorView TensorView::compact(void *data, DType dtype,
                               std::vector<int64_t> shape) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.strides = compactStrides(shape);
  view.shape = std::move(shape);
  return view;
}

int64_t TensorView::elementOffset(const Index &index) const {
  if (index.rank != rank())
    suiteBug("index rank differs from the tensor's");
  int64_t offset = 0;
  for (int i = 0; i < index.rank; ++i) {
    if (index.values[i] < 0 || index.values[i] >= shape[i])
      suiteBug("index outside the tensor's shape");
    offset += index.values[i] * strides[i];
  }
  return offset;
}

void *TensorView::elementPointer(const Index &index) const {
  return static_cast<char *>(data) + elementOffset(index) * dtypeBytes(dtype);
}

static Index makeIndex(std::initializer_list<int64_t> values) {
  Index index;
  for (int64_t v : values)
    index.values[index.rank++] = v;
  return index;
}

std::vector<int64_t> cacheShape(const Description &desc, CacheSide side,
                                int64_t numBlocks) {
  int64_t bs = desc.blockSize, h = desc.numKvHeads, d = desc.headDim;
  switch (desc.layout) {
  case Layout::Contiguous:
    return {numBlocks, h, bs, d}; // [batch, H, max_seq_len, D]
  case Layout::PagedNHD:
    return {numBlocks, bs, h, d};
  case Layout::PagedHND:
    return {numBlocks, h, bs, d};
  case Layout::VllmVectorized:
    if (side == CacheSide::Key)
      return {numBlocks, h, d / desc.x(), bs, desc.x()};
    return {numBlocks, h, d, bs};
  case Layout::DualStacked:
    return {numBlocks, 2, h, bs, d};
  }
  suiteBug("unknown layout");
}

Index cacheIndex(const Description &desc, CacheSide side, int64_t block,
                 int64_t head, int64_t pos, int64_t d) {
  switch (desc.layout) {
  case Layout::Contiguous:
  case Layout::PagedHND:
    return makeIndex({block, head, pos, d});
  case Layout::PagedNHD:
    return makeIndex({block, pos, head, d});
  case Layout::VllmVectorized:
    if (side == CacheSide::Key)
      return makeIndex({block, head, d / desc.x(), pos, d % desc.x()});
    return makeIndex({block, head, d, pos});
  case Layout::DualStacked:
    return makeIndex({block, side == CacheSide::Key ? 0 : 1, head, pos, d});
  }
  suiteBug("unknown layout");
}

CacheCoord cacheCoord(const Description &desc, CacheSide side,
                      const Index &index) {
  const auto &v = index.values;
  CacheCoord coord;
  coord.side = side;
  coord.block = v[0];
  switch (desc.layout) {
  case Layout::Contiguous:
  case Layout::PagedHND:
    coord.head = v[1], coord.pos = v[2], coord.d = v[3];
    break;
  case Layout::PagedNHD:
    coord.pos = v[1], coord.head = v[2], coord.d = v[3];
    break;
  case Layout::VllmVectorized:
    if (side == CacheSide::Key)
      coord.head = v[1], coord.d = v[2] * desc.x() + v[4], coord.pos = v[3];
    else
      coord.head = v[1], coord.d = v[2], coord.pos = v[3];
    break;
  case Layout::DualStacked:
    coord.side = v[1] == 0 ? CacheSide::Key : CacheSide::Value;
    coord.head = v[2], coord.pos = v[3], coord.d = v[4];
    break;
  }
  return coord;
}

uint32_t loadBits(const void *p, DType type) {
  if (dtypeBytes(type) == 1)
    return *static_cast<const uint8_t *>(p);
  if (dtypeBytes(type) == 4) {
    uint32_t bits;
    std::memcpy(&bits, p, 4);
    return bits;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bits;
}

void storeBits(void *p, DType type, uint32_t bits) {
  if (dtypeBytes(type) == 1) {
    *static_cast<uint8_t *>(p) = static_cast<uint8_t>(bits);
    return;
  }
  if (dtypeBytes(type) == 4) {
    std::memcpy(p, &bits, 4);
    return;
  }
  uint16_t narrow = static_cast<uint16_t>(bits);
  std::memcpy(p, &narrow, 2);
}

static float toFloat(uint32_t bits, DType type) {
  switch (type) {
  case DType::F32:
    return bitsToFloat(bits);
  case DType::F16:
    return halfToFloat(static_cast<uint16_t>(bits));
  case DType::BF16:
    return bfloat16ToFloat(static_cast<uint16_t>(bits));
  default:
    break;
  }
  suiteBug("a quantized element has no value without its scale");
}

static uint32_t fromFloat(float value, DType type) {
  switch (type) {
  case DType::F32:
    return floatBits(value);
  case DType::F16:
    return floatToHalf(value);
  case DType::BF16:
    return floatToBfloat16(value);
  default:
    break;
  }
  suiteBug("a quantized element is written by quantize()");
}

float elementToFloat(uint32_t bits, DType type) { return toFloat(bits, type); }
uint32_t floatToElement(float value, DType type) {
  return fromFloat(value, type);
}

uint32_t convertElement(uint32_t bits, DType from, DType to) {
  if (from == to)
    return bits;
  if (from != DType::F32 && to != DType::F32)
    suiteBug("16-bit to 16-bit casts are refused by the dialect");
  return fromFloat(toFloat(bits, from), to);
}

std::vector<int64_t> staticScaleShape(const Description &desc, int64_t rows,
                                      int64_t numBlocks) {
  int64_t h = desc.numKvHeads;
  switch (desc.quant->granularity) {
  case Granularity::PerTensor:
    return {1};
  case Granularity::PerHead:
    return {h};
  case Granularity::PerToken:
    return {rows};
  case Granularity::PerTokenHead:
    return {rows, h};
  case Granularity::PerBlock:
    return {numBlocks, h};
  }
  suiteBug("unknown granularity");
}

std::vector<int64_t> scaleCacheShape(const Description &desc,
                                     int64_t numBlocks) {
  if (desc.quant->granularity == Granularity::PerToken)
    return {numBlocks, desc.blockSize};
  if (desc.quant->granularity == Granularity::PerTokenHead)
    return {numBlocks, desc.blockSize, desc.numKvHeads};
  suiteBug("only per_token and per_token_head scales are dynamic");
}

int64_t staticScaleIndex(const Description &desc, int64_t row, int64_t head,
                         int64_t block) {
  int64_t h = desc.numKvHeads;
  switch (desc.quant->granularity) {
  case Granularity::PerTensor:
    return 0;
  case Granularity::PerHead:
    return head;
  case Granularity::PerToken:
    return row;
  case Granularity::PerTokenHead:
    return row * h + head;
  case Granularity::PerBlock:
    return block * h + head;
  }
  suiteBug("unknown granularity");
}

int64_t scaleCacheIndex(const Description &desc, int64_t block, int64_t pos,
                        int64_t head) {
  int64_t slot = block * desc.blockSize + pos;
  if (desc.quant->granularity == Granularity::PerToken)
    return slot;
  return slot * desc.numKvHeads + head;
}

namespace {

/// One side (K or V) of one token of a quantized append.
void quantizeRow(const Description &desc, const TensorView &source, int64_t t,
                 const TensorView &cache, CacheSide side, int64_t block,
                 int64_t pos, const float *staticScale, float *scaleCache) {
  const QuantSpec &quant = *desc.quant;
  auto x = [&](int64_t h, int64_t d) {
    return toFloat(
        loadBits(source.elementPointer(makeIndex({t, h, d})), source.dtype),
        source.dtype);
  };
  // Dynamic scales: the amax of the group (the token, or the token's head).
  std::vector<float> groupScale(desc.numKvHeads, 1.0f);
  if (quant.dynamic()) {
    bool perToken = quant.granularity == Granularity::PerToken;
    float tokenAmax = 0;
    for (int64_t h = 0; h < desc.numKvHeads; ++h) {
      float amax = 0;
      for (int64_t d = 0; d < desc.headDim; ++d)
        amax = foldAmax(amax, x(h, d));
      tokenAmax = foldAmax(tokenAmax, amax);
      groupScale[h] = dynamicScale(quant.kind, amax);
    }
    for (int64_t h = 0; h < desc.numKvHeads; ++h) {
      if (perToken)
        groupScale[h] = dynamicScale(quant.kind, tokenAmax);
      scaleCache[scaleCacheIndex(desc, block, pos, h)] = groupScale[h];
    }
  } else {
    for (int64_t h = 0; h < desc.numKvHeads; ++h)
      groupScale[h] = staticScale[staticScaleIndex(desc, t, h, block)];
  }
  for (int64_t h = 0; h < desc.numKvHeads; ++h)
    for (int64_t d = 0; d < desc.headDim; ++d)
      storeBits(cache.elementPointer(cacheIndex(desc, side, block, h, pos, d)),
                desc.cacheDtype,
                quantize(quant.kind, x(h, d), groupScale[h], quant.reciprocal));
}

} // namespace

void appendReference(const Description &desc, const TensorView &key,
                     const TensorView &value, const int64_t *slotMapping,
                     const TensorView &keyCache, const TensorView &valueCache,
                     const ScaleArgs *scales) {
  if (key.rank() != 3 || value.rank() != 3)
    suiteBug("key/value must be [num_tokens, H, D]");
  if (desc.quant && !scales)
    suiteBug("a quantized append needs its scales");
  int64_t numTokens = key.shape[0];
  int64_t numBlocks = keyCache.shape[0];
  bool stacked = desc.layout == Layout::DualStacked;
  const TensorView &vCache = stacked ? keyCache : valueCache;
  for (int64_t t = 0; t < numTokens; ++t) {
    int64_t slot = slotMapping[t];
    if (slot < 0)
      continue;
    int64_t block = slot / desc.blockSize;
    int64_t pos = slot % desc.blockSize;
    if (block >= numBlocks)
      continue;
    if (desc.quant) {
      quantizeRow(desc, key, t, keyCache, CacheSide::Key, block, pos,
                  scales->keyScale, scales->keyScaleCache);
      quantizeRow(desc, value, t, vCache, CacheSide::Value, block, pos,
                  scales->valueScale, scales->valueScaleCache);
      continue;
    }
    for (int64_t h = 0; h < desc.numKvHeads; ++h) {
      for (int64_t d = 0; d < desc.headDim; ++d) {
        Index src = makeIndex({t, h, d});
        storeBits(keyCache.elementPointer(
                      cacheIndex(desc, CacheSide::Key, block, h, pos, d)),
                  desc.cacheDtype,
                  convertElement(loadBits(key.elementPointer(src), key.dtype),
                                 key.dtype, desc.cacheDtype));
        storeBits(
            vCache.elementPointer(
                cacheIndex(desc, CacheSide::Value, block, h, pos, d)),
            desc.cacheDtype,
            convertElement(loadBits(value.elementPointer(src), value.dtype),
                           value.dtype, desc.cacheDtype));
      }
    }
  }
}

void gatherReference(const Description &desc, const TensorView &keyCache,
                     const TensorView &valueCache, const int64_t *slotMapping,
                     int64_t numRows, const ScaleArgs *scales,
                     const TensorView &keyOut, const TensorView &valueOut) {
  if (desc.quant && !scales)
    suiteBug("a quantized gather needs its scales");
  int64_t numBlocks = keyCache.shape[0];
  bool stacked = desc.layout == Layout::DualStacked;
  for (int64_t i = 0; i < numRows; ++i) {
    int64_t slot = slotMapping[i];
    if (slot < 0)
      continue;
    int64_t block = slot / desc.blockSize;
    int64_t pos = slot % desc.blockSize;
    if (block >= numBlocks)
      continue;
    for (CacheSide side : {CacheSide::Key, CacheSide::Value}) {
      bool isKey = side == CacheSide::Key;
      const TensorView &cache = isKey || stacked ? keyCache : valueCache;
      const TensorView &out = isKey ? keyOut : valueOut;
      for (int64_t h = 0; h < desc.numKvHeads; ++h) {
        float scale = 1.0f;
        if (desc.quant) {
          scale = desc.quant->dynamic()
                      ? (isKey ? scales->keyScaleCache
                               : scales->valueScaleCache)[scaleCacheIndex(
                            desc, block, pos, h)]
                      : (isKey ? scales->keyScale
                               : scales->valueScale)[staticScaleIndex(
                            desc, i, h, block)];
        }
        for (int64_t d = 0; d < desc.headDim; ++d) {
          uint32_t bits = loadBits(
              cache.elementPointer(cacheIndex(desc, side, block, h, pos, d)),
              desc.cacheDtype);
          float value = desc.quant
                            ? dequantize(desc.quant->kind,
                                         static_cast<uint8_t>(bits), scale)
                            : toFloat(bits, desc.cacheDtype);
          storeBits(out.elementPointer(makeIndex({i, h, d})), out.dtype,
                    fromFloat(value, out.dtype));
        }
      }
    }
  }
}

std::vector<int64_t> slotMappingReference(int64_t blockSize,
                                          const SlotMappingInputs &in,
                                          int64_t numTokens) {
  std::vector<int64_t> slots(numTokens, -1);
  for (int64_t t = 0; t < numTokens; ++t) {
    for (int64_t r = 0; r < in.numReqs; ++r) {
      if (t < in.queryStartLoc[r] || t >= in.queryStartLoc[r + 1])
        continue;
      // The new token goes at context_len: positions count the tokens
      // already in the cache, so this step's first token is not "-1".
      int64_t pos =
          static_cast<int64_t>(in.contextLens[r]) + t - in.queryStartLoc[r];
      int64_t column = pos / blockSize;
      if (column >= in.maxBlocksPerReq)
        break;
      int32_t block = in.blockTable[r * in.blockTableStride + column];
      if (block < 0)
        break;
      slots[t] = static_cast<int64_t>(block) * blockSize + pos % blockSize;
      break;
    }
  }
  return slots;
}

std::vector<int64_t> pageTableSlotsReference(int64_t blockSize,
                                             int64_t numBlocks,
                                             const PageTableInputs &in) {
  // Written from FlashInfer's description, not from the kernel: each
  // request's pages as a list, then the position's page in that list.
  int64_t numIndices = static_cast<int64_t>(in.kvIndices.size());
  int64_t batchSize = static_cast<int64_t>(in.kvIndptr.size()) - 1;
  std::vector<std::vector<int64_t>> pages(batchSize > 0 ? batchSize : 0);
  std::vector<bool> wellFormed(pages.size(), false);
  for (int64_t b = 0; b < batchSize; ++b) {
    int64_t first = in.kvIndptr[b], last = in.kvIndptr[b + 1];
    if (first < 0 || last > numIndices)
      continue; // names entries that kv_indices does not have
    wellFormed[b] = true;
    for (int64_t k = first; k < last; ++k)
      pages[b].push_back(in.kvIndices[k]);
  }
  std::vector<int64_t> slots(in.positions.size(), -1);
  for (size_t i = 0; i < slots.size(); ++i) {
    int64_t b = in.batchIndices[i];
    int64_t position = in.positions[i];
    if (b < 0 || b >= batchSize || !wellFormed[b] || position < 0)
      continue;
    const std::vector<int64_t> &list = pages[b];
    if (position / blockSize >= static_cast<int64_t>(list.size()))
      continue;
    int64_t page = list[position / blockSize];
    if (page < 0 || page >= numBlocks)
      continue;
    slots[i] = page * blockSize + position % blockSize;
  }
  return slots;
}

} // namespace kvgen::conformance
