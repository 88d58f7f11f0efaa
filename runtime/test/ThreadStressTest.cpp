//===- ThreadStressTest.cpp - first launches of many threads at once ------===//
//
// Threads that make their first launch on a freshly loaded bundle at once,
// round after round, each naming its kernel in a buffer of its own that it
// rewrites and frees as soon as the call returns: kvrt may read the name
// only while the call lasts (kvrt.h), so what a thread remembers of its
// launches (PlanCache) must hold a copy. A kvrt that kept the caller's
// pointer takes a rewritten name for a remembered launch (a plan of one
// description launched under another's name) and, once the buffer is freed,
// reads freed memory, which the sanitizer build reports.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace kvrt::test;

namespace {

constexpr int kThreads = 8;
constexpr int kRounds = 200;
constexpr int64_t kTokens = 3, kBlocks = 2, kBlockSize = 4, kHeadDim = 16;

std::atomic<int> hostCalls{0};
extern "C" void countCall(void **) {
  hostCalls.fetch_add(1, std::memory_order_relaxed);
}

/// Two append descriptions that differ in their head count: the tensors of
/// one are refused by the other.
json twoAppends() {
  CacheConfig narrow, wide;
  narrow.blockSize = wide.blockSize = kBlockSize;
  narrow.headDim = wide.headDim = kHeadDim;
  narrow.heads = 2;
  wide.heads = 4;
  std::vector<json> kernels = describe("kv_narrow", "append", narrow);
  for (json &kernel : describe("kv_wide", "append", wide))
    kernels.push_back(kernel);
  return bundleJson(kernels);
}

/// A heap copy of `name` that the caller frees: the name's only home.
std::unique_ptr<char[]> heapName(const char *name) {
  std::unique_ptr<char[]> copy(new char[16]);
  std::memset(copy.get(), 0, 16);
  std::strcpy(copy.get(), name);
  return copy;
}

/// One thread's launches; false, with `failure` set, at the first surprise.
bool launchAsOneThread(kvrt_bundle *bundle, const std::atomic<bool> &go,
                       std::string &failure) {
  HostTensor key = HostTensor::compact(bf16(), {kTokens, 2, kHeadDim});
  HostTensor value = HostTensor::compact(bf16(), {kTokens, 2, kHeadDim});
  HostTensor slots = HostTensor::compact(i64(), {kTokens});
  HostTensor keyCache =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, 2, kHeadDim});
  HostTensor valueCache =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, 2, kHeadDim});
  HostTensor otherKey = HostTensor::compact(bf16(), {kTokens, 2, kHeadDim});
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.key = key.get();
  args.value = value.get();
  args.slot_mapping = slots.get();
  args.key_cache = keyCache.get();
  args.value_cache = valueCache.get();
  auto launch = [&](const char *name) {
    args.kernel = name;
    return kvrt_append(bundle, &args, nullptr);
  };
  auto fail = [&](const char *what, kvrt_status status) {
    failure = std::string(what) + ": " + kvrt_status_name(status) + ": " +
              kvrt_last_error();
    return false;
  };
  while (!go.load(std::memory_order_acquire))
    std::this_thread::yield();

  // The first launch of this thread on this bundle, from a name freed once
  // the call returned.
  std::unique_ptr<char[]> name = heapName("kv_narrow");
  kvrt_status status = launch(name.get());
  if (status != KVRT_SUCCESS)
    return fail("the first launch", status);
  name.reset();
  // The same launch from a new buffer (a hit: compared with the remembered
  // name, which must be kvrt's copy), then at new addresses (a rebase).
  name = heapName("kv_narrow");
  status = launch(name.get());
  if (status != KVRT_SUCCESS)
    return fail("the first launch repeated", status);
  args.key = otherKey.get();
  name = heapName("kv_narrow");
  status = launch(name.get());
  if (status != KVRT_SUCCESS)
    return fail("the first launch at new addresses", status);
  // The name rewritten once the call returned, as freed and reused memory
  // is, then the other description named with the same tensors: planned
  // anew, and refused (its caches have 4 heads), never taken for the
  // remembered launch.
  std::strcpy(name.get(), "kv_wide");
  std::unique_ptr<char[]> other = heapName("kv_wide");
  status = launch(other.get());
  if (status != KVRT_ERROR_INVALID_ARGUMENT)
    return fail("kv_wide with kv_narrow's tensors should be refused", status);
  return true;
}

TEST(ThreadStress, FirstLaunchesOfManyThreadsKeepNoCallerName) {
  for (int round = 0; round < kRounds; ++round) {
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(twoAppends(), &raw), KVRT_SUCCESS) << kvrt_last_error();
    BundlePtr bundle(raw);
    for (size_t i = 0; i < kvrt_bundle_num_kernels(raw); ++i)
      ASSERT_EQ(kvrt_bundle_set_host_kernel(
                    raw, kvrt_bundle_kernel_name(raw, i), countCall),
                KVRT_SUCCESS);
    hostCalls = 0;
    std::atomic<bool> go{false};
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        if (!launchAsOneThread(raw, go, failures[t]) && failures[t].empty())
          failures[t] = "failed";
      });
    go.store(true, std::memory_order_release);
    for (std::thread &thread : threads)
      thread.join();
    for (int t = 0; t < kThreads; ++t)
      ASSERT_EQ(failures[t], "") << "round " << round << ", thread " << t;
    // Three launches a thread ran a kernel; the refused one ran nothing.
    ASSERT_EQ(hostCalls.load(), 3 * kThreads) << "round " << round;
  }
}

} // namespace
