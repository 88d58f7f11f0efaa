//===- PlanCache.cpp - validated launches, remembered per thread ----------===//

#include "PlanCache.h"

#include "Limits.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace kvrt::impl {

uint64_t nextBundleId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

LaunchKey::LaunchKey(uint64_t bundleId, KernelKind kind, const char *kernel)
    : bundleId(bundleId), kind(kind), kernel(kernel) {}

void LaunchKey::assign(const LaunchKey &other) {
  bundleId = other.bundleId;
  kind = other.kind;
  kernel = other.kernel;
  count = other.count;
  tensorCount = other.tensorCount;
  ok = other.ok;
  std::memcpy(words, other.words, count * sizeof(uint64_t));
  std::memcpy(addresses, other.addresses, 2 * tensorCount * sizeof(uint64_t));
  // The caller's tensors are not kept: they are read only during the call.
  std::fill(tensors, tensors + tensorCount, nullptr);
}

void LaunchKey::addTensor(const DLTensor *tensor) {
  if (tensorCount == kMaxTensors) {
    ok = false;
    return;
  }
  tensors[tensorCount] = tensor;
  uint64_t *address = addresses + 2 * tensorCount++;
  if (!tensor) {
    address[0] = address[1] = 0;
    addWord(0);
    return;
  }
  addWord(1);
  if (tensor->ndim < 0 || tensor->ndim > kMaxRank ||
      (tensor->ndim > 0 && !tensor->shape)) {
    ok = false;
    return;
  }
  address[0] = reinterpret_cast<uintptr_t>(tensor->data);
  address[1] = tensor->byte_offset;
  addWord(
      static_cast<uint64_t>(static_cast<uint32_t>(tensor->device.device_type))
          << 32 |
      static_cast<uint32_t>(tensor->device.device_id));
  addWord(static_cast<uint64_t>(static_cast<uint32_t>(tensor->ndim)) << 32 |
          static_cast<uint64_t>(tensor->dtype.code) << 24 |
          static_cast<uint64_t>(tensor->dtype.bits) << 16 |
          tensor->dtype.lanes);
  for (int i = 0; i < tensor->ndim; ++i)
    addWord(static_cast<uint64_t>(tensor->shape[i]));
  // NULL strides (compact) and explicit compact strides are different keys:
  // validation reads them differently, even if it accepts both.
  addWord(tensor->strides ? 1 : 0);
  if (tensor->strides)
    for (int i = 0; i < tensor->ndim; ++i)
      addWord(static_cast<uint64_t>(tensor->strides[i]));
}

bool LaunchKey::sameShapes(const LaunchKey &other) const {
  if (bundleId != other.bundleId || kind != other.kind ||
      count != other.count || tensorCount != other.tensorCount ||
      (kernel == nullptr) != (other.kernel == nullptr))
    return false;
  if (kernel && kernel != other.kernel && std::strcmp(kernel, other.kernel))
    return false;
  return std::memcmp(words, other.words, count * sizeof(uint64_t)) == 0;
}

bool LaunchKey::operator==(const LaunchKey &other) const {
  return sameShapes(other) &&
         std::memcmp(addresses, other.addresses,
                     2 * tensorCount * sizeof(uint64_t)) == 0;
}

namespace {

/// How a plan moves to new addresses: each buffer's argument tensor and its
/// offset from that tensor's data + byte_offset, what each argument tensor
/// addresses, and which buffers the kernel may write.
struct Rebase {
  bool usable = false;
  int8_t argument[kMaxBuffers];
  uint64_t offset[kMaxBuffers];
  bool written[kMaxBuffers];
  /// The buffer that q_out may share every byte with: query, where the plan
  /// found them the same view (in place); -1 otherwise.
  int8_t inPlace[kMaxBuffers];
  /// Bytes from data + byte_offset to one past the last element; 0 for an
  /// empty tensor.
  uint64_t reach[LaunchKey::kMaxTensors] = {};
  size_t elementBytes[LaunchKey::kMaxTensors];
  bool used[LaunchKey::kMaxTensors] = {};
};

/// The rebase of `plan`, planned from the arguments of `key`.
Rebase makeRebase(const LaunchKey &key, const LaunchPlan &plan) {
  Rebase rebase;
  // Two argument positions holding one DLTensor would make a buffer's
  // position ambiguous: such a plan is only ever hit, never rebased.
  for (int a = 0; a < key.numTensors(); ++a)
    for (int b = a + 1; b < key.numTensors(); ++b)
      if (key.tensor(a) && key.tensor(a) == key.tensor(b))
        return rebase;
  for (int i = 0; i < plan.numBuffers; ++i) {
    const TensorView &view = plan.buffers[i];
    int a = 0;
    while (a < key.numTensors() && key.tensor(a) != view.tensor)
      ++a;
    if (a == key.numTensors())
      return rebase;
    uint64_t base = key.data(a) + key.byteOffset(a);
    rebase.argument[i] = static_cast<int8_t>(a);
    rebase.offset[i] = view.begin() - base;
    rebase.written[i] = abi::kernelWrites(plan.kind, plan.bufferParams[i]);
    rebase.inPlace[i] = -1;
    if (plan.bufferParams[i] == abi::Param::QOut) {
      int query = plan.bufferOf[static_cast<int>(abi::Param::Query)];
      if (query >= 0 && plan.buffers[query].first == view.first)
        rebase.inPlace[i] = static_cast<int8_t>(query);
    }
    rebase.used[a] = true;
    rebase.elementBytes[a] = view.elementBytes;
    // A tensor's views (the K and V of a stacked cache) reach its end.
    if (view.extent > 0)
      rebase.reach[a] = std::max<uint64_t>(
          rebase.reach[a], rebase.offset[i] + view.extent * view.elementBytes);
  }
  rebase.usable = true;
  return rebase;
}

/// Moves `plan` to the addresses of `key` if each passes planning's checks
/// of an address and no buffer the kernel writes shares a byte with a
/// buffer of another tensor; leaves it as it was otherwise.
bool rebasePlan(const Rebase &rebase, const LaunchKey &key, LaunchPlan &plan) {
  if (!rebase.usable)
    return false;
  uint64_t base[LaunchKey::kMaxTensors];
  for (int a = 0; a < key.numTensors(); ++a) {
    if (!rebase.used[a])
      continue;
    uint64_t data = key.data(a), end = 0;
    if (!data && rebase.reach[a] > 0)
      return false;
    if (__builtin_add_overflow(data, key.byteOffset(a), &base[a]) ||
        __builtin_add_overflow(base[a], rebase.reach[a], &end) ||
        end > limits::kAddressLimit || (base[a] & (rebase.elementBytes[a] - 1)))
      return false;
  }
  uint64_t begin[kMaxBuffers], end[kMaxBuffers];
  for (int i = 0; i < plan.numBuffers; ++i) {
    begin[i] = base[rebase.argument[i]] + rebase.offset[i];
    end[i] = begin[i] + plan.buffers[i].extent * plan.buffers[i].elementBytes;
  }
  for (int w = 0; w < plan.numBuffers; ++w) {
    if (!rebase.written[w] || begin[w] == end[w])
      continue;
    for (int o = 0; o < plan.numBuffers; ++o) {
      // Same shapes and strides as when planned: the same first element
      // makes the same view, in place as planned.
      if (o == rebase.inPlace[w] && begin[o] == begin[w])
        continue;
      if (rebase.argument[o] != rebase.argument[w] && begin[o] != end[o] &&
          begin[o] < end[w] && begin[w] < end[o])
        return false;
    }
  }
  for (int i = 0; i < plan.numBuffers; ++i)
    plan.buffers[i].first =
        reinterpret_cast<char *>(static_cast<uintptr_t>(begin[i]));
  return true;
}

struct Entry {
  bool used = false;
  /// The key, with its kernel name copied: the caller's string may change.
  LaunchKey key{0, KernelKind::Append, nullptr};
  std::string kernel;
  LaunchPlan plan;
  Rebase rebase;
};
constexpr int kEntries = 4;
struct Entries {
  Entry entries[kEntries];
  int next = 0;
  uint64_t hits = 0;
  uint64_t rebases = 0;
};
// Per thread: no lock on the launch path, and no plan shared across threads
// (a plan is cheap; correctness needs no sharing).
thread_local Entries cache;
} // namespace

const LaunchPlan *PlanCache::find(const LaunchKey &key) {
  if (!key.usable())
    return nullptr;
  Entry *similar = nullptr;
  for (Entry &entry : cache.entries) {
    if (!entry.used || !entry.key.sameShapes(key))
      continue;
    if (entry.key == key) {
      ++cache.hits;
      return &entry.plan;
    }
    if (!similar)
      similar = &entry;
  }
  if (!similar || !rebasePlan(similar->rebase, key, similar->plan))
    return nullptr;
  // The entry now stands for these addresses.
  std::memcpy(similar->key.addresses, key.addresses,
              2 * key.tensorCount * sizeof(uint64_t));
  ++cache.hits;
  ++cache.rebases;
  return &similar->plan;
}

void PlanCache::remember(const LaunchKey &key, const LaunchPlan &plan) {
  if (!key.usable())
    return;
  Entry &entry = cache.entries[cache.next];
  cache.next = (cache.next + 1) % kEntries;
  entry.used = true;
  entry.key.assign(key);
  if (key.kernel) {
    entry.kernel = key.kernel;
    entry.key.kernel = entry.kernel.c_str();
  }
  entry.plan = plan;
  entry.rebase = makeRebase(key, plan);
}

uint64_t PlanCache::hits() { return cache.hits; }

uint64_t PlanCache::rebases() { return cache.rebases; }

void PlanCache::clear() {
  for (Entry &entry : cache.entries)
    entry.used = false;
}

} // namespace kvrt::impl
