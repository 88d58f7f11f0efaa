//===- PlanCache.cpp - validated launches, remembered per thread ----------===//

#include "PlanCache.h"

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
  ok = other.ok;
  std::memcpy(words, other.words, count * sizeof(uint64_t));
}

void LaunchKey::addTensor(const DLTensor *tensor) {
  if (!tensor) {
    addWord(0);
    return;
  }
  addWord(1);
  if (tensor->ndim < 0 || tensor->ndim > kMaxRank ||
      (tensor->ndim > 0 && !tensor->shape)) {
    ok = false;
    return;
  }
  addWord(reinterpret_cast<uintptr_t>(tensor->data));
  addWord(tensor->byte_offset);
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

bool LaunchKey::operator==(const LaunchKey &other) const {
  if (bundleId != other.bundleId || kind != other.kind ||
      count != other.count || (kernel == nullptr) != (other.kernel == nullptr))
    return false;
  if (kernel && kernel != other.kernel && std::strcmp(kernel, other.kernel))
    return false;
  return std::memcmp(words, other.words, count * sizeof(uint64_t)) == 0;
}

/// The variant's bits (a C caller may store any int there).
static uint64_t variantBits(const kvrt_variant &variant) {
  int raw = 0;
  std::memcpy(&raw, &variant, sizeof(raw));
  return static_cast<uint32_t>(raw);
}

void addArguments(LaunchKey &key, const kvrt_append_args &a) {
  for (const DLTensor *t :
       {a.key, a.value, a.slot_mapping, a.key_cache, a.value_cache, a.key_scale,
        a.value_scale, a.key_scale_cache, a.value_scale_cache})
    key.addTensor(t);
  key.addWord(variantBits(a.variant));
}

void addArguments(LaunchKey &key, const kvrt_slot_mapping_args &a) {
  for (const DLTensor *t :
       {a.block_table, a.query_start_loc, a.context_lens, a.slot_mapping})
    key.addTensor(t);
}

void addArguments(LaunchKey &key, const kvrt_fused_append_args &a) {
  for (const DLTensor *t :
       {a.key, a.value, a.block_table, a.query_start_loc, a.context_lens,
        a.key_cache, a.value_cache, a.key_scale, a.value_scale,
        a.key_scale_cache, a.value_scale_cache})
    key.addTensor(t);
  key.addWord(variantBits(a.variant));
}

void addArguments(LaunchKey &key, const kvrt_gather_args &a) {
  for (const DLTensor *t :
       {a.key_cache, a.value_cache, a.slot_mapping, a.key_out, a.value_out,
        a.key_scale, a.value_scale, a.key_scale_cache, a.value_scale_cache})
    key.addTensor(t);
  key.addWord(variantBits(a.variant));
}

void addArguments(LaunchKey &key, const kvrt_mla_append_args &a) {
  for (const DLTensor *t :
       {a.kv_c, a.k_pe, a.slot_mapping, a.key_cache, a.key_scale})
    key.addTensor(t);
  key.addWord(variantBits(a.variant));
}

void addArguments(LaunchKey &key, const kvrt_mla_fused_append_args &a) {
  for (const DLTensor *t : {a.kv_c, a.k_pe, a.block_table, a.query_start_loc,
                            a.context_lens, a.key_cache, a.key_scale})
    key.addTensor(t);
  key.addWord(variantBits(a.variant));
}

namespace {
struct Entry {
  bool used = false;
  /// The key, with its kernel name copied: the caller's string may change.
  LaunchKey key{0, KernelKind::Append, nullptr};
  std::string kernel;
  LaunchPlan plan;
};
constexpr int kEntries = 4;
struct Entries {
  Entry entries[kEntries];
  int next = 0;
  uint64_t hits = 0;
};
// Per thread: no lock on the launch path, and no plan shared across threads
// (a plan is cheap; correctness needs no sharing).
thread_local Entries cache;
} // namespace

const LaunchPlan *PlanCache::find(const LaunchKey &key) {
  if (!key.usable())
    return nullptr;
  for (Entry &entry : cache.entries)
    if (entry.used && entry.key == key) {
      ++cache.hits;
      return &entry.plan;
    }
  return nullptr;
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
}

uint64_t PlanCache::hits() { return cache.hits; }

void PlanCache::clear() {
  for (Entry &entry : cache.entries)
    entry.used = false;
}

} // namespace kvrt::impl
