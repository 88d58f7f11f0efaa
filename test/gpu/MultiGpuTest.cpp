//===- MultiGpuTest.cpp - kvrt on two GPUs: sharded appends ---------------===//
//
// kvgen-multi-gpu-test [--bundle=PATH] [--seed=N] [gtest flags]
//
// On a machine with 2 (or more) CUDA devices and a configured build:
//
//   ninja -C build kvgen-multi-gpu-test
//   ctest --test-dir build -L gpu -R multi-gpu --output-on-failure
//
// On a CUDA machine that builds nothing: stage the binary, libkvrt and the
// matrix bundle with `scripts/stage-gpu.sh build STAGE`, copy STAGE there
// and run
//
//   STAGE/bin/kvgen-multi-gpu-test \
//       --bundle=STAGE/bin/conformance-matrix.bundle.json
//
// (--bundle defaults to $KVGEN_GPU_BUNDLE, else the bundle next to the
// binary.)
//
// It uses cuda:0 and cuda:1. With fewer than 2 CUDA devices it prints
// "SKIPPED: <reason>" and exits with 77, which ctest counts as skipped. It
// uses no NCCL (the ranks share nothing but the host); if NCCL is ever added
// here, keep its NVLink multicast off (NCCL_NVLS_ENABLE=0).
//
// kvrt on every GPU of a host: one std::thread per GPU (rank r on cuda:r),
// each with cudaSetDevice(r), its own non-blocking stream and its own
// allocations, all sharing one kvrt_bundle, in which kvrt loads one module
// per CUDA context (here each device's primary context). The ranks append
// their shards concurrently (they start together at a barrier). Then:
//
//  - each rank's cache, copied back, must equal the C++ reference applied to
//    that rank's inputs, every byte: the caches are poisoned, with guards
//    around them (conformance::CacheSet);
//  - the union (each element taken from the rank that owns it) must equal
//    the reference applied to the unsharded inputs.
//
// The unsharded append: kTokens tokens of K and V [T, 8, D] as views into one
// fused KV buffer [T, 2, 8, D], distinct random slots over twice the slots
// they need, one padding token (slot -1) and one slot past the last block.
// The 8-head kernel is the matrix's gpu_append_paged_nhd (paged_nhd, block
// 16, 8 x 128, bf16).
//
//  - Slot shard (context parallel): both ranks get the full 8-head K/V and a
//    full-size cache; rank r's slot_mapping keeps the slots of the tokens t
//    with t % 2 == r and is -1 for the others. A slot belongs to the rank of
//    the token that writes it (rank 0 where no token does).
//  - Head shard (tensor parallel, tp = 2): rank 0 appends heads 0-3 and rank
//    1 heads 4-7 (K/V views into the same fused buffer, at a head offset)
//    with the full slot mapping. Each rank's cache holds 4 heads, so its
//    kernel must be a 4-head description: kvrt checks the heads of K, V and
//    the caches against the kernel's num_kv_heads, so the 8-head kernel
//    cannot write a 4-head cache (and must not: the head count is part of
//    the kernel). The matrix's gpu_append_paged_nhd_h4 is that kernel; without
//    a 4-head twin in the bundle the test skips, saying so.
//    (any append with the same layout, block size, head dim and dtypes and
//    half the heads is picked up; that name first). Everything else runs
//    with the 8-head kernel.
//
// Also on two devices: K/V on cuda:1 with the caches on cuda:0 is refused,
// the message naming both tensors, and nothing is launched; a cache labelled
// cuda:1 whose memory is cuda:0's is refused by kvrt's pointer check; a
// thread with no current CUDA context that launches on cuda:1 tensors gets
// cuda:1 (kvrt picks the device from the tensors' DLPack device).
//
//===----------------------------------------------------------------------===//

#include "CudaBackend.h"
#include "MatrixBundle.h"

#include "conformance/Description.h"
#include "conformance/Harness.h"
#include "conformance/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace kvgen;
using namespace kvgen::conformance;

namespace {

constexpr int kRanks = 2;
/// The unsharded kernel: paged_nhd, block 16, 8 x 128, bf16.
constexpr const char *kFullName = "gpu_append_paged_nhd";
/// The preferred name of its 4-head twin, for the head shard.
constexpr const char *kHalfName = "gpu_append_paged_nhd_h4";
/// Tokens of the unsharded append; odd, so the slot shard is uneven.
constexpr int64_t kTokens = 301;

struct Globals {
  kvrt_bundle *bundle = nullptr;
  std::vector<Description> matrix;
  uint64_t seed = 0x6b7667656e; // "kvgen", as the GPU suite's default
};

Globals &globals() {
  static Globals instance;
  return instance;
}

//===----------------------------------------------------------------------===//
// Descriptions
//===----------------------------------------------------------------------===//

/// The 8-head description, or why it is not usable.
std::optional<Description> fullDescription(std::string &why) {
  std::optional<Description> desc =
      findDescription(globals().matrix, kFullName);
  if (!desc)
    why = std::string("the matrix has no description ") + kFullName;
  else if (desc->kind != Kind::Append || desc->numKvHeads != 8 ||
           desc->numKvHeads % kRanks != 0)
    why =
        std::string(kFullName) + " is not an 8-head append: " + desc->summary();
  else
    return desc;
  return std::nullopt;
}

/// `half` is `full` with 1/kRanks of its heads.
bool isShardOf(const Description &half, const Description &full) {
  return half.kind == Kind::Append && half.layout == full.layout &&
         half.blockSize == full.blockSize && half.headDim == full.headDim &&
         half.sourceDtype == full.sourceDtype &&
         half.cacheDtype == full.cacheDtype &&
         half.numKvHeads * kRanks == full.numKvHeads;
}

/// The head shard's per-rank description, if the matrix has one.
std::optional<Description> headShardDescription(const Description &full) {
  std::optional<Description> named =
      findDescription(globals().matrix, kHalfName);
  if (named && isShardOf(*named, full))
    return named;
  for (const Description &desc : globals().matrix)
    if (isShardOf(desc, full))
      return desc;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// The unsharded append, on the host: K and V [T, H, D] as views into one
/// fused KV buffer [T, 2, H, D], and the slot mapping.
struct Inputs {
  Description full;
  int64_t numTokens = 0;
  int64_t numBlocks = 0;
  std::vector<unsigned char> kv;
  std::vector<int64_t> slots;

  size_t elementBytes() const { return dtypeBytes(full.sourceDtype); }
  std::vector<int64_t> strides() const {
    return {2 * full.numKvHeads * full.headDim, full.headDim, 1};
  }
  /// Elements from the buffer's start to head `firstHead` of token 0 of K
  /// (or of V).
  int64_t offset(bool value, int64_t firstHead) const {
    return ((value ? full.numKvHeads : 0) + firstHead) * full.headDim;
  }
  /// Heads [firstHead, firstHead + heads) of K (or V), on the host.
  TensorView host(bool value, int64_t firstHead, int64_t heads) const {
    TensorView view;
    view.data = const_cast<unsigned char *>(kv.data()) +
                offset(value, firstHead) * elementBytes();
    view.dtype = full.sourceDtype;
    view.shape = {numTokens, heads, full.headDim};
    view.strides = strides();
    return view;
  }
};

Inputs makeInputs(const Description &full, uint64_t seed) {
  Inputs in;
  in.full = full;
  in.numTokens = kTokens;
  // Twice the slots the tokens need: half the cache stays poison.
  in.numBlocks = (2 * kTokens + full.blockSize - 1) / full.blockSize;
  std::mt19937_64 rng(seed);
  size_t count =
      static_cast<size_t>(kTokens * 2 * full.numKvHeads * full.headDim);
  in.kv.resize(count * in.elementBytes());
  fillSourceValues(in.kv.data(), count, full.sourceDtype, full.cacheDtype, rng);
  std::vector<int64_t> free(static_cast<size_t>(in.numBlocks * full.blockSize));
  std::iota(free.begin(), free.end(), 0);
  std::shuffle(free.begin(), free.end(), rng);
  in.slots.assign(free.begin(), free.begin() + kTokens);
  // A padding token (rank 0's in the slot shard) and a slot past the last
  // block (rank 1's): neither writes anything.
  in.slots[6] = -1;
  in.slots[kTokens - 2] = in.numBlocks * full.blockSize + 5;
  return in;
}

/// What one rank appends: heads [firstHead, firstHead + heads) of the K/V,
/// with its slot mapping, into a cache of `desc` (as many blocks as the
/// unsharded one).
struct RankWork {
  int rank = 0;
  Description desc;
  int64_t firstHead = 0;
  int64_t heads = 0;
  std::vector<int64_t> slots;
  uint64_t poisonSeed = 0;
};

/// Every head and every slot: the unsharded append as one rank's work.
RankWork wholeWork(const Inputs &in, uint64_t poisonSeed) {
  RankWork work;
  work.desc = in.full;
  work.heads = in.full.numKvHeads;
  work.slots = in.slots;
  work.poisonSeed = poisonSeed;
  return work;
}

//===----------------------------------------------------------------------===//
// Host images of caches
//===----------------------------------------------------------------------===//

/// A K/V cache pair of `desc` on the host, compact in cacheShape() (one kv
/// tensor for dual_stacked), without guards: what is compared across ranks.
struct HostCaches {
  Description desc;
  int64_t numBlocks = 0;
  std::vector<unsigned char> key, value; // value: empty for dual_stacked

  HostCaches() = default;
  HostCaches(const Description &desc, int64_t numBlocks)
      : desc(desc), numBlocks(numBlocks) {
    key.assign(bytes(CacheSide::Key), 0);
    if (!stacked())
      value.assign(bytes(CacheSide::Value), 0);
  }

  bool stacked() const { return desc.layout == Layout::DualStacked; }
  size_t bytes(CacheSide side) const {
    std::vector<int64_t> shape = cacheShape(desc, side, numBlocks);
    int64_t elements = 1;
    for (int64_t extent : shape)
      elements *= extent;
    return static_cast<size_t>(elements) * dtypeBytes(desc.cacheDtype);
  }
  /// Valid while the buffers are neither resized nor moved from.
  TensorView view(CacheSide side) {
    bool key = side == CacheSide::Key || stacked();
    return TensorView::compact(
        key ? this->key.data() : value.data(), desc.cacheDtype,
        cacheShape(desc, key ? CacheSide::Key : CacheSide::Value, numBlocks));
  }
  /// K then V: what forEachElement's `side` indexes.
  std::array<TensorView, 2> views() {
    return {view(CacheSide::Key), view(CacheSide::Value)};
  }
};

constexpr std::array<CacheSide, 2> kSides = {CacheSide::Key, CacheSide::Value};

/// Calls f(s, block, head, pos, d) for every element of both caches of
/// `desc`, s indexing kSides (contiguous: block is the request, pos the
/// position in it).
template <typename F>
void forEachElement(const Description &desc, int64_t numBlocks, F f) {
  for (int s = 0; s < 2; ++s)
    for (int64_t block = 0; block < numBlocks; ++block)
      for (int64_t pos = 0; pos < desc.blockSize; ++pos)
        for (int64_t head = 0; head < desc.numKvHeads; ++head)
          for (int64_t d = 0; d < desc.headDim; ++d)
            f(s, block, head, pos, d);
}

/// The caches of `set` inside `image` (a copy of its whole storage).
HostCaches extract(const CacheSet &set, const Description &desc,
                   std::vector<unsigned char> &image) {
  HostCaches out(desc, set.numBlocks());
  const size_t elem = dtypeBytes(desc.cacheDtype);
  std::array<TensorView, 2> from = {
      set.hostView(CacheSide::Key, image.data()),
      set.hostView(CacheSide::Value, image.data())};
  std::array<TensorView, 2> to = out.views();
  forEachElement(
      desc, out.numBlocks,
      [&](int s, int64_t block, int64_t head, int64_t pos, int64_t d) {
        Index index = cacheIndex(desc, kSides[s], block, head, pos, d);
        std::memcpy(to[s].elementPointer(index), from[s].elementPointer(index),
                    elem);
      });
  return out;
}

/// "" if `actual` equals `expected` byte for byte; else how many elements
/// differ and the first few, by (cache, block, head, pos, d).
std::string compare(HostCaches &expected, HostCaches &actual,
                    int maxShown = 5) {
  if (expected.key == actual.key && expected.value == actual.value)
    return "";
  const Description &desc = expected.desc;
  const size_t elem = dtypeBytes(desc.cacheDtype);
  std::array<TensorView, 2> want = expected.views(), got = actual.views();
  int64_t differing = 0;
  std::string details;
  forEachElement(
      desc, expected.numBlocks,
      [&](int s, int64_t block, int64_t head, int64_t pos, int64_t d) {
        Index index = cacheIndex(desc, kSides[s], block, head, pos, d);
        const void *w = want[s].elementPointer(index);
        const void *g = got[s].elementPointer(index);
        if (std::memcmp(w, g, elem) == 0 || differing++ >= maxShown)
          return;
        char line[200];
        std::snprintf(line, sizeof(line),
                      "\n    %s cache, block %lld, head %lld, pos %lld, d "
                      "%lld: expected 0x%0*x, got 0x%0*x",
                      s == 0 ? "key" : "value", static_cast<long long>(block),
                      static_cast<long long>(head), static_cast<long long>(pos),
                      static_cast<long long>(d), static_cast<int>(2 * elem),
                      loadBits(w, desc.cacheDtype), static_cast<int>(2 * elem),
                      loadBits(g, desc.cacheDtype));
        details += line;
      });
  return std::to_string(differing) + " elements differ; first:" + details;
}

/// Which rank holds element (head, slot) of the unsharded cache, and at
/// which of its heads.
struct Owner {
  int rank;
  int64_t head;
};
using OwnerFn = std::function<Owner(int64_t head, int64_t slot)>;

/// The unsharded caches put together from the ranks' caches.
HostCaches assemble(const Description &full, int64_t numBlocks,
                    std::vector<HostCaches> &ranks, const OwnerFn &owner) {
  HostCaches out(full, numBlocks);
  const size_t elem = dtypeBytes(full.cacheDtype);
  std::array<TensorView, 2> to = out.views();
  std::vector<std::array<TensorView, 2>> from;
  for (HostCaches &rank : ranks)
    from.push_back(rank.views());
  forEachElement(
      full, numBlocks,
      [&](int s, int64_t block, int64_t head, int64_t pos, int64_t d) {
        Owner o = owner(head, block * full.blockSize + pos);
        std::memcpy(to[s].elementPointer(
                        cacheIndex(full, kSides[s], block, head, pos, d)),
                    from[o.rank][s].elementPointer(cacheIndex(
                        ranks[o.rank].desc, kSides[s], block, o.head, pos, d)),
                    elem);
      });
  return out;
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

/// One rank's device tensors: the fused KV buffer with its K and V views,
/// the slot mapping, and the poisoned caches.
struct RankTensors {
  DeviceBuffer kv, slots;
  TensorArg key, value, slotMapping;
  CacheSet caches;
};

bool prepare(Backend &b, const Inputs &in, const RankWork &work, RankTensors &t,
             std::string &error) {
  t.kv = DeviceBuffer(b, in.kv.size());
  if (!t.kv.valid()) {
    error = "allocating K/V failed: " + b.lastError();
    return false;
  }
  if (!b.copyToDevice(t.kv.get(), in.kv.data(), in.kv.size())) {
    error = "copying K/V to the device failed: " + b.lastError();
    return false;
  }
  DLDevice device = b.device();
  DLDataType type = toDLDataType(in.full.sourceDtype);
  const uint64_t elem = in.elementBytes();
  std::vector<int64_t> shape = {in.numTokens, work.heads, in.full.headDim};
  t.key = TensorArg(t.kv.get(), in.offset(false, work.firstHead) * elem, device,
                    type, shape, in.strides());
  t.value = TensorArg(t.kv.get(), in.offset(true, work.firstHead) * elem,
                      device, type, shape, in.strides());
  if (!uploadVector(b, work.slots, t.slots, error))
    return false;
  t.slotMapping =
      TensorArg(t.slots.get(), 0, device, int64Type(), {in.numTokens}, {1});
  return t.caches.create(b, work.desc, in.numBlocks, CacheStorage::Compact,
                         work.poisonSeed, error);
}

/// `desc` must outlive the launch (args.kernel points into it).
kvrt_append_args appendArgs(const Description &desc, const RankTensors &t) {
  kvrt_append_args args = KVRT_ARGS_INIT(kvrt_append_args);
  args.kernel = desc.name.c_str();
  args.key = t.key.get();
  args.value = t.value.get();
  args.slot_mapping = t.slotMapping.get();
  args.key_cache = t.caches.keyCache();
  args.value_cache = t.caches.valueCache();
  args.variant = KVRT_VARIANT_AUTO;
  return args;
}

/// Releases its waiters together once `count` threads have arrived (C++17
/// has no std::barrier). Used once.
class Barrier {
public:
  explicit Barrier(int count) : remaining(count) {}
  void arriveAndWait() {
    std::unique_lock<std::mutex> lock(mutex);
    if (--remaining == 0) {
      released.notify_all();
      return;
    }
    released.wait(lock, [this] { return remaining == 0; });
  }

private:
  std::mutex mutex;
  std::condition_variable released;
  int remaining;
};

struct RankResult {
  /// Why the rank could not run its append ("" if it ran).
  std::string failure;
  /// How its cache differs from the reference of its inputs ("" if not).
  std::string mismatch;
  /// Its caches before and after the append.
  HostCaches before, after;
};

/// Makes rank `rank`'s backend on the calling thread (the CUDA one selects
/// the rank's device there); nullptr and `error` on failure.
using BackendFactory =
    std::function<std::unique_ptr<Backend>(int rank, std::string &error)>;

/// One rank, on its own thread: its backend, its tensors, the barrier every
/// rank waits at (so the appends run together, each on its own stream), the
/// append, and the check of its cache. Everything it allocates is released
/// on this thread, before the backend.
void runRank(const BackendFactory &factory, kvrt_bundle *bundle,
             const Inputs &in, const RankWork &work, Barrier &start,
             RankResult &out) {
  std::string error;
  std::unique_ptr<Backend> backend = factory(work.rank, error);
  RankTensors tensors; // declared after the backend: released before it
  bool ready = backend && prepare(*backend, in, work, tensors, error);
  if (ready) {
    std::vector<unsigned char> poison = tensors.caches.poisonImage();
    out.before = extract(tensors.caches, work.desc, poison);
  }
  // Every rank arrives, ready or not, or the others would wait forever.
  start.arriveAndWait();
  if (!ready) {
    out.failure = error;
    return;
  }
  kvrt_append_args args = appendArgs(work.desc, tensors);
  kvrt_status status = kvrt_append(bundle, &args, backend->stream());
  if (status != KVRT_SUCCESS) {
    out.failure = kvrtFailure("kvrt_append", status);
    return;
  }
  if (!backend->synchronize()) {
    out.failure = "after the append: " + backend->lastError();
    return;
  }
  tensors.caches.expectAppend(in.host(false, work.firstHead, work.heads),
                              in.host(true, work.firstHead, work.heads),
                              work.slots);
  std::string report;
  if (!tensors.caches.check(report))
    out.mismatch = report.empty() ? "the caches differ" : report;
  std::vector<unsigned char> image;
  if (!tensors.caches.readBack(image, error)) {
    out.failure = error;
    return;
  }
  out.after = extract(tensors.caches, work.desc, image);
}

//===----------------------------------------------------------------------===//
// Shards
//===----------------------------------------------------------------------===//

struct ShardPlan {
  std::vector<RankWork> ranks;
  OwnerFn owner;
};

/// Tensor parallel: rank r appends heads [r * H/2, (r + 1) * H/2) with every
/// slot, into a cache of `half` (H/2 heads).
ShardPlan headShard(const Inputs &in, const Description &half, uint64_t seed) {
  ShardPlan plan;
  const int64_t heads = half.numKvHeads;
  for (int r = 0; r < kRanks; ++r) {
    RankWork work;
    work.rank = r;
    work.desc = half;
    work.firstHead = r * heads;
    work.heads = heads;
    work.slots = in.slots;
    work.poisonSeed = seed + 0x100 + r;
    plan.ranks.push_back(std::move(work));
  }
  plan.owner = [heads](int64_t head, int64_t) {
    return Owner{static_cast<int>(head / heads), head % heads};
  };
  return plan;
}

/// Context parallel: rank r appends every head of the tokens t with
/// t % 2 == r (the other slots -1), into a full-size cache.
ShardPlan slotShard(const Inputs &in, uint64_t seed) {
  ShardPlan plan;
  const int64_t numSlots = in.numBlocks * in.full.blockSize;
  std::vector<int> owners(static_cast<size_t>(numSlots), 0);
  for (int64_t t = 0; t < in.numTokens; ++t)
    if (in.slots[t] >= 0 && in.slots[t] < numSlots)
      owners[in.slots[t]] = static_cast<int>(t % kRanks);
  for (int r = 0; r < kRanks; ++r) {
    RankWork work = wholeWork(in, seed + 0x200 + r);
    work.rank = r;
    for (int64_t t = 0; t < in.numTokens; ++t)
      if (t % kRanks != r)
        work.slots[t] = -1;
    plan.ranks.push_back(std::move(work));
  }
  plan.owner = [owners](int64_t head, int64_t slot) {
    return Owner{owners[slot], head};
  };
  return plan;
}

/// Runs the ranks concurrently, one thread each, then checks each rank's
/// cache and the union. Returns the failures (none: passed).
std::vector<std::string> runSharded(kvrt_bundle *bundle, const Inputs &in,
                                    const ShardPlan &plan,
                                    const BackendFactory &factory) {
  const size_t ranks = plan.ranks.size();
  std::vector<RankResult> results(ranks);
  Barrier start(static_cast<int>(ranks));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      runRank(factory, bundle, in, plan.ranks[r], start, results[r]);
    });
  for (std::thread &thread : threads)
    thread.join();

  std::vector<std::string> failures;
  for (size_t r = 0; r < ranks; ++r) {
    std::string rank =
        "rank " + std::to_string(r) + " (" + plan.ranks[r].desc.name +
        ", heads " + std::to_string(plan.ranks[r].firstHead) + "-" +
        std::to_string(plan.ranks[r].firstHead + plan.ranks[r].heads - 1) + ")";
    if (!results[r].failure.empty())
      failures.push_back(rank + ": " + results[r].failure);
    else if (!results[r].mismatch.empty())
      failures.push_back(rank +
                         ": its cache differs from the reference of its "
                         "inputs: " +
                         results[r].mismatch);
  }
  for (const RankResult &result : results)
    if (!result.failure.empty())
      return failures; // no union without every rank's cache

  std::vector<HostCaches> before, after;
  for (RankResult &result : results) {
    before.push_back(std::move(result.before));
    after.push_back(std::move(result.after));
  }
  const int64_t heads = in.full.numKvHeads;
  HostCaches expected = assemble(in.full, in.numBlocks, before, plan.owner);
  appendReference(in.full, in.host(false, 0, heads), in.host(true, 0, heads),
                  in.slots.data(), expected.view(CacheSide::Key),
                  expected.view(CacheSide::Value));
  HostCaches actual = assemble(in.full, in.numBlocks, after, plan.owner);
  std::string difference = compare(expected, actual);
  if (!difference.empty())
    failures.push_back("the union of the ranks' caches differs from the "
                       "unsharded append: " +
                       difference);
  return failures;
}

//===----------------------------------------------------------------------===//
// CUDA
//===----------------------------------------------------------------------===//

/// Rank r on cuda:r, set on the calling thread.
std::unique_ptr<Backend> cudaRank(int rank, std::string &error) {
  auto backend = std::make_unique<gpu::CudaBackend>();
  if (!backend->init(globals().bundle, error, rank)) {
    error = "cuda:" + std::to_string(rank) + ": " + error;
    return nullptr;
  }
  return backend;
}

/// A backend and tensors on one device, for the tests that mix devices on
/// one thread: made with that device current (cudaMalloc allocates on the
/// current device) and released with it current again.
struct DeviceSide {
  int device = 0;
  std::unique_ptr<gpu::CudaBackend> backend;
  std::unique_ptr<RankTensors> tensors;

  DeviceSide() = default;
  DeviceSide(const DeviceSide &) = delete;
  DeviceSide &operator=(const DeviceSide &) = delete;
  ~DeviceSide() {
    if (!backend)
      return;
    cudaSetDevice(device);
    tensors.reset();
    backend.reset();
  }

  bool create(int device, const Inputs &in, const RankWork &work,
              std::string &error) {
    this->device = device;
    backend = std::make_unique<gpu::CudaBackend>();
    // init() makes `device` current on this thread.
    if (!backend->init(globals().bundle, error, device))
      return false;
    tensors = std::make_unique<RankTensors>();
    return prepare(*backend, in, work, *tensors, error);
  }

  /// Whether the caches still match what was expected of them (their
  /// poison, unless expectAppend was called), every byte.
  bool check(std::string &report) {
    if (cudaSetDevice(device) != cudaSuccess) {
      report = "cudaSetDevice failed";
      return false;
    }
    if (!backend->synchronize()) {
      report = backend->lastError();
      return false;
    }
    return tensors->caches.check(report);
  }
};

bool contains(const std::string &text, const std::string &fragment) {
  return text.find(fragment) != std::string::npos;
}

TEST(MultiGpu, SlotShardOnTwoDevicesConcurrently) {
  std::string why;
  std::optional<Description> full = fullDescription(why);
  ASSERT_TRUE(full) << why;
  Inputs in = makeInputs(*full, globals().seed ^ 0x510751075107ull);
  for (const std::string &failure : runSharded(
           globals().bundle, in, slotShard(in, globals().seed), cudaRank))
    ADD_FAILURE() << "slot shard: " << failure;
}

TEST(MultiGpu, HeadShardOnTwoDevicesConcurrently) {
  std::string why;
  std::optional<Description> full = fullDescription(why);
  ASSERT_TRUE(full) << why;
  std::optional<Description> half = headShardDescription(*full);
  if (!half)
    GTEST_SKIP() << "the head shard needs a " << full->numKvHeads / kRanks
                 << "-head description in the matrix (each rank's cache "
                    "holds "
                 << full->numKvHeads / kRanks << " of the " << full->numKvHeads
                 << " heads of " << kFullName
                 << ", and a kernel writes only caches of its own head "
                    "count); it has none: add "
                 << kHalfName << " (" << layoutName(full->layout) << ", block "
                 << full->blockSize << ", " << full->numKvHeads / kRanks
                 << " x " << full->headDim << ", "
                 << dtypeName(full->cacheDtype) << " from "
                 << dtypeName(full->sourceDtype) << ") to conformanceMatrix()";
  Inputs in = makeInputs(*full, globals().seed ^ 0x4ead4ead4eadull);
  for (const std::string &failure :
       runSharded(globals().bundle, in, headShard(in, *half, globals().seed),
                  cudaRank))
    ADD_FAILURE() << "head shard: " << failure;
}

TEST(MultiGpu, TensorsOnTwoDevicesAreRefused) {
  std::string why;
  std::optional<Description> full = fullDescription(why);
  ASSERT_TRUE(full) << why;
  Inputs in = makeInputs(*full, globals().seed ^ 0xdef1ce5ull);
  DeviceSide cuda0, cuda1;
  std::string error;
  ASSERT_TRUE(cuda1.create(1, in, wholeWork(in, globals().seed + 0x301), error))
      << error;
  ASSERT_TRUE(cuda0.create(0, in, wholeWork(in, globals().seed + 0x300), error))
      << error;
  kvrt_bundle *bundle = globals().bundle;

  // K, V and slot_mapping on cuda:1 (memory and label), the caches on
  // cuda:0: refused by validation, before the driver is asked anything.
  kvrt_append_args args = appendArgs(*full, *cuda0.tensors);
  args.key = cuda1.tensors->key.get();
  args.value = cuda1.tensors->value.get();
  args.slot_mapping = cuda1.tensors->slotMapping.get();
  kvrt_status status = kvrt_append(bundle, &args, cuda0.backend->stream());
  std::string message = kvrt_last_error();
  EXPECT_EQ(status, KVRT_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_TRUE(contains(message, "key_cache: on cuda:0 but key is on cuda:1"))
      << message;
  EXPECT_TRUE(
      contains(message, "all tensors of a launch must be on one device"))
      << message;

  // Only K on cuda:1.
  args = appendArgs(*full, *cuda0.tensors);
  args.key = cuda1.tensors->key.get();
  status = kvrt_append(bundle, &args, cuda0.backend->stream());
  message = kvrt_last_error();
  EXPECT_EQ(status, KVRT_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_TRUE(contains(message, "value: on cuda:0 but key is on cuda:1"))
      << message;

  // Every tensor labelled cuda:1, but the caches' memory is cuda:0's: the
  // labels agree, so kvrt's pointer check (in cuda:1's context, current
  // here) is what refuses.
  DLTensor keyCache = *cuda0.tensors->caches.keyCache();
  keyCache.device = DLDevice{kDLCUDA, 1};
  DLTensor valueCache{};
  args = appendArgs(*full, *cuda1.tensors);
  args.key_cache = &keyCache;
  if (const DLTensor *value = cuda0.tensors->caches.valueCache()) {
    valueCache = *value;
    valueCache.device = DLDevice{kDLCUDA, 1};
    args.value_cache = &valueCache;
  } else {
    args.value_cache = nullptr;
  }
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  status = kvrt_append(bundle, &args, cuda1.backend->stream());
  message = kvrt_last_error();
  EXPECT_EQ(status, KVRT_ERROR_INVALID_ARGUMENT) << message;
  EXPECT_TRUE(contains(message, "key_cache: device is cuda:1 but its data"))
      << message;
  EXPECT_TRUE(contains(message, "was allocated on cuda:0")) << message;

  // Nothing was launched anywhere: every cache byte is still poison.
  std::string report;
  EXPECT_TRUE(cuda0.check(report)) << "cuda:0: " << report;
  EXPECT_TRUE(cuda1.check(report)) << "cuda:1: " << report;
}

TEST(MultiGpu, ThreadWithoutAContextLaunchesOnTheTensorsDevice) {
  std::string why;
  std::optional<Description> full = fullDescription(why);
  ASSERT_TRUE(full) << why;
  Inputs in = makeInputs(*full, globals().seed ^ 0xc0c0c0c0ull);
  RankWork work = wholeWork(in, globals().seed + 0x400);
  DeviceSide cuda1;
  std::string error;
  ASSERT_TRUE(cuda1.create(1, in, work, error)) << error;

  // A thread that has made no CUDA call has no current context: kvrt takes
  // the primary context of the tensors' device, cuda:1 (not the runtime's
  // default device 0), the one cuda1's stream belongs to.
  kvrt_append_args args = appendArgs(*full, *cuda1.tensors);
  kvrt_stream stream = cuda1.backend->stream();
  kvrt_status status = KVRT_SUCCESS;
  std::string message;
  std::thread([&] {
    status = kvrt_append(globals().bundle, &args, stream);
    if (status != KVRT_SUCCESS)
      message = kvrt_last_error();
  }).join();
  ASSERT_EQ(status, KVRT_SUCCESS) << message;

  const int64_t heads = in.full.numKvHeads;
  cuda1.tensors->caches.expectAppend(in.host(false, 0, heads),
                                     in.host(true, 0, heads), work.slots);
  std::string report;
  EXPECT_TRUE(cuda1.check(report)) << report;
}

//===----------------------------------------------------------------------===//
// main
//===----------------------------------------------------------------------===//

void usage() {
  std::cerr << "usage: kvgen-multi-gpu-test [--bundle=PATH] [--seed=N] "
               "[gtest flags]\n"
            << gpu::kMatrixBundleUsage
            << "  --seed=N       the data seed (also KVGEN_CONFORMANCE_SEED)\n";
}

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);

  Globals &g = globals();
  gpu::MatrixBundle matrixBundle;
  if (const char *env = std::getenv("KVGEN_CONFORMANCE_SEED"))
    g.seed = std::strtoull(env, nullptr, 0);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (matrixBundle.parse(arg))
      continue;
    if (arg.rfind("--seed=", 0) == 0)
      g.seed = std::strtoull(arg.c_str() + 7, nullptr, 0);
    else {
      usage();
      return 2;
    }
  }

  std::string reason = gpu::noDeviceReason();
  if (!reason.empty()) {
    std::printf("SKIPPED: needs %d CUDA devices; no CUDA device is usable "
                "(%s)\n",
                kRanks, reason.c_str());
    return gpu::kSkipped;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < kRanks) {
    std::printf("SKIPPED: needs %d CUDA devices, found %d\n", kRanks, count);
    return gpu::kSkipped;
  }

  g.bundle = matrixBundle.load();
  if (!g.bundle)
    return 1;
  g.matrix = conformanceMatrix();

  std::printf("multi-gpu: %d CUDA devices, using", count);
  for (int device = 0; device < kRanks; ++device) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    std::printf("%s cuda:%d %s (sm_%d%d)", device ? "," : "", device, prop.name,
                prop.major, prop.minor);
  }
  std::printf("; bundle %s (%zu kernels), seed 0x%llx\n",
              matrixBundle.getPath().c_str(), kvrt_bundle_num_kernels(g.bundle),
              static_cast<unsigned long long>(g.seed));

  int result = RUN_ALL_TESTS();
  kvrt_bundle_destroy(g.bundle);
  g.bundle = nullptr;
  return result;
}
