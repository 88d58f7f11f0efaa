//===- LaunchCacheTest.cpp - what kvrt remembers between launches ---------===//
//
// PlanCache: a launch with the same arguments reuses the validated plan, and
// any change (pointer, byte_offset, shape, stride, dtype, device, kernel
// name, variant) is validated again, so that a tensor made invalid after a
// good launch is refused. FunctionCache: a launch in the same current context
// asks the driver for no device or module, and a changed context or device
// resolves again.
//
//===----------------------------------------------------------------------===//

#include "FakeDriverTest.h"
#include "FunctionCache.h"
#include "GpuLauncher.h"
#include "PlanCache.h"

#include <vector>

using namespace kvrt::test;
using kvrt::impl::PlanCache;
using ::testing::HasSubstr;

namespace {

class LaunchCacheTest : public FakeDriverTest {
protected:
  void SetUp() override {
    PlanCache::clear();
    kvrt::impl::FunctionCache::clear();
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
/// struct's size says the list is whole (a kernel name, the tensors, a
/// variant), so that a field added to the struct and not to addArguments
/// fails here.
template <typename Args>
void expectEveryTensorKeyed(std::vector<const DLTensor * Args::*> fields,
                            bool hasVariant) {
  size_t words = 1 + fields.size() + (hasVariant ? 1 : 0);
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
  }
}

TEST(LaunchKeyTest, EveryTensorOfEveryKindIsKeyed) {
  expectEveryTensorKeyed<kvrt_append_args>(
      {&kvrt_append_args::key, &kvrt_append_args::value,
       &kvrt_append_args::slot_mapping, &kvrt_append_args::key_cache,
       &kvrt_append_args::value_cache, &kvrt_append_args::key_scale,
       &kvrt_append_args::value_scale, &kvrt_append_args::key_scale_cache,
       &kvrt_append_args::value_scale_cache},
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
       &kvrt_fused_append_args::value_scale_cache},
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
       &kvrt_mla_append_args::key_scale},
      /*hasVariant=*/true);
  expectEveryTensorKeyed<kvrt_mla_fused_append_args>(
      {&kvrt_mla_fused_append_args::kv_c, &kvrt_mla_fused_append_args::k_pe,
       &kvrt_mla_fused_append_args::block_table,
       &kvrt_mla_fused_append_args::query_start_loc,
       &kvrt_mla_fused_append_args::context_lens,
       &kvrt_mla_fused_append_args::key_cache,
       &kvrt_mla_fused_append_args::key_scale},
      /*hasVariant=*/true);
}

} // namespace
