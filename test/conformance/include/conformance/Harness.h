//===- Harness.h - Buffers, tensors and byte-exact checks -------*- C++ -*-===//
//
// The pieces the cases are made of, public so that device-specific tests
// (CUDA graphs, caches past 2^32 elements) build on the same ones: device
// buffers through a Backend, DLTensors that own their shape, K/V sources laid
// out the ways serving stacks lay them out, and poisoned caches whose every
// byte is compared with the reference.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_CONFORMANCE_HARNESS_H
#define KVGEN_CONFORMANCE_HARNESS_H

#include "conformance/Backend.h"
#include "conformance/Description.h"
#include "conformance/Reference.h"
#include "kvrt/test/TensorArg.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kvgen::conformance {

/// Device memory owned through a Backend.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend &backend, size_t bytes);
  /// Backend::allocateFenced(); invalid() where the Backend cannot.
  static DeviceBuffer fenced(Backend &backend, size_t bytes);
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  bool valid() const { return pointer != nullptr; }
  char *get() const { return static_cast<char *>(pointer); }
  size_t size() const { return bytes; }

private:
  void release();

  Backend *backend = nullptr;
  void *pointer = nullptr;
  size_t bytes = 0;
  bool isFenced = false;
};

/// A DLTensor that owns the shape and strides it points at (kvrt's tests
/// use the same one). Unset, get() is nullptr (an absent optional tensor).
using TensorArg = kvrt::test::TensorArg;

/// Random K/V element bits for `count` elements of `source` (to be cast to
/// `cache`): never zero, never NaN or infinite. For an fp32 source cast to a
/// 16-bit cache a share of the values are exact rounding ties, their
/// neighbours, values that round to subnormals and values that overflow to
/// infinity, so the cast's rounding is checked, not just its common case.
void fillSourceValues(void *host, size_t count, DType source, DType cache,
                      std::mt19937_64 &rng);

/// A position-dependent byte pattern (no zero runs), so a kernel that moves
/// poison around is caught as surely as one that writes the wrong value.
void fillPoison(void *host, size_t bytes, uint64_t seed);

/// How a case lays out the new K and V rows.
enum class SourceStorage {
  /// K then V, each compact [num_tokens, H, D].
  Compact,
  /// Views into one fused QKV projection [num_tokens, (Hq + 2H) * D]: every
  /// stride a multiple of 16 bytes, so the vector variant applies.
  FusedQkv,
  /// The same with one element of padding per row: an odd token stride, so
  /// only the scalar variant applies.
  FusedQkvOddStride,
  /// K stored [H, num_tokens, D] and V stored [num_tokens, D, H] (a head
  /// stride larger than the token stride; a dim stride other than 1).
  Permuted,
  /// K and V interleaved per token ([rows, 2, H, D], a fused KV projection).
  /// Where the Backend has fenced memory, the storage holds only the first
  /// `storedTokens` rows and ends at the fence: the rows of the padding
  /// tokens after them are not memory at all, so a kernel that reads a
  /// padding token's K/V faults. Elsewhere every row is backed.
  KvInterleavedTruncated,
};

const char *sourceStorageName(SourceStorage storage);

/// The K/V source of one case: one storage buffer (host copy, device copy),
/// K and V as views into it.
class SourceSet {
public:
  /// `storedTokens` matters only for KvInterleavedTruncated (<= numTokens).
  bool create(Backend &backend, const Description &desc, int64_t numTokens,
              SourceStorage storage, std::mt19937_64 &rng, std::string &error,
              int64_t storedTokens = -1);
  /// New random values in the same buffers (a replayed CUDA graph reads
  /// them).
  bool refill(std::mt19937_64 &rng, std::string &error);
  /// New values chosen per element: `value(t, h, d, isKey)` in fp32, stored
  /// in the source dtype (round to nearest even), for every stored row. The
  /// quantized cases use it to place values relative to their scales.
  bool
  refillWith(const std::function<float(int64_t, int64_t, int64_t, bool)> &value,
             std::string &error);

  int64_t numTokens() const { return tokens; }
  /// Whether the device buffer still holds every byte uploaded to it (K, V
  /// and whatever lies between them: a fused projection's Q): an append
  /// only reads its source (Params.def's KVGEN_ABI_KERNEL_WRITES).
  bool checkUnchanged(std::string &error) const;
  size_t storageBytes() const { return host.size(); }
  TensorView hostKey() const;
  TensorView hostValue() const;
  const DLTensor *key() const { return keyArg.get(); }
  const DLTensor *value() const { return valueArg.get(); }
  /// KvInterleavedTruncated on a Backend with fenced memory: the rows past
  /// `storedTokens` are not memory.
  bool rowsFenced() const { return fencedRows; }

private:
  Backend *backend = nullptr;
  Description desc;
  int64_t tokens = 0;
  /// Rows backed by memory (all but a fenced storage's padding rows).
  int64_t storedRows = 0;
  bool fencedRows = false;
  std::vector<unsigned char> host;
  DeviceBuffer device;
  int64_t keyOffset = 0, valueOffset = 0; // elements
  std::vector<int64_t> keyStrides, valueStrides;
  TensorArg keyArg, valueArg;
};

/// How a case lays out the caches.
enum class CacheStorage {
  /// Each cache compact in its own region (dual_stacked: the one tensor).
  Compact,
  /// Each cache (dual_stacked: the kv tensor) a view [:, 0] of its own
  /// [num_blocks, 2, ...] region: a block stride of twice the block, with
  /// the other half of every stride poison that must stay untouched.
  BlockStrided,
  /// K and V as the two halves of one [num_blocks, 2, ...] region,
  /// FlashInfer-style: K = kv[:, 0], V = kv[:, 1]. (dual_stacked is that
  /// layout already: the same as Compact there.)
  Interleaved,
};

/// The caches of one case: one poisoned storage buffer with guard bytes
/// before and after the caches, a host image of what it must hold, and the
/// byte-for-byte check of the device copy against that image.
class CacheSet {
public:
  /// `float8Codes`: an fp8 cache's tensors say DLPack's float8 code (10,
  /// 12) instead of uint8.
  bool create(Backend &backend, const Description &desc, int64_t numBlocks,
              CacheStorage storage, uint64_t poisonSeed, std::string &error,
              bool float8Codes = false);
  /// Poisons the device storage again and resets the expected image to it.
  bool reset(std::string &error);

  int64_t numBlocks() const { return blocks; }
  const DLTensor *keyCache() const { return keyArg.get(); }
  /// nullptr for dual_stacked (kvrt wants NULL there).
  const DLTensor *valueCache() const { return valueArg.get(); }

  /// Applies appendReference() to the expected image (with the scales of a
  /// quantized description).
  void expectAppend(const SourceSet &source, const std::vector<int64_t> &slots,
                    const ScaleArgs *scales = nullptr);
  /// The same with K and V as host views ([num_tokens, H, D] of the source
  /// dtype): a head shard of a wider source, say.
  void expectAppend(const TensorView &key, const TensorView &value,
                    const std::vector<int64_t> &slots,
                    const ScaleArgs *scales = nullptr);
  /// The image the storage must hold.
  std::vector<unsigned char> &expectedImage() { return expected; }

  /// Copies the device storage back and compares every byte (guards and
  /// gaps included) with the expected image. On a difference, `report` names
  /// the first `maxShown` differing elements by (cache, block, head, pos, d).
  bool check(std::string &report, int maxShown = 5);
  size_t storageBytes() const { return expected.size(); }

  /// The device storage copied back whole (guards included), laid out as
  /// poisonImage() is.
  bool readBack(std::vector<unsigned char> &image, std::string &error);
  /// What the storage held after create() or reset().
  const std::vector<unsigned char> &poisonImage() const { return poison; }
  /// The K or V cache (dual_stacked: the one kv tensor) inside `base`, an
  /// image of the storage (a copy of poisonImage(), or from readBack()).
  TensorView hostView(CacheSide side, unsigned char *base) const;

private:
  std::string describeByte(size_t byte) const;

  Backend *backend = nullptr;
  Description desc;
  int64_t blocks = 0;
  uint64_t seed = 0;
  size_t guardBytes = 0;
  int64_t keyOffset = 0, valueOffset = 0; // elements from the guard's end
  std::vector<int64_t> keyStrides, valueStrides;
  std::vector<unsigned char> poison, expected;
  DeviceBuffer device;
  TensorArg keyArg, valueArg;
};

/// A device copy of host data; nullptr-free even for empty vectors.
template <typename T>
bool uploadVector(Backend &backend, const std::vector<T> &values,
                  DeviceBuffer &buffer, std::string &error) {
  if (!buffer.valid() || buffer.size() < values.size() * sizeof(T))
    buffer = DeviceBuffer(backend, values.size() * sizeof(T));
  if (!buffer.valid()) {
    error = "allocation failed: " + backend.lastError();
    return false;
  }
  if (!values.empty() && !backend.copyToDevice(buffer.get(), values.data(),
                                               values.size() * sizeof(T))) {
    error = "copy to device failed: " + backend.lastError();
    return false;
  }
  return true;
}

/// Whether the `values.size()` elements at device address `device` are still
/// `values`, as they were uploaded: what a kernel only reads must stay as it
/// was. The error names `name` and the first element that differs.
template <typename T>
bool checkUnchanged(Backend &backend, const std::vector<T> &values,
                    const void *device, const std::string &name,
                    std::string &error) {
  std::vector<T> actual(values.size());
  if (!values.empty() &&
      !backend.copyToHost(actual.data(), device, values.size() * sizeof(T))) {
    error = "copying " + name + " back failed: " + backend.lastError();
    return false;
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (actual[i] != values[i]) {
      error = name + " changed, which the kernel only reads: element " +
              std::to_string(i) + " of " + std::to_string(values.size()) +
              " was " + std::to_string(values[i]) + ", is " +
              std::to_string(actual[i]);
      return false;
    }
  return true;
}

/// DLPack dtypes of the index tensors.
inline DLDataType int32Type() { return DLDataType{kDLInt, 32, 1}; }
inline DLDataType int64Type() { return DLDataType{kDLInt, 64, 1}; }

/// "status (message)" for a failed kvrt call.
std::string kvrtFailure(const char *call, kvrt_status status);

} // namespace kvgen::conformance

#endif // KVGEN_CONFORMANCE_HARNESS_H
