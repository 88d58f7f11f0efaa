//===- LaunchPathBench.cpp - kvrt's host work per launch, in ns -----------===//
//
// Times kvrt_append's host path on a CPU, through the fake driver (whose
// cuLaunchKernel only records the call): what an eager loop pays kvrt on top
// of the driver's own launch. Three loops over the standard append (5 tokens,
// paged NHD, bf16), each the median of 7 rounds:
//   fake launch   the fake cuLaunchKernel alone, called directly
//   kvrt, cold    kvrt_append with the plan and function caches emptied
//                 before each call: every launch validates and resolves,
//                 as kvrt did before it had the caches
//   kvrt, warm    kvrt_append with the same tensors every call
//   kvrt, 8 sets  kvrt_append over eight input sets in turn
// "kvrt overhead" is a kvrt loop minus the fake launch. Exits 1 if a launch
// fails. Usage: kvrt_launch_path_bench [calls per round [cold|warm|sets]];
// naming a loop runs only that one (for a profiler: `perf record`).
//
//===----------------------------------------------------------------------===//

#include "CudaDriver.h"
#include "FakeCuda.h"
#include "GpuLauncher.h"
#include "PlanCache.h"
#include "TestSupport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace kvrt::test;

namespace {

template <typename Fn> double nsPerCall(int calls, Fn fn) {
  std::vector<double> rounds;
  for (int round = 0; round < 7; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      fn();
    auto stop = std::chrono::steady_clock::now();
    rounds.push_back(
        std::chrono::duration<double, std::nano>(stop - start).count() / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int calls = argc > 1 ? std::atoi(argv[1]) : 100000;
  const std::string only = argc > 2 ? argv[2] : "";
  if (!only.empty() && only != "cold" && only != "warm" && only != "sets") {
    std::fprintf(stderr,
                 "kvrt_launch_path_bench: no loop named '%s' "
                 "(cold, warm or sets)\n",
                 only.c_str());
    return 2;
  }
  auto runs = [&](const char *loop) { return only.empty() || only == loop; };
  kvrt::impl::CudaDriver::setLibraryForTesting(KVRT_FAKE_CUDA_PATH);
  fake_cuda_reset();
  static int userContext;
  fake_cuda_state()->current = &userContext;
  // A real driver reports each allocation's range, which kvrt then trusts
  // without asking again (GpuLauncher::checkPointers).
  fake_cuda_state()->rangeSize = 1ull << 40;

  kvrt_bundle *raw = nullptr;
  if (load(standardBundle(), &raw) != KVRT_SUCCESS) {
    std::fprintf(stderr, "load: %s\n", kvrt_last_error());
    return 1;
  }
  BundlePtr bundle(raw);
  constexpr int64_t tokens = 5, heads = 2, dim = 16, blockSize = 4, blocks = 3;
  HostTensor key = HostTensor::compact(bf16(), {tokens, heads, dim});
  HostTensor value = HostTensor::compact(bf16(), {tokens, heads, dim});
  HostTensor slots = HostTensor::compact(i64(), {tokens});
  HostTensor keyCache =
      HostTensor::compact(bf16(), {blocks, blockSize, heads, dim});
  HostTensor valueCache =
      HostTensor::compact(bf16(), {blocks, blockSize, heads, dim});
  for (HostTensor *t : {&key, &value, &slots, &keyCache, &valueCache})
    t->get()->device = {kDLCUDA, 0};
  kvrt_append_args args = {sizeof(kvrt_append_args),
                           nullptr,
                           key.get(),
                           value.get(),
                           slots.get(),
                           keyCache.get(),
                           valueCache.get(),
                           KVRT_VARIANT_AUTO};

  bool failed = false;
  auto append = [&] {
    if (kvrt_append(bundle.get(), &args, nullptr) != KVRT_SUCCESS)
      failed = true;
  };
  append();
  if (failed) {
    std::fprintf(stderr, "kvrt_append: %s\n", kvrt_last_error());
    return 1;
  }

  // The fake's cuLaunchKernel, as kvrt calls it.
  const kvrt::impl::CudaDriver *driver = nullptr;
  if (!kvrt::impl::CudaDriver::get(&driver).ok())
    return 1;
  kvrt::impl::cuda::CUfunction function = nullptr;
  driver->cuModuleGetFunction(&function, nullptr, "kv_append");
  int64_t scalar = 0;
  void *params[21];
  for (void *&param : params)
    param = &scalar;
  double bare = nsPerCall(calls, [&] {
    driver->cuLaunchKernel(function, 3, 1, 1, 4, 2, 1, 0, nullptr, params,
                           nullptr);
  });
  double cold = !runs("cold") ? 0 : nsPerCall(calls, [&] {
    kvrt::impl::PlanCache::clear();
    kvrt::impl::GpuLauncher::forgetResolvedFunctions();
    append();
  });
  double warm = !runs("warm") ? 0 : nsPerCall(calls, append);
  // An eager loop over more input sets than the plan cache holds (kvbench's
  // decode loop, or one append per layer): each launch plans anew, its
  // function found in the cache.
  constexpr int kSets = 8;
  std::vector<HostTensor> keys, values;
  std::vector<kvrt_append_args> sets;
  for (int i = 0; i < kSets; ++i) {
    keys.push_back(HostTensor::compact(bf16(), {tokens, heads, dim}));
    values.push_back(HostTensor::compact(bf16(), {tokens, heads, dim}));
  }
  for (int i = 0; i < kSets; ++i) {
    keys[i].get()->device = values[i].get()->device = {kDLCUDA, 0};
    sets.push_back(args);
    sets.back().key = keys[i].get();
    sets.back().value = values[i].get();
  }
  int next = 0;
  double perSet = !runs("sets") ? 0 : nsPerCall(calls, [&] {
    if (kvrt_append(bundle.get(), &sets[next], nullptr) != KVRT_SUCCESS)
      failed = true;
    next = (next + 1) % kSets;
  });
  if (failed) {
    std::fprintf(stderr, "kvrt_append: %s\n", kvrt_last_error());
    return 1;
  }
  std::printf("launch path, ns per call (median of 7 rounds of %d)\n", calls);
  std::printf("  fake launch   %8.1f\n", bare);
  auto print = [&](const char *loop, const char *label, double ns) {
    if (runs(loop))
      std::printf("  %-13s %8.1f   kvrt overhead %8.1f\n", label, ns,
                  ns - bare);
  };
  print("cold", "kvrt, cold", cold);
  print("sets", "kvrt, 8 sets", perSet);
  print("warm", "kvrt, warm", warm);
  return 0;
}
