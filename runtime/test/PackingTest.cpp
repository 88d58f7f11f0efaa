//===- PackingTest.cpp - the params a kernel receives, and its variant ----===//
//
// Recording host kernels see exactly the void *params[] a GPU kernel would:
// one pointer per buffer, then the i64 scalars, per docs/KERNEL-ABI.md.
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

#include <dlfcn.h>

using namespace kvrt::test;

namespace {

int64_t address(const void *pointer, int64_t byteOffset = 0) {
  return static_cast<int64_t>(reinterpret_cast<uintptr_t>(pointer)) +
         byteOffset;
}

/// Checks the pointer parameter of buffer `index`: its first element.
void expectBuffer(const std::vector<int64_t> &params, int index,
                  const void *data, int64_t byteOffset, const char *label) {
  SCOPED_TRACE(label);
  ASSERT_GT(params.size(), static_cast<size_t>(index));
  EXPECT_EQ(params[index], address(data, byteOffset)) << "data + byte_offset";
}

std::vector<int64_t> scalarsOf(int numBuffers) {
  const std::vector<int64_t> &params = recorded().params;
  return std::vector<int64_t>(params.begin() + numBuffers, params.end());
}

//===----------------------------------------------------------------------===//
// append
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, PackAppendPagedNhdWithPermutedCacheView) {
  // The key cache lives as [nb, H, bs, D] and is passed as its NHD view.
  HostTensor physical =
      HostTensor::compact(bf16(), {kBlocks, kHeads, kBlockSize, kHeadDim});
  keyCache = physical.view(
      bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim},
      {kHeads * kBlockSize * kHeadDim, kHeadDim, kBlockSize * kHeadDim, 1}, 0);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(recorded().vectorCalls, 1);
  const std::vector<int64_t> &params = recorded().params;
  ASSERT_EQ(params.size(), 21u);

  expectBuffer(params, 0, qkv.data(), kQueryHeads * kHeadDim * 2, "key");
  expectBuffer(params, 1, qkv.data(), (kQueryHeads + kHeads) * kHeadDim * 2,
               "value");
  expectBuffer(params, 2, slots.data(), 0, "slot_mapping");
  expectBuffer(params, 3, physical.data(), 0, "key_cache");
  expectBuffer(params, 4, valueCache.data(), 0, "value_cache");

  const int64_t blockStride = kBlockSize * kHeads * kHeadDim;
  std::vector<int64_t> expected = {
      kTokens, kBlocks,
      // key, value: [T, H, D] strides
      kQkvRow, kHeadDim, 1, kQkvRow, kHeadDim, 1,
      // key cache (block, head, pos, dim) of the permuted view
      blockStride, kBlockSize * kHeadDim, kHeadDim, 1,
      // value cache, compact NHD
      blockStride, kHeadDim, kHeads * kHeadDim, 1};
  EXPECT_EQ(scalarsOf(5), expected);
}

TEST_F(VllmTest, PackAppendVllmVectorized) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  const std::vector<int64_t> &params = recorded().params;
  ASSERT_EQ(params.size(), 21u);
  expectBuffer(params, 3, keyCache.data(), 0, "key_cache");
  expectBuffer(params, 4, valueCache.data(), 0, "value_cache");
  std::vector<int64_t> scalars = scalarsOf(5);
  ASSERT_EQ(scalars.size(), 16u);
  // K [nb, H, D/x, bs, x]: block, head, pos = the bs stride (x), dim = the
  // D/x stride (bs * x); the x dimension has stride 1.
  const int64_t blockStride = kHeads * kHeadDim * kBlockSize;
  std::vector<int64_t> keyCacheStrides(scalars.begin() + 8,
                                       scalars.begin() + 12);
  EXPECT_EQ(keyCacheStrides,
            (std::vector<int64_t>{blockStride, kHeadDim * kBlockSize, kX,
                                  kBlockSize * kX}));
  // V [nb, H, D, bs]: pos stride 1, dim stride bs.
  std::vector<int64_t> valueCacheStrides(scalars.begin() + 12, scalars.end());
  EXPECT_EQ(valueCacheStrides,
            (std::vector<int64_t>{blockStride, kHeadDim * kBlockSize, 1,
                                  kBlockSize}));
}

TEST_F(DualStackedTest, PackAppendDualStacked) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  const std::vector<int64_t> &params = recorded().params;
  ASSERT_EQ(params.size(), 21u);
  // [nb, 2, H, bs, D]: K at index 0, V at index 1 of dim 1.
  const int64_t kvStride = kHeads * kBlockSize * kHeadDim;
  const int64_t blockStride = 2 * kvStride;
  expectBuffer(params, 3, keyCache.data(), 0, "key_cache");
  expectBuffer(params, 4, keyCache.data(), kvStride * 2, "value_cache");
  std::vector<int64_t> scalars = scalarsOf(5);
  std::vector<int64_t> cacheStrides(scalars.begin() + 8, scalars.end());
  std::vector<int64_t> view = {blockStride, kBlockSize * kHeadDim, kHeadDim, 1};
  std::vector<int64_t> both = view;
  both.insert(both.end(), view.begin(), view.end());
  EXPECT_EQ(cacheStrides, both);
}

TEST_F(LaunchTest, PackAppendContiguous) {
  CacheConfig contiguous;
  contiguous.layout = "contiguous";
  contiguous.blockSize = 8; // max_seq_len
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(describe("kv_append", "append", contiguous)), &raw),
            KVRT_SUCCESS)
      << kvrt_last_error();
  bundle.reset(raw);
  registerRecorders(raw);
  const int64_t batch = 2, maxSeqLen = 8;
  keyCache = HostTensor::compact(bf16(), {batch, kHeads, maxSeqLen, kHeadDim});
  valueCache =
      HostTensor::compact(bf16(), {batch, kHeads, maxSeqLen, kHeadDim});
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<int64_t> scalars = scalarsOf(5);
  EXPECT_EQ(scalars[1], batch) << "num_blocks is the batch";
  std::vector<int64_t> keyCacheStrides(scalars.begin() + 8,
                                       scalars.begin() + 12);
  EXPECT_EQ(keyCacheStrides,
            (std::vector<int64_t>{kHeads * maxSeqLen * kHeadDim,
                                  maxSeqLen * kHeadDim, kHeadDim, 1}));
}

TEST_F(LaunchTest, PackAppendPagedHnd) {
  CacheConfig hnd;
  hnd.layout = "paged_hnd";
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(describe("kv_append", "append", hnd)), &raw),
            KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw);
  keyCache =
      HostTensor::compact(bf16(), {kBlocks, kHeads, kBlockSize, kHeadDim});
  valueCache =
      HostTensor::compact(bf16(), {kBlocks, kHeads, kBlockSize, kHeadDim});
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<int64_t> scalars = scalarsOf(5);
  std::vector<int64_t> valueCacheStrides(scalars.begin() + 12, scalars.end());
  EXPECT_EQ(valueCacheStrides,
            (std::vector<int64_t>{kHeads * kBlockSize * kHeadDim,
                                  kBlockSize * kHeadDim, kHeadDim, 1}));
}

//===----------------------------------------------------------------------===//
// slot_mapping and fused_append
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, PackSlotMapping) {
  // Block-table rows padded to 6 entries; 7 tokens (some are padding).
  HostTensor padded = HostTensor::compact(i32(), {kRequests, 6});
  blockTable = padded.view(i32(), {kRequests, kMaxBlocksPerReq}, {6, 1}, 0);
  slots = HostTensor::compact(i64(), {7});
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(recorded().scalarCalls, 1);
  const std::vector<int64_t> &params = recorded().params;
  ASSERT_EQ(params.size(), 8u);
  expectBuffer(params, 0, padded.data(), 0, "block_table");
  expectBuffer(params, 1, queryStartLoc.data(), 0, "query_start_loc");
  expectBuffer(params, 2, contextLens.data(), 0, "context_lens");
  expectBuffer(params, 3, slots.data(), 0, "slot_mapping");
  EXPECT_EQ(scalarsOf(4),
            (std::vector<int64_t>{7, kRequests, 6, kMaxBlocksPerReq}));
}

TEST_F(LaunchTest, PackFusedAppend) {
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(recorded().vectorCalls, 1);
  const std::vector<int64_t> &params = recorded().params;
  ASSERT_EQ(params.size(), 26u);
  expectBuffer(params, 2, blockTable.data(), 0, "block_table");
  expectBuffer(params, 5, keyCache.data(), 0, "key_cache");
  std::vector<int64_t> scalars = scalarsOf(7);
  ASSERT_EQ(scalars.size(), 19u);
  const int64_t blockStride = kBlockSize * kHeads * kHeadDim;
  std::vector<int64_t> expected = {
      kTokens,          kBlocks,           kRequests, kMaxBlocksPerReq,
      kMaxBlocksPerReq, kQkvRow,           kHeadDim,  1,
      kQkvRow,          kHeadDim,          1,         blockStride,
      kHeadDim,         kHeads * kHeadDim, 1,         blockStride,
      kHeadDim,         kHeads * kHeadDim, 1};
  EXPECT_EQ(scalars, expected);
}

//===----------------------------------------------------------------------===//
// Variant selection
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, AlignedPicksVector) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  EXPECT_EQ(recorded().scalarCalls, 0);
}

TEST_F(LaunchTest, MisalignedPointerFallsBackToScalar) {
  // Element-aligned (bf16) but not 16-byte aligned.
  key.get()->byte_offset += 2;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 0);
  EXPECT_EQ(recorded().scalarCalls, 1);
}

TEST_F(LaunchTest, OddStrideFallsBackToScalar) {
  // A head stride that is not a multiple of vector_elems (8).
  HostTensor wide = HostTensor::compact(bf16(), {kTokens, kHeads, 17});
  key = wide.view(bf16(), {kTokens, kHeads, kHeadDim}, {kHeads * 17, 17, 1}, 0);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
}

TEST_F(LaunchTest, InnerStrideFallsBackToScalar) {
  value = HostTensor::strided(bf16(), {kTokens, kHeads, kHeadDim},
                              {kHeads * kHeadDim * 2, kHeadDim * 2, 2});
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
}

TEST_F(LaunchTest, MisalignedCacheFallsBackToScalar) {
  HostTensor bigger =
      HostTensor::compact(bf16(), {kBlocks + 1, kBlockSize, kHeads, kHeadDim});
  valueCache =
      bigger.view(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim}, {}, 8);
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
}

TEST_F(LaunchTest, ForcedVectorRefusesMisaligned) {
  key.get()->byte_offset += 2;
  expectRefused(append(KVRT_VARIANT_VECTOR), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: data + byte_offset", "is not aligned to 16 bytes",
                 "the vector variant 'kv_append' assumes"});
}

TEST_F(LaunchTest, ForcedVectorRefusesInnerStride) {
  value = HostTensor::strided(bf16(), {kTokens, kHeads, kHeadDim},
                              {kHeads * kHeadDim * 2, kHeadDim * 2, 2});
  expectRefused(fused(KVRT_VARIANT_VECTOR), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: stride[2] is 2 but the vector variant 'kv_fused' "
                 "assumes a contiguous innermost dimension"});
}

TEST_F(LaunchTest, ForcedVectorRefusesOddStride) {
  HostTensor wide = HostTensor::compact(bf16(), {kTokens, kHeads, 17});
  key = wide.view(bf16(), {kTokens, kHeads, kHeadDim}, {kHeads * 17, 17, 1}, 0);
  expectRefused(append(KVRT_VARIANT_VECTOR), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: stride[0] is 34, not a multiple of vector_elems (8)"});
}

TEST_F(LaunchTest, ForcedVectorRefusesMisalignedStackedValueView) {
  CacheConfig dual;
  dual.layout = "dual_stacked";
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(describe("kv_append", "append", dual)), &raw),
            KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw);
  // The V half starts 4 elements (8 bytes) past a 16-byte boundary.
  HostTensor stacked =
      HostTensor::compact(bf16(), {kBlocks, 2, kHeads, kBlockSize, kHeadDim});
  const int64_t half = kHeads * kBlockSize * kHeadDim + 4;
  keyCache =
      stacked.view(bf16(), {kBlocks, 2, kHeads, kBlockSize, kHeadDim},
                   {2 * half, half, kBlockSize * kHeadDim, kHeadDim, 1}, 0);
  kvrt_append_args args = appendArgs(KVRT_VARIANT_VECTOR);
  args.value_cache = nullptr;
  expectRefused(
      kvrt_append(bundle.get(), &args, nullptr), KVRT_ERROR_INVALID_ARGUMENT,
      {"key_cache[:, 1]: data + byte_offset", "not aligned to 16 bytes"});
}

TEST_F(LaunchTest, ForcedScalarRunsScalar) {
  ASSERT_EQ(append(KVRT_VARIANT_SCALAR), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
  EXPECT_EQ(recorded().vectorCalls, 0);
}

TEST_F(LaunchTest, AutoUsesScalarWhenOnlyScalarIsRegistered) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(standardBundle(), &raw), KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw, /*vector=*/false, /*scalar=*/true);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
  recorded() = Recorded();
  expectRefused(append(KVRT_VARIANT_VECTOR), KVRT_ERROR_NOT_FOUND,
                {"no host kernel is registered for 'kv_append'"});
}

TEST_F(LaunchTest, AutoWithoutScalarVariantRefusesMisaligned) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(
      load(bundleJson({kernelJson("kv_append", "append", "vector")}), &raw),
      KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw);
  key.get()->byte_offset += 2;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: data + byte_offset", "not aligned to 16 bytes"});
  expectRefused(append(KVRT_VARIANT_SCALAR), KVRT_ERROR_NOT_FOUND,
                {"variant: the bundle has no scalar variant of 'kv_append'"});
}

TEST_F(LaunchTest, ScalarOnlyDescription) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(
      load(bundleJson({kernelJson("kv_append_scalar", "append", "scalar")}),
           &raw),
      KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
  recorded() = Recorded();
  expectRefused(append(KVRT_VARIANT_VECTOR), KVRT_ERROR_NOT_FOUND,
                {"variant: the bundle has no vector variant of 'kv_append'"});
}

/// Loads the standard append's vector and scalar kernels and its wide
/// kernel of threshold `minTokens` (and bound `maxTokens`, if not 0), each
/// with a recorder.
void loadWithWide(BundlePtr &bundle, int64_t minTokens, int64_t maxTokens = 0) {
  std::vector<json> kernels = describe("kv_append", "append");
  kernels.push_back(wideKernelJson("kv_append", "append", minTokens));
  if (maxTokens > 0)
    kernels.back()["max_tokens"] = maxTokens;
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(kernels), &raw), KVRT_SUCCESS) << kvrt_last_error();
  bundle.reset(raw);
  registerRecorders(raw);
}

TEST_F(LaunchTest, AutoPicksWideFromItsMinTokens) {
  loadWithWide(bundle, kTokens);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().wideCalls, 1);
  EXPECT_EQ(recorded().vectorCalls, 0);
  // The same parameters as the vector kernel's.
  std::vector<int64_t> wideParams = recorded().params;
  ASSERT_EQ(append(KVRT_VARIANT_VECTOR), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  EXPECT_EQ(recorded().params, wideParams);

  // One token short of the threshold: the vector kernel.
  recorded() = Recorded();
  loadWithWide(bundle, kTokens + 1);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  EXPECT_EQ(recorded().wideCalls, 0);
  ASSERT_EQ(append(KVRT_VARIANT_WIDE), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().wideCalls, 1);
}

TEST_F(LaunchTest, AutoPicksWideBelowItsMaxTokens) {
  // One token under the bound: still the wide kernel.
  loadWithWide(bundle, 1, kTokens + 1);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().wideCalls, 1);
  EXPECT_EQ(recorded().vectorCalls, 0);

  // At the bound: the vector kernel again; forced, the wide one still runs.
  recorded() = Recorded();
  loadWithWide(bundle, 1, kTokens);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
  EXPECT_EQ(recorded().wideCalls, 0);
  ASSERT_EQ(append(KVRT_VARIANT_WIDE), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().wideCalls, 1);
}

TEST_F(LaunchTest, WideKeepsTheVectorPromise) {
  loadWithWide(bundle, 1);
  key.get()->byte_offset += 2;
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().scalarCalls, 1);
  EXPECT_EQ(recorded().wideCalls, 0);
  recorded() = Recorded();
  expectRefused(append(KVRT_VARIANT_WIDE), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: data + byte_offset", "is not aligned to 16 bytes",
                 "the wide variant 'kv_append_wide' assumes"});
}

TEST_F(LaunchTest, AutoUsesWideWhenTheVectorKernelIsNotRegistered) {
  loadWithWide(bundle, kTokens + 1);
  kvrt_bundle_set_host_kernel(bundle.get(), "kv_append", nullptr);
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().wideCalls, 1);
}

TEST_F(LaunchTest, ForcedWideWithoutWideVariantIsRefused) {
  expectRefused(append(KVRT_VARIANT_WIDE), KVRT_ERROR_NOT_FOUND,
                {"variant: the bundle has no wide variant of 'kv_append'"});
}

TEST_F(LaunchTest, NamingTheWideKernelSaysWhatToPass) {
  loadWithWide(bundle, 1);
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_append_wide";
  expectRefused(kvrt_append(bundle.get(), &args, nullptr), KVRT_ERROR_NOT_FOUND,
                {"'kv_append_wide' is the wide variant of 'kv_append'",
                 "pass KVRT_VARIANT_WIDE"});
}

TEST_F(VllmTest, ValueCacheIsOutsideThePromise) {
  // Its stores are scalar: an 8-byte-aligned value cache keeps the vector
  // variant.
  HostTensor bigger =
      HostTensor::compact(bf16(), {kBlocks + 1, kHeads, kHeadDim, kBlockSize});
  valueCache =
      bigger.view(bf16(), {kBlocks, kHeads, kHeadDim, kBlockSize}, {}, 8);
  ASSERT_EQ(append(KVRT_VARIANT_VECTOR), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(recorded().vectorCalls, 1);
}

//===----------------------------------------------------------------------===//
// No driver
//===----------------------------------------------------------------------===//

bool driverPresent() {
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle)
    dlclose(handle);
  return handle != nullptr;
}

TEST_F(LaunchTest, GpuLaunchWithoutDriver) {
  if (driverPresent())
    GTEST_SKIP() << "libcuda.so.1 is present on this machine";
  // The pointers are host memory labelled kDLCUDA: validation accepts them,
  // and nothing may dereference them before the driver is found missing.
  moveAllTo({kDLCUDA, 0});
  for (int attempt = 0; attempt < 2; ++attempt) {
    expectRefused(append(), KVRT_ERROR_NO_DRIVER,
                  {"libcuda.so.1 could not be loaded"});
    expectRefused(slotMapping(), KVRT_ERROR_NO_DRIVER, {"libcuda.so.1"});
    expectRefused(fused(), KVRT_ERROR_NO_DRIVER, {"libcuda.so.1"});
  }
  // Host launches in the same process are unaffected.
  moveAllTo({kDLCPU, 0});
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

} // namespace
