//===- FunctionCache.cpp - a thread's resolved kernels, per context -------===//

#include "FunctionCache.h"

#include <atomic>

namespace kvrt::impl {

uint64_t nextLauncherId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {
constexpr int kEntries = 8;
struct Entries {
  ResolvedFunction entries[kEntries];
  int next = 0;
};
thread_local Entries cache;
} // namespace

cuda::CUfunction FunctionCache::find(uint64_t launcher, cuda::CUcontext context,
                                     unsigned long long contextId, int ordinal,
                                     int kernelIndex) {
  for (const ResolvedFunction &entry : cache.entries)
    if (entry.launcher == launcher && entry.context == context &&
        entry.contextId == contextId && entry.ordinal == ordinal &&
        entry.kernelIndex == kernelIndex)
      return entry.function;
  return nullptr;
}

void FunctionCache::remember(const ResolvedFunction &resolved) {
  cache.entries[cache.next] = resolved;
  cache.next = (cache.next + 1) % kEntries;
}

void FunctionCache::clear() {
  for (ResolvedFunction &entry : cache.entries)
    entry = ResolvedFunction();
}

} // namespace kvrt::impl
