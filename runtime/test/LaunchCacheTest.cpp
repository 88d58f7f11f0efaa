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

#include "FakeCuda.h"
#include "Fixtures.h"
#include "FunctionCache.h"
#include "GpuLauncher.h"
#include "PlanCache.h"

using namespace kvrt::test;
using kvrt::impl::PlanCache;
using ::testing::HasSubstr;

namespace {

class LaunchCacheTest : public LaunchTest {
protected:
  void SetUp() override {
    fake_cuda_reset();
    kvrt::impl::GpuLauncher::forgetVerifiedRanges();
    PlanCache::clear();
    kvrt::impl::FunctionCache::clear();
    state = fake_cuda_state();
    LaunchTest::SetUp();
    moveAllTo({kDLCUDA, 0});
    static int userContext;
    state->current = &userContext;
    state->paramsToRecord = 21;
  }

  /// A good launch, then the same again: the second one hits.
  void launchTwice() {
    ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
    uint64_t hits = PlanCache::hits();
    ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
    ASSERT_EQ(PlanCache::hits(), hits + 1) << "the same arguments hit";
  }

  FakeCudaState *state = nullptr;
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

} // namespace
