//===- Harness.cpp - Buffers, tensors and byte-exact checks ---------------===//

#include "conformance/Harness.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace kvgen::conformance {

//===----------------------------------------------------------------------===//
// DeviceBuffer
//===----------------------------------------------------------------------===//

// Never ask a Backend for zero bytes: an empty tensor still needs a valid,
// aligned data pointer, and some allocators return nullptr for 0.
static constexpr size_t kMinAllocation = 256;

DeviceBuffer::DeviceBuffer(Backend &backend, size_t bytes)
    : backend(&backend), bytes(bytes) {
  pointer = backend.allocate(std::max(bytes, kMinAllocation));
}

DeviceBuffer DeviceBuffer::fenced(Backend &backend, size_t bytes) {
  DeviceBuffer buffer;
  buffer.backend = &backend;
  buffer.bytes = bytes;
  buffer.isFenced = true;
  buffer.pointer = backend.allocateFenced(bytes);
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : backend(other.backend), pointer(other.pointer), bytes(other.bytes),
      isFenced(other.isFenced) {
  other.pointer = nullptr;
  other.bytes = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    backend = other.backend;
    pointer = other.pointer;
    bytes = other.bytes;
    isFenced = other.isFenced;
    other.pointer = nullptr;
    other.bytes = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (pointer) {
    if (isFenced)
      backend->deallocateFenced(pointer);
    else
      backend->deallocate(pointer);
  }
  pointer = nullptr;
}

std::string kvrtFailure(const char *call, kvrt_status status) {
  return std::string(call) + " returned " + std::to_string(status) + " (" +
         kvrt_last_error() + ")";
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

static uint32_t randomFinite32(std::mt19937_64 &rng) {
  for (;;) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (((bits >> 23) & 0xff) != 0xff && (bits & 0x7fffffff) != 0)
      return bits;
  }
}

static uint16_t randomFinite16(DType type, std::mt19937_64 &rng) {
  for (;;) {
    uint16_t bits = static_cast<uint16_t>(rng());
    bool finite = type == DType::F16 ? ((bits >> 10) & 0x1f) != 0x1f
                                     : ((bits >> 7) & 0xff) != 0xff;
    if (finite && (bits & 0x7fff) != 0)
      return bits;
  }
}

static uint32_t uniformBits(std::mt19937_64 &rng, uint32_t lo, uint32_t hi) {
  return lo + static_cast<uint32_t>(rng() % (hi - lo + 1));
}

/// An fp32 value for a 16-bit cache: 1/2 ordinary, 1/8 each exact ties, near
/// ties, values that land in (or under) the target's subnormals, and values
/// at the top of the target's range (some of which round to infinity).
static uint32_t roundingProbe32(DType cache, std::mt19937_64 &rng) {
  uint32_t sign = static_cast<uint32_t>(rng() & 1) << 31;
  uint32_t mantissa = static_cast<uint32_t>(rng()) & 0x7fffff;
  unsigned kind = static_cast<unsigned>(rng() % 8);
  bool toHalf = cache == DType::F16;
  // Bits below the target's mantissa, and the half-way pattern of those.
  uint32_t lowMask = toHalf ? 0x1fff : 0xffff;
  uint32_t tie = toHalf ? 0x1000 : 0x8000;
  uint32_t normalLo = toHalf ? 127 - 14 : 100;
  uint32_t normalHi = toHalf ? 127 + 15 : 154;
  uint32_t exponent = uniformBits(rng, normalLo, normalHi);
  switch (kind) {
  case 4: // exact tie: rounds to the even neighbour
    mantissa = (mantissa & ~lowMask) | tie;
    break;
  case 5: // one fp32 ulp either side of a tie
    mantissa = (mantissa & ~lowMask) | (rng() & 1 ? tie + 1 : tie - 1);
    break;
  case 6: // f16: [2^-25, 2^-14) subnormal halves; bf16: fp32 subnormals
    if (toHalf) {
      exponent = uniformBits(rng, 127 - 25, 127 - 15);
    } else {
      exponent = uniformBits(rng, 0, 1);
      if (exponent == 0 && mantissa == 0)
        mantissa = 1;
    }
    break;
  case 7: // top of the range: f16 [~61440, 2^17), bf16 [2^127, FLT_MAX]
    if (toHalf) {
      exponent = uniformBits(rng, 127 + 15, 127 + 16);
      if (exponent == 127 + 15)
        mantissa |= 0x700000; // >= 61440, around 65504 / 65520
    } else {
      exponent = 254;
      if (rng() & 1)
        mantissa |= 0x7f0000; // within 2^-7 of FLT_MAX: half round to inf
    }
    break;
  default:
    break;
  }
  return sign | (exponent << 23) | mantissa;
}

void fillSourceValues(void *host, size_t count, DType source, DType cache,
                      std::mt19937_64 &rng) {
  unsigned char *bytes = static_cast<unsigned char *>(host);
  for (size_t i = 0; i < count; ++i) {
    if (source == DType::F32) {
      uint32_t bits = cache == DType::F32 ? randomFinite32(rng)
                                          : roundingProbe32(cache, rng);
      std::memcpy(bytes + 4 * i, &bits, 4);
    } else {
      uint16_t bits = randomFinite16(source, rng);
      std::memcpy(bytes + 2 * i, &bits, 2);
    }
  }
}

static uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fillPoison(void *host, size_t bytes, uint64_t seed) {
  unsigned char *out = static_cast<unsigned char *>(host);
  uint64_t key = splitMix64(seed);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t word = splitMix64(key ^ i);
    std::memcpy(out + i, &word, 8);
  }
  if (i < bytes) {
    uint64_t word = splitMix64(key ^ i);
    std::memcpy(out + i, &word, bytes - i);
  }
}

static int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

//===----------------------------------------------------------------------===//
// SourceSet
//===----------------------------------------------------------------------===//

const char *sourceStorageName(SourceStorage storage) {
  switch (storage) {
  case SourceStorage::Compact:
    return "compact";
  case SourceStorage::FusedQkv:
    return "fused_qkv";
  case SourceStorage::FusedQkvOddStride:
    return "fused_qkv_odd_stride";
  case SourceStorage::Permuted:
    return "permuted";
  case SourceStorage::KvInterleavedTruncated:
    return "kv_interleaved_truncated";
  }
  return "?";
}

bool SourceSet::create(Backend &backend, const Description &desc,
                       int64_t numTokens, SourceStorage storage,
                       std::mt19937_64 &rng, std::string &error,
                       int64_t storedTokens) {
  this->backend = &backend;
  this->desc = desc;
  tokens = numTokens;
  device = DeviceBuffer();
  const int64_t t = numTokens, h = desc.numKvHeads, d = desc.headDim;
  const int64_t elem = static_cast<int64_t>(dtypeBytes(desc.sourceDtype));
  // Query heads of the fused projection: GQA with 4 query heads per kv head,
  // MQA with 8 query heads on the one kv head.
  const int64_t queryHeads = h == 1 ? 8 : 4 * h;
  const int64_t aligned = 256 / elem;
  int64_t storageElems = 0;
  switch (storage) {
  case SourceStorage::Compact:
    keyOffset = 0;
    valueOffset = roundUp(t * h * d, aligned);
    keyStrides = valueStrides = {h * d, d, 1};
    storageElems = valueOffset + t * h * d;
    break;
  case SourceStorage::FusedQkv:
  case SourceStorage::FusedQkvOddStride: {
    int64_t row = (queryHeads + 2 * h) * d +
                  (storage == SourceStorage::FusedQkvOddStride ? 1 : 0);
    keyOffset = queryHeads * d;
    valueOffset = (queryHeads + h) * d;
    keyStrides = valueStrides = {row, d, 1};
    storageElems = t * row;
    break;
  }
  case SourceStorage::Permuted:
    keyOffset = 0;
    keyStrides = {d, t * d, 1}; // stored [H, T, D]
    valueOffset = roundUp(t * h * d, aligned);
    valueStrides = {d * h, 1, h}; // stored [T, D, H]
    storageElems = valueOffset + t * h * d;
    break;
  case SourceStorage::KvInterleavedTruncated: {
    int64_t rows = storedTokens < 0 ? t : std::min(storedTokens, t);
    keyOffset = 0;
    valueOffset = h * d;
    keyStrides = valueStrides = {2 * h * d, d, 1};
    // Rows of 2 * H * D elements of >= 2 bytes with D a multiple of 64 are
    // whole multiples of 256 bytes, as fenced memory wants.
    size_t bytes = static_cast<size_t>(rows * 2 * h * d * elem);
    if (rows > 0 && bytes % 256 == 0)
      device = DeviceBuffer::fenced(backend, bytes);
    // Without a fence, rows past the storage would just be whatever memory
    // follows (another tensor, which kvrt rightly refuses as aliasing):
    // back them all.
    fencedRows = device.valid();
    storageElems = (fencedRows ? rows : t) * 2 * h * d;
    break;
  }
  }
  storedRows = storage == SourceStorage::KvInterleavedTruncated && fencedRows
                   ? std::min(storedTokens < 0 ? t : storedTokens, t)
                   : t;

  host.assign(static_cast<size_t>(storageElems * elem), 0);
  if (!device.valid())
    device = DeviceBuffer(backend, host.size());
  if (!device.valid()) {
    error = "allocating " + std::to_string(host.size()) +
            " bytes of K/V failed: " + backend.lastError();
    return false;
  }
  DLDevice dev = backend.device();
  DLDataType type = toDLDataType(desc.sourceDtype);
  // K reaches its first element through byte_offset, V through its data
  // pointer: DLPack allows both and producers use both.
  keyArg = TensorArg(device.get(), static_cast<uint64_t>(keyOffset * elem), dev,
                     type, {t, h, d}, keyStrides);
  valueArg = TensorArg(device.get() + valueOffset * elem, 0, dev, type,
                       {t, h, d}, valueStrides);
  return refill(rng, error);
}

bool SourceSet::refill(std::mt19937_64 &rng, std::string &error) {
  size_t elem = dtypeBytes(desc.sourceDtype);
  fillSourceValues(host.data(), host.size() / elem, desc.sourceDtype,
                   desc.cacheDtype, rng);
  if (!host.empty() &&
      !backend->copyToDevice(device.get(), host.data(), host.size())) {
    error = "copying K/V to the device failed: " + backend->lastError();
    return false;
  }
  return true;
}

bool SourceSet::refillWith(
    const std::function<float(int64_t, int64_t, int64_t, bool)> &value,
    std::string &error) {
  for (bool isKey : {true, false}) {
    TensorView view = isKey ? hostKey() : hostValue();
    for (int64_t t = 0; t < storedRows; ++t)
      for (int64_t h = 0; h < desc.numKvHeads; ++h)
        for (int64_t d = 0; d < desc.headDim; ++d) {
          Index index;
          index.rank = 3;
          index.values = {t, h, d};
          storeBits(view.elementPointer(index), desc.sourceDtype,
                    floatToElement(value(t, h, d, isKey), desc.sourceDtype));
        }
  }
  if (!host.empty() &&
      !backend->copyToDevice(device.get(), host.data(), host.size())) {
    error = "copying K/V to the device failed: " + backend->lastError();
    return false;
  }
  return true;
}

bool SourceSet::checkUnchanged(std::string &error) const {
  return conformance::checkUnchanged(*backend, host, device.get(),
                                     "the K/V source", error);
}

TensorView SourceSet::hostKey() const {
  TensorView view;
  view.data = const_cast<unsigned char *>(host.data()) +
              keyOffset * dtypeBytes(desc.sourceDtype);
  view.dtype = desc.sourceDtype;
  view.shape = {tokens, desc.numKvHeads, desc.headDim};
  view.strides = keyStrides;
  return view;
}

TensorView SourceSet::hostValue() const {
  TensorView view = hostKey();
  view.data = const_cast<unsigned char *>(host.data()) +
              valueOffset * dtypeBytes(desc.sourceDtype);
  view.strides = valueStrides;
  return view;
}

//===----------------------------------------------------------------------===//
// CacheSet
//===----------------------------------------------------------------------===//

static int64_t product(const std::vector<int64_t> &values, size_t from) {
  int64_t p = 1;
  for (size_t i = from; i < values.size(); ++i)
    p *= values[i];
  return p;
}

bool CacheSet::create(Backend &backend, const Description &desc,
                      int64_t numBlocks, CacheStorage storage,
                      uint64_t poisonSeed, std::string &error,
                      bool float8Codes) {
  this->backend = &backend;
  this->desc = desc;
  blocks = numBlocks;
  seed = poisonSeed;
  const int64_t elem = static_cast<int64_t>(dtypeBytes(desc.cacheDtype));
  const bool stacked = desc.layout == Layout::DualStacked;
  std::vector<int64_t> keyShape = cacheShape(desc, CacheSide::Key, numBlocks);
  std::vector<int64_t> valueShape =
      cacheShape(desc, CacheSide::Value, numBlocks);
  // Elements of one side of one block (a whole [2, ...] block if stacked).
  const int64_t blockElems = product(keyShape, 1);
  // Guards of at least one block on either side: a write one block before or
  // after the cache, or through a slightly wrong offset, lands in poison
  // that is compared, not in someone else's memory.
  guardBytes = static_cast<size_t>(
      roundUp(std::max<int64_t>(4096, blockElems * elem), 256));
  int64_t cacheElems = 0;
  keyOffset = 0;
  keyStrides = TensorView::compactStrides(keyShape);
  valueStrides = TensorView::compactStrides(valueShape);
  if (stacked) {
    valueOffset = 0;
    bool strided = storage == CacheStorage::BlockStrided;
    if (strided)
      keyStrides[0] = 2 * blockElems;
    cacheElems = (strided ? 2 : 1) * numBlocks * blockElems;
  } else if (storage == CacheStorage::Interleaved) {
    valueOffset = blockElems;
    keyStrides[0] = valueStrides[0] = 2 * blockElems;
    cacheElems = 2 * numBlocks * blockElems;
  } else if (storage == CacheStorage::BlockStrided) {
    valueOffset = roundUp(2 * numBlocks * blockElems, 256 / elem);
    keyStrides[0] = valueStrides[0] = 2 * blockElems;
    cacheElems = valueOffset + 2 * numBlocks * blockElems;
  } else {
    valueOffset = roundUp(numBlocks * blockElems, 256 / elem);
    cacheElems = valueOffset + numBlocks * blockElems;
  }
  size_t total = 2 * guardBytes + static_cast<size_t>(cacheElems * elem);
  poison.resize(total);
  fillPoison(poison.data(), total, seed);
  device = DeviceBuffer(backend, total);
  if (!device.valid()) {
    error = "allocating " + std::to_string(total) +
            " bytes of cache failed: " + backend.lastError();
    return false;
  }
  DLDevice dev = backend.device();
  DLDataType type = float8Codes ? float8DLDataType(desc.cacheDtype)
                                : toDLDataType(desc.cacheDtype);
  keyArg = TensorArg(device.get(), guardBytes + keyOffset * elem, dev, type,
                     keyShape, keyStrides);
  if (stacked)
    valueArg = TensorArg();
  else
    valueArg = TensorArg(device.get() + guardBytes + valueOffset * elem, 0, dev,
                         type, valueShape, valueStrides);
  return reset(error);
}

bool CacheSet::reset(std::string &error) {
  expected = poison;
  if (!backend->copyToDevice(device.get(), poison.data(), poison.size())) {
    error = "poisoning the cache failed: " + backend->lastError();
    return false;
  }
  return true;
}

TensorView CacheSet::hostView(CacheSide side, unsigned char *base) const {
  size_t elem = dtypeBytes(desc.cacheDtype);
  TensorView view;
  bool key = side == CacheSide::Key || desc.layout == Layout::DualStacked;
  view.data = base + guardBytes + (key ? keyOffset : valueOffset) * elem;
  view.dtype = desc.cacheDtype;
  view.shape =
      cacheShape(desc, key ? CacheSide::Key : CacheSide::Value, blocks);
  view.strides = key ? keyStrides : valueStrides;
  return view;
}

void CacheSet::expectAppend(const SourceSet &source,
                            const std::vector<int64_t> &slots,
                            const ScaleArgs *scales) {
  expectAppend(source.hostKey(), source.hostValue(), slots, scales);
}

void CacheSet::expectAppend(const TensorView &key, const TensorView &value,
                            const std::vector<int64_t> &slots,
                            const ScaleArgs *scales) {
  appendReference(desc, key, value, slots.data(),
                  hostView(CacheSide::Key, expected.data()),
                  hostView(CacheSide::Value, expected.data()), scales);
}

bool CacheSet::readBack(std::vector<unsigned char> &image, std::string &error) {
  image.resize(expected.size());
  if (!backend->copyToHost(image.data(), device.get(), image.size())) {
    error = "copying the cache back failed: " + backend->lastError();
    return false;
  }
  return true;
}

/// The index of the element `offset` elements from a view's first element,
/// if the view holds it.
static bool decompose(int64_t offset, const std::vector<int64_t> &shape,
                      const std::vector<int64_t> &strides, Index &index) {
  if (offset < 0)
    return false;
  std::vector<size_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  index.rank = static_cast<int>(shape.size());
  int64_t rest = offset;
  for (size_t dim : order) {
    int64_t i = rest / strides[dim];
    if (i >= shape[dim])
      return false;
    index.values[dim] = i;
    rest -= i * strides[dim];
  }
  return rest == 0;
}

std::string CacheSet::describeByte(size_t byte) const {
  const size_t elem = dtypeBytes(desc.cacheDtype);
  const size_t cacheEnd = expected.size() - guardBytes;
  char text[160];
  if (byte < guardBytes) {
    std::snprintf(text, sizeof(text), "guard, %zu bytes before the caches",
                  guardBytes - byte);
    return text;
  }
  if (byte >= cacheEnd) {
    std::snprintf(text, sizeof(text), "guard, %zu bytes after the caches",
                  byte - cacheEnd);
    return text;
  }
  int64_t element = static_cast<int64_t>((byte - guardBytes) / elem);
  for (CacheSide side : {CacheSide::Key, CacheSide::Value}) {
    bool key = side == CacheSide::Key;
    if (!key && desc.layout == Layout::DualStacked)
      break;
    Index index;
    std::vector<int64_t> shape =
        cacheShape(desc, key ? CacheSide::Key : CacheSide::Value, blocks);
    if (!decompose(element - (key ? keyOffset : valueOffset), shape,
                   key ? keyStrides : valueStrides, index))
      continue;
    CacheCoord c = cacheCoord(desc, side, index);
    std::snprintf(text, sizeof(text),
                  "%s cache (block %" PRId64 ", head %" PRId64 ", pos %" PRId64
                  ", d %" PRId64 ")",
                  c.side == CacheSide::Key ? "key" : "value", c.block, c.head,
                  c.pos, c.d);
    return text;
  }
  return "padding (between the caches, or in a strided cache's gaps)";
}

bool CacheSet::check(std::string &report, int maxShown) {
  std::vector<unsigned char> actual(expected.size());
  if (!backend->copyToHost(actual.data(), device.get(), actual.size())) {
    report = "copying the cache back failed: " + backend->lastError();
    return false;
  }
  if (std::memcmp(actual.data(), expected.data(), actual.size()) == 0)
    return true;

  const size_t elem = dtypeBytes(desc.cacheDtype);
  size_t differing = 0, unwritten = 0, stray = 0;
  std::string details;
  int shown = 0;
  size_t lastElement = SIZE_MAX;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] == expected[i])
      continue;
    ++differing;
    // Report per element (aligned to the element grid of the caches).
    size_t start = i < guardBytes ? i : i - (i - guardBytes) % elem;
    if (start == lastElement)
      continue;
    lastElement = start;
    size_t width = std::min(elem, actual.size() - start);
    bool wasPoison = std::memcmp(&actual[start], &poison[start], width) == 0;
    bool shouldBePoison =
        std::memcmp(&expected[start], &poison[start], width) == 0;
    unwritten += wasPoison;
    stray += shouldBePoison;
    if (shown >= maxShown)
      continue;
    ++shown;
    uint32_t want = 0, got = 0;
    std::memcpy(&want, &expected[start], width);
    std::memcpy(&got, &actual[start], width);
    char line[256];
    std::snprintf(line, sizeof(line), "\n    %s: expected 0x%0*x, got 0x%0*x%s",
                  describeByte(start).c_str(), static_cast<int>(2 * width),
                  want, static_cast<int>(2 * width), got,
                  wasPoison        ? " (not written: still poison)"
                  : shouldBePoison ? " (written: should be untouched)"
                                   : "");
    details += line;
  }
  report = std::to_string(differing) + " of " + std::to_string(actual.size()) +
           " bytes differ (" + std::to_string(unwritten) +
           " elements left unwritten, " + std::to_string(stray) +
           " written that should be untouched); first:" + details;
  return false;
}

} // namespace kvgen::conformance
