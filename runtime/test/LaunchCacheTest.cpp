//===- LaunchCacheTest.cpp - what kvrt remembers between launches ---------===//
//
// PlanCache: a launch with the same arguments reuses the validated plan, and
// any change (pointer, byte_offset, shape, stride, dtype, device, kernel
// name, variant) is validated again, so that a tensor made invalid after a
// good launch is refused. Resolved functions: a launch in the same current
// context asks the driver for no device or module, and a changed context or
// device resolves again.
//
//===----------------------------------------------------------------------===//

#include "FakeDriverTest.h"
#include "GpuLauncher.h"
#include "PlanCache.h"
#include "PrologueSupport.h"

#include <vector>

using namespace kvrt::test;
using kvrt::impl::PlanCache;
using ::testing::HasSubstr;

namespace {

class LaunchCacheTest : public FakeDriverTest {
protected:
  void SetUp() override {
    PlanCache::clear();
    kvrt::impl::GpuLauncher::forgetResolvedFunctions();
    FakeDriverTest::SetUp();
    static int userContext;
    state->current = &userContext;
    state->paramsToRecord = 21;
    state->buffersToRecord = 5;
  }

  /// A good launch, then the same again: the second one hits.
  void launchTwice() {
    ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
    uint64_t hits = PlanCache::hits();
    ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
    ASSERT_EQ(PlanCache::hits(), hits + 1) << "the same arguments hit";
  }
};

TEST_F(LaunchCacheTest, SameArgumentsReuseThePlan) {
  launchTwice();
  EXPECT_EQ(state->launches, 2);
  // Identical DLTensors in other objects hit too: the key is their contents.
  HostTensor other = slots;
  kvrt_append_args args = appendArgs();
  args.slot_mapping = other.get();
  uint64_t hits = PlanCache::hits();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS);
  EXPECT_EQ(PlanCache::hits(), hits + 1);
}

TEST_F(LaunchCacheTest, ChangedPointerIsValidatedAgain) {
  launchTwice();
  // Value's rows now start inside the key cache: the write-disjoint check
  // must see it.
  value.get()->data = keyCache.get()->data;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("value"));
  EXPECT_EQ(state->launches, 2);
}

TEST_F(LaunchCacheTest, ChangedPointerReachesTheKernel) {
  launchTwice();
  HostTensor moved = HostTensor::compact(i64(), {kTokens});
  moved.get()->device = {kDLCUDA, 0};
  slots.get()->data = moved.get()->data;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  // Parameter 2 is slot_mapping's first element.
  EXPECT_EQ(state->params[2],
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(moved.data())));
}

/// Another input set of the same shapes (an eager loop's next call, another
/// layer's caches): every tensor at another address.
struct MovedSet {
  HostTensor qkv, key, value, slots, keyCache, valueCache;
  explicit MovedSet(uint64_t cacheOffset = 0) {
    makeRows(&qkv, &key, &value);
    slots = HostTensor::compact(i64(), {kTokens});
    // Compact, as the fixture's; the storage's 256 spare bytes take the
    // offset.
    for (HostTensor *cache : {&keyCache, &valueCache}) {
      *cache =
          HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
      cache->get()->byte_offset = cacheOffset;
    }
  }
  void moveTo(DLDevice device) {
    for (HostTensor *t : {&key, &value, &slots, &keyCache, &valueCache})
      t->get()->device = device;
  }
  kvrt_append_args args() {
    return {sizeof(kvrt_append_args),
            nullptr,
            key.get(),
            value.get(),
            slots.get(),
            keyCache.get(),
            valueCache.get(),
            KVRT_VARIANT_AUTO};
  }
  /// data + byte_offset of each buffer, in the append's parameter order.
  std::vector<int64_t> firsts() {
    std::vector<int64_t> out;
    for (HostTensor *t : {&key, &value, &slots, &keyCache, &valueCache})
      out.push_back(static_cast<int64_t>(
          reinterpret_cast<uintptr_t>(t->get()->data) + t->get()->byte_offset));
    return out;
  }
};

TEST_F(LaunchCacheTest, SameShapesAtNewAddressesRebase) {
  launchTwice();
  MovedSet moved(/*cacheOffset=*/64);
  moved.moveTo({kDLCUDA, 0});
  kvrt_append_args args = moved.args();
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  // Every pointer parameter is the new tensor's first element.
  std::vector<int64_t> firsts = moved.firsts();
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(state->params[i], firsts[i]) << "parameter " << i;
  // And back: the fixture's tensors, rebased again.
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 2);
  EXPECT_EQ(state->params[3], static_cast<int64_t>(reinterpret_cast<uintptr_t>(
                                  keyCache.get()->data)));
  EXPECT_EQ(state->launches, 4);
}

TEST_F(LaunchCacheTest, RebasedAddressesAreCheckedAsPlanningChecksThem) {
  launchTwice();
  uint64_t rebases = PlanCache::rebases();
  void *data = keyCache.get()->data;
  // Each refusal carries planning's own message, and launches nothing.
  keyCache.get()->data = nullptr;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_cache: data is NULL"));
  keyCache.get()->data = reinterpret_cast<void *>(uintptr_t(1) << 57);
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("2^57"));
  keyCache.get()->data = data;
  keyCache.get()->byte_offset = 1; // not a whole bf16
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("2-byte elements"));
  keyCache.get()->byte_offset = 0;
  // The written cache moved onto the rows it reads.
  keyCache.get()->data = qkv.get()->data;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_cache"));
  EXPECT_EQ(PlanCache::rebases(), rebases);
  EXPECT_EQ(state->launches, 2);
  // Where it was: the remembered plan still serves.
  keyCache.get()->data = data;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launches, 3);
}

TEST_F(LaunchCacheTest, OneTensorInTwoPlacesIsPlannedNotRebased) {
  // K and V read from one DLTensor when planned; then V from its own rows.
  kvrt_append_args args = appendArgs();
  args.value = args.key;
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  MovedSet moved;
  moved.moveTo({kDLCUDA, 0});
  args.value = moved.value.get();
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases);
  EXPECT_EQ(state->params[1], moved.firsts()[1]);
}

TEST_F(DualStackedTest, RebasedStackedCacheMovesBothViews) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  HostTensor moved =
      HostTensor::compact(bf16(), {kBlocks, 2, kHeads, kBlockSize, kHeadDim});
  keyCache.get()->data = moved.get()->data;
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  // K at index 0, V at index 1 of dim 1, of the new tensor.
  const int64_t kvStride = kHeads * kBlockSize * kHeadDim;
  const auto at = [&](int64_t elements) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(moved.get()->data) +
                                elements * 2);
  };
  EXPECT_EQ(recorded().params[3], at(0));
  EXPECT_EQ(recorded().params[4], at(kvStride));
}

TEST_F(LaunchTest, RebasedPlanKeepsTheVectorPromiseChecked) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  // The cache now starts 2 bytes in: bf16 elements stay aligned, 16-byte
  // vectors do not. AUTO falls back to the scalar kernel; VECTOR refuses.
  MovedSet moved(/*cacheOffset=*/2);
  moved.moveTo({kDLCPU, 0});
  kvrt_append_args args = moved.args();
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(recorded().scalarCalls, 1);
  args.variant = KVRT_VARIANT_VECTOR;
  EXPECT_EQ(kvrt_append(bundle.get(), &args, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("not aligned"));
}

TEST_F(LaunchTest, RebasedSlotMappingKeepsWhatItWritesDisjoint) {
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  HostTensor moved = HostTensor::compact(i64(), {kTokens});
  slots = moved;
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(
      recorded().params[3],
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(moved.get()->data)));
  // The slots a slot_mapping kernel writes moved onto the block table it
  // reads: refused, with planning's message.
  slots.get()->data = blockTable.get()->data;
  EXPECT_EQ(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("slot_mapping: overlaps"));
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(calls(), 2) << "a refused launch ran a kernel";
}

TEST_F(LaunchTest, RebasedFusedAppendMovesEveryBuffer) {
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  HostTensor table = HostTensor::compact(i32(), {kRequests, kMaxBlocksPerReq});
  HostTensor cache =
      HostTensor::compact(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim});
  blockTable = table;
  keyCache = cache;
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  const std::vector<int64_t> &params = recorded().params;
  EXPECT_EQ(params[2], static_cast<int64_t>(
                           reinterpret_cast<uintptr_t>(table.get()->data)));
  EXPECT_EQ(params[5], static_cast<int64_t>(
                           reinterpret_cast<uintptr_t>(cache.get()->data)));
}

TEST_F(LaunchTest, RebasedInPlaceQueryStaysInPlace) {
  // q_out given as query itself (vLLM's in-place Q) at new addresses: the
  // plan moves, both buffers to the one new address; a q_out that no longer
  // is query is planned anew, and refused.
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(
      load(bundleJson(describePrologue("kv_rope", "append", Parts())), &raw),
      KVRT_SUCCESS)
      << kvrt_last_error();
  bundle.reset(raw);
  registerRecorders(raw);
  HostTensor positions = HostTensor::compact(i64(), {kTokens});
  HostTensor cosSin = HostTensor::compact(bf16(), {kMaxPosition, kRotaryDim});
  HostTensor kWeight = HostTensor::compact(bf16(), {kHeadDim});
  HostTensor qWeight = HostTensor::compact(bf16(), {kHeadDim});
  HostTensor epsilon = HostTensor::compact(f32(), {1});
  auto launchInPlace = [&](const HostTensor &rows, uint64_t qOutOffset) {
    HostTensor query = rows.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                 {kQkvRow, kHeadDim, 1}, 0);
    HostTensor qOut = rows.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                {kQkvRow, kHeadDim, 1}, qOutOffset);
    kvrt_append_args args = appendArgs();
    args.kernel = "kv_rope";
    args.query = query.get();
    args.q_out = qOut.get();
    args.rope_positions = positions.get();
    args.cos_sin_cache = cosSin.get();
    args.k_norm_weight = kWeight.get();
    args.q_norm_weight = qWeight.get();
    args.epsilon = epsilon.get();
    return kvrt_append(bundle.get(), &args, nullptr);
  };
  ASSERT_EQ(launchInPlace(qkv, 0), KVRT_SUCCESS) << kvrt_last_error();
  HostTensor rows = HostTensor::compact(bf16(), {kTokens, kQkvRow});
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(launchInPlace(rows, 0), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  std::vector<std::string> names = prologueParams("append", Parts());
  int64_t address = reinterpret_cast<int64_t>(rows.data());
  for (const char *name : {"query", "q_out"}) {
    size_t at = std::find(names.begin(), names.end(), name) - names.begin();
    EXPECT_EQ(recorded().params.at(at), address) << name;
  }
  EXPECT_EQ(launchInPlace(rows, 2), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(),
              HasSubstr("q_out: overlaps query but is not query itself"));
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
}

TEST_F(LaunchTest, RebasedGatherKeepsOnlyWhatItWritesDisjoint) {
  loadWithGather();
  // K's cache read twice, through a second tensor over the same bytes: a
  // gather only reads its caches (Params.def's KVGEN_ABI_KERNEL_WRITES), so
  // planning accepts the overlap, and so does a rebase to new outputs.
  HostTensor sameBytes = keyCache.view(
      bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim},
      {kBlockSize * kHeads * kHeadDim, kHeads * kHeadDim, kHeadDim, 1}, 0);
  HostTensor keyOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  HostTensor valueOut =
      HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  kvrt_gather_args args = gatherArgs(keyOut, valueOut);
  args.value_cache = sameBytes.get();
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  HostTensor movedKey =
      HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  HostTensor movedValue =
      HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  args.key_out = movedKey.get();
  args.value_out = movedValue.get();
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1)
      << "the caches a gather reads were checked as if it wrote them";
  EXPECT_EQ(recorded().params[3],
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(movedKey.data())));
  // What it writes still may not move onto what it reads: planning's refusal.
  HostTensor onCache = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim},
                                     {kHeads * kHeadDim, kHeadDim, 1}, 0);
  args.key_out = onCache.get();
  EXPECT_EQ(kvrt_gather(bundle.get(), &args, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_out: overlaps"));
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(calls(), 2) << "a refused launch ran a kernel";
}

// A gather of a cache without V writes key_out alone: its plan holds no
// stand-in for value_out that a rebase could find key_out overlapping.
TEST_F(LaunchTest, RebasedKOnlyGatherMovesKeyOut) {
  std::vector<json> kernels;
  for (json kernel : describe("kv_konly_gather", "gather")) {
    kernel["cache"]["k_only"] = true;
    kernel["params"] = {"key_cache",
                        "slot_mapping",
                        "key_out",
                        "num_tokens",
                        "num_blocks",
                        "key_out_stride_token",
                        "key_out_stride_head",
                        "key_out_stride_dim",
                        "key_cache_stride_block",
                        "key_cache_stride_head",
                        "key_cache_stride_pos",
                        "key_cache_stride_dim"};
    kernels.push_back(kernel);
  }
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(kernels), &raw), KVRT_SUCCESS) << kvrt_last_error();
  bundle.reset(raw);
  registerRecorders(raw);
  HostTensor keyOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
  args.key_cache = keyCache.get();
  args.slot_mapping = slots.get();
  args.key_out = keyOut.get();
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  HostTensor moved = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  args.key_out = moved.get();
  uint64_t rebases = PlanCache::rebases();
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(recorded().params[2],
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(moved.data())));
  // Onto the cache it reads: no rebase, and planning's refusal.
  HostTensor onCache = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim},
                                     {kHeads * kHeadDim, kHeadDim, 1}, 0);
  args.key_out = onCache.get();
  EXPECT_EQ(kvrt_gather(bundle.get(), &args, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_out: overlaps key_cache"));
  EXPECT_EQ(PlanCache::rebases(), rebases + 1);
  EXPECT_EQ(calls(), 2) << "a refused launch ran a kernel";
}

TEST_F(LaunchCacheTest, ChangedByteOffsetIsValidatedAgain) {
  launchTwice();
  slots.get()->byte_offset = 3; // misaligned int64
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("slot_mapping"));
}

TEST_F(LaunchCacheTest, ChangedShapeIsValidatedAgain) {
  launchTwice();
  keyCache.get()->shape[3] = kHeadDim / 2;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_cache"));
  EXPECT_EQ(state->launches, 2);
}

TEST_F(LaunchCacheTest, ChangedStrideIsValidatedAgain) {
  launchTwice();
  // The same array, one stride changed in place.
  key.stridesRef()[1] = -kHeadDim;
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("negative strides"));
  EXPECT_EQ(state->launches, 2);
}

TEST_F(LaunchCacheTest, ChangedDtypeIsValidatedAgain) {
  launchTwice();
  slots.get()->dtype = i32();
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("slot_mapping"));
  EXPECT_EQ(state->launches, 2);
}

TEST_F(LaunchCacheTest, ChangedDeviceIsValidatedAgain) {
  launchTwice();
  keyCache.get()->device = {kDLCUDA, 1};
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("key_cache"));
}

TEST_F(LaunchCacheTest, ChangedKernelNameIsLookedUpAgain) {
  launchTwice();
  char name[] = "kv_append";
  kvrt_append_args args = appendArgs();
  args.kernel = name;
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS);
  // The same buffer, another name: refused, not the remembered plan.
  std::strcpy(name, "kv_fused");
  EXPECT_EQ(kvrt_append(bundle.get(), &args, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("fused_append kernel"));
}

TEST_F(LaunchCacheTest, RefusalIsNeverRemembered) {
  slots.get()->dtype = f32();
  uint64_t hits = PlanCache::hits();
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(PlanCache::hits(), hits);
  EXPECT_EQ(state->launches, 0);
}

TEST_F(LaunchCacheTest, AnotherBundleDoesNotHit) {
  launchTwice();
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(standardBundle(config()), &raw), KVRT_SUCCESS);
  BundlePtr other(raw);
  uint64_t hits = PlanCache::hits();
  kvrt_append_args args = appendArgs();
  ASSERT_EQ(kvrt_append(other.get(), &args, nullptr), KVRT_SUCCESS);
  EXPECT_EQ(PlanCache::hits(), hits);
}

TEST_F(LaunchCacheTest, SameContextAsksTheDriverForNoDevice) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  int queries = state->deviceCountQueries;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->deviceCountQueries, queries);
  EXPECT_EQ(state->launches, 3);
  EXPECT_EQ(state->moduleLoads, 1);
}

TEST_F(LaunchCacheTest, AnotherContextResolvesAgain) {
  ASSERT_EQ(append(), KVRT_SUCCESS);
  static int otherContext;
  state->current = &otherContext;
  int queries = state->deviceCountQueries;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_GT(state->deviceCountQueries, queries);
  EXPECT_EQ(state->moduleLoads, 2);
  EXPECT_EQ(state->launchContext, &otherContext);
}

TEST_F(LaunchCacheTest, RecreatedContextResolvesAgain) {
  ASSERT_EQ(append(), KVRT_SUCCESS);
  state->contextIdOffset = 1000; // destroyed and recreated at one address
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->moduleLoads, 2);
}

TEST_F(LaunchCacheTest, TensorsOnAnotherDeviceThanTheContextAreRefused) {
  state->deviceCount = 2;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  // The context is on device 0; the tensors move to device 1.
  moveAllTo({kDLCUDA, 1});
  EXPECT_EQ(append(), KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_THAT(kvrt_last_error(), HasSubstr("current CUDA context"));
  EXPECT_EQ(state->launches, 1);
}

/// Every tensor field of an argument struct reaches the key: moving any one
/// of them to another buffer gives another key. `fields` lists them, and the
/// struct's size says the list is whole (struct_size, a kernel name, the
/// tensors, a variant), so that a field added to the struct and not to
/// addArguments fails here.
template <typename Args>
void expectEveryTensorKeyed(std::vector<const DLTensor * Args::*> fields,
                            bool hasVariant) {
  size_t words = 2 + fields.size() + (hasVariant ? 1 : 0);
  ASSERT_EQ(sizeof(Args), words * sizeof(void *))
      << "a field of the struct is not in this test's list";
  int64_t shape[1] = {4};
  std::vector<float> storage(2 * fields.size());
  std::vector<DLTensor> tensors(fields.size());
  for (size_t i = 0; i < fields.size(); ++i)
    tensors[i] = DLTensor{&storage[i], {kDLCUDA, 0}, 1, {kDLFloat, 32, 1},
                          shape,       nullptr,      0};
  Args args{};
  for (size_t i = 0; i < fields.size(); ++i)
    args.*fields[i] = &tensors[i];
  auto keyOf = [&](const Args &a) {
    kvrt::impl::LaunchKey key(1, kvgen::abi::KernelKind::Append, "k");
    kvrt::impl::addArguments(key, a);
    return key;
  };
  kvrt::impl::LaunchKey base = keyOf(args);
  for (size_t i = 0; i < fields.size(); ++i) {
    DLTensor moved = tensors[i];
    moved.data = &storage[fields.size() + i];
    Args changed = args;
    changed.*fields[i] = &moved;
    EXPECT_FALSE(keyOf(changed) == base) << "field " << i << " is not keyed";
    // Only its address moved: a rebase, not a new plan.
    EXPECT_TRUE(keyOf(changed).sameShapes(base)) << "field " << i;
    DLTensor reshaped = tensors[i];
    int64_t otherShape[1] = {8};
    reshaped.shape = otherShape;
    changed.*fields[i] = &reshaped;
    EXPECT_FALSE(keyOf(changed).sameShapes(base)) << "field " << i;
  }
}

TEST(LaunchKeyTest, EveryTensorOfEveryKindIsKeyed) {
  expectEveryTensorKeyed<kvrt_append_args>(
      {&kvrt_append_args::key, &kvrt_append_args::value,
       &kvrt_append_args::slot_mapping, &kvrt_append_args::key_cache,
       &kvrt_append_args::value_cache, &kvrt_append_args::key_scale,
       &kvrt_append_args::value_scale, &kvrt_append_args::key_scale_cache,
       &kvrt_append_args::value_scale_cache, &kvrt_append_args::query,
       &kvrt_append_args::q_out, &kvrt_append_args::rope_positions,
       &kvrt_append_args::cos_sin_cache, &kvrt_append_args::k_norm_weight,
       &kvrt_append_args::q_norm_weight, &kvrt_append_args::epsilon,
       &kvrt_append_args::q_scale},
      /*hasVariant=*/true);
  expectEveryTensorKeyed<kvrt_slot_mapping_args>(
      {&kvrt_slot_mapping_args::block_table,
       &kvrt_slot_mapping_args::query_start_loc,
       &kvrt_slot_mapping_args::context_lens,
       &kvrt_slot_mapping_args::slot_mapping},
      /*hasVariant=*/false);
  expectEveryTensorKeyed<kvrt_fused_append_args>(
      {&kvrt_fused_append_args::key, &kvrt_fused_append_args::value,
       &kvrt_fused_append_args::block_table,
       &kvrt_fused_append_args::query_start_loc,
       &kvrt_fused_append_args::context_lens,
       &kvrt_fused_append_args::key_cache, &kvrt_fused_append_args::value_cache,
       &kvrt_fused_append_args::key_scale, &kvrt_fused_append_args::value_scale,
       &kvrt_fused_append_args::key_scale_cache,
       &kvrt_fused_append_args::value_scale_cache,
       &kvrt_fused_append_args::query, &kvrt_fused_append_args::q_out,
       &kvrt_fused_append_args::cos_sin_cache,
       &kvrt_fused_append_args::k_norm_weight,
       &kvrt_fused_append_args::q_norm_weight, &kvrt_fused_append_args::epsilon,
       &kvrt_fused_append_args::q_scale},
      /*hasVariant=*/true);
  expectEveryTensorKeyed<kvrt_gather_args>(
      {&kvrt_gather_args::key_cache, &kvrt_gather_args::value_cache,
       &kvrt_gather_args::slot_mapping, &kvrt_gather_args::key_out,
       &kvrt_gather_args::value_out, &kvrt_gather_args::key_scale,
       &kvrt_gather_args::value_scale, &kvrt_gather_args::key_scale_cache,
       &kvrt_gather_args::value_scale_cache},
      /*hasVariant=*/true);
  expectEveryTensorKeyed<kvrt_mla_append_args>(
      {&kvrt_mla_append_args::kv_c, &kvrt_mla_append_args::k_pe,
       &kvrt_mla_append_args::slot_mapping, &kvrt_mla_append_args::key_cache,
       &kvrt_mla_append_args::key_scale, &kvrt_mla_append_args::query,
       &kvrt_mla_append_args::q_out, &kvrt_mla_append_args::k_pe_out,
       &kvrt_mla_append_args::rope_positions,
       &kvrt_mla_append_args::cos_sin_cache},
      /*hasVariant=*/true);
  expectEveryTensorKeyed<kvrt_mla_fused_append_args>(
      {&kvrt_mla_fused_append_args::kv_c, &kvrt_mla_fused_append_args::k_pe,
       &kvrt_mla_fused_append_args::block_table,
       &kvrt_mla_fused_append_args::query_start_loc,
       &kvrt_mla_fused_append_args::context_lens,
       &kvrt_mla_fused_append_args::key_cache,
       &kvrt_mla_fused_append_args::key_scale,
       &kvrt_mla_fused_append_args::query, &kvrt_mla_fused_append_args::q_out,
       &kvrt_mla_fused_append_args::k_pe_out,
       &kvrt_mla_fused_append_args::cos_sin_cache},
      /*hasVariant=*/true);
  using Paged = kvrt_paged_kv_append_args;
  expectEveryTensorKeyed<Paged>({&Paged::key,
                                 &Paged::value,
                                 &Paged::batch_indices,
                                 &Paged::positions,
                                 &Paged::kv_indices,
                                 &Paged::kv_indptr,
                                 &Paged::key_cache,
                                 &Paged::value_cache,
                                 &Paged::key_scale,
                                 &Paged::value_scale,
                                 &Paged::key_scale_cache,
                                 &Paged::value_scale_cache,
                                 &Paged::query,
                                 &Paged::q_out,
                                 &Paged::rope_positions,
                                 &Paged::cos_sin_cache,
                                 &Paged::k_norm_weight,
                                 &Paged::q_norm_weight,
                                 &Paged::epsilon,
                                 &Paged::q_scale},
                                /*hasVariant=*/true);
  using FusedGather = kvrt_fused_gather_args;
  expectEveryTensorKeyed<FusedGather>(
      {&FusedGather::block_table, &FusedGather::query_start_loc,
       &FusedGather::context_lens, &FusedGather::key_cache,
       &FusedGather::value_cache, &FusedGather::key_out,
       &FusedGather::value_out, &FusedGather::key_scale,
       &FusedGather::value_scale, &FusedGather::key_scale_cache,
       &FusedGather::value_scale_cache},
      /*hasVariant=*/true);
}

} // namespace
