//===- GpuPathTest.cpp - the GPU launch path, against a fake driver -------===//
//
// kvrt's process-wide driver is pointed at libkvrt_fake_cuda.so (see main),
// so these tests run the whole GPU path on a CPU: context choice, the module
// cache, compute-capability checks, cubin vs PTX, JIT logs, pointer checks
// and the launch geometry. Tensor pointers are host memory the fake never
// dereferences.
//
//===----------------------------------------------------------------------===//

#include "CudaDriver.h"
#include "FakeDriverTest.h"

using namespace kvrt::test;
using ::testing::HasSubstr;

namespace {

class GpuPathTest : public FakeDriverTest {
protected:
  kvrt_status appendOn(kvrt_stream stream) {
    kvrt_append_args args = appendArgs();
    return kvrt_append(bundle.get(), &args, stream);
  }

  void expectNoLaunch(kvrt_status status, kvrt_status code,
                      const std::vector<std::string> &fragments) {
    expectRefused(status, code, fragments);
    EXPECT_EQ(state->launches, 0);
  }
};

TEST_F(GpuPathTest, PrimaryContextWhenNoneIsCurrent) {
  state->paramsToRecord = 21;
  state->buffersToRecord = 5;
  kvrt_stream stream = reinterpret_cast<kvrt_stream>(0x5a5a);
  ASSERT_EQ(appendOn(stream), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launches, 1);
  EXPECT_STREQ(state->lastFunction, "kv_append");
  EXPECT_EQ(state->primaryRetains, 1);
  EXPECT_EQ(state->pushes, 1);
  EXPECT_EQ(state->pops, 1);
  EXPECT_EQ(state->current, nullptr) << "the pushed context was popped";
  EXPECT_NE(state->launchContext, nullptr);
  EXPECT_EQ(state->lastLoadContext, state->launchContext);
  EXPECT_EQ(state->stream, stream);
  EXPECT_EQ(state->lastImageKind, 2) << "PTX";

  // Geometry from the manifest: tokens_per_block 2, threads_x 4.
  EXPECT_EQ(state->grid[0], 3u); // ceil(5 / 2)
  EXPECT_EQ(state->grid[1], 1u);
  EXPECT_EQ(state->grid[2], 1u);
  EXPECT_EQ(state->block[0], 4u);
  EXPECT_EQ(state->block[1], 2u);
  EXPECT_EQ(state->block[2], 1u);
  EXPECT_EQ(state->sharedBytes, 0u);
  // The same params a host kernel gets: key's first element, num_tokens.
  EXPECT_EQ(state->params[0],
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(qkv.data()) +
                                 kQueryHeads * kHeadDim * 2));
  EXPECT_EQ(state->params[5], kTokens);
  EXPECT_EQ(state->params[6], kBlocks);

  // The module and the retained context are reused.
  ASSERT_EQ(appendOn(stream), KVRT_SUCCESS);
  EXPECT_EQ(state->moduleLoads, 1);
  EXPECT_EQ(state->primaryRetains, 1);
  EXPECT_EQ(state->launches, 2);

  bundle.reset();
  EXPECT_EQ(state->moduleUnloads, 1);
  EXPECT_EQ(state->primaryReleases, 1);
}

TEST_F(GpuPathTest, CurrentContextIsUsed) {
  static int userContext;
  state->current = &userContext;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->pushes, 0);
  EXPECT_EQ(state->primaryRetains, 0);
  EXPECT_EQ(state->launchContext, &userContext);
  EXPECT_EQ(state->lastLoadContext, &userContext);
}

TEST_F(GpuPathTest, OneModulePerContext) {
  static int contextA, contextB;
  state->current = &contextA;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  state->current = &contextB;
  ASSERT_EQ(fused(), KVRT_SUCCESS);
  state->current = &contextA;
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS);
  EXPECT_EQ(state->moduleLoads, 2);
  EXPECT_EQ(state->launches, 3);
  EXPECT_STREQ(state->lastFunction, "kv_slots");
  // Each kernel is looked up once per module.
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->functionLookups, 3);
}

TEST_F(GpuPathTest, RecreatedContextAtTheSameAddressReloads) {
  static int context;
  state->current = &context;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  state->contextIdOffset = 1000; // destroyed and recreated at one address
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->moduleLoads, 2);
  // The destructor skips the module of the context that is gone.
  bundle.reset();
  EXPECT_EQ(state->moduleUnloads, 1);
}

TEST_F(GpuPathTest, CurrentContextOnAnotherDevice) {
  static int context;
  state->deviceCount = 2;
  state->current = &context;
  state->currentDevice = 1;
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"key: on cuda:0 but the calling thread's current CUDA "
                  "context is on device 1"});
}

TEST_F(GpuPathTest, OnePrimaryContextAndModulePerDevice) {
  state->deviceCount = 2;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  void *cuda0 = state->launchContext;
  // No current context: the device comes from the tensors' DLPack device.
  moveAllTo({kDLCUDA, 1});
  state->pointerOrdinal = 1;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->primaryRetains, 2);
  EXPECT_EQ(state->moduleLoads, 2);
  EXPECT_NE(state->launchContext, cuda0);
  EXPECT_EQ(state->lastLoadContext, state->launchContext);
  EXPECT_EQ(state->current, nullptr) << "the pushed context was popped";
  // Back on cuda:0: its context and module are reused.
  moveAllTo({kDLCUDA, 0});
  state->pointerOrdinal = 0;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->launchContext, cuda0);
  EXPECT_EQ(state->primaryRetains, 2);
  EXPECT_EQ(state->moduleLoads, 2);
  EXPECT_EQ(state->launches, 3);
  bundle.reset();
  EXPECT_EQ(state->moduleUnloads, 2);
  EXPECT_EQ(state->primaryReleases, 2);
}

TEST_F(GpuPathTest, TensorsOnTwoDevicesTouchNoDriver) {
  state->deviceCount = 2;
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->get()->device = {kDLCUDA, 1};
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"key_cache: on cuda:0 but key is on cuda:1"});
  EXPECT_EQ(state->pointerQueries, 0);
  EXPECT_EQ(state->primaryRetains, 0);
  EXPECT_EQ(state->moduleLoads, 0);
}

TEST_F(GpuPathTest, DeviceOutOfRange) {
  moveAllTo({kDLCUDA, 3});
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"key: on cuda:3 but the driver sees 1 device(s)"});
}

TEST_F(GpuPathTest, ComputeCapabilityTooLow) {
  state->computeMajor = 8;
  expectNoLaunch(append(), KVRT_ERROR_UNSUPPORTED_DEVICE,
                 {"compute capability 8.0 but the bundle was compiled for "
                  "sm_90 (9.0 or newer)"});
  EXPECT_EQ(state->moduleLoads, 0);
}

TEST_F(GpuPathTest, ArchSpecificTargetNeedsExactMatch) {
  json manifest = standardBundle();
  manifest["target"]["chip"] = "sm_90a";
  reload(manifest);
  state->computeMajor = 10;
  expectNoLaunch(append(), KVRT_ERROR_UNSUPPORTED_DEVICE,
                 {"compiled for sm_90a (9.0 exactly)"});
}

TEST_F(GpuPathTest, ExactMatchPrefersCubin) {
  json manifest = standardBundle();
  manifest["cubin_base64"] = "f0VMRgIBAQAAAAAA"; // "\x7f" "ELF..."
  reload(manifest);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->lastImageKind, 1);
}

TEST_F(GpuPathTest, NewerDeviceJitsThePtx) {
  json manifest = standardBundle();
  manifest["cubin_base64"] = "f0VMRgIBAQAAAAAA";
  reload(manifest);
  state->computeMajor = 10;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->lastImageKind, 2);
}

TEST_F(GpuPathTest, CubinOnlyForAnotherChip) {
  json manifest = standardBundle();
  manifest.erase("ptx");
  manifest["cubin_base64"] = "f0VMRgIBAQAAAAAA";
  reload(manifest);
  state->computeMajor = 10;
  expectNoLaunch(append(), KVRT_ERROR_UNSUPPORTED_DEVICE,
                 {"the bundle has only a cubin for sm_90", "no PTX to JIT"});
}

TEST_F(GpuPathTest, JitFailureCarriesTheLog) {
  state->loadResult = 218;
  state->loadErrorLog = "ptxas fatal : Unresolved extern function 'expf'";
  expectNoLaunch(append(), KVRT_ERROR_DRIVER,
                 {"could not JIT the bundle's PTX", "CUDA_ERROR_INVALID_PTX",
                  "JIT error log: ptxas fatal : Unresolved extern function "
                  "'expf'"});
  // The failure is not cached as a module: a later launch tries again.
  state->loadResult = 0;
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(GpuPathTest, KernelMissingFromTheModule) {
  state->missingFunction = "kv_append";
  expectNoLaunch(append(), KVRT_ERROR_NOT_FOUND,
                 {"kernel 'kv_append' is in the manifest but not in the "
                  "bundle's PTX/cubin"});
}

TEST_F(GpuPathTest, PointerTheDriverDoesNotKnow) {
  state->memoryType = 0;
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"key: device is cuda:0 but its data",
                  "is not memory the CUDA driver knows"});
}

TEST_F(GpuPathTest, PinnedHostPointer) {
  state->memoryType = 1;
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"key: device is cuda:0 but its data", "pinned host memory"});
}

TEST_F(GpuPathTest, PointerOnAnotherDevice) {
  state->deviceCount = 2;
  state->pointerOrdinal = 1;
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"was allocated on cuda:1"});
}

TEST_F(GpuPathTest, UnansweredPointerQueryIsNotARefusal) {
  state->pointerResult = 1;
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(GpuPathTest, VerifiedRangesAreNotQueriedAgain) {
  state->rangeSize = 1; // one range per tensor
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->pointerQueries, 5);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->pointerQueries, 5) << "all five inside verified ranges";
  // A tensor on another device is not vouched for by cuda:0's ranges.
  state->deviceCount = 2;
  moveAllTo({kDLCUDA, 1});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: device is cuda:1", "was allocated on cuda:0"});
  kvrt::impl::GpuLauncher::forgetVerifiedRanges();
}

TEST_F(GpuPathTest, DualStackedQueriesTheCacheOnce) {
  json manifest = standardBundle([] {
    CacheConfig config;
    config.layout = "dual_stacked";
    return config;
  }());
  reload(manifest);
  keyCache =
      HostTensor::compact(bf16(), {kBlocks, 2, kHeads, kBlockSize, kHeadDim});
  keyCache.get()->device = {kDLCUDA, 0};
  kvrt_append_args args = appendArgs();
  args.value_cache = nullptr;
  ASSERT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(state->pointerQueries, 4); // key, value, slot_mapping, kv_cache
}

TEST_F(GpuPathTest, AutoPicksTheScalarKernelOnTheGpuToo) {
  key.get()->byte_offset += 2;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_STREQ(state->lastFunction, "kv_append_scalar");
  EXPECT_EQ(state->block[0], 32u); // the scalar kernel's own geometry
}

TEST_F(GpuPathTest, SlotMappingGeometry) {
  slots = HostTensor::compact(i64(), {300});
  slots.get()->device = {kDLCUDA, 0};
  state->paramsToRecord = 8;
  state->buffersToRecord = 4;
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->grid[0], 2u); // ceil(300 / 256)
  EXPECT_EQ(state->block[0], 1u);
  EXPECT_EQ(state->block[1], 256u);
  EXPECT_EQ(state->params[4], 300);
}

TEST_F(GpuPathTest, TokensPastTheI32ScalarAreRefusedBeforeTheGrid) {
  // 2^32 tokens at two per block would be 2^31 blocks, one past CUDA's grid
  // limit; num_tokens is an i32 of the ABI, so kvrt refuses it first (the
  // grid limit stays as a second line). Nothing is dereferenced, so the
  // tensors may sit at made-up addresses.
  const int64_t tokens = int64_t(1) << 32;
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->shapeRef()[0] = tokens;
  key.get()->data = reinterpret_cast<void *>(uintptr_t(1) << 44);
  value.get()->data = key.get()->data;
  slots.get()->data = reinterpret_cast<void *>(uintptr_t(1) << 45);
  expectNoLaunch(append(), KVRT_ERROR_INVALID_ARGUMENT,
                 {"num_tokens is 4294967296, past 2^31 - 1"});
}

TEST_F(GpuPathTest, ZeroTokensTouchNothing) {
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->shapeRef()[0] = 0;
  ASSERT_EQ(append(), KVRT_SUCCESS);
  EXPECT_EQ(state->launches, 0);
  EXPECT_EQ(state->moduleLoads, 0);
  EXPECT_EQ(state->pointerQueries, 0);
}

//===----------------------------------------------------------------------===//
// Checked mode: the slots copied from the device on the launch's stream
//===----------------------------------------------------------------------===//

TEST_F(GpuPathTest, CheckedModeCopiesTheSlotsAndRefusesADuplicate) {
  ASSERT_EQ(kvrt_bundle_set_checked(bundle.get(), 1), KVRT_SUCCESS);
  int64_t values[kTokens] = {7, 2, 7, 0, 1};
  std::memcpy(slots.data(), values, sizeof(values));
  kvrt_stream stream = reinterpret_cast<kvrt_stream>(0x77);
  expectNoLaunch(appendOn(stream), KVRT_ERROR_INVALID_ARGUMENT,
                 {"slot_mapping[2] = 7 is also used by token 0"});
  EXPECT_EQ(state->copies, 1);
  EXPECT_EQ(state->synchronizes, 1);
  EXPECT_EQ(state->copyStream, stream);
  EXPECT_NE(state->copyContext, nullptr) << "copied inside a context";
  EXPECT_EQ(state->current, nullptr) << "the pushed context was popped";
}

TEST_F(GpuPathTest, CheckedModeLaunchesDistinctSlots) {
  ASSERT_EQ(kvrt_bundle_set_checked(bundle.get(), 1), KVRT_SUCCESS);
  int64_t values[kTokens] = {7, 2, -1, 0, 1};
  std::memcpy(slots.data(), values, sizeof(values));
  ASSERT_EQ(appendOn(nullptr), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->copies, 1);
  EXPECT_EQ(state->launches, 1);
}

TEST_F(GpuPathTest, QuantizedGatherPacksScalesInAbiOrder) {
  CacheConfig config;
  config.dtype = "f8e4m3";
  config.quant = "fp8_e4m3";
  config.gather = true;
  reload(standardBundle(config));
  HostTensor keyCache8 = HostTensor::compact(
      {kDLUInt, 8, 1}, {kBlocks, kBlockSize, kHeads, kHeadDim});
  HostTensor valueCache8 = HostTensor::compact(
      {kDLUInt, 8, 1}, {kBlocks, kBlockSize, kHeads, kHeadDim});
  HostTensor keyOut = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  HostTensor valueOut =
      HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  HostTensor keyScale = HostTensor::compact(f32(), {1});
  HostTensor valueScale = HostTensor::compact(f32(), {1});
  for (HostTensor *tensor :
       {&keyCache8, &valueCache8, &keyOut, &valueOut, &keyScale, &valueScale})
    tensor->get()->device = {kDLCUDA, 0};
  kvrt_gather_args args = KVRT_ARGS_INIT(kvrt_gather_args);
  args.key_cache = keyCache8.get();
  args.value_cache = valueCache8.get();
  args.slot_mapping = slots.get();
  args.key_out = keyOut.get();
  args.value_out = valueOut.get();
  args.key_scale = keyScale.get();
  args.value_scale = valueScale.get();
  state->paramsToRecord = 7 + 16;
  state->buffersToRecord = 7;
  ASSERT_EQ(kvrt_gather(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_STREQ(state->lastFunction, "kv_gather");
  // key_cache, value_cache, slot_mapping, key_out, value_out, key_scale,
  // value_scale, then num_tokens and num_blocks.
  EXPECT_EQ(state->params[3],
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(keyOut.data())));
  EXPECT_EQ(state->params[6], static_cast<int64_t>(reinterpret_cast<uintptr_t>(
                                  valueScale.data())));
  EXPECT_EQ(state->params[7], kTokens);
  EXPECT_EQ(state->params[8], kBlocks);
}

TEST_F(GpuPathTest, UncheckedLaunchCopiesNothing) {
  ASSERT_EQ(appendOn(nullptr), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(state->copies, 0);
  EXPECT_EQ(state->synchronizes, 0);
}

} // namespace

int main(int argc, char **argv) {
  kvrt::impl::CudaDriver::setLibraryForTesting(KVRT_FAKE_CUDA_PATH);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
